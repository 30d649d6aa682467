"""Kafka: workload R produced to a 4-partition topic, read by Lakestate and by Spark's applyInPandasWithState on
the Structured Streaming Kafka source, side by side in one run; Lakestate on R's files beside them.

    source scripts/env.sh
    python bench/kafka.py                        # R: 5 x 100,000 events over 100,000 keys (~8 min, most of it the peer)
    python bench/kafka.py --peers none --rounds 3   # Lakestate on Kafka and on files, best of 3 rounds each (~2 min)
    python bench/kafka.py --files 2 --events 2000 --keys 500   # a tiny run

The bench starts its own broker (scripts/kafka.sh, a fresh folder, free
ports) and stops it at the end. Each file's events are produced in order,
round robin over the 4 partitions (message key: the event's key, value: the
event as JSON), so every partition holds a quarter of each file: a microbatch
bound of one file's events (Lakestate's ``max_records_per_microbatch``,
Spark's ``maxOffsetsPerTrigger``) takes a quarter from each partition, and
both engines' microbatches are R's files, as Lakestate's on the files are.
The logic is bench/jobs.py's (a running count and sum per key, one output row
per key per microbatch); outputs are checked equal, as multisets. Events/s
are over what each engine is timed on (Lakestate: its run from its first plan
to its last commit; the peer: its query from start to end), after a warm-up
of every engine on a small topic.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.peers import OUTPUT_SCHEMA, STATE_SCHEMA, _run, outputs_equal, read_outputs
from bench.throughput import run_lakestate
from bench.workload import workload_parser, workload_sizes, write_workload
from tests.support.ports import free_port_pair

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 4


def _broker(command: str, directory: Path, port: int) -> None:
    env = {**os.environ, "LAKESTATE_KAFKA_DIR": str(directory), "LAKESTATE_KAFKA_PORT": str(port)}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "kafka.sh"), command], env=env, capture_output=True,
                          text=True, timeout=120)
    if done.returncode:
        raise SystemExit(f"scripts/kafka.sh {command} failed:\n{done.stdout}{done.stderr}")


def produce(bootstrap: str, topic: str, files: list[Path]) -> int:
    """Create ``topic`` with 4 partitions and produce every file's events to it, file by file, round robin over
    the partitions; return how many."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS)]).values():
        future.result()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000})
    count = 0
    for path in files:
        for row in pq.read_table(path).to_pylist():
            while True:
                try:
                    producer.produce(topic, key=row["key"], value=json.dumps(row), partition=count % PARTITIONS)
                    break
                except BufferError:  # the local queue is full: let it drain
                    producer.poll(0.1)
            count += 1
        producer.poll(0)
    if producer.flush(120):
        raise SystemExit(f"the broker did not take every message of {topic}")
    return count


def run_lakestate_kafka(spark, bootstrap: str, topic: str, per_microbatch: int, root: Path, quiet: bool = False
                        ) -> dict:
    from bench.jobs import count_sum_kafka_job
    from state_store.run.runtime import run_job
    from state_store.settings import Settings

    settings = Settings.load(root=root)
    spec = count_sum_kafka_job(bootstrap, topic, per_microbatch)
    result = run_job(spark, spec, settings,
                     progress=(lambda line: None) if quiet else (lambda line: print("   ", line, flush=True)))
    return {"engine": "lakestate[kafka]", "events": result.records_in, "seconds": result.seconds,
            "events_per_s": round(result.records_in / result.seconds), "microbatches": len(result.batches),
            "phases": result.phases, "sink": str(settings.in_warehouse(spec.sink, "sink"))}


def run_apply_in_pandas_with_state_kafka(spark, bootstrap: str, topic: str, per_microbatch: int, work: Path
                                         ) -> dict:
    """bench/peers.py's applyInPandasWithState peer, on the Structured Streaming Kafka source: one file's
    events per trigger (maxOffsetsPerTrigger), the value parsed from JSON."""
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    from bench.peers import ROCKSDB, _count_sum

    def update(key, frames, state):
        count, total = _count_sum(state.get if state.exists else None, frames)
        state.update((count, total))
        yield pd.DataFrame({"key": [key[0]], "count": [count], "sum": [total]})

    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    events = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", per_microbatch).load()
              .select(F.from_json(F.col("value").cast("string"), "key string, amount long, ts long").alias("e"))
              .select("e.*"))
    out = events.groupBy("key").applyInPandasWithState(update, OUTPUT_SCHEMA, STATE_SCHEMA, "Append",
                                                       GroupStateTimeout.NoTimeout)
    return _run("spark applyInPandasWithState[kafka]", out, work)


def read_floor(spark, bootstrap: str, topic: str, files: Path) -> tuple[float, float, float]:
    """What Spark alone takes to read the topic (with Lakestate's consumer fetch sizes, the value parsed from
    JSON), the topic with its values left as bytes, and the files, every column of every record, best of 3 each:
    how much of the gap between Lakestate on Kafka and on files is the source's own read, and how much of that
    the JSON parse."""
    from pyspark.sql import functions as F

    from state_store.sources.kafka import _READ_DEFAULTS

    def topic_read(parse: bool = True):
        reader = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
        for name, value in _READ_DEFAULTS.items():
            reader = reader.option(f"kafka.{name}", value)
        if not parse:
            return reader.load().select("value", "key", "topic", "partition", "offset", "timestamp")
        value = F.from_json(F.col("value").cast("string"), "key string, amount long, ts long").alias("v")
        return reader.load().select(value, "key", "topic", "partition", "offset", "timestamp").select("v.*", "*")

    def best(make) -> float:
        times = []
        for _ in range(3):
            started = time.time()
            make().write.format("noop").mode("overwrite").save()
            times.append(time.time() - started)
        return min(times)

    return best(topic_read), best(lambda: topic_read(parse=False)), best(lambda: spark.read.parquet(str(files)))


