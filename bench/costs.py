"""What one microbatch costs as state grows, what a tiny microbatch costs, and memory over many microbatches.

    source scripts/env.sh
    python bench/costs.py                 # all three
    python bench/costs.py --only scaling  # or: tiny, memory

- scaling: the same 100,000-event microbatch (100,000 keys) against 100,000
  and against 1,000,000 keys of state; prints both run times and their ratio.
- tiny: a 10-event microbatch on 100,000 keys of state, timed inside the run
  (first plan to last commit) and as a whole ``spark-submit``.
- memory: runs of 10 and of 50 microbatches (10,000 events each); prints the
  driver JVM's peak heap and the Python workers' peak RSS for each run.

The job is ``bench/jobs.py`` (delta backend, parallelism 2, a checkpoint
after every microbatch).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.workload import write_workload  # noqa: E402


def _run(spark, root: Path, input_dir: Path, **bounds):
    from bench.jobs import count_sum_job
    from state_store.runtime import run_job
    from state_store.settings import Settings

    return run_job(spark, count_sum_job(str(input_dir)), Settings.load(root=root), progress=lambda line: None,
                   **bounds)


def scaling(spark, base: Path) -> None:
    times = {}
    for state_keys in (100_000, 1_000_000):
        root, input_dir = base / f"scaling-{state_keys}", base / f"scaling-{state_keys}" / "input"
        write_workload(input_dir, 1, state_keys, state_keys)
        built = _run(spark, root, input_dir)
        write_workload(input_dir, 1, 100_000, 100_000)  # keys user-0..user-99999: all already in the state
        result = _run(spark, root, input_dir)
        times[state_keys] = result.seconds
        print(f"state {state_keys:>9,d} keys (built in {built.seconds}s): a 100,000-event microbatch took "
              f"{result.seconds}s {result.phases}", flush=True)
    print(f"scaling: time ratio 1M / 100k keys of state = {times[1_000_000] / times[100_000]:.2f}", flush=True)


def tiny(spark, base: Path) -> None:
    root, input_dir = base / "tiny", base / "tiny" / "input"
    write_workload(input_dir, 1, 100_000, 100_000)
    _run(spark, root, input_dir)
    write_workload(input_dir, 1, 10, 100_000)
    result = _run(spark, root, input_dir)
    print(f"tiny: a 10-event microbatch on 100,000 keys of state took {result.seconds}s inside the run "
          f"{result.phases}", flush=True)
    from state_store.cli import main as lakestate
    from state_store.spark import PROJECT_ROOT, delta_jars

    env = {**os.environ, "LAKESTATE_ROOT": str(root), "LAKESTATE_BENCH_INPUT": str(input_dir)}
    os.environ.update(env)
    lakestate(["register", "bench.jobs:job", "--root", str(root)])
    write_workload(input_dir, 1, 10, 100_000)
    started = time.time()
    out = subprocess.run(["spark-submit", "--master", "local[*]", "--jars", ",".join(delta_jars()),
                          "--conf", "spark.log.level=WARN", str(PROJECT_ROOT / "jobs" / "run_microbatches.py"),
                          "--job", "bench"], env=env, capture_output=True, text=True)
    wall = time.time() - started
    line = [x for x in out.stdout.splitlines() if "records/s" in x]
    print(f"tiny: the same as a whole spark-submit took {wall:.1f}s (exit {out.returncode}); "
          f"{line[-1] if line else out.stderr[-500:]}", flush=True)


def memory(spark, base: Path) -> None:
    jvm = spark._jvm.java.lang.management.ManagementFactory
    for microbatches in (10, 50):
        root, input_dir = base / f"memory-{microbatches}", base / f"memory-{microbatches}" / "input"
        write_workload(input_dir, microbatches, 10_000, 10_000)
        pools = [p for p in jvm.getMemoryPoolMXBeans() if str(p.getType()) == "Heap memory"]
        for p in pools:
            p.resetPeakUsage()
        result = _run(spark, root, input_dir)
        heap = sum(p.getPeakUsage().getUsed() for p in pools)
        worker = max(b.worker_peak_rss_kb for b in result.batches)
        print(f"memory: a run of {microbatches} microbatches x 10,000 events: driver JVM peak heap "
              f"{heap / 2**20:.0f} MiB, Python worker peak RSS {worker / 1024:.0f} MiB, {result.seconds}s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["scaling", "tiny", "memory"])
    args = parser.parse_args()
    from state_store.spark import build_spark

    base = Path(tempfile.mkdtemp(prefix="lakestate-costs-"))
    spark = build_spark("lakestate-costs", extra_conf={"spark.driver.memory": "6g"})
    for name, fn in (("scaling", scaling), ("tiny", tiny)):
        if args.only in (None, name):
            fn(spark, base)
    spark.stop()
    if args.only in (None, "memory"):
        # Fresh Python workers per task (not Spark's default), so a worker's peak RSS is that task's.
        spark = build_spark("lakestate-costs-memory", extra_conf={"spark.driver.memory": "6g",
                                                                  "spark.python.worker.reuse": "false"})
        memory(spark, base)
        spark.stop()


if __name__ == "__main__":
    main()
