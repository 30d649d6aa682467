"""Throughput: Lakestate against Spark's own stateful Python APIs, side by side on the same data, in one run.

    source scripts/env.sh
    python bench/throughput.py                      # workload R: 5 files x 100,000 events over 100,000 keys
    python bench/throughput.py --workload L --peers none
    python bench/throughput.py --files 2 --events 1000 --keys 500   # a tiny run
    python bench/throughput.py --peers none --paths record,vectorized  # R per record and as a VectorizedKeyedFunction
    python bench/throughput.py --peers none --paths vectorized --rounds 3  # each engine's best of 3 rounds
    python bench/throughput.py --peers none --paths record,composite --rounds 3 --no-floor  # R keyed by 2 columns
    python bench/throughput.py --peers none --paths record,union3 --rounds 3 --no-floor  # R as a union of 3 sources

Lakestate runs ``bench/jobs.py`` (a running (count, sum) per key in a
ValueState, one output row per key per microbatch) with the ``delta`` backend,
parallelism 2, one file per microbatch and a checkpoint after every
microbatch, all pending microbatches in one run. The peers
(``bench/peers.py``) run the same logic on copies of the same files with the
RocksDB state store, one file per trigger. Events/s is over the span each
engine is timed on: Lakestate's run from its first plan to its last commit
(what the run prints itself), the peers' query from start to end; SparkSession
start-up is excluded for all, and every engine first runs once on 2 small
files so that none is timed in a cold JVM (``--no-warmup`` to skip). Outputs
are checked equal. Last, ``bench/floor.py``'s pass (the same read, shuffle and
sort with no user code) runs on the same files in the same JVM, and each
engine's rate is printed against it too (``--no-floor`` to skip).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.floor import floor_pass
from bench.peers import PEERS, dir_size, outputs_equal, read_outputs
from bench.workload import workload_parser, workload_sizes, write_workload


def keyed_commit_bytes(table: Path) -> int:
    """Bytes of the data files the keyed table's commits added."""
    total = 0
    for log in sorted((table / "_delta_log").glob("*.json")):
        for line in log.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                total += int(action["add"]["size"])
    return total


def run_lakestate(spark, input_dir: Path, root: Path, backend: str, quiet: bool = False,
                  vectorized: bool = False, composite: bool = False, union: bool = False) -> dict:
    """Lakestate's R job over ``input_dir``; ``composite``: keyed by two columns whose pair is R's key, over a
    copy of the files with the key split (``bench.jobs.split_keys``, before the timing); ``union``: the union of
    three sources that hold the events between them (``bench.jobs.split_sources``, before the timing)."""
    from bench.jobs import count_sum_job, count_sum_union_job, split_keys, split_sources
    from state_store.run.runtime import run_job
    from state_store.settings import Settings

    settings = Settings.load(root=root)
    if composite:
        split_keys(input_dir, input_dir.parent / "split")
        input_dir = input_dir.parent / "split"
    spec = (count_sum_union_job(split_sources(input_dir, input_dir.parent / "sources"), backend=backend) if union
            else count_sum_job(str(input_dir), backend=backend, vectorized=vectorized, composite=composite))
    started = time.time()
    result = run_job(spark, spec, settings,
                     progress=(lambda line: None) if quiet else (lambda line: print("   ", line, flush=True)))
    total = time.time() - started
    events = result.records_in
    state = settings.job_dir(spec.job_id) / "state"
    size, files = dir_size(state) if state.exists() else (0, 0)
    changed = spark.read.format("delta").load(str(state / "keyed")).selectExpr(
        "sum(length(state_name) + length(key) + length(namespace) + coalesce(length(user_key), 0) "
        "+ length(value) + 4 + 8 + 8 + 8) AS raw").first()["raw"] if backend == "delta" else None
    path = ",vectorized" if vectorized else ",composite" if composite else ",union3" if union else ""
    return {"engine": f"lakestate[{backend}{path}]", "events": events,
            "seconds": result.seconds, "events_per_s": round(events / result.seconds),
            "with_checkpoints_s": round(total, 1), "microbatches": len(result.batches), "phases": result.phases,
            "state_bytes": size, "state_files": files,
            "keyed_bytes_written": keyed_commit_bytes(state / "keyed") if backend == "delta" else None,
            "changed_entry_bytes": changed,
            "sink": str(settings.in_warehouse(spec.sink, "sink"))}


