"""Rescale and savepoint costs, side by side in one run.

    source scripts/env.sh
    python bench/rescale.py              # both
    python bench/rescale.py --only rescale   # or: savepoint

- rescale: the same job (``bench/jobs.py``, delta backend) with 10,000 and with
  1,000,000 keys of keyed state and the same operator state (the source
  offsets); times the rescale step itself (2 -> 3, then 3 -> 1; no savepoint;
  after one untimed warm-up rescale) and prints the ratio 1M / 10k. Keyed rows are not rewritten, so it should not
  grow with keyed state.
- savepoint: a savepoint of the 1,000,000-key checkpoint against a plain Spark
  read-and-write of the same rows (the savepoint's own tables of live keyed and
  operator entries, read and written again as partitioned Delta tables: no
  newest-entry selection, no metadata); each timed twice, the faster kept;
  prints the ratio savepoint / plain.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.workload import write_workload

QUIET = dict(say=lambda line: None)


def build(spark, base: Path, keys: int):
    from bench.jobs import count_sum_job
    from state_store.run.runtime import run_job
    from state_store.settings import Settings

    root, input_dir = base / f"state-{keys}", base / f"state-{keys}" / "input"
    write_workload(input_dir, 1, keys, keys)
    settings = Settings.load(root=root)
    spec = count_sum_job(str(input_dir))
    result = run_job(spark, spec, settings, progress=lambda line: None)
    print(f"built {keys:>9,d} keys of state in {result.seconds}s", flush=True)
    return settings, spec


def rescale(spark, states) -> None:
    from state_store.ops.restore import rescale_job

    times = {}
    settings, spec = states[min(states)]
    rescale_job(spark, settings, spec, 2, **QUIET)  # warm-up (same parallelism), untimed: both sizes start warm
    for keys, (settings, spec) in states.items():
        steps = []
        for parallelism in (3, 1):
            started = time.perf_counter()
            rescale_job(spark, settings, spec, parallelism, **QUIET)
            steps.append(time.perf_counter() - started)
        times[keys] = steps
        print(f"rescale with {keys:>9,d} keys of keyed state: 2 -> 3 took {steps[0]:.2f}s, 3 -> 1 took "
              f"{steps[1]:.2f}s", flush=True)
    small, large = (sum(times[k]) for k in sorted(times))
    print(f"rescale: time ratio 1M / 10k keys of keyed state = {large / small:.2f}", flush=True)


def savepoint(spark, settings, spec, base: Path) -> None:
    from state_store.catalog.job_store import JobStore
    from state_store.ops.savepoint import take_savepoint
    from state_store.records.layout import KEYED_TABLE as KEYED
    from state_store.records.layout import OPERATOR_TABLE as OPERATOR

    checkpoint = JobStore(settings.job_dir(spec.job_id)).latest_checkpoint()
    entries = sum(checkpoint.entries.values())
    best = {"savepoint": float("inf"), "plain": float("inf")}
    for attempt in range(2):
        started = time.perf_counter()
        taken = take_savepoint(spark, settings, spec.job_id, label=f"bench-{attempt}", **QUIET)
        best["savepoint"] = min(best["savepoint"], time.perf_counter() - started)
        started = time.perf_counter()
        for table in (KEYED, OPERATOR):  # the same live rows (the savepoint's), read and written, nothing more
            (spark.read.format("delta").load(taken.table_path(table.name)).write.format("delta")
             .partitionBy(*table.partition_columns).save(str(base / f"plain-{attempt}" / table.name)))
        best["plain"] = min(best["plain"], time.perf_counter() - started)
    print(f"savepoint of {entries:,d} entries ({taken.size_bytes:,d} bytes in {taken.num_files} files): "
          f"{best['savepoint']:.2f}s; plain Spark read-and-write of the same rows: {best['plain']:.2f}s", flush=True)
    print(f"savepoint: time ratio savepoint / plain = {best['savepoint'] / best['plain']:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["rescale", "savepoint"])
    args = parser.parse_args()
    from state_store.spark.session import build_spark

    base = Path(tempfile.mkdtemp(prefix="lakestate-rescale-"))
    spark = build_spark("lakestate-rescale", extra_conf={"spark.driver.memory": "6g"})
    try:
        states = {keys: build(spark, base, keys) for keys in (10_000, 1_000_000)}
        if args.only in (None, "savepoint"):
            savepoint(spark, *states[1_000_000], base)
        if args.only in (None, "rescale"):
            rescale(spark, states)
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