def main() -> None:
    parser = workload_parser(__doc__)
    parser.add_argument("--peers", default="apply", help="apply, or none")
    parser.add_argument("--rounds", type=int, default=1,
                        help="time Lakestate on Kafka and on files this many times each, in turn; the best is "
                             "reported (the peer runs once)")
    args = parser.parse_args()
    files, events, keys = workload_sizes(args)

    os.environ["PYTHONWARNINGS"] = "ignore::FutureWarning"
    from state_store.spark.session import build_spark

    base = Path(tempfile.mkdtemp(prefix="lakestate-bench-kafka-"))
    port = free_port_pair()
    bootstrap = f"127.0.0.1:{port}"
    try:
        _broker("start", base / "kafka", port)
        written = write_workload(base / "input", files, events, keys)
        started = time.time()
        produced = produce(bootstrap, "r", written)
        print(f"data: {files} files x {events} events over {keys} keys, {produced} messages produced to "
              f"{PARTITIONS} partitions in {time.time() - started:.1f}s", flush=True)
        spark = build_spark("lakestate-bench-kafka", extra_conf={"spark.driver.memory": "6g"})
        warm = write_workload(base / "warm-input", 2, 2_000, 2_000)
        produce(bootstrap, "warm", warm)
        run_lakestate(spark, base / "warm-input", base / "warm-files", "delta", quiet=True)
        run_lakestate_kafka(spark, bootstrap, "warm", 2_000, base / "warm-kafka", quiet=True)
        if args.peers == "apply":
            run_apply_in_pandas_with_state_kafka(spark, bootstrap, "warm", 2_000, base / "warm-peer")
        print("warm-up: every engine ran 2 x 2,000 events first", flush=True)
        rounds: dict[str, list] = {}
        for round_ in range(args.rounds):
            tag = f" (round {round_ + 1} of {args.rounds})" if args.rounds > 1 else ""
            print(f"lakestate on R's files{tag}", flush=True)
            shutil.copytree(base / "input", base / f"files-{round_}" / "input")
            r = run_lakestate(spark, base / f"files-{round_}" / "input", base / f"files-{round_}" / "root", "delta")
            r["engine"] = "lakestate[files]"
            rounds.setdefault(r["engine"], []).append(r)
            print(f"lakestate on topic r{tag}", flush=True)
            r = run_lakestate_kafka(spark, bootstrap, "r", events, base / f"kafka-{round_}")
            rounds.setdefault(r["engine"], []).append(r)
        if args.peers == "apply":
            print("peer applyInPandasWithState on topic r", flush=True)
            r = run_apply_in_pandas_with_state_kafka(spark, bootstrap, "r", events, base / "peer")
            rounds[r["engine"]] = [r]
        if args.rounds > 1:
            for engine, each in rounds.items():
                times = ", ".join(f"{r['seconds']:.2f}s" for r in each)
                print(f"{engine}: {times} over the rounds")
        best = {engine: min(each, key=lambda r: r["seconds"]) for engine, each in rounds.items()}
        kafka, files_ = best["lakestate[kafka]"], best["lakestate[files]"]
        print()
        for r in best.values():
            print(f"{r['engine']:38s} {r['events']:>9d} events {r['seconds']:>7.1f}s {r['events_per_s']:>8d} ev/s "
                  f"in {r['microbatches']} microbatches", flush=True)
        print(f"lakestate on Kafka / on files: {kafka['events_per_s'] / files_['events_per_s']:.2f}x")
        topic_s, raw_s, files_s = read_floor(spark, bootstrap, "r", base / "input")
        print(f"Spark's own read alone (no state, no output; best of 3): the topic, JSON parsed {topic_s:.2f}s "
              f"(values left as bytes {raw_s:.2f}s), the files {files_s:.2f}s: {topic_s - files_s:.2f}s of the "
              f"{kafka['seconds'] - files_['seconds']:.2f}s between the two runs")
        ours = read_outputs(spark, kafka["sink"])
        print(f"outputs of lakestate[kafka] equal to lakestate[files]: "
              f"{outputs_equal(spark, ours, read_outputs(spark, files_['sink']))}")
        peer = best.get("spark applyInPandasWithState[kafka]")
        if peer:
            print(f"lakestate on Kafka / applyInPandasWithState on Kafka: "
                  f"{kafka['events_per_s'] / peer['events_per_s']:.1f}x")
            print(f"outputs equal to {peer['engine']}: {outputs_equal(spark, ours, read_outputs(spark, peer['sink']))}")
        print(json.dumps(list(best.values())))
        spark.stop()
    finally:
        _broker("stop", base / "kafka", port)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
