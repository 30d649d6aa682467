"""Kafka on this machine: scripts/kafka.sh's broker (KRaft, from Maven Central's jars) and Spark's batch Kafka
reader with pinned offset ranges, the read a Kafka source's plan will pin for each microbatch (issue 23)."""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from state_store import (
    Dataflow,
    FilterFunction,
    JobSpec,
    KafkaSource,
    KeyedProcessFunction,
    OutputTag,
    Types,
    ValueStateDescriptor,
)
from state_store.run.runtime import FaultInjector, InjectedFault
from tests.support.airflow_server import migrate
from tests.support.helpers import run, sink_rows, state_at_latest_checkpoint
from tests.support.lake import Lake
from tests.support.ports import free_port_run
from tests.support.servers import ROOT, script

SCRIPT = ROOT / "scripts" / "kafka.sh"


def _topic(broker, name: str, partitions: int = 4, config: dict | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker["bootstrap"]})  # kept while its futures resolve
    for future in admin.create_topics([NewTopic(name, partitions, config=config or {})]).values():
        future.result()


def _produce(broker, topic: str, messages: list[tuple[int, str, dict | bytes]]) -> None:
    """``(partition, key, value)`` messages, in order: a dict as JSON, bytes as they are (a poison value)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker["bootstrap"]})
    for partition, key, value in messages:
        producer.produce(topic, key=key, value=value if isinstance(value, bytes) else json.dumps(value),
                         partition=partition)
    assert producer.flush(30) == 0


def test_a_broker_from_maven_jars_serves_spark_exactly_the_pinned_offset_ranges(spark, broker):
    again = script("kafka", "start", broker["env"])
    assert again.returncode == 0 and f"already running (pid {broker['pid']})" in again.stdout
    assert script("kafka", "status", broker["env"]).returncode == 0
    _topic(broker, "pinned")
    _produce(broker, "pinned", [(i % 4, f"user-{i}", {"n": i}) for i in range(40)])
    # [start, end) per partition, as a plan pins them: 10 records each, these ranges 2+0+10+5 of them.
    ranges = {0: (3, 5), 1: (4, 4), 2: (0, 10), 3: (5, 10)}
    start = json.dumps({"pinned": {str(p): s for p, (s, _) in ranges.items()}})
    end = json.dumps({"pinned": {str(p): e for p, (_, e) in ranges.items()}})
    rows = (spark.read.format("kafka").option("kafka.bootstrap.servers", broker["bootstrap"])
            .option("subscribe", "pinned").option("startingOffsets", start).option("endingOffsets", end).load()
            .selectExpr("partition", "offset", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")
            .collect())
    got = sorted((r["partition"], r["offset"]) for r in rows)
    assert got == sorted((p, o) for p, (s, e) in ranges.items() for o in range(s, e))
    for r in rows:  # partition p's offset o is the message i = 4 o + p
        i = 4 * r["offset"] + r["partition"]
        assert (r["key"], json.loads(r["value"])) == (f"user-{i}", {"n": i})


CLICK = Types.ROW_NAMED(["user", "amount"], [Types.STRING(), Types.LONG()])
TOTALS = Types.ROW_NAMED(["user", "n", "total", "last_offset"], [Types.STRING(), Types.LONG(), Types.LONG(),
                                                                 Types.LONG()])


class Totals(KeyedProcessFunction):
    """Per user: records seen, their amounts' sum, and the offset of the last one (Kafka's column)."""

    def open(self, ctx):
        self.acc = ctx.get_state(ValueStateDescriptor("acc", Types.LIST(Types.LONG())))

    def process(self, key, records, ctx):
        n, total = self.acc.value() or [0, 0]
        n, total = n + len(records), total + sum(r["amount"] for r in records)
        self.acc.update([n, total])
        yield {"user": key, "n": n, "total": total, "last_offset": records[-1]["kafka_offset"]}


def kafka_job(lake, broker, topic: str, job_id: str = "clicks", watermark_strategy=None, **source_options) -> JobSpec:
    source = KafkaSource(broker["bootstrap"], topics=[topic], schema=CLICK, **source_options)
    return JobSpec(job_id=job_id, function=Totals(), source=source, key="user", key_type=Types.STRING(),
                   output_type=TOTALS, sink=f"sinks/{job_id}", uid="totals", parallelism=2, max_parallelism=8,
                   order_by=["kafka_offset"], watermark_strategy=watermark_strategy)


def _clicks(first: int, count: int, users: int = 6) -> list[tuple[int, str, dict]]:
    """Click ``i`` of user ``i % users`` with amount ``i``, each user's clicks in its own partition."""
    return [(i % users % 4, f"u{i % users}", {"user": f"u{i % users}", "amount": i})
            for i in range(first, first + count)]