def main() -> None:
    parser = workload_parser(__doc__)
    parser.add_argument("--backends", default="delta", help="comma-separated Lakestate backends")
    parser.add_argument("--peers", default="apply,transform", help="comma-separated: apply,transform, or none")
    parser.add_argument("--paths", default="record",
                        help="comma-separated Lakestate paths: record,vectorized,composite (per record, keyed by two "
                             "columns whose pair is R's key),union3 (per record, a union of three sources)")
    parser.add_argument("--no-warmup", action="store_true", help="time each engine in the JVM as it finds it")
    parser.add_argument("--no-floor", action="store_true", help="skip bench/floor.py's pass in the same session")
    parser.add_argument("--rounds", type=int, default=1,
                        help="time every engine (and the floor) this many times, in turn, on fresh copies of the "
                             "data; each one's best round is reported (every round is printed)")
    args = parser.parse_args()
    files, events, keys = workload_sizes(args)
    peers = [] if args.peers == "none" else args.peers.split(",")
    lakestates = [(b, p, f"{b}-{p}") for b in args.backends.split(",") for p in args.paths.split(",")]

    os.environ["PYTHONWARNINGS"] = "ignore::FutureWarning"  # the peers' pandas deprecation noise
    from state_store.spark.session import build_spark

    base = Path(tempfile.mkdtemp(prefix="lakestate-bench-"))
    try:
        write_workload(base / "input", files, events, keys)
        spark = build_spark("lakestate-bench", extra_conf={"spark.driver.memory": "6g"})
        print(f"data: {files} files x {events} events over {keys} keys; spark {spark.version}, "
              f"{os.cpu_count()} cores", flush=True)
        if not args.no_warmup:
            # Every engine is timed in a JVM that has already run it once (classes loaded, code compiled):
            # otherwise whichever runs first pays the JVM's warm-up for the others.
            warm = base / "warmup"
            write_workload(warm / "input", 2, 2_000, 2_000)
            started = time.time()
            for backend, path, name in lakestates:
                shutil.copytree(warm / "input", warm / name / "input")
                run_lakestate(spark, warm / name / "input", warm / name / "root", backend, quiet=True,
                              vectorized=path == "vectorized", composite=path == "composite",
                              union=path == "union3")
            for name in peers:
                shutil.copytree(warm / "input", warm / name / "input")
                PEERS[name](spark, warm / name / "input", warm / name)
            if not args.no_floor:
                floor_pass(spark, warm / "input")
            print(f"warm-up: every engine ran 2 x 2,000 events first ({time.time() - started:.0f}s)", flush=True)
        rounds: dict[str, list] = {}  # engine -> its result of each round
        floor_seconds, rows = [], 0
        for round_ in range(args.rounds):
            tag = f" (round {round_ + 1} of {args.rounds})" if args.rounds > 1 else ""
            for backend, path, name in lakestates:
                shutil.copytree(base / "input", base / f"{name}-{round_}" / "input")
                print(f"lakestate backend={backend} {path}{tag}", flush=True)
                result = run_lakestate(spark, base / f"{name}-{round_}" / "input", base / f"{name}-{round_}" / "root",
                                       backend, vectorized=path == "vectorized", composite=path == "composite",
                                       union=path == "union3")
                rounds.setdefault(result["engine"], []).append(result)
            for name in peers:
                shutil.copytree(base / "input", base / f"{name}-{round_}" / "input")
                print(f"peer {name}{tag}", flush=True)
                result = PEERS[name](spark, base / f"{name}-{round_}" / "input", base / f"{name}-{round_}")
                rounds.setdefault(result["engine"], []).append(result)
            if not args.no_floor:  # what Spark alone costs for the same pass, in the same JVM (bench/floor.py)
                rows, seconds = floor_pass(spark, base / "input")
                floor_seconds.append(seconds)
                print(f"floor.py's pass{tag}: {rows} events in {seconds:.1f}s = {rows / seconds:,.0f} events/s",
                      flush=True)
        if args.rounds > 1:
            for engine, each in rounds.items():
                times = ", ".join(f"{r['seconds']:.2f}s" for r in each)
                print(f"{engine}: {times} over the rounds")
            if floor_seconds:
                print(f"floor: {', '.join(f'{s:.2f}s' for s in floor_seconds)} over the rounds")
        results = [min(each, key=lambda r: r["seconds"]) for each in rounds.values()]
        floor_rate = rows / min(floor_seconds) if floor_seconds else None
        print()
        peer_rates = {r["engine"]: r["events_per_s"] for r in results if r["engine"].startswith("spark")}
        for r in results:
            ratios = " ".join(f"{r['events_per_s'] / rate:.1f}x {name.split()[-1]}"
                              for name, rate in peer_rates.items())
            if floor_rate:
                ratios += f" {r['events_per_s'] / floor_rate:.2f}x floor"
            print(f"{r['engine']:34s} {r['events']:>9d} events {r['seconds']:>7.1f}s {r['events_per_s']:>8d} ev/s  "
                  f"{ratios}", flush=True)
        lake = next(r for r in results if r["engine"].startswith("lakestate"))
        print(f"lakestate run phases: {lake['phases']}; with checkpoints {lake['with_checkpoints_s']}s")
        if lake["keyed_bytes_written"]:
            print(f"keyed state: {lake['keyed_bytes_written']} bytes written for {lake['changed_entry_bytes']} bytes "
                  f"of changed entries ({lake['keyed_bytes_written'] / lake['changed_entry_bytes']:.2f}x); "
                  f"state tables {lake['state_bytes']} bytes in {lake['state_files']} files")
        ours = read_outputs(spark, lake["sink"])
        for r in results:
            if r["engine"].startswith("lakestate") and r is not lake:
                print(f"outputs of {r['engine']} equal to {lake['engine']}: "
                      f"{outputs_equal(spark, ours, read_outputs(spark, r['sink']))}")
            if r["engine"].startswith("spark"):
                print(f"outputs equal to {r['engine']}: {outputs_equal(spark, ours, read_outputs(spark, r['sink']))}")
        print(json.dumps(results))
        spark.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
