"""Reading back what a job left: its sink rows and its state at the latest checkpoint."""
from __future__ import annotations

import json

from state_store.backends import create_backend
from state_store.catalog import JobMeta
from state_store.runtime import JobRunner

FIXED_CLOCK = lambda: 1_700_000_000_000  # noqa: E731  processing time the tests control


def run(spark, spec, lake, max_microbatches=None, **options):
    options.setdefault("clock", FIXED_CLOCK)
    options.setdefault("progress", lambda line: None)
    return JobRunner(spark, spec, lake.settings, **options).run(max_microbatches)


def sink_rows(spark, lake, spec) -> list[str]:
    path = lake.settings.in_warehouse(spec.sink, "sink")
    rows = spark.read.format("delta").load(str(path)).collect()
    return sorted(json.dumps(r.asDict(recursive=True), sort_keys=True) for r in rows)


def state_at_latest_checkpoint(spark, lake, spec) -> tuple[list, list]:
    job_dir = lake.settings.job_dir(spec.job_id)
    checkpoint = JobMeta(job_dir).latest_checkpoint()
    keyed, operator = create_backend(checkpoint["backend"], spark, job_dir, spec.job_id).restore(checkpoint)
    k = sorted(tuple(r) for r in keyed.select("state_name", "key_group", "key", "namespace", "value").collect())
    o = sorted(tuple(r) for r in operator.select("state_name", "subtask", "mode", "value").collect())
    return k, o


def keyed_values(keyed_rows, state_name: str) -> dict:
    return {(key, ns): json.loads(value) for name, _, key, ns, value in keyed_rows if name == state_name}
