"""What one microbatch costs as state grows, what a tiny microbatch costs, and memory over many microbatches.

    source scripts/env.sh
    python bench/costs.py                 # all three
    python bench/costs.py --only scaling  # or: tiny, memory

- scaling: a 10,000-event run (uniform keys, every key group touched) against
  1,000,000 and against 10,000,000 keys of state; prints the run times and
  their ratio.
- tiny: a 10-event run on 100,000 keys of state, timed inside the run (first
  plan to last commit) five times in a warm session, and as a whole
  ``spark-submit`` beside two plain-Spark ``spark-submit``s, each with and without the JVM's class archive.
- memory: runs of 10 and of 50 microbatches (10,000 events each); prints the
  driver JVM's peak heap (and what a GC after the run leaves) and the Python
  workers' peak RSS for each run; then 50 microbatches as five runs of 10,
  with the driver's heap after a GC and the workers' peak RSS after each.

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

from bench.workload import write_workload


def _run(spark, root: Path, input_dir: Path, **bounds):
    from bench.jobs import count_sum_job
    from state_store.run.runtime import run_job
    from state_store.settings import Settings

    return run_job(spark, count_sum_job(str(input_dir)), Settings.load(root=root), progress=lambda line: None,
                   **bounds)


def scaling(spark, base: Path) -> None:
    """A 10,000-event run (uniform keys, every key group touched) against 1M and against 10M keys of state, three
    times each; the state is built by runs of 1M distinct keys per microbatch."""
    best = {}
    for state_keys in (1_000_000, 10_000_000):
        root, input_dir = base / f"scaling-{state_keys}", base / f"scaling-{state_keys}" / "input"
        started = time.time()
        for first in range(0, state_keys, 1_000_000):
            write_workload(input_dir, 1, 1_000_000, 1_000_000, first_key=first)
        built = _run(spark, root, input_dir)
        print(f"state {state_keys:>10,d} keys built in {time.time() - started:.0f}s "
              f"({built.records_in:,d} events, run {built.seconds}s)", flush=True)
        times = []
        for n in range(3):
            write_workload(input_dir, 1, 10_000, state_keys, seed=100 + n)
            result = _run(spark, root, input_dir)
            times.append(result.seconds)
            print(f"  a 10,000-event run on {state_keys:,d} keys of state: {result.seconds}s {result.phases}",
                  flush=True)
        best[state_keys] = min(times)
    print(f"scaling: time ratio 10M / 1M keys of state (best of 3 each) = "
          f"{best[10_000_000] / best[1_000_000]:.2f}", flush=True)


def spark_submit(script: Path, *args: str, env: dict | None = None,
                 options: tuple[str, ...] = ()) -> tuple[float, subprocess.CompletedProcess]:
    """``spark-submit`` of ``script`` to local[*] with the Delta jars (and ``options`` before the script): its wall
    seconds, start to exit, and the finished process."""
    from state_store.spark.session import delta_jars

    started = time.time()
    out = subprocess.run(["spark-submit", "--master", "local[*]", *options, "--jars", ",".join(delta_jars()),
                          "--conf", "spark.log.level=WARN", str(script), *args], env=env or dict(os.environ),
                         capture_output=True, text=True)
    return time.time() - started, out


def tiny(spark, base: Path) -> None:
    """A 10-event run on 100,000 keys of state: five times in this (warm) session, then as a whole
    ``spark-submit``, beside two plain-Spark ``spark-submit``s (``bench/plain_submit.py``)."""
    root, input_dir = base / "tiny", base / "tiny" / "input"
    write_workload(input_dir, 1, 100_000, 100_000)
    _run(spark, root, input_dir)
    for n in range(5):
        write_workload(input_dir, 1, 10, 100_000)
        result = _run(spark, root, input_dir)
        print(f"tiny: a 10-event run on 100,000 keys of state, warm session, try {n + 1}: {result.seconds}s "
              f"{result.phases}", flush=True)
    from state_store.cli import main as lakestate
    from state_store.spark.session import PROJECT_ROOT

    env = {**os.environ, "LAKESTATE_ROOT": str(root), "LAKESTATE_BENCH_INPUT": str(input_dir)}
    os.environ.update(env)
    lakestate(["register", "bench.jobs:job", "--root", str(root)])
    # Each submit twice, in turn: with the JVM's class archive (scripts/class-archive.sh, which scripts/env.sh
    # gives SPARK_SUBMIT_OPTS) and without it.
    without = {**env, "SPARK_SUBMIT_OPTS": " ".join(
        o for o in env.get("SPARK_SUBMIT_OPTS", "").split()
        if not o.startswith(("-XX:SharedArchiveFile", "-Xlog:cds")))}
    archived = "-XX:SharedArchiveFile" in env.get("SPARK_SUBMIT_OPTS", "")
    walls = {}
    for name, script, args in (("plain Spark, count range(10)", Path(__file__).parent / "plain_submit.py",
                                ("count", str(base))),
                               ("plain Spark, 2 Delta appends + a read", Path(__file__).parent / "plain_submit.py",
                                ("delta", str(base))),
                               ("Lakestate, a 10-event run", PROJECT_ROOT / "jobs" / "run_microbatches.py",
                                ("--job", "bench"))):
        for archive, submit_env in ((True, env), (False, without)) if archived else ((False, env),):
            if name.startswith("Lakestate"):
                write_workload(input_dir, 1, 10, 100_000)
            walls[name, archive], out = spark_submit(script, *args, env=submit_env)
            line = [x for x in out.stdout.splitlines() if "records/s" in x or x.startswith("plain:")]
            print(f"tiny: spark-submit, {name}, {'with' if archive else 'without'} the class archive: "
                  f"{walls[name, archive]:.1f}s (exit {out.returncode}); "
                  f"{line[-1] if line else out.stderr[-500:]}", flush=True)
    for archive in (True, False) if archived else (False,):
        mine = walls["Lakestate, a 10-event run", archive]
        print(f"tiny: spark-submit ratios, {'with' if archive else 'without'} the class archive: " + ", ".join(
            f"{mine / w:.2f}x {n}" for (n, a), w in walls.items() if a == archive and not n.startswith("Lakestate")),
            flush=True)
    if archived:
        print("tiny: with / without the class archive: " + ", ".join(
            f"{walls[n, True] / walls[n, False]:.2f} {n}" for n, a in walls if a), flush=True)


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
        spark._jvm.java.lang.System.gc()
        kept = jvm.getMemoryMXBean().getHeapMemoryUsage().getUsed()
        worker = max(b.worker_peak_rss_kb for b in result.batches)
        print(f"memory: a run of {microbatches} microbatches x 10,000 events: driver JVM peak heap "
              f"{heap / 2**20:.0f} MiB ({kept / 2**20:.0f} MiB still used after a GC), Python worker peak RSS "
              f"{worker / 1024:.0f} MiB, {result.seconds}s", flush=True)


def memory_over_runs(spark, base: Path) -> None:
    """50 microbatches as five runs of 10 in one JVM: the driver's heap after a GC and the workers' peak RSS
    after each run."""
    jvm = spark._jvm.java.lang.management.ManagementFactory
    root, input_dir = base / "memory-runs", base / "memory-runs" / "input"
    write_workload(input_dir, 50, 10_000, 10_000)
    for n in range(5):
        result = _run(spark, root, input_dir, max_microbatches=10)
        spark._jvm.java.lang.System.gc()
        kept = jvm.getMemoryMXBean().getHeapMemoryUsage().getUsed()
        worker = max(b.worker_peak_rss_kb for b in result.batches)
        print(f"memory: after microbatch {10 * n + 9} (run {n + 1} of 5): driver JVM heap after a GC "
              f"{kept / 2**20:.0f} MiB, Python worker peak RSS {worker / 1024:.0f} MiB, {result.seconds}s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["scaling", "tiny", "memory"])
    args = parser.parse_args()
    from state_store.spark.session import build_spark

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
        memory_over_runs(spark, base)
        spark.stop()


if __name__ == "__main__":
    main()
