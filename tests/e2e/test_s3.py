"""The warehouse and the savepoint root on S3-compatible storage (``s3a://``), against a real S3 server
(moto's, started on 127.0.0.1), real Spark with hadoop-aws, and real Delta: a job runs, takes a savepoint,
rescales, is restored, and ends with exactly what the same steps give on a local warehouse."""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys

import pytest

from state_store.catalog.job_store import JobStore
from state_store.catalog.jobs import JobCatalog
from state_store.catalog.lease import JobLease
from state_store.catalog.savepoints import list_savepoints
from state_store.cli import main as lakestate
from state_store.delta import log, sizes
from state_store.delta.points import StatePoint
from state_store.errors import JobLocked
from state_store.ops.restore import rescale_job, restore_job
from state_store.ops.savepoint import take_savepoint
from state_store.settings import Settings
from state_store.storage import ObjectPath, create_exclusive, location
from tests.support.helpers import run, sink_rows, state_at_latest_checkpoint, write_job_module
from tests.support.jobs import all_states_job, events
from tests.support.lake import Lake
from tests.support.servers import S3_BUCKET

# scripts/test.sh: on the spark tier's side (an S3 server and spark-submits, ~75 s the e2e side, the longer, loses)
pytestmark = pytest.mark.beside_spark

BUCKET = S3_BUCKET
QUIET = dict(say=lambda m: None)


def _object_lake(tmp_path, name: str) -> Lake:
    """Inputs in a local folder, as a user's would be; warehouse and savepoint root in the bucket."""
    lake = Lake(tmp_path / name)
    lake.settings = Settings.load(root=f"s3a://{BUCKET}/{name}")
    return lake


def _steps(spark, lake: Lake) -> dict:
    """Run 2 microbatches at parallelism 2, take a savepoint, rescale to 3, run 1 more; restore the savepoint
    into a second job and run it to the end; then the first job too. Returns what a user would look at.
    Four event files (one a microbatch) are the fewest that leave every step a microbatch to run: 6 microbatches
    a lake (10 with six files); the first run's 2 reach the job's checkpoint interval, which the savepoint needs."""
    lake.write_rules("r0.json", [{"name": "factor", "factor": 3}])
    for batch in range(4):
        lake.write_events(f"e{batch}.json", events(batch))
    spec = all_states_job(lake)
    run(spark, spec, lake, max_microbatches=2)
    savepoint = take_savepoint(spark, lake.settings, spec.job_id, label="before-rescale", **QUIET)
    rescale_job(spark, lake.settings, spec, 3, **QUIET)
    run(spark, spec, lake, max_microbatches=1)
    copy = all_states_job(lake, job_id="all-states-copy")
    restore_job(spark, lake.settings, copy, StatePoint(savepoint), parallelism=3, backend="hashmap", **QUIET)
    run(spark, copy, lake)
    run(spark, spec, lake)
    meta = JobStore(lake.settings.job_dir(spec.job_id))
    return {
        "sink": sink_rows(spark, lake, spec),
        "state": state_at_latest_checkpoint(spark, lake, spec),
        "copy sink": sink_rows(spark, lake, copy),
        "copy state": state_at_latest_checkpoint(spark, lake, copy),
        "checkpoints": [(c.checkpoint_id, c.batch_id, c.parallelism) for c in meta.checkpoints()],
        "savepoints": [(s.name, s.checkpoint_id, s.entries) for s in list_savepoints(lake.settings)],
    }


def test_a_job_savepoint_rescale_and_restore_on_s3a_end_as_on_a_local_warehouse(spark, s3, tmp_path):
    on_s3 = _object_lake(tmp_path, "s3")
    assert isinstance(on_s3.settings.warehouse, ObjectPath)
    got = _steps(spark, on_s3)
    expected = _steps(spark, Lake(tmp_path / "local"))
    assert got == expected
    assert got["checkpoints"][-1][2] == 3 and got["savepoints"][0][0].endswith("before-rescale")
    # Everything is in the bucket: the job's catalog, tables and the savepoint; nothing was written locally.
    keys = {f.relative_to(on_s3.settings.root).parts[0] for f in on_s3.settings.root.files()}
    assert keys == {"warehouse", "savepoints"}
    assert not (tmp_path / "s3" / "root" / "warehouse").exists()
    names = {f.name for f in (on_s3.settings.job_dir("all-states") / "_meta" / "checkpoints").iterdir()}
    assert names and all(n.startswith("chk-") and n.endswith(".json") for n in names)


