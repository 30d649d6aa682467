"""Compaction's memory against the state's size (issue 59, item 8): the peak RSS of a compaction in a process of
its own, with N keys of keyed state, the rewrite of this code beside that of an earlier commit.

    source scripts/env.sh
    python bench/compaction_memory.py --keys 2000000                          # build, then each variant
    python bench/compaction_memory.py --keys 10000000 --keep /tmp/cm-10m --variants none   # build only, kept
    python bench/compaction_memory.py --state /tmp/cm-10m --variants after,after-spark     # reuse a built state
    python bench/compaction_memory.py --state /tmp/cm-10m --before 0ddfc28 --variants before

The state: workload R's job (``bench/jobs.py``, ``delta`` backend, parallelism 2, 128 key groups) run over
``--keys`` distinct keys, 1,000,000 a microbatch, then two microbatches of a tenth of them again (their entries
superseded: 1.2 N rows, N live). Each variant compacts that state (from an untouched copy) with ``compact_job``
in a fresh child process (a SparkSession made only for it, as ``lakestate compact`` does) and prints one JSON
line: rows scanned and after, seconds (the ``compact_job`` call), the child's peak RSS (``VmHWM``: its Python
heap, Arrow's and delta-rs's buffers) and its JVM's.

Variants: ``after`` (this code, its own choice of path), ``after-in-process`` (this code, in this process
whatever the table's size), ``after-spark`` (this code, the Spark rewrite forced), and ``before``,
``before-in-process`` (the same with ``state_store`` of the commit ``--before``, taken with ``git archive``).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = "bench"
PER_MICROBATCH = 1_000_000
HUGE = 2**62


def build(base: Path, keys: int) -> None:
    """``keys`` entries of workload R's job in ``base`` (a root of its own), then two runs that supersede a tenth."""
    sys.path.insert(0, str(ROOT))
    from bench.jobs import count_sum_job
    from bench.workload import write_workload
    from state_store.run.runtime import run_job
    from state_store.settings import Settings
    from state_store.spark.session import build_spark

    input_dir = base / "input"
    for first in range(0, keys, PER_MICROBATCH):
        write_workload(input_dir, 1, min(PER_MICROBATCH, keys - first), min(PER_MICROBATCH, keys - first),
                       first_key=first)
    spark = build_spark("bench-compaction-build", extra_conf={"spark.ui.enabled": "false",
                                                              "spark.driver.memory": "4g"})
    try:
        started = time.perf_counter()
        settings, spec = Settings.load(root=base), count_sum_job(str(input_dir), job_id=JOB)
        run_job(spark, spec, settings, progress=lambda line: None)
        for seed in (1, 2):  # the same tenth of the keys again: their entries get a newer row
            write_workload(input_dir, 1, keys // 10, keys // 10, seed=100 + seed)
            run_job(spark, spec, settings, progress=lambda line: None)
    finally:
        spark.stop()
    from state_store.catalog.job_store import JobStore

    latest = JobStore(settings.job_dir(JOB)).latest_checkpoint()
    shutil.copytree(base, _pristine(base), symlinks=True, ignore=shutil.ignore_patterns("input"))
    print(json.dumps({"built_keys": keys, "entries": latest.total_entries, "state_mib": round(
        latest.size_bytes / 2**20, 1), "files": latest.num_files, "seconds": round(time.perf_counter() - started, 1)}),
        flush=True)


def peak_mb(pid: int | str = "self") -> float | None:
    """The peak resident set (``VmHWM``) of process ``pid``, in MB (10**6 bytes)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) * 1024 / 1e6, 1)
    except OSError:
        return None
    return None


def child(root: Path, force: str | None) -> None:
    """``compact_job`` of the job in ``root`` in this process, then one JSON line of what it did and cost."""
    from state_store.delta import live_arrow
    from state_store.ops import compaction
    from state_store.settings import Settings
    from state_store.spark.session import build_spark

    limits = [(compaction, "IN_PROCESS_MAX_BYTES"), (live_arrow, "PARTITION_MAX_BYTES"),
              (live_arrow, "DRIVER_MAX_BYTES")]  # the last is the whole table's bound before this change
    for module, name in limits:
        if force and hasattr(module, name):
            setattr(module, name, HUGE if force == "in-process" else -1)
    sessions = []

    def spark():
        sessions.append(build_spark("bench-compaction", extra_conf={"spark.ui.enabled": "false"}))
        return sessions[0]

    started = time.perf_counter()
    report = compaction.compact_job(spark, Settings.load(root=root), JOB, say=lambda line: None)
    seconds = time.perf_counter() - started
    jvm = None
    if sessions:
        jvm = peak_mb(sessions[0].sparkContext._gateway.proc.pid)
        sessions[0].stop()
    keyed = report["tables"]["keyed"]
    print(json.dumps({"rows_scanned": keyed["rows_scanned"], "rows_after": keyed["rows_after"],
                      "files": [keyed["files_before"], keyed["files_after"]], "seconds": round(seconds, 1),
                      "python_peak_mb": peak_mb(), "jvm_peak_mb": jvm}), flush=True)


def variant(state: Path, name: str, code: Path | None, force: str | None) -> dict:
    """Compact ``state`` in a child process with ``code``'s ``state_store`` (this checkout's when None), from
    its pristine copy (checkpoints name their tables by absolute path: a state is compacted where it was built);
    the child's JSON line."""
    pristine = _pristine(state)
    shutil.rmtree(state)
    shutil.copytree(pristine, state, symlinks=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(code or ROOT), str(ROOT),
                                                                   os.environ.get("PYTHONPATH")) if p)}
    args = [sys.executable, str(Path(__file__).resolve()), "--child", str(state)]
    if force:
        args += ["--force", force]
    done = subprocess.run(args, env=env, capture_output=True, text=True, cwd=str(code or ROOT))
    if done.returncode:
        sys.exit(f"{name} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    line = {"variant": name, **json.loads(done.stdout.strip().splitlines()[-1])}
    print(json.dumps(line), flush=True)
    return line


def _pristine(state: Path) -> Path:
    """The untouched copy of ``state`` (made by ``build``) every variant starts from."""
    return state.with_name(state.name + ".pristine")


def archive(commit: str, into: Path) -> Path:
    """``state_store`` of ``commit`` in ``into``: the code a ``before`` variant runs."""
    into.mkdir(parents=True, exist_ok=True)
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "state_store"], check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=2_000_000)
    parser.add_argument("--variants", default="before,after",
                        help="comma-separated: before, before-in-process, after, after-in-process, after-spark; "
                             "none to only build")
    parser.add_argument("--before", default="0ddfc28", help="the commit whose state_store 'before' runs")
    parser.add_argument("--keep", type=Path, help="build the state here and keep it")
    parser.add_argument("--state", type=Path, help="a state --keep built: compact copies of it, build nothing")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--force", choices=["in-process", "spark"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.force)
    scratch = Path(tempfile.mkdtemp(prefix="lakestate-cm-"))
    try:
        state = args.state
        if state is None:
            state = args.keep or scratch / "state"
            build(state, args.keys)
        wanted = [v for v in args.variants.split(",") if v and v != "none"]
        code = archive(args.before, scratch / "before") if any(v.startswith("before") for v in wanted) else None
        for name in wanted:
            force = "in-process" if name.endswith("-in-process") else "spark" if name.endswith("-spark") else None
            variant(state, name, code if name.startswith("before") else None, force)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if args.state is None and args.keep is None:
            shutil.rmtree(_pristine(state), ignore_errors=True)


if __name__ == "__main__":
    main()
