"""Reading back what a job left: its sink rows and its state at a checkpoint."""
from __future__ import annotations

import json
import subprocess
import textwrap
from contextlib import contextmanager

from state_store.delta.backends import create_keyed_backend, create_operator_backend
from state_store.catalog.job_store import JobStore
from state_store.run.runtime import JobRunner

@contextmanager
def environ(values: dict):
    """``os.environ`` with ``values`` set for the block, then each variable as it was (unset if it was)."""
    import os

    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


FIXED_CLOCK = lambda: 1_700_000_000_000  # noqa: E731  processing time the tests control


def run(spark, spec, lake, max_microbatches=None, max_records=None, **options):
    options.setdefault("clock", FIXED_CLOCK)
    options.setdefault("progress", lambda line: None)
    return JobRunner(spark, spec, lake.settings, **options).run(max_microbatches, max_records)


def sink_rows(spark, lake, spec, with_microbatch: bool = True) -> list[str]:
    path = lake.settings.in_warehouse(spec.sink, "sink")
    df = spark.read.format("delta").load(str(path))
    if not with_microbatch:
        df = df.drop("_microbatch")
    return sorted(json.dumps(r.asDict(recursive=True), sort_keys=True) for r in df.collect())


def state_at_checkpoint(spark, lake, spec, checkpoint) -> tuple[list, list]:
    job_dir = lake.settings.job_dir(spec.job_id)
    keyed = create_keyed_backend(checkpoint.backend, spark, job_dir, spec.job_id).read(checkpoint)
    operator = create_operator_backend(checkpoint.backend, spark, job_dir, spec.job_id).read(checkpoint)
    k = sorted(tuple(r) for r in keyed.select("state_name", "key_group", "key", "namespace", "user_key", "value").collect())
    o = sorted(tuple(r) for r in operator.select("state_name", "subtask", "mode", "value").collect())
    return k, o


def state_at_latest_checkpoint(spark, lake, spec) -> tuple[list, list]:
    return state_at_checkpoint(spark, lake, spec, JobStore(lake.settings.job_dir(spec.job_id)).latest_checkpoint())


def keyed_values(keyed_rows, state_name: str) -> dict:
    """(key, namespace) -> value of a state; for MapState, (key, namespace, user key) -> value."""
    out = {}
    for name, _, key, ns, user_key, value in keyed_rows:
        if name == state_name:
            out[(key, ns) if user_key is None else (key, ns, json.loads(user_key))] = json.loads(value)
    return out


def write_holder(lease_dir, record: dict, generation: int = 1) -> None:
    """Make `record` the lease holder of a job (as a crashed or remote run would have left it)."""
    from state_store.catalog.lease import generation_path

    lease_dir.mkdir(parents=True, exist_ok=True)
    generation_path(lease_dir, generation).write_text(json.dumps(record))


def write_job_module(directory, module: str, lake, job_id: str, **overrides) -> None:
    """``<directory>/<module>.py`` with a factory ``job()`` building ``all_states_job`` over ``lake``'s inputs
    (with ``overrides``): what ``lakestate register <module>:job`` needs in another process."""
    extra = "".join(f", {k}={v!r}" for k, v in overrides.items())
    (directory / f"{module}.py").write_text(textwrap.dedent(f"""
        from pathlib import Path
        from tests.jobs import all_states_job

        class _Lake:
            events, rules = Path({str(lake.events)!r}), Path({str(lake.rules)!r})

        def job():
            return all_states_job(_Lake, job_id={job_id!r}{extra})
    """))


@contextmanager
def read_only(folder):
    """``folder`` on a read-only bind mount for the block: the tests run as root, so chmod would not stop a
    write, and a mount point is what a read-only volume is (removing it fails with EBUSY, as in production)."""
    import pytest

    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True, capture_output=True)
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def write_stored_values(spark, lake, job_id: str, state_name: str, texts: dict) -> None:
    """Something outside the job writes ``texts`` (key -> stored JSON text) as the values of ``state_name``'s
    keys in the job's keyed table, and points the latest checkpoint at that version, as a restore's write
    (a generation of its own, which the checkpoint lists) would."""
    from pyspark.sql import functions as F

    keyed = str(lake.settings.job_dir(job_id) / "state" / "keyed")
    value = F.col("value")
    for key, text in texts.items():
        value = F.when(F.col("key") == key, F.lit(text)).otherwise(value)
    (spark.read.format("delta").load(keyed)
     .filter((F.col("state_name") == state_name) & F.col("key").isin(list(texts)))
     .withColumn("value", value).withColumn("generation", F.lit(1).cast("bigint"))
     .write.format("delta").mode("append").save(keyed))
    meta = JobStore(lake.settings.job_dir(job_id))
    checkpoint = meta.latest_checkpoint()
    checkpoint.state["keyed"].version += 1
    checkpoint.state["keyed"].generations = [1]
    meta.write_checkpoint(checkpoint)