def _final(spark, lake, spec) -> dict:
    """Each user's last output row: (n, total, last_offset)."""
    rows = [json.loads(r) for r in sink_rows(spark, lake, spec)]
    last = {}
    for r in sorted(rows, key=lambda r: (r["_microbatch"], r["n"])):
        last[r["user"]] = (r["n"], r["total"], r["last_offset"])
    return last


def _expected(clicks) -> dict:
    out = {}
    offsets: dict[int, int] = {}
    for partition, user, value in clicks:
        offset = offsets.get(partition, 0)
        offsets[partition] = offset + 1
        if isinstance(value, bytes):
            continue  # a poison value: it takes an offset, and no part in the totals
        n, total, _ = out.get(user, (0, 0, None))
        out[user] = (n + 1, total + value["amount"], offset)
    return out


def test_a_job_reads_a_topic_of_four_partitions_and_each_message_produced_between_runs_once(spark, lake, broker):
    _topic(broker, "clicks")
    produced = _clicks(0, 30)
    _produce(broker, "clicks", produced)
    spec = kafka_job(lake, broker, "clicks", max_records_per_microbatch=12)
    first = run(spark, spec, lake)
    assert [b.records_in for b in first.batches] == [12, 12, 6]  # max_records_per_microbatch, split by partition
    assert _final(spark, lake, spec) == _expected(produced)
    assert run(spark, spec, lake).batches == []  # nothing new: nothing read again
    more = _clicks(30, 14)
    _produce(broker, "clicks", more)
    second = run(spark, spec, lake)
    assert second.records_in == 14
    assert _final(spark, lake, spec) == _expected(produced + more)
    # The offsets are operator list state: one entry per topic partition (the next offset to read), each on
    # the subtask Flink's Kafka source reads it with ("clicks" starts at subtask 1 of 2).
    ends = [sum(1 for p, _, _ in produced + more if p == partition) for partition in range(4)]
    assert _source_entries(spark, lake, spec) == {
        0: [("main:clicks:1", ends[1]), ("main:clicks:3", ends[3])],
        1: [("main:clicks:0", ends[0]), ("main:clicks:2", ends[2])]}


class NotU5(FilterFunction):
    def filter(self, record: dict) -> bool:
        return record["user"] != "u5"


def test_a_dataflow_reads_a_topic_with_its_first_operator_keeping_the_offsets(spark, lake, broker):
    """A chain on Kafka: its first operator reads the topic and keeps the offsets, the next gets what it
    emitted, across runs with messages produced between them."""
    _topic(broker, "chained")
    alone = kafka_job(lake, broker, "chained", job_id="alone", max_records_per_microbatch=12)
    chain = (Dataflow.from_source(alone.source, job_id="chain").key_by("user", Types.STRING())
             .process(Totals(), uid="totals", output_type=TOTALS, max_parallelism=8, order_by=["kafka_offset"])
             .filter(NotU5(), uid="not-u5").sink_to("sinks/chain"))
    produced = []
    for first, count, microbatches in ((0, 30, [12, 12, 6]), (30, 14, [12, 2])):
        produced += _clicks(first, count)
        _produce(broker, "chained", _clicks(first, count))
        assert [b.records_in for b in run(spark, chain, lake).batches] == microbatches
        assert _final(spark, lake, chain) == {u: v for u, v in _expected(produced).items() if u != "u5"}
    ends = {f"main:chained:{p}": sum(1 for q, _, _ in produced if q == p) for p in range(4)}
    assert dict(e for each in _source_entries(spark, lake, chain).values() for e in each) == ends


def _source_entries(spark, lake, spec) -> dict[int, list[tuple[str, int]]]:
    """``__source__.offsets`` at the latest checkpoint: subtask -> its entries (split, offset)."""
    _, operator = state_at_latest_checkpoint(spark, lake, spec)
    return {r[1]: [(e["split"], e["offset"]) for e in json.loads(r[3])] for r in operator
            if r[0] == "__source__.offsets"}


