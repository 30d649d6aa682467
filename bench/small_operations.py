"""A small job's runs, savepoints and rescales, warm: what the state-table writes of operations cost.

    source scripts/env.sh
    python bench/small_operations.py

For each of three rounds (the first is the warm-up and is not counted) and each backend (delta, hashmap): the
tests' all-states job (``tests/support/jobs.py``: every state kind, operator and broadcast state) over three small
files, two runs of one microbatch, then a savepoint of its latest checkpoint, then a rescale 2 -> 3 (no savepoint
first). Prints each round's seconds and the warm totals. Run it in two trees (a ``git worktree`` of the older commit),
one after the other in turn, to compare them: it imports the tree it sits in.
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

QUIET = dict(say=lambda line: None)


def one(spark, backend: str) -> tuple[float, float, float]:
    from state_store.ops.restore import rescale_job
    from state_store.ops.savepoint import take_savepoint
    from tests.conftest import Lake
    from tests.support.helpers import run
    from tests.support.jobs import all_states_job, events

    lake = Lake(Path(tempfile.mkdtemp(prefix="small-operations-")))
    spec = all_states_job(lake, backend=backend)
    lake.write_rules("r0.json", [{"name": "factor", "factor": 3}])
    for b in range(3):
        lake.write_events(f"e{b}.json", events(b))
    started = time.time()
    run(spark, spec, lake, max_microbatches=1)
    run(spark, spec, lake, max_microbatches=1)
    runs, started = time.time() - started, time.time()
    take_savepoint(spark, lake.settings, spec.job_id, **QUIET)
    savepoint, started = time.time() - started, time.time()
    rescale_job(spark, lake.settings, spec, 3, **QUIET)
    return runs, savepoint, time.time() - started


def main() -> None:
    from state_store.spark.session import build_spark

    spark = build_spark("bench-small-operations", master="local[2]", extra_conf={
        "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2", "spark.ui.enabled": "false",
        "spark.driver.memory": "4g"}, s3=False)
    totals = [0.0, 0.0, 0.0]
    for round_ in range(3):
        for backend in ("delta", "hashmap"):
            figures = one(spark, backend)
            print(f"round {round_} {backend:7}: two runs {figures[0]:.1f}s, savepoint {figures[1]:.1f}s, "
                  f"rescale {figures[2]:.1f}s" + ("  (warm-up)" if round_ == 0 else ""), flush=True)
            if round_:
                totals = [t + f for t, f in zip(totals, figures)]
    print(f"warm totals ({ROOT.name}): runs {totals[0]:.1f}s, savepoints {totals[1]:.1f}s, rescales {totals[2]:.1f}s")
    spark.stop()


if __name__ == "__main__":
    main()
