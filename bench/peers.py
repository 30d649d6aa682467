"""Spark's own Python stateful streaming APIs on a benchmark workload: the peers Lakestate is measured against.

    source scripts/env.sh
    python bench/peers.py --workload R                        # 5 files x 100,000 events, 100,000 keys
    python bench/peers.py --files 2 --events 1000 --keys 500  # a tiny run
    python bench/peers.py --workload L --peers transform      # one peer only

Both peers run the same logic over the same Parquet files (bench/workload.py),
one file per microbatch: per key a running (count, sum of amount) kept in
RocksDB state, and one output row `key, count, sum` per key touched in a
microbatch (the values after it), appended to a Delta table.

- `applyInPandasWithState`: the GroupState API (Spark 3.4+), Append, NoTimeout.
- `transformWithStateInPandas`: the StatefulProcessor API (Spark 4.0), a
  ValueState of (count, sum), operator output mode Update, timeMode None.

The clock runs from just before `start()` to after `awaitTermination()`; the
SparkSession's start-up is not counted. At the end the two outputs are compared
as multisets.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor
from pyspark.sql.streaming.state import GroupStateTimeout

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.workload import workload_parser, workload_sizes, write_workload

INPUT_SCHEMA = "key string, amount long, ts long"
OUTPUT_SCHEMA = "key string, count long, sum long"
STATE_SCHEMA = "count long, sum long"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def dir_size(path: Path) -> tuple[int, int]:
    """(bytes, files) under path."""
    files = [p for p in Path(path).rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def _stream(spark, input_dir: Path):
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    return spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(input_dir))


def _run(engine: str, out, work_dir: Path) -> dict:
    """Run `out` to a Delta sink under work_dir, trigger availableNow, and measure it."""
    sink, checkpoint = work_dir / "sink", work_dir / "checkpoint"
    # The Delta sink takes Append (or Complete) only. applyInPandasWithState's own mode must equal the
    # query's; transformWithStateInPandas' operator mode (Update) is not checked against it.
    writer = (out.writeStream.format("delta").outputMode("append")
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    started = time.time()
    query = writer.start(str(sink))
    query.awaitTermination()
    seconds = time.time() - started
    progress = query.recentProgress
    events = sum(p["numInputRows"] for p in progress)
    state_bytes, state_files = dir_size(checkpoint / "state")
    return {"engine": engine, "events": events, "seconds": round(seconds, 1),
            "events_per_s": round(events / seconds), "microbatches": len(progress),
            "per_microbatch_s": [round(p["durationMs"].get("triggerExecution", 0) / 1000, 2) for p in progress],
            "sink": str(sink), "state_bytes": state_bytes, "state_files": state_files}


def _count_sum(previous, frames) -> tuple[int, int]:
    count, total = previous if previous is not None else (0, 0)
    for pdf in frames:
        count += len(pdf)
        total += int(pdf["amount"].sum())
    return count, total


def run_apply_in_pandas_with_state(spark, input_dir: Path, work_dir: Path) -> dict:
    """Peer 1: groupBy(key).applyInPandasWithState, Append, NoTimeout."""
    def update(key, frames, state):
        count, total = _count_sum(state.get if state.exists else None, frames)
        state.update((count, total))
        yield pd.DataFrame({"key": [key[0]], "count": [count], "sum": [total]})

    out = _stream(spark, input_dir).groupBy("key").applyInPandasWithState(
        update, OUTPUT_SCHEMA, STATE_SCHEMA, "Append", GroupStateTimeout.NoTimeout)
    return _run("spark applyInPandasWithState", out, work_dir)


class CountSum(StatefulProcessor):
    """Peer 2's processor: a ValueState (count, sum) per key; one output row per key per microbatch."""

    def init(self, handle) -> None:
        self.acc = handle.getValueState("acc", STATE_SCHEMA)

    def handleInputRows(self, key, rows, timerValues):
        count, total = _count_sum(self.acc.get() if self.acc.exists() else None, rows)
        self.acc.update((count, total))
        yield pd.DataFrame({"key": [key[0]], "count": [count], "sum": [total]})

    def close(self) -> None:
        pass


def run_transform_with_state_in_pandas(spark, input_dir: Path, work_dir: Path) -> dict:
    """Peer 2: groupBy(key).transformWithStateInPandas with a StatefulProcessor, Update, timeMode None."""
    out = _stream(spark, input_dir).groupBy("key").transformWithStateInPandas(
        statefulProcessor=CountSum(), outputStructType=OUTPUT_SCHEMA, outputMode="Update", timeMode="None")
    return _run("spark transformWithStateInPandas", out, work_dir)


PEERS = {"apply": run_apply_in_pandas_with_state, "transform": run_transform_with_state_in_pandas}


def read_outputs(spark, sink_path):
    """A peer's output table: key, count, sum."""
    return spark.read.format("delta").load(str(sink_path)).select("key", "count", "sum")


def outputs_equal(spark, a_df, b_df) -> bool:
    """Equal as multisets: the same rows, each as many times."""
    return a_df.count() == b_df.count() and a_df.exceptAll(b_df).isEmpty() and b_df.exceptAll(a_df).isEmpty()


def main() -> None:
    parser = workload_parser(__doc__)
    parser.add_argument("--peers", default="apply,transform", help="comma-separated: " + ",".join(PEERS))
    args = parser.parse_args()
    files, events, keys = workload_sizes(args)
    peers = args.peers.split(",")
    if unknown := set(peers) - set(PEERS):
        parser.error(f"unknown peers: {sorted(unknown)}")

    # Python workers inherit this: it silences a pandas deprecation warning printed once per group batch.
    os.environ["PYTHONWARNINGS"] = "ignore::FutureWarning"
    from state_store.spark.session import build_spark

    base = Path(tempfile.mkdtemp(prefix="lakestate-peers-"))
    try:
        write_workload(base / "input", files, events, keys)
        spark = build_spark("peers", extra_conf={"spark.driver.memory": "6g", "spark.sql.shuffle.partitions": "2"})
        print(f"data: {files} files x {events} events, {keys} keys; spark {spark.version}, {os.cpu_count()} cores",
              flush=True)
        results = []
        for name in peers:
            shutil.copytree(base / "input", base / name / "input")
            r = PEERS[name](spark, base / name / "input", base / name)
            results.append(r)
            print(f"{r['engine']:34s} {r['events']:>8d} events {r['seconds']:>7.1f}s {r['events_per_s']:>7d} ev/s  "
                  f"state: {r['state_bytes']} bytes, {r['state_files']} files; "
                  f"per microbatch {r['per_microbatch_s']}", flush=True)
        if len(results) == 2:
            a, b = (read_outputs(spark, r["sink"]) for r in results)
            print(f"outputs equal: {outputs_equal(spark, a, b)} ({a.count()} vs {b.count()} rows)", flush=True)
        spark.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
