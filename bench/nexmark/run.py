"""Nexmark, side by side (issue 63): each query over the same generated events by Flink SQL 2.3 and by
Lakestate's SQL, their final tables compared row for row, their rates (events/s) and ratio printed as a table.

    source scripts/env.sh
    python bench/nexmark/run.py --queries all --events 2000000 --big 10000000   # the table of docs/benchmarks.md
    python bench/nexmark/run.py --queries 5,8 --events 200000                    # a few, smaller
    python bench/nexmark/run.py --store tests/fixtures/nexmark_flink.json        # the tests' expected tables

The events (``generate.py``, seed 1, 10,000 events/s from 2024-12-31T23:59:50Z) are written once per size into
``.cache/nexmark`` (``--files`` files, a microbatch each; for Flink the same events as one file,
``engines.flink_events``: over several, Flink's windows lose records run to run). Flink: the query's INSERT INTO
its blackhole sink in a JVM of its own, its span the JVM's wall time less the same query's on a 2,000-event slice
right before (the fixed cost, as ``bench/flink.py``); then its final table, collected in another JVM. Lakestate:
``SqlJob`` in one warm SparkSession (each query first run on the 2,000-event slice, not counted), a checkpoint a
microbatch, the ``delta`` backend, parallelism 2, ``end_of_input`` (Flink's end of a bounded source); its span what
the run prints (first plan to last commit); its state at the end the bytes of its state tables. q6 is not valid in
Flink 2.3 (nor compiled by Lakestate's SQL); q12 is in processing time, its rows are checked for their invariants
only.
q5, q7, q8 and q11 are also run as written by hand (``dataflows.py``), their tables compared with Flink's too.
``--store FILE``: no timing; the slice of the tests (3,000 events at 200 events/s, 3 files) run by Flink, each
final table stored as its row count, a digest and its first rows, for ``tests/nexmark/test_queries.py``.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from bench.nexmark import dataflows, engines  # noqa: E402
from bench.nexmark.dataflows import HAND_WRITTEN  # noqa: E402
from bench.nexmark.generate import parse_base_time, write_files  # noqa: E402
from bench.nexmark.spark_streaming import FIRES_AT_END, SPARK_QUERIES, run_spark  # noqa: E402
from bench.nexmark.tables import write_side_input  # noqa: E402

CACHE = ROOT / ".cache" / "nexmark"
BASE_TIME = "2024-12-31T23:59:50Z"
QUERIES = [n for n in range(24) if n != 6]  # q6: not valid in Flink 2.3 (its own TODO), nor compiled here
BIG = (0, 1, 2, 5, 8)  # the queries the issue runs on --big events
PROCESSING_TIME = (12,)  # compared by their invariants only
PROCESSING_WINDOW = datetime.timedelta(seconds=10)  # q12's
SLICE = {"events": 3_000, "files": 3, "seed": 1, "rate": 200}  # the tests' (tests/nexmark/test_queries.py)


def events_dir(events: int, files: int, seed: int = 1, rate: int = 10_000) -> Path:
    """The generated events of these settings, written once into .cache/nexmark."""
    where = CACHE / f"events-{events}-{files}-{seed}-{rate}"
    if not (where / "_done").is_file():
        shutil.rmtree(where, ignore_errors=True)
        started = time.perf_counter()
        write_files(where, events, files, seed, rate, parse_base_time(BASE_TIME))
        (where / "_done").write_text("")
        print(f"generated {events:,d} events in {files} files in {time.perf_counter() - started:.0f}s", flush=True)
    return where


def digest(rows: list[tuple]) -> str:
    """A final table's digest: its sorted rows as JSON lines, hashed."""
    text = "\n".join(json.dumps(list(r)) for r in sorted(rows))
    return hashlib.sha256(text.encode()).hexdigest()


def store_expected(path: Path) -> None:
    """Flink's final table of each query over the tests' slice, as ``{"q<n>": {"rows", "sha256", "head"}}``."""
    from state_store.spark.session import build_spark

    classpath = engines.flink_classes()
    events = events_dir(**SLICE)
    side = write_side_input(CACHE / "side_input")
    spark = build_spark("lakestate-nexmark-expected")
    expected = {}
    with tempfile.TemporaryDirectory() as work:
        for n in QUERIES:
            engines.run_flink(classpath, n, events, side, changes=Path(work) / f"q{n}.json")
            rows = engines.rows_of(engines.flink_table(spark, Path(work) / f"q{n}.json"))
            expected[f"q{n}"] = {"rows": len(rows), "sha256": digest(rows), "head": [list(r) for r in rows[:3]]}
            print(f"q{n}: {len(rows)} rows", flush=True)
    path.write_text(json.dumps({"slice": SLICE, "flink": "2.3.0", "queries": expected}, indent=1) + "\n")


