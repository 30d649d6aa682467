"""Operations in seconds (issue 42), each timed as a user or an Airflow task sees it: the whole command.

    source scripts/env.sh
    python bench/operations.py                 # all, on a Spark Connect server of its own (started and stopped)
    python bench/operations.py --only connect  # or: submit

- connect: on a warm Spark Connect server (`lakestate <op> --remote`, what the operation DAGs run on a
  `spark_connect` connection), each the best of ``--rounds``:
  - a savepoint of workload R's job with 2,000,000 keys (about 11 MiB of state; target <= 5 s);
  - a rescale 2 -> 3 with a savepoint first, then back 3 -> 2 untimed (target <= 10 s);
  - a compaction of about 1,000 small files: eight runs of 1,000 keys spread over every key group write a file
    per touched (state, key group) partition each (target <= 15 s).
- submit: a savepoint of the same 2M-key state as a ``spark-submit``, against a plain-Spark ``spark-submit``
  that reads the same files and writes them again (bench/plain_submit.py ``copy``), same jars and confs,
  alternated; prints the ratio (target <= 1.5x).
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
sys.path.insert(0, str(ROOT))

from bench.workload import write_workload  # noqa: E402


def lakestate(env: dict, *args: str) -> tuple[float, str]:
    """``lakestate <args>`` in a process of its own: (wall seconds, its output); a failure stops the bench."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "state_store.cli", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True)
    took = time.perf_counter() - started
    if done.returncode:
        sys.exit(f"lakestate {' '.join(args)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return took, done.stdout


def job_env(base: Path, name: str, keys: int, files: int, events: int) -> dict:
    """A root of its own with workload R's job registered over ``files`` files of ``events`` events on ``keys``."""
    root = base / name
    write_workload(root / "input", files, events, keys)
    env = {**os.environ, "LAKESTATE_ROOT": str(root), "LAKESTATE_BENCH_INPUT": str(root / "input"),
           "PYTHONPATH": str(ROOT)}
    lakestate(env, "register", "bench.jobs:job")
    return env


def size_of(env: dict) -> str:
    from state_store.catalog.job_store import JobStore
    from state_store.settings import Settings

    latest = JobStore(Settings.load(root=env["LAKESTATE_ROOT"]).job_dir("bench")).latest_checkpoint()
    return f"{latest.total_entries:,d} entries, {latest.size_bytes / 2**20:.1f} MiB in {latest.num_files} files"


def best(rounds: int, step) -> float:
    return min(step(i) for i in range(rounds))


def on_connect(base: Path, url: str, rounds: int) -> None:
    remote = ("--remote", url)
    env = job_env(base, "big", 2_000_000, 1, 2_000_000)
    took, _ = lakestate(env, "run", "--job", "bench", *remote)
    print(f"built 2,000,000 keys of state over Connect in {took:.1f}s: {size_of(env)}", flush=True)

    def savepoint(i):
        took, _ = lakestate(env, "savepoint", "bench", "--label", f"bench-{i}", *remote)
        return took
    print(f"savepoint of 2M keys, warm Connect: {best(rounds, savepoint):.2f}s (target <= 5 s)", flush=True)

    def rescale(i):
        took, _ = lakestate(env, "rescale", "bench", "--parallelism", "3", "--savepoint-first", *remote)
        lakestate(env, "rescale", "bench", "--parallelism", "2", *remote)
        return took
    print(f"rescale 2 -> 3 with savepoint first, 2M keys, warm Connect: {best(rounds, rescale):.2f}s "
          f"(target <= 10 s)", flush=True)

    small = job_env(base, "small", 1_000, 8, 1_000)
    for _ in range(8):  # a run a file: each writes a file per touched (state, key group) partition
        lakestate(small, "run", "--job", "bench", "--max-microbatches", "1", *remote)
    files = sum(1 for _ in (Path(small["LAKESTATE_ROOT"]) / "warehouse" / "jobs" / "bench" / "state")
                .rglob("*.parquet"))
    took, said = lakestate(small, "compact", "bench", "--json", *remote)
    report = json.loads(said[said.index("\n{") + 1:] if not said.startswith("{") else said)
    print(f"compaction of {files} state files ({report['files_before']} in the tables it rewrote -> "
          f"{report['files_after']}), warm Connect: {took:.2f}s (target <= 15 s)", flush=True)


def submits(base: Path, rounds: int) -> None:
    import pyspark

    from state_store.spark.session import delta_jars

    env = job_env(base, "submit", 2_000_000, 1, 2_000_000)
    lakestate(env, "run", "--job", "bench")
    print(f"built 2,000,000 keys of state: {size_of(env)}", flush=True)
    submit = [str(Path(pyspark.__file__).parent / "bin" / "spark-submit"), "--master", "local[*]",
              "--conf", "spark.log.level=WARN"]
    jars = delta_jars()
    submit += ["--jars", ",".join(jars)] if jars else ["--packages", "io.delta:delta-spark_2.13:4.0.0"]
    keyed = Path(env["LAKESTATE_ROOT"]) / "warehouse" / "jobs" / "bench" / "state" / "keyed"
    times = {"savepoint": [], "plain": []}
    for i in range(rounds):
        started = time.perf_counter()
        done = subprocess.run([*submit, str(ROOT / "state_store" / "entrypoint" / "main.py"), "savepoint", "bench",
                               "--label", f"submit-{i}"], env=env, cwd=ROOT, capture_output=True, text=True)
        times["savepoint"].append(time.perf_counter() - started)
        assert done.returncode == 0, done.stderr[-3000:]
        out = base / f"plain-{i}"
        started = time.perf_counter()
        done = subprocess.run([*submit, str(ROOT / "bench" / "plain_submit.py"), "copy", str(keyed), str(out)],
                              env=env, cwd=ROOT, capture_output=True, text=True)
        times["plain"].append(time.perf_counter() - started)
        assert done.returncode == 0, done.stderr[-3000:]
        shutil.rmtree(out)
    s, p = min(times["savepoint"]), min(times["plain"])
    print(f"savepoint as spark-submit: {s:.2f}s; plain Spark submit copying the same keyed table: {p:.2f}s; "
          f"ratio {s / p:.2f}x (target <= 1.5x); rounds: {[round(t, 1) for t in times['savepoint']]} vs "
          f"{[round(t, 1) for t in times['plain']]}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["connect", "submit"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--remote", help="a warm server's sc:// URL (default: start one, stop it after)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="lakestate-ops-"))
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} cores, load {load:.2f} at start", flush=True)
    try:
        if args.only in (None, "connect"):
            url, started = args.remote, None
            if url is None:
                env = {**os.environ, "LAKESTATE_CONNECT_DIR": str(base / "connect")}
                started = subprocess.run([str(ROOT / "scripts" / "spark-connect.sh"), "start", "--background"],
                                         env=env, capture_output=True, text=True, check=True)
                url = started.stdout.strip().splitlines()[-1]
            try:
                on_connect(base, url, args.rounds)
            finally:
                if started is not None:
                    subprocess.run([str(ROOT / "scripts" / "spark-connect.sh"), "stop"], env=env,
                                   capture_output=True)
        if args.only in (None, "submit"):
            submits(base, args.rounds)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