def test_a_rescale_gives_the_seeds_table_and_a_savepoint_restored_into_a_new_job_continues_from_its_offsets(
        spark, lake, broker):
    """4 partitions on 2 subtasks, then 3: [p1, p4], [p2], [p3] (1-based; topic "kafka-rescale" starts at
    subtask 0 at both parallelisms), and no record read twice or skipped across the rescale."""
    from state_store.delta.points import StatePoint
    from state_store.ops.restore import rescale_job, restore_job
    from state_store.ops.savepoint import take_savepoint

    quiet = dict(say=lambda m: None)
    _topic(broker, "kafka-rescale")
    produced = _clicks(0, 24)
    _produce(broker, "kafka-rescale", produced)
    spec = kafka_job(lake, broker, "kafka-rescale", job_id="rescaled")
    run(spark, spec, lake)
    ends = [sum(1 for p, _, _ in produced if p == partition) for partition in range(4)]
    split = [(f"main:kafka-rescale:{p}", ends[p]) for p in range(4)]
    assert _source_entries(spark, lake, spec) == {0: [split[0], split[2]], 1: [split[1], split[3]]}
    savepoint = take_savepoint(spark, lake.settings, spec.job_id, label="two", **quiet)
    assert rescale_job(spark, lake.settings, spec, 3, **quiet).parallelism == 3
    assert _source_entries(spark, lake, spec) == {0: [split[0], split[3]], 1: [split[1]], 2: [split[2]]}
    more = _clicks(24, 16)
    _produce(broker, "kafka-rescale", more)
    after = run(spark, spec, lake)
    assert after.records_in == 16  # each new record once, none of the old ones again
    assert _final(spark, lake, spec) == _expected(produced + more)
    ends = [sum(1 for p, _, _ in produced + more if p == partition) for partition in range(4)]
    split = [(f"main:kafka-rescale:{p}", ends[p]) for p in range(4)]
    assert _source_entries(spark, lake, spec) == {0: [split[0], split[3]], 1: [split[1]], 2: [split[2]]}
    # The savepoint (before the rescale and the 16) restored into a new job: it reads the 16, and only them.
    copy = kafka_job(lake, broker, "kafka-rescale", job_id="restored")
    restore_job(spark, lake.settings, copy, StatePoint(savepoint), **quiet)
    resumed = run(spark, copy, lake)
    assert resumed.records_in == 16
    assert _final(spark, lake, copy) == _expected(produced + more)  # every user has a click among the 16


def test_the_watermark_is_the_least_over_the_partitions_and_idle_ones_are_left_out_after_with_idleness(
        spark, lake, broker):
    """Event time per partition (Kafka's record timestamps): the watermark a plan pins is the least of the
    partitions' largest event times; a partition without records holds it until idle for the timeout."""
    from datetime import timedelta

    from confluent_kafka import Producer

    from state_store import WatermarkStrategy
    from state_store.watermarks import MIN_WATERMARK, WATERMARK_STATE, EventClock

    # Its records carry timestamps of 1970: with the default retention (7 days, by record timestamp) the broker's
    # periodic retention check may delete them between produce and read. Kept forever here.
    _topic(broker, "timed", config={"retention.ms": "-1"})

    def produce(times: dict[int, list[int]]) -> None:  # partition -> its records' timestamps (ms)
        producer = Producer({"bootstrap.servers": broker["bootstrap"]})
        for partition, stamps in times.items():
            for ms in stamps:
                producer.produce("timed", key="u", value=json.dumps({"user": "u", "amount": 1}), partition=partition,
                                 timestamp=ms)
        assert producer.flush(30) == 0

    def clock_after(now: int) -> EventClock:
        run(spark, spec, lake, clock=lambda: now)
        _, operator = state_at_latest_checkpoint(spark, lake, spec)
        return EventClock.restored([r[3] for r in operator if r[0] == WATERMARK_STATE])

    strategy = WatermarkStrategy.for_bounded_out_of_orderness(0).with_timestamp_column("kafka_timestamp") \
        .with_idleness(timedelta(seconds=10))
    spec = kafka_job(lake, broker, "timed", job_id="timed", watermark_strategy=strategy)
    produce({0: [10_000, 30_000], 1: [20_000], 2: [15_000, 12_000]})
    first = clock_after(1_000)
    assert first.watermark == MIN_WATERMARK  # partition 3 has had no record: it holds event time back
    assert first.splits == {"timed:0": [30_000, 1_000], "timed:1": [20_000, 1_000], "timed:2": [15_000, 1_000],
                            "timed:3": [None, 1_000]}
    produce({3: [5_000]})
    assert clock_after(2_000).watermark == 5_000 - 1  # the least over the four partitions
    produce({0: [40_000], 3: [50_000]})
    # Partitions 1 and 2 have had nothing for 12 s (> 10 s): left out, the least of 0 and 3 is the watermark.
    assert clock_after(13_000).watermark == 40_000 - 1