def lakestate_q12_invariants(rows: list[tuple], bids: int) -> list[str]:
    """q12's rows (bidder, count, window start, end in processing time): some, each count positive, every bid
    counted once (all of a run's microbatches have its plan's processing time), each window 10 s."""
    problems = [] if rows else ["no window fired"]
    problems += [f"a count of {r[1]}" for r in rows if int(r[1]) <= 0]
    if sum(int(r[1]) for r in rows) != bids:
        problems.append(f"{sum(int(r[1]) for r in rows)} bids counted of {bids}")
    parse = datetime.datetime.fromisoformat
    problems += [f"a window {r[2]} - {r[3]}" for r in rows if parse(r[3]) - parse(r[2]) != PROCESSING_WINDOW]
    return problems


def processing_time_table(spark, n: int, events: Path, side: Path, root: Path, started: float):
    """The final table of a query in processing time: its windows are of the run's processing time, fixed in its
    plan, so they fire in a run after they end (docs/flink.md): the job run again, without new events, once its
    first run's windows have ended."""
    time.sleep(max(0.0, started + PROCESSING_WINDOW.total_seconds() + 1 - time.time()))
    return engines.run_lakestate(spark, engines.sql_job(n, events, side), root, f"sinks/q{n}")["table"]


def measure(spark, classpath: str, n: int, events: Path, size: int, fixed_events: Path, side: Path,
            work: Path) -> dict:
    """Query ``n`` over the ``size`` events in ``events``: Flink's span and table, Lakestate's span, state and
    table, and how they compare. Rates are of all the events, as Nexmark's (a query of bids reads the others too)."""
    fixed = engines.run_flink(classpath, n, fixed_events, side)["wall"]
    timed = engines.run_flink(classpath, n, events, side)
    flink_span = timed["wall"] - fixed
    engines.run_flink(classpath, n, events, side, changes=work / f"flink-q{n}.json")
    flink = engines.flink_table(spark, work / f"flink-q{n}.json")
    engines.run_lakestate(spark, engines.sql_job(n, fixed_events, side), work / f"warm-{n}", f"sinks/q{n}")
    started = time.time()
    ours = engines.run_lakestate(spark, engines.sql_job(n, events, side), work / f"q{n}", f"sinks/q{n}")
    if n in PROCESSING_TIME:
        ours["table"] = processing_time_table(spark, n, events, side, work / f"q{n}", started)
    hand = None
    if n in HAND_WRITTEN:  # the same query written by hand as a dataflow, its table compared with Flink's too
        written = getattr(dataflows, f"q{n}")
        engines.run_lakestate(spark, written(str(fixed_events)), work / f"warm-{n}-dataflow", f"sinks/q{n}")
        hand = engines.run_lakestate(spark, written(str(events)), work / f"q{n}-dataflow", f"sinks/q{n}")
        hand["differences"] = engines.differences(flink, hand["table"])
    peer = None
    if n in SPARK_QUERIES:  # Spark Structured Streaming, where Spark SQL expresses the query
        run_spark(spark, n, fixed_events, work / f"warm-{n}-spark")
        peer = run_spark(spark, n, events, work / f"q{n}-spark")
        peer["differences"] = engines.differences(flink, peer["table"])
    if n in PROCESSING_TIME:
        bids = sum(1 for p in events.glob("part-*.json") for line in p.open() if line.startswith('{"event_type":2'))
        different = lakestate_q12_invariants(engines.rows_of(ours["table"]), bids)
    else:
        different = engines.differences(flink, ours["table"])
    rows, flink_rows = ours["table"].count(), flink.count()
    for done in (f"q{n}", f"warm-{n}", f"flink-q{n}.json", f"q{n}-dataflow", f"warm-{n}-dataflow", f"q{n}-spark",
                 f"warm-{n}-spark"):
        shutil.rmtree(work / done, ignore_errors=True) if (work / done).is_dir() else (work / done).unlink(True)
    return {"query": n, "events": size, "read": ours["events"], "flink_s": flink_span, "flink_wall": timed["wall"],
            "flink_fixed": fixed, "lakestate_s": ours["seconds"], "state_bytes": ours["state_bytes"],
            "rows": rows, "flink_rows": flink_rows, "equal": not different,
            "differences": different, "hand_s": hand and hand["seconds"],
            "hand_equal": hand and not hand["differences"], "hand_differences": hand and hand["differences"],
            "spark_s": peer and peer["seconds"], "spark_equal": peer and not peer["differences"],
            "spark_differences": peer and peer["differences"]}