def test_the_catalog_and_the_cli_work_on_s3a(spark, s3, tmp_path, monkeypatch):
    lake = _object_lake(tmp_path, "cli")
    module_dir = tmp_path / "modules"
    module_dir.mkdir()
    write_job_module(module_dir, "s3_job", lake, "on-s3")
    monkeypatch.syspath_prepend(str(module_dir))
    root = str(lake.settings.root)
    assert lakestate(["register", "s3_job:job", "--root", root]) == 0
    assert JobCatalog(lake.settings).ids() == ["on-s3"]
    lake.write_rules("r0.json", [{"name": "factor", "factor": 2}])
    lake.write_events("e0.json", events(0))
    run(spark, JobCatalog(lake.settings).load("on-s3"), lake)
    # The page's sizes of the checkpoint's state: its tables' logs on S3 are read once, then one HEAD a table.
    reads, read = [], log._partition_sizes
    monkeypatch.setattr(log, "_partition_sizes", lambda *a: reads.append(a) or read(*a))
    checkpoint = JobStore(lake.settings.job_dir("on-s3")).latest_checkpoint()
    first = sorted(p[1:] for p in sizes.pinned_partitions(checkpoint))
    assert first and str(reads[0][0]).startswith("s3a://") and sum(p[3] for p in first) > 0, first
    read_once = len(reads)
    assert sorted(p[1:] for p in sizes.pinned_partitions(checkpoint)) == first and len(reads) == read_once
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert lakestate(["jobs", "--root", root]) == 0
        assert lakestate(["savepoint", "on-s3", "--label", "cli", "--root", root]) == 0
        assert lakestate(["savepoints", "--root", root]) == 0
    text = out.getvalue()
    assert "on-s3" in text and f"s3a://{BUCKET}/cli/savepoints/on-s3/" in text, text
    # A user's own process: `lakestate state` builds its SparkSession with hadoop-aws because --root is s3a://,
    # and prints what this session's read prints.
    ask = ["state", "--job", "on-s3", "--state", "count", "--key", "a", "--root", root]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert lakestate(ask) == 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(module_dir), os.environ.get("PYTHONPATH", "")])}
    env.pop("LAKESTATE_JARS", None)  # the Delta jars from .cache/jars; hadoop-aws must come from the --root
    done = subprocess.run([sys.executable, "-m", "state_store.cli", *ask], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == out.getvalue() and "3" in done.stdout, done.stdout


def test_the_lease_on_s3a_is_a_conditional_put_only_one_run_gets(s3):
    target = location(f"s3a://{BUCKET}/lease-test/000000000001.json")
    create_exclusive(target, '{"run": 1}')
    with pytest.raises(FileExistsError):
        create_exclusive(target, '{"run": 2}')
    assert target.read_text() == '{"run": 1}'  # the first writer's content stands
    lease_dir = location(f"s3a://{BUCKET}/lease-test/job/_meta/lease")
    first = JobLease(lease_dir, "job").acquire()
    try:
        with pytest.raises(JobLocked, match="is held by run"):
            JobLease(lease_dir, "job").acquire()
    finally:
        first.release()
    second = JobLease(lease_dir, "job").acquire()  # released: the next run takes it
    second.release()


def test_a_missing_bucket_is_refused_before_anything_is_written(s3, tmp_path):
    from state_store.errors import ConfigError

    settings = Settings.load(root="s3a://no-such-bucket/x")
    with pytest.raises(ConfigError, match="bucket 'no-such-bucket' .* does not exist: create it"):
        settings.check_writable()


def test_housekeeping_removes_what_a_killed_savepoint_left_in_place_on_s3a_and_keeps_one_being_written(s3):
    import json
    import socket

    from state_store.ops.housekeeping import housekeeping
    from tests.support.helpers import dead_pid

    settings = Settings.load(root=f"s3a://{BUCKET}/abandoned")
    job = settings.savepoints / "counts"
    # No rename on object storage: a savepoint is written in place, and is in progress until its metadata is there.
    for name, pid in (("killed", dead_pid()), ("writing", os.getpid()), ("complete", dead_pid())):
        (job / name / "keyed" / "part-0.parquet").write_bytes(b"x" * 100)
        (job / name / "_owner.json").write_text(json.dumps({"host": socket.gethostname(), "pid": pid,
                                                            "run_id": None}))
    (job / "complete" / "_metadata.json").write_text("{}")
    report = housekeeping("counts", settings, say=lambda m: None)
    assert report["removed_savepoints"] == ["killed"]
    assert sorted(p.name for p in job.iterdir()) == ["complete", "writing"]