def test_a_topic_joined_with_a_folder_keeps_each_ones_offsets_and_the_least_watermark_over_file_and_partitions(
        spark, lake, broker):
    """Two sources of one job (issue 40): impressions from files, clicks from a topic of four partitions (Kafka's
    record timestamps as event time), interval-joined: each source's offsets are pinned, and the watermark is the
    least over the file and every partition, a partition with no record yet holding it at none."""
    from confluent_kafka import Producer

    from state_store import Dataflow, FileSource, ProcessJoinFunction, WatermarkStrategy
    from state_store.catalog.job_store import JobStore
    from state_store.watermarks import MIN_WATERMARK

    class Pair(ProcessJoinFunction):
        def process_element(self, impression, click, ctx):
            yield {"user": impression["user"], "shown": impression["ts"], "clicked": ctx.right_timestamp()}

    _topic(broker, "ad-clicks", config={"retention.ms": "-1"})  # timestamps of 1970: kept (see above)

    def produce(clicks: list[tuple[int, str, int]]) -> None:  # (partition, user, timestamp)
        producer = Producer({"bootstrap.servers": broker["bootstrap"]})
        for partition, user, ms in clicks:
            producer.produce("ad-clicks", key=user, value=json.dumps({"user": user, "amount": 1}),
                             partition=partition, timestamp=ms)
        assert producer.flush(30) == 0

    bound = WatermarkStrategy.for_bounded_out_of_orderness(0)
    impressions = Dataflow.from_source(
        FileSource(str(lake.events), "json", Types.ROW_NAMED(["user", "ts"], [Types.STRING(), Types.LONG()])),
        job_id="ctr", watermark_strategy=bound.with_timestamp_column("ts"))
    clicks = Dataflow.from_source(KafkaSource(broker["bootstrap"], topics=["ad-clicks"], schema=CLICK), job_id="ctr",
                                  watermark_strategy=bound.with_timestamp_column("kafka_timestamp"))
    spec = (impressions.key_by("user").interval_join(clicks.key_by("user")).between(0, 10_000)
            .process(Pair(), uid="ctr", output_type=Types.ROW_NAMED(["user", "shown", "clicked"], [
                Types.STRING(), Types.LONG(), Types.LONG()])).sink_to("sinks/ctr"))
    lake.write_events("000.json", [{"user": "u1", "ts": 1000}, {"user": "u2", "ts": 2000}])
    produce([(0, "u1", 5000), (1, "u2", 15_000), (2, "u1", 8000)])  # u2's click is 13 s after: no pair
    run(spark, spec, lake)
    produce([(3, "u2", 3000)])
    run(spark, spec, lake)
    store = JobStore(lake.settings.job_dir("ctr"))
    # partition 3 had no record in the first microbatch: no watermark; then the least of 2 s (the file), 5, 15,
    # 8 and 3 s (the partitions)
    assert [store.read_plan(b).watermark for b in (0, 1)] == [MIN_WATERMARK, 1999]
    assert sorted(store.latest_checkpoint().source_offsets) == ["main", "second"]
    rows = spark.read.format("delta").load(str(lake.settings.in_warehouse(spec.sink, "sink")))
    assert sorted((r["user"], r["shown"], r["clicked"], r["_microbatch"]) for r in rows.collect()) == [
        ("u1", 1000, 5000, 0), ("u1", 1000, 8000, 0), ("u2", 2000, 3000, 1)]


