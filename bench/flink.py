"""Flink's own JVM engine as a peer (issue 42), side by side with Lakestate on the same events, in one run.

    source scripts/env.sh
    python bench/flink.py    # workload R: Flink hashmap and rocksdb, Lakestate per record and vectorised
    python bench/flink.py --workload L --rounds 1

Flink runs ``bench/flink/CountSum.java`` (``bench/jobs.py``'s logic: per key a running (count, sum) in one
ValueState; an output per record, kept per key in a hash map rather than written) on the workload's events as CSV
files, streaming mode, parallelism 2, in a JVM of its own per round (Flink 2.3.0's jars from the
``apache-flink-libraries`` wheel, fetched once into .cache/flink; the job compiled by ``javac``). Its span is the
JVM's wall time less its fixed cost, the same job on one 2,000-event file in a JVM of its own, measured right
before each round (after one such JVM not counted; its ``getNetRuntime`` is printed too). Lakestate's span is
what its run prints itself (first plan to last commit; ``bench/throughput.py``'s), in one warm SparkSession after a
warm-up on 2 small files: a microbatch per file, a checkpoint after each, the ``delta`` backend, parallelism 2. Both
are checked to end with the same state: per key, the last (count, sum); the keys, the sum of counts and the sum of
sums compared.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.workload import workload_parser, workload_sizes, write_workload  # noqa: E402

FLINK = "2.3.0"
CACHE = ROOT / ".cache" / "flink"


def flink_classpath() -> str:
    """Flink's jars (fetched once from PyPI's apache-flink-libraries wheel) and bench/flink's jobs (CountSum,
    Operations) compiled against them."""
    lib, classes = CACHE / "lib", CACHE / "classes"
    if not (lib / f"flink-dist-{FLINK}.jar").is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(CACHE),
                        f"apache-flink-libraries=={FLINK}"], check=True)
        (wheel,) = CACHE.glob(f"apache_flink_libraries-{FLINK}-*.whl")
        lib.mkdir(exist_ok=True)
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.startswith("pyflink/lib/") and name.endswith(".jar"):
                    (lib / name.rsplit("/", 1)[1]).write_bytes(z.read(name))
    for source in sorted((ROOT / "bench" / "flink").glob("*.java")):  # CountSum, Operations
        compiled = classes / f"{source.stem}.class"
        if not compiled.is_file() or compiled.stat().st_mtime < source.stat().st_mtime:
            classes.mkdir(parents=True, exist_ok=True)
            subprocess.run(["javac", "-d", str(classes), "-cp", f"{lib}/*:{classes}", str(source)], check=True)
    return f"{lib}/*:{classes}"


def as_csv(parquet_dir: Path, csv_dir: Path) -> None:
    """The workload's Parquet files as CSV lines ``key,amount,ts`` (no header), one file each."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    csv_dir.mkdir(parents=True)
    for path in sorted(parquet_dir.glob("part-*.parquet")):
        pacsv.write_csv(pq.read_table(path), csv_dir / f"{path.stem}.csv",
                        pacsv.WriteOptions(include_header=False, quoting_style="none"))


def run_flink(classpath: str, csv_dir: Path, backend: str) -> dict:
    """One JVM running CountSum over ``csv_dir``: its wall time, net runtime and what its subtasks ended with."""
    started = time.perf_counter()
    done = subprocess.run(["java", "-cp", classpath, "CountSum", str(csv_dir), backend, "2"], capture_output=True,
                          text=True)
    wall = time.perf_counter() - started
    if done.returncode:
        sys.exit(f"Flink's job failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    subtasks = [dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", line))
                for line in done.stdout.splitlines() if line.startswith("flink-subtask")]
    net = int(re.search(r"net_ms=(\d+)", done.stdout).group(1)) / 1000
    ended = {k: sum(s[k] for s in subtasks) for k in ("keys", "counts", "sums")}
    return {"wall": wall, "net": net, "ended": ended}


