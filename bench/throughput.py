"""Throughput of the demo job, side by side with Spark's own stateful streaming on the same data.

    source scripts/env.sh && python bench/throughput.py [--files 5] [--events 100000] [--keys 100000]

Both engines run on the same SparkSession (local[*]) over the same Parquet
files, one file per microbatch, with the same per-user logic (event count,
spend scaled by a broadcast rule, average amount, page counts, last 3 pages)
and write their output to a Delta table. Lakestate runs with each backend asked
for; the peer is `applyInPandasWithState` with Spark's default state store.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def dir_size(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def run_lakestate(spark, root: Path, backend: str) -> dict:
    os.environ["LAKESTATE_ROOT"] = str(root)
    os.environ["LAKESTATE_BACKEND"] = backend
    from demo.clicks import job
    from state_store.catalog import JobMeta
    from state_store.runtime import run_job
    from state_store.settings import Settings

    settings = Settings.load(root=root)
    spec = job().with_overrides(job_id=f"clicks-{backend}", sink=f"sinks/clicks-{backend}", backend=backend)
    started = time.time()
    result = run_job(spark, spec, settings, progress=lambda line: print("   ", line, flush=True))
    seconds = time.time() - started
    events = sum(b["records_in"] for b in result.batches)
    latest = JobMeta(settings.job_dir(spec.job_id)).latest_checkpoint()
    state_dir = settings.job_dir(spec.job_id) / ("state" if backend == "delta" else f"snapshots/chk-{latest['checkpoint_id']}")
    size, files = dir_size(state_dir)
    return {"engine": f"lakestate[{backend}]", "events": events, "seconds": round(seconds, 1),
            "events_per_s": round(events / seconds), "state_entries": sum(latest["entries"].values()),
            "state_bytes_on_disk": size, "state_files": files,
            "per_microbatch_s": [b["seconds"] for b in result.batches]}


def run_spark_streaming(spark, root: Path) -> dict:
    """The peer: Structured Streaming + applyInPandasWithState, same logic, same files."""
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    from demo.clicks import EVENT

    inputs = root / "input"
    rules = spark.read.json(str(inputs / "rules")).select("page", "multiplier")
    stream = (spark.readStream.schema(EVENT.spark_schema_ddl()).option("maxFilesPerTrigger", 1)
              .parquet(str(inputs / "clicks")))
    joined = stream.join(F.broadcast(rules), "page", "left").fillna({"multiplier": 1.0})

    def update(key, frames, state):
        events, spend, total, pages, last = (state.get if state.exists else (0, 0.0, 0.0, "{}", "[]"))
        pages, last = json.loads(pages), json.loads(last)
        for pdf in frames:
            pdf = pdf.sort_values("seq")
            events += len(pdf)
            spend += float((pdf["amount"] * pdf["multiplier"]).sum())
            total += float(pdf["amount"].sum())
            for p in pdf["page"]:
                pages[p] = pages.get(p, 0) + 1
            last = (last + list(pdf["page"]))[-3:]
        state.update((events, spend, total, json.dumps(pages), json.dumps(last)))
        yield pd.DataFrame({"user_id": [key[0]], "events": [events], "spend": [spend],
                            "avg_amount": [total / events], "distinct_pages": [len(pages)]})

    out = joined.groupBy("user_id").applyInPandasWithState(
        update, "user_id long, events long, spend double, avg_amount double, distinct_pages int",
        "events long, spend double, total double, pages string, last string", "Append", GroupStateTimeout.NoTimeout)
    checkpoint = root / "peer-checkpoint"
    started = time.time()
    query = (out.writeStream.format("delta").option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start(str(root / "peer-sink")))
    query.awaitTermination()
    seconds = time.time() - started
    progress = query.recentProgress
    events = sum(p["numInputRows"] for p in progress)
    size, files = dir_size(checkpoint / "state")
    return {"engine": "spark applyInPandasWithState", "events": events, "seconds": round(seconds, 1),
            "events_per_s": round(events / seconds), "state_entries": None,
            "state_bytes_on_disk": size, "state_files": files,
            "per_microbatch_s": [round(p["durationMs"].get("triggerExecution", 0) / 1000, 2) for p in progress]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=5)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--backends", default="delta", help="comma-separated Lakestate backends to run")
    parser.add_argument("--no-peer", action="store_true")
    args = parser.parse_args()

    from demo.generate import write_events, write_rules
    from state_store.spark import build_spark

    # The peer's Python workers warn once per key group about a pandas deprecation.
    os.environ["PYTHONWARNINGS"] = "ignore::FutureWarning"

    base = Path(tempfile.mkdtemp(prefix="lakestate-bench-"))
    try:
        data = base / "data"
        write_events(data / "input" / "clicks", args.files, args.events, args.keys)
        write_rules(data / "input" / "rules")
        spark = build_spark("lakestate-bench", extra_conf={"spark.driver.memory": "6g"})
        print(f"data: {args.files} files x {args.events} events, {args.keys} keys; spark {spark.version}, "
              f"{os.cpu_count()} cores", flush=True)
        results = []
        for backend in args.backends.split(","):
            root = base / backend
            shutil.copytree(data / "input", root / "input")
            print(f"lakestate backend={backend}", flush=True)
            results.append(run_lakestate(spark, root, backend))
        if not args.no_peer:
            root = base / "peer"
            shutil.copytree(data / "input", root / "input")
            print("peer: spark structured streaming applyInPandasWithState", flush=True)
            results.append(run_spark_streaming(spark, root))
        print()
        peer = next((r for r in results if r["engine"].startswith("spark")), None)
        for r in results:
            ratio = f"{r['events_per_s'] / peer['events_per_s']:.2f}x peer" if peer else ""
            print(f"{r['engine']:32s} {r['events']:>8d} events {r['seconds']:>7.1f}s {r['events_per_s']:>7d} ev/s "
                  f"{ratio:>11s}  state: {r['state_entries'] or '-'} entries, {r['state_bytes_on_disk']} bytes, "
                  f"{r['state_files']} files; per microbatch {r['per_microbatch_s']}")
        print(json.dumps(results))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