def table(results: list[dict]) -> str:
    """The results as docs/benchmarks.md's table."""
    lines = ["| query | events | Lakestate SQL (ev/s) | hand-written (ev/s) | Flink SQL (ev/s) | Spark (ev/s) | "
             "Lakestate / Flink | hand-written / SQL | Lakestate / Spark | rows equal to Flink's | rows | "
             "state at the end |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in results:
        rate = {k: r["events"] / r[f"{k}_s"] if r.get(f"{k}_s") else None for k in ("lakestate", "hand", "spark")}
        theirs = r["events"] / r["flink_s"] if r["flink_s"] > 0 else math.inf
        equal = ["invariants" if r["query"] in PROCESSING_TIME else "yes" if r["equal"] else "**no**"]
        if rate["hand"]:
            equal.append("hand-written " + ("yes" if r["hand_equal"] else "**no**"))
        if rate["spark"]:
            equal.append("Spark " + ("yes" if r["spark_equal"] else "no: its last windows never fire"
                                     if r["query"] in FIRES_AT_END else "**no**"))
        shown = {k: "" if v is None else f"{v:,.0f}" for k, v in rate.items()}
        ours = rate["lakestate"]
        hand_vs_sql = "" if not rate["hand"] else f"{rate['hand'] / ours:.2f}x"
        ours_vs_spark = "" if not rate["spark"] else f"{ours / rate['spark']:.2f}x"
        lines.append(f"| q{r['query']} | {r['events']:,d} | {shown['lakestate']} | {shown['hand']} | {theirs:,.0f} | "
                     f"{shown['spark']} | {ours / theirs:.2f}x | {hand_vs_sql} | {ours_vs_spark} | "
                     f"{'; '.join(equal)} | {r['rows']:,d} | {r['state_bytes'] / 1e6:,.1f} MB |")
    ratios = [(r["events"] / r["lakestate_s"]) / (r["events"] / r["flink_s"]) for r in results if r["flink_s"] > 0]
    if ratios:
        mean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        lines.append(f"\ngeometric mean of Lakestate SQL / Flink over {len(ratios)} queries: {mean:.2f}x; lowest "
                     f"{min(ratios):.2f}x")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", default="all", help="all, or their numbers: 0,5,8")
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--big", type=int, default=None, help="the events of q0-q2, q5 and q8 (default --events)")
    parser.add_argument("--files", type=int, default=20, help="files (microbatches) of each size")
    parser.add_argument("--store", type=Path, help="store Flink's tables of the tests' slice here; no timing")
    args = parser.parse_args()
    if args.store:
        return store_expected(args.store)
    queries = QUERIES if args.queries == "all" else [int(q) for q in args.queries.split(",")]
    classpath = engines.flink_classes()
    fixed_events = events_dir(2_000, 1)
    sizes = {n: args.big if args.big and n in BIG else args.events for n in queries}
    dirs = {size: events_dir(size, args.files) for size in sorted(set(sizes.values()))}
    side = write_side_input(CACHE / "side_input")
    from state_store.spark.session import build_spark

    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at start; queries {queries}", flush=True)
    spark = build_spark("lakestate-nexmark", extra_conf={"spark.driver.memory": "8g"})
    work = Path(tempfile.mkdtemp(prefix="lakestate-nexmark-"))
    results = []
    try:
        for n in queries:
            r = measure(spark, classpath, n, dirs[sizes[n]], sizes[n], fixed_events, side, work)
            results.append(r)
            print(f"q{n}: {r['events']:,d} events; Lakestate {r['lakestate_s']:.1f}s; Flink wall "
                  f"{r['flink_wall']:.1f}s - fixed {r['flink_fixed']:.1f}s = {r['flink_s']:.1f}s; rows "
                  f"{r['rows']:,d} (Flink {r['flink_rows']:,d}), equal: {r['equal']}", flush=True)
            for line in r["differences"]:
                print("   ", line[:300], flush=True)
            if r["spark_s"]:
                print(f"q{n} by Spark: {r['spark_s']:.1f}s, equal: {r['spark_equal']}", flush=True)
                for line in r["spark_differences"]:
                    print("   ", line[:300], flush=True)
            if r["hand_s"]:
                print(f"q{n} by hand: Lakestate {r['hand_s']:.1f}s, equal: {r['hand_equal']}", flush=True)
                for line in r["hand_differences"]:
                    print("   ", line[:300], flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(table(results))


if __name__ == "__main__":
    main()