def lakestate_ended(spark, sink: str) -> dict:
    """Each key's last (count, sum) in Lakestate's sink: the keys, the sum of counts and of sums."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rows = spark.read.format("delta").load(sink)
    last = rows.withColumn("_n", F.row_number().over(Window.partitionBy("key").orderBy(F.desc("_microbatch"))))
    got = last.filter("_n = 1").agg(F.count("*").alias("keys"), F.sum("count").alias("counts"),
                                    F.sum("sum").alias("sums")).first()
    return {k: int(got[k]) for k in ("keys", "counts", "sums")}


def main() -> None:
    parser = workload_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=2, help="each engine's best of this many rounds")
    parser.add_argument("--backends", default="hashmap,rocksdb", help="Flink's state backends")
    parser.add_argument("--paths", default="record,vectorized", help="Lakestate's paths")
    args = parser.parse_args()
    files, events, keys = workload_sizes(args)
    classpath = flink_classpath()
    base = Path(tempfile.mkdtemp(prefix="lakestate-flink-"))
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at start; data: {files} files x "
          f"{events:,d} events over {keys:,d} keys; Flink {FLINK}", flush=True)
    results: dict[str, list[float]] = {}
    try:
        write_workload(base / "input", files, events, keys)
        as_csv(base / "input", base / "csv")
        write_workload(base / "fixed", 1, 2_000, 2_000)
        as_csv(base / "fixed", base / "fixed-csv")
        flink_ended = None
        for backend in args.backends.split(","):
            run_flink(classpath, base / "fixed-csv", backend)  # a first JVM of the backend, not counted
            for round_ in range(args.rounds):
                # the fixed cost measured beside each round, so a change of load between rounds moves both
                fixed = run_flink(classpath, base / "fixed-csv", backend)["wall"]
                got = run_flink(classpath, base / "csv", backend)
                span = got["wall"] - fixed
                print(f"flink[{backend}] round {round_ + 1}: wall {got['wall']:.2f}s - fixed {fixed:.2f}s = "
                      f"{span:.2f}s ({events * files / span:,.0f} ev/s); net runtime {got['net']:.2f}s; "
                      f"ended {got['ended']}", flush=True)
                results.setdefault(f"flink[{backend}]", []).append(span)
                assert flink_ended in (None, got["ended"]), (flink_ended, got["ended"])
                flink_ended = got["ended"]
        from bench.throughput import run_lakestate
        from state_store.spark.session import build_spark

        spark = build_spark("lakestate-flink-bench", extra_conf={"spark.driver.memory": "6g"})
        write_workload(base / "warm", 2, 2_000, 2_000)
        for path in args.paths.split(","):
            shutil.copytree(base / "warm", base / f"warm-{path}" / "input")
            run_lakestate(spark, base / f"warm-{path}" / "input", base / f"warm-{path}" / "root", "delta",
                          quiet=True, vectorized=path == "vectorized")
        for round_ in range(args.rounds):
            for path in args.paths.split(","):
                where = base / f"{path}-{round_}"
                shutil.copytree(base / "input", where / "input")
                got = run_lakestate(spark, where / "input", where / "root", "delta", quiet=True,
                                    vectorized=path == "vectorized")
                ended = lakestate_ended(spark, got["sink"])
                print(f"lakestate[{path}] round {round_ + 1}: {got['seconds']:.2f}s ({got['events_per_s']:,d} ev/s); "
                      f"ended {ended}", flush=True)
                assert ended == flink_ended, (ended, flink_ended)
                results.setdefault(f"lakestate[{path}]", []).append(got["seconds"])
        print()
        reference = min(results.get("flink[hashmap]", [0])) or None
        for engine, spans in results.items():
            best = min(spans)
            ratio = f"  {reference / best:.2f}x Flink hashmap's rate" if reference else ""
            print(f"{engine:22s} {events * files:>10,d} events {best:>7.2f}s {events * files / best:>10,.0f} ev/s"
                  f"{ratio}", flush=True)
        print("the same state at the end in every engine: keys, sum of counts, sum of sums =", flink_ended)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