def test_the_kafka_demo_job_runs_as_its_pipeline_dag_and_a_second_run_reads_only_what_was_produced_since(
        spark, tmp_path, broker, monkeypatch):
    """scripts/demo-kafka.sh's job (demo/kafka_clicks.py) through ``airflow dags test``: the DAG's task
    submits it with spark-submit, which has the Kafka connector; the second run (the same command, in this
    process) starts at the first's offsets."""
    import subprocess
    import sys

    from state_store.catalog.job_store import JobStore
    from state_store.settings import Settings
    from tests.support.airflow_files import ROOT as PROJECT
    from tests.support.airflow_files import airflow_test_env, write_registry

    registry = write_registry(tmp_path, """
    [jobs.clicks_kafka]
    entrypoint = "demo.kafka_clicks:job"
    """)
    root = tmp_path / "lakestate"
    env = {**airflow_test_env(tmp_path, registry, root), "LAKESTATE_KAFKA_BOOTSTRAP": broker["bootstrap"],
           "LAKESTATE_KAFKA_TOPIC": "demo-clicks"}

    def produce(events: int) -> None:
        done = subprocess.run([sys.executable, "-m", "demo.kafka_clicks", "--events", str(events), "--users", "50",
                               "--seed", str(events)], env=env, capture_output=True, text=True, cwd=PROJECT)
        assert done.returncode == 0 and f"produced {events} clicks" in done.stdout, done.stdout + done.stderr

    def offsets() -> dict:
        latest = JobStore(Settings.load(root=root).job_dir("clicks_kafka")).latest_checkpoint()
        return latest.source_offsets["main"]["offsets"]["demo-clicks"]

    produce(300)
    migrate(env)
    out = subprocess.run(["airflow", "dags", "test", "lakestate_clicks_kafka"], env=env, capture_output=True,
                         text=True, timeout=900, cwd=PROJECT)
    assert ", state=success, run_type=" in out.stdout + out.stderr, (out.stdout + out.stderr)[-4000:]
    first = offsets()
    assert sum(first.values()) == 300 and len(first) == 4
    produce(120)
    from state_store.cli import main

    for name in ("LAKESTATE_ROOT", "LAKESTATE_KAFKA_BOOTSTRAP", "LAKESTATE_KAFKA_TOPIC"):
        monkeypatch.setenv(name, env[name])
    assert main(["run", "--job", "clicks_kafka", "--registry", str(registry)]) == 0
    second = offsets()
    assert sum(second.values()) == 420 and all(second[p] >= first[p] for p in first)


