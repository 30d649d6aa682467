"""Savepoint, restore and rescale against the size of the keyed state, beside Flink 2.3 on the same state (issue 64).

    source scripts/env.sh
    python bench/operations_vs_flink.py                       # 1M and 10M keys (~25 min)
    python bench/operations_vs_flink.py --keys 100000,1000000 --backends hashmap   # a shorter look

The state is R's job's (``bench/jobs.py``: per key a running (count, sum) in one ValueState), built from the same
events in both engines: ``--keys`` distinct keys, each once, in files of 1M events.

- Flink (``bench/flink/Operations.java``, parallelism 2, max parallelism 128, hashmap and RocksDB): the job reads the
  files continuously and, once every event has updated its state, stops with a savepoint (canonical format, the
  default); then a JVM of its own restores that savepoint at parallelism 3, restored when every subtask of the
  keyed operator has opened. Timed inside the JVM (so without its start); the same steps on 2,000 keys are
  measured first and subtracted, as the fixed cost of a MiniCluster and a job. Three probe events after the
  restore show the restored values.
- Lakestate (``lakestate`` commands on a warm Spark Connect server, as the operation DAGs run them, each a process
  of its own as a user or an Airflow task sees it): ``savepoint``; ``restore --savepoint ... --parallelism 3``;
  back to 2 (untimed); ``rescale --parallelism 3`` from the latest checkpoint (what a Lakestate rescale needs: the
  keyed tables are pinned, not copied); back to 2 (untimed); ``rescale --parallelism 3 --savepoint-first`` (the
  savepoint-first rescale, as Flink's); and that last one again as a ``spark-submit`` (a JVM of its own, not
  subtracted). The same probes are read back with ``lakestate state``.

Each step prints its seconds and the bytes it wrote (Flink: the savepoint's folder; Lakestate: the files it added
under the job's root, Delta logs included); the table at the end gives each at the largest size against the
smallest, and Lakestate's rescale against Flink's stop-with-savepoint + restore at the new parallelism.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.flink import as_csv, flink_classpath  # noqa: E402
from bench.operations import lakestate  # noqa: E402
from bench.workload import write_workload  # noqa: E402

PER_FILE = 1_000_000
FIXED_KEYS = 2_000


def state_data(base: Path, keys: int) -> tuple[Path, Path, dict]:
    """``keys`` keys' events (each key once) as Parquet and CSV, and three probe keys with their amounts."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    parquet, csv = base / f"data-{keys}" / "parquet", base / f"data-{keys}" / "csv"
    for first in range(0, keys, PER_FILE):
        write_workload(parquet, 1, min(PER_FILE, keys - first), min(PER_FILE, keys - first), first_key=first)
    as_csv(parquet, csv)
    wanted = {f"user-{k}" for k in (0, keys // 2, keys - 1)}
    table = pq.read_table(parquet, columns=["key", "amount"])
    table = table.filter(pc.is_in(table.column("key"), value_set=pa.array(sorted(wanted))))
    return parquet, csv, dict(zip(table.column("key").to_pylist(), table.column("amount").to_pylist()))


def flink(classpath: str, csv: Path, backend: str, keys: int, probes: dict, base: Path) -> dict:
    """Flink's build, stop-with-savepoint and restore at parallelism 3: milliseconds and the savepoint's bytes."""
    java = ["java", "-Xmx10g", "-cp", classpath, "Operations"]
    savepoints = base / f"flink-{backend}-{keys}"

    def run(*args: str) -> str:
        done = subprocess.run([*java, *args], capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"Flink's {args[0]} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        return done.stdout

    said = run("build", str(csv), backend, "2", str(keys), savepoints.as_uri())
    got = {name: int(ms) for name, ms in re.findall(r"flink-(\w+) ms=(\d+)", said)}
    got["savepoint_bytes"] = int(re.search(r"bytes=(\d+)", said).group(1))
    path = re.search(r"path=(\S+)", said).group(1)
    probe_file = base / "probes.csv"
    probe_file.write_text("".join(f"{key},5,0\n" for key in probes))
    said = run("restore", str(csv), backend, "3", path, str(probe_file))
    got["restore"] = int(re.search(r"flink-restore ms=(\d+)", said).group(1))
    seen = {k: (int(c), int(s)) for k, c, s in re.findall(r"flink-probe key=(\S+) count=(\d+) sum=(\d+)", said)}
    assert seen == {k: (2, a + 5) for k, a in probes.items()}, (seen, probes)
    shutil.rmtree(savepoints, ignore_errors=True)
    return got


def written(root: Path, before: dict) -> int:
    """Bytes of the files under ``root`` that are new or changed since ``before`` (``files(root)``)."""
    return sum(size for path, size in files(root).items() if before.get(path) != size)


def files(root: Path) -> dict:
    return {str(p): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def submitted(env: dict, *args: str) -> tuple[float, str]:
    """The entrypoint's ``args`` as a ``spark-submit`` (``lakestate submit``'s command, which submits a run):
    (wall seconds, its output)."""
    from state_store.cli import submit_command

    command = submit_command([], driver_memory="8g")[:-1] + list(args)  # its last word is "run"
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    took = time.perf_counter() - started
    if done.returncode:
        sys.exit(f"spark-submit {' '.join(args)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return took, done.stdout


def lakestate_steps(base: Path, keys: int, parquet: Path, probes: dict, url: str) -> dict:
    """Lakestate's build and operations on ``keys`` keys: (seconds, bytes written) of each step."""
    root = base / f"lakestate-{keys}"
    env = {**os.environ, "LAKESTATE_ROOT": str(root), "LAKESTATE_BENCH_INPUT": str(parquet), "PYTHONPATH": str(ROOT)}
    remote = ("--remote", url)
    lakestate(env, "register", "bench.jobs:job")
    got = {}

    def step(name: str | None, *args: str, submit: bool = False) -> str:
        before = files(root)
        took, said = submitted(env, *args) if submit else lakestate(env, *args)
        if name is not None:
            got[name] = (took, written(root, before))
            print(f"  lakestate {name}: {took:.2f}s, {got[name][1] / 2**20:.1f} MiB written", flush=True)
        return said

    step("build", "run", "--job", "bench", *remote)
    said = step("savepoint", "savepoint", "bench", "--label", "bench", *remote)
    savepoint = Path(re.search(r"savepoint path: (\S+)", said).group(1)).name
    step("restore", "restore", "bench", "--savepoint", f"bench/{savepoint}", "--parallelism", "3", *remote)
    step(None, "rescale", "bench", "--parallelism", "2", *remote)
    step("rescale", "rescale", "bench", "--parallelism", "3", *remote)
    step(None, "rescale", "bench", "--parallelism", "2", *remote)
    step("rescale_savepoint_first", "rescale", "bench", "--parallelism", "3", "--savepoint-first", *remote)
    step(None, "rescale", "bench", "--parallelism", "2", *remote)
    step("rescale_savepoint_first_submit", "rescale", "bench", "--parallelism", "3", "--savepoint-first",
         submit=True)
    for key, amount in probes.items():
        said = step(None, "state", "--job", "bench", "--state", "acc", "--key", key, *remote)
        value = json.loads(said.strip().splitlines()[-1])["value"]
        assert (value["count"], value["sum"]) == (1, amount), (key, value, amount)
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="1000000,10000000", help="sizes of the keyed state, comma-separated")
    parser.add_argument("--backends", default="hashmap,rocksdb", help="Flink's state backends")
    args = parser.parse_args()
    sizes = [int(k) for k in args.keys.split(",")]
    base = Path(tempfile.mkdtemp(prefix="lakestate-ops-flink-"))
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at start; keys {sizes}", flush=True)
    classpath = flink_classpath()
    env = {**os.environ, "LAKESTATE_CONNECT_DIR": str(base / "connect"), "SPARK_DRIVER_MEMORY": "8g"}
    connect = [str(ROOT / "scripts" / "spark-connect.sh")]
    results: dict[str, dict] = {}
    try:
        _, fixed_csv, fixed_probes = state_data(base, FIXED_KEYS)
        fixed = {b: flink(classpath, fixed_csv, b, FIXED_KEYS, fixed_probes, base) for b in args.backends.split(",")}
        print(f"Flink's fixed cost (2,000 keys): {fixed}", flush=True)
        started = subprocess.run([*connect, "start", "--background"], env=env, capture_output=True, text=True,
                                 check=True)
        url = started.stdout.strip().splitlines()[-1]
        for keys in sizes:
            parquet, csv, probes = state_data(base, keys)
            print(f"{keys:,d} keys:", flush=True)
            for backend in args.backends.split(","):
                got = flink(classpath, csv, backend, keys, probes, base)
                net = {k: (got[k] - fixed[backend][k]) / 1000 for k in ("build", "savepoint", "restore")}
                results[f"flink[{backend}] {keys}"] = {**net, "savepoint_bytes": got["savepoint_bytes"]}
                print(f"  flink[{backend}]: build {net['build']:.2f}s, stop-with-savepoint {net['savepoint']:.2f}s "
                      f"({got['savepoint_bytes'] / 2**20:.1f} MiB), restore at 3 {net['restore']:.2f}s (less the "
                      f"fixed cost; raw {got['savepoint'] / 1000:.2f}s and {got['restore'] / 1000:.2f}s)", flush=True)
            results[f"lakestate {keys}"] = lakestate_steps(base, keys, parquet, probes, url)
        summary(results, sizes, args.backends.split(","))
    finally:
        subprocess.run([*connect, "stop"], env=env, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def summary(results: dict, sizes: list, backends: list) -> None:
    small, large = min(sizes), max(sizes)
    print(f"\nat {large:,d} keys (x its time at {small:,d} keys):")
    for backend in backends:
        f, f0 = results[f"flink[{backend}] {large}"], results[f"flink[{backend}] {small}"]
        both, both0 = f["savepoint"] + f["restore"], f0["savepoint"] + f0["restore"]
        print(f"  flink[{backend}] stop-with-savepoint {f['savepoint']:.2f}s (x{f['savepoint'] / f0['savepoint']:.1f})"
              f", restore at 3 {f['restore']:.2f}s (x{f['restore'] / f0['restore']:.1f}), both {both:.2f}s "
              f"(x{both / both0:.1f}), {f['savepoint_bytes'] / 2**20:.1f} MiB written")
    lake, lake0 = results[f"lakestate {large}"], results[f"lakestate {small}"]
    flink_both = min(results[f"flink[{b}] {large}"]["savepoint"] + results[f"flink[{b}] {large}"]["restore"]
                     for b in backends)
    for name, (took, wrote) in lake.items():
        if name == "build":
            continue
        print(f"  lakestate {name}: {took:.2f}s (x{took / lake0[name][0]:.2f}), {wrote / 2**20:.1f} MiB written; "
              f"{took / flink_both:.2f}x Flink's faster stop-with-savepoint + restore")


if __name__ == "__main__":
    main()