@pytest.mark.e2e
def test_the_broker_script_says_what_is_missing_without_its_jars(tmp_path):
    """A checkout whose set-up had no Maven: start names the folder and the fix, and starts nothing."""
    fake = tmp_path / "checkout"
    (fake / "scripts").mkdir(parents=True)
    (fake / "scripts" / "kafka.sh").write_text(SCRIPT.read_text())
    env = {**os.environ, "LAKESTATE_KAFKA_DIR": str(tmp_path / "kafka"), "LAKESTATE_KAFKA_PORT": str(free_port_run(2))}
    result = subprocess.run(["bash", str(fake / "scripts" / "kafka.sh"), "start"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert "no broker jars in" in result.stderr and "scripts/setup.sh" in result.stderr
    assert not (tmp_path / "kafka" / "broker.pid").exists()


def test_a_partition_added_while_the_job_runs_is_read_from_its_start_and_said(spark, lake, broker):
    from confluent_kafka.admin import AdminClient, NewPartitions

    _topic(broker, "grow", partitions=2)
    produced = [(i % 2, f"u{i % 2}", {"user": f"u{i % 2}", "amount": i}) for i in range(6)]
    _produce(broker, "grow", produced)
    spec = kafka_job(lake, broker, "grow", job_id="grow")
    run(spark, spec, lake)
    admin = AdminClient({"bootstrap.servers": broker["bootstrap"]})
    for future in admin.create_partitions([NewPartitions("grow", 4)]).values():
        future.result()
    more = [(2 + i % 2, f"v{i % 2}", {"user": f"v{i % 2}", "amount": 100 + i}) for i in range(4)]
    more += [(0, "u0", {"user": "u0", "amount": 7})]
    _produce(broker, "grow", more)
    lines: list[str] = []
    result = run(spark, spec, lake, progress=lines.append)
    assert result.records_in == 5
    assert any("Kafka partition grow:2 is new: read from its earliest offset 0" in line for line in lines), lines
    assert _final(spark, lake, spec) == _expected(produced + more)


def test_starting_offsets_latest_pins_the_first_plan_and_reads_only_what_comes_after(spark, lake, broker):
    _topic(broker, "late")
    before = _clicks(0, 8)
    _produce(broker, "late", before)
    spec = kafka_job(lake, broker, "late", job_id="late", starting_offsets="latest")
    first = run(spark, spec, lake)
    assert [b.records_in for b in first.batches] == [0]  # an empty microbatch that pins where the job starts
    after = _clicks(8, 5)
    _produce(broker, "late", after)
    assert run(spark, spec, lake).records_in == 5
    rows = {u: (n, total) for u, (n, total, _) in _final(spark, lake, spec).items()}
    assert rows == {u: (n, total) for u, (n, total, _) in _expected(after).items()}


def test_offsets_gone_from_the_broker_stop_the_run_naming_them_or_are_skipped_when_allowed(spark, lake, broker):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from state_store import InputError

    _topic(broker, "gap")
    _produce(broker, "gap", [(0, "u0", {"user": "u0", "amount": i}) for i in range(10)])
    spec = kafka_job(lake, broker, "gap", job_id="gap")
    assert run(spark, spec, lake).records_in == 10
    _produce(broker, "gap", [(0, "u0", {"user": "u0", "amount": i}) for i in range(10, 20)])
    admin = AdminClient({"bootstrap.servers": broker["bootstrap"]})
    for future in admin.delete_records([TopicPartition("gap", 0, 15)]).values():
        future.result()
    with pytest.raises(InputError, match=r"Kafka partition gap:0: offsets 10 to 14 are no longer on the broker .*"
                                         r"fail_on_data_loss=False"):
        run(spark, spec, lake)
    lenient = spec.with_overrides(source=KafkaSource(broker["bootstrap"], topics=["gap"], schema=CLICK,
                                                     fail_on_data_loss=False))
    lines: list[str] = []
    assert run(spark, lenient, lake, progress=lines.append).records_in == 5  # offsets 15 to 19
    assert any("warning: Kafka partition gap:0: offsets 10 to 14 are no longer" in line for line in lines), lines
    assert _final(spark, lake, spec)["u0"] == (15, sum(range(10)) + sum(range(15, 20)), 19)


def test_a_kafka_source_refuses_bad_declarations_before_anything_runs(lake):
    from state_store import ConfigError

    def job(**source):
        options = {"bootstrap_servers": "127.0.0.1:9", "topics": ["t"], "schema": CLICK, **source}
        return JobSpec(job_id="bad", function=Totals(), source=KafkaSource(**options), key="user",
                       key_type=Types.STRING(), output_type=TOTALS, sink="sinks/bad")

    cases = [
        ({"topics": None}, "give either topics"),
        ({"topic_pattern": "t.*"}, "give either topics"),
        ({"topics": "t"}, "topics must be a non-empty list"),
        ({"value_format": "avro"}, "value_format 'avro' is not supported"),
        ({"schema": None}, "a json value_format needs the value's fields"),
        ({"schema": Types.ROW_NAMED(["user", "kafka_offset"], [Types.STRING(), Types.LONG()])}, "clash"),
        ({"starting_offsets": "newest"}, "starting_offsets must be"),
        ({"starting_offsets": {"x": -1}}, "is not a partition number and an offset"),
        ({"max_records_per_microbatch": 0}, "max_records_per_microbatch must be a positive integer"),
        ({"bootstrap_servers": ""}, "bootstrap_servers must be"),
    ]
    for source, message in cases:
        with pytest.raises(ConfigError, match=re.escape(message)):
            job(**source).validate()
    with pytest.raises(ConfigError, match="key column 'who' is not in the source schema"):
        job().with_overrides(key="who").validate()
    job(topics=None, topic_pattern="clicks-.*").validate()  # a pattern alone is fine
    job(value_format="raw", schema=None).with_overrides(key="kafka_key").validate()  # raw: key and value bytes


def test_a_kafka_source_refuses_non_finite_numbers_and_non_boolean_flags_naming_the_option():
    from state_store import ConfigError

    def job(**source):
        options = {"bootstrap_servers": "127.0.0.1:9", "topics": ["t"], "schema": CLICK, **source}
        return JobSpec(job_id="bad", function=Totals(), source=KafkaSource(**options), key="user",
                       key_type=Types.STRING(), output_type=TOTALS, sink="sinks/bad")

    cases = [
        ({"request_timeout_s": float("nan")}, "request_timeout_s must be a finite positive number of seconds, got nan"),
        ({"request_timeout_s": float("inf")}, "request_timeout_s must be a finite positive number of seconds, got inf"),
        ({"request_timeout_s": True}, "request_timeout_s must be a finite positive number of seconds, got True"),
        ({"fail_on_data_loss": "no"}, "fail_on_data_loss must be True or False, got 'no'"),
        ({"fail_on_data_loss": 0}, "fail_on_data_loss must be True or False, got 0"),
        ({"max_records_per_microbatch": True}, "max_records_per_microbatch must be a positive integer, got True"),
        ({"max_records_per_microbatch": 10.0}, "max_records_per_microbatch must be a positive integer, got 10.0"),
        ({"starting_offsets": {"0": True}}, "partition '0' -> True is not a partition number and an offset"),
    ]
    for source, message in cases:
        with pytest.raises(ConfigError, match=re.escape(message)):
            job(**source).validate()
    job(request_timeout_s=2, fail_on_data_loss=False, max_records_per_microbatch=5).validate()  # real ones pass


def test_a_kafka_source_that_cannot_reach_its_broker_says_so(spark, lake):
    from state_store import InputError

    spec = JobSpec(job_id="nobroker", function=Totals(), key="user", key_type=Types.STRING(), output_type=TOTALS,
                   source=KafkaSource(f"127.0.0.1:{free_port_run(2)}", topics=["t"], schema=CLICK,
                                      request_timeout_s=2),
                   sink="sinks/nobroker")
    with pytest.raises(InputError, match=r"cannot reach Kafka at 127\.0\.0\.1:\d+ .*scripts/kafka\.sh start"):
        run(spark, spec, lake)


@pytest.fixture(scope="module")
def fault_reference(spark, broker, tmp_path_factory):
    """A topic read by a job without a crash: its sink and state, the reference for the crashed runs."""
    _topic(broker, "faults")
    _produce(broker, "faults", _clicks(0, 30))
    lake = Lake(tmp_path_factory.mktemp("faults-reference"))
    spec = kafka_job(lake, broker, "faults", job_id="faults", max_records_per_microbatch=12)
    run(spark, spec, lake)
    return sink_rows(spark, lake, spec), state_at_latest_checkpoint(spark, lake, spec)


# The points where a Kafka run's durable state is its own: the offsets pinned in the plan, the __source__ offsets
# written with the state, and committed. The others write what any source's run writes: test_exactly_once[point].
KAFKA_POINTS = ("after_plan", "after_state_write", "after_commit")


@pytest.mark.parametrize("point", KAFKA_POINTS)
def test_a_crash_at_each_fault_point_then_a_rerun_gives_the_sink_and_state_of_a_clean_run(spark, lake, broker,
                                                                                        fault_reference, point):
    """Microbatch 1 of 3 crashes at ``point``; the rerun replays its pinned offsets (or goes on after them)."""
    spec = kafka_job(lake, broker, "faults", job_id="faults", max_records_per_microbatch=12)
    with pytest.raises(InjectedFault):
        run(spark, spec, lake, faults=FaultInjector(point, batch_id=1))
    assert run(spark, spec, lake).batches, "the rerun must process or replay the crashed microbatch"
    sink, state = fault_reference
    assert sink_rows(spark, lake, spec) == sink  # nothing lost, nothing read twice
    assert state_at_latest_checkpoint(spark, lake, spec) == state


def test_a_microbatch_bound_is_split_over_the_partitions_by_what_each_has():
    source = KafkaSource("127.0.0.1:9", topics=["t"], schema=CLICK, max_records_per_microbatch=5)
    available = {("t", 0): 100, ("t", 1): 1, ("t", 2): 1, ("t", 3): 0}
    take = source._take(available)
    assert sum(take.values()) == 5 and all(0 <= take[tp] <= n for tp, n in available.items())
    assert take[("t", 0)] >= 3  # the partition with the most gives the most
    assert source._take({("t", 0): 2, ("t", 1): 3}) == {("t", 0): 2, ("t", 1): 3}  # under the bound: all


def _dead_letter_rows(spark, lake, spec, tag) -> list[tuple]:
    path = lake.settings.in_warehouse(spec.side_output_sink(tag), "sink")
    return sorted((r["kafka_topic"], r["kafka_partition"], r["kafka_offset"], r["kafka_key"], bytes(r["value"]),
                   r["_microbatch"]) for r in spark.read.format("delta").load(str(path)).collect())


def test_a_poison_kafka_value_fails_the_run_naming_topic_partition_offset_and_value_and_writes_nothing(
        spark, lake, broker):
    from state_store import InputError

    _topic(broker, "poison")
    good = _clicks(0, 12)
    _produce(broker, "poison", good)
    spec = kafka_job(lake, broker, "poison", job_id="poison")
    run(spark, spec, lake)
    sink, state = sink_rows(spark, lake, spec), state_at_latest_checkpoint(spark, lake, spec)
    # Partition 2 has users u2 (clicks 2, 8): its offsets 0 and 1; the poison record is its offset 2.
    _produce(broker, "poison", [(2, "u2", b"not json {" + b"x" * 200)] + _clicks(12, 6))
    with pytest.raises(InputError) as failed:
        run(spark, spec, lake)
    message = str(failed.value)
    assert "Kafka record at topic poison partition 2 offset 2 has a value that is not JSON of the source's schema" \
        in message, message
    assert "value starts 'not json {" + "x" * 70 + "'" in message, message  # its first 80 characters, no more
    assert "x" * 71 not in message and "on_malformed=KafkaSource.dead_letters(" in message, message
    assert sink_rows(spark, lake, spec) == sink  # nothing written
    assert state_at_latest_checkpoint(spark, lake, spec) == state


def test_a_kafka_record_without_an_event_time_is_refused_at_planning_naming_topic_partition_and_offset(
        spark, lake, broker):
    """Issue 37 #6 on Kafka: the event time is a field of the value; a record whose field is null is refused
    before anything runs (the poison record beside it is left to the run, which names it)."""
    from state_store import InputError, WatermarkStrategy

    _topic(broker, "untimed")
    _produce(broker, "untimed", _clicks(0, 4) + [(1, "u1", {"user": "u1", "amount": None})])
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column("amount")
    spec = kafka_job(lake, broker, "untimed", job_id="untimed", watermark_strategy=strategy)
    with pytest.raises(InputError, match=r"1 record\(s\) have no event time: column 'amount' .* first in topic "
                                         r"untimed partition 1 at offset 1\."):
        run(spark, spec, lake)
    assert not lake.settings.in_warehouse(spec.sink, "sink").exists()


def test_poison_kafka_values_go_to_the_dead_letter_table_with_their_coordinates_once_across_a_crash(
        spark, lake, broker):
    from state_store import ConfigError

    _topic(broker, "dead")
    good = _clicks(0, 12)
    bad = [(1, "u1", b"\x00\xff not json"), (3, "u3", json.dumps({"user": "u3", "amount": "lots"}).encode()),
           (0, "u0", b"[1, 2]")]
    _produce(broker, "dead", good[:6] + bad + good[6:])
    tag = KafkaSource.dead_letters("poison")
    spec = kafka_job(lake, broker, "dead", job_id="dead", on_malformed=tag).with_overrides(side_outputs=[tag])
    # Each side output and the sink committed, the microbatch not yet marked: the rerun replays it.
    with pytest.raises(InjectedFault):
        run(spark, spec, lake, faults=FaultInjector("before_commit", batch_id=0))
    assert run(spark, spec, lake).batches
    assert _final(spark, lake, spec) == _expected(good[:6] + bad + good[6:])  # the good ones, each once
    offsets: dict[int, int] = {}  # each bad record's offset: after the good ones produced before it
    for partition, _, _ in good[:6]:
        offsets[partition] = offsets.get(partition, 0) + 1
    expected = sorted(("dead", p, offsets[p], k, v, 0) for p, k, v in bad)
    assert _dead_letter_rows(spark, lake, spec, tag) == expected  # not twice after the replay
    with pytest.raises(ConfigError, match="on_malformed sends poison records to side output 'poison', which the "
                                          "job does not declare"):
        kafka_job(lake, broker, "dead", job_id="dead", on_malformed=tag).validate()
    with pytest.raises(ConfigError, match=r"declare it with KafkaSource\.dead_letters\('poison'\)"):
        kafka_job(lake, broker, "dead", job_id="dead", on_malformed=OutputTag("poison", CLICK)).validate()
    with pytest.raises(ConfigError, match="on_malformed must be 'fail' or a dead-letter side output"):
        kafka_job(lake, broker, "dead", job_id="dead", on_malformed="skip").validate()
