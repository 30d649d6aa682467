"""Kafka topics as a source: each microbatch's plan pins ``[start, end)`` per topic partition.

An offset is ``{"offsets": {topic: {partition: next offset to read}}}``: the position after a microbatch, which
a checkpoint keeps and a replay starts from. A plan's end offset also pins, under ``PINNED``, where partitions
it reads for the first time start (the job's first plan: ``starting_offsets``; a partition added later: its
earliest offset) and what it has to say about them. The run reads exactly the pinned ranges with Spark's batch
Kafka reader (``assign``, ``startingOffsets`` and ``endingOffsets`` as JSON), so a replay after a crash reads
the same records. Partitions and offsets come from the broker's admin API (confluent-kafka) in the driver: no
Spark job, and the same over Spark Connect.

A record is the message's value (``value_format="json"``: the declared ``schema``'s fields parsed from it;
``"raw"``: the bytes as ``value``) and its Kafka metadata, ``KAFKA_COLUMNS``; the job's key and event-time
columns are chosen among them as for other sources.

A json value that is not JSON of the schema (not JSON at all, a field of the wrong type, a bare scalar or array)
is a poison record: by default the run fails naming its topic, partition and offset and the start of the value,
before anything is written; with ``on_malformed=KafkaSource.dead_letters("<name>")`` (an ``OutputTag`` the job
also declares in its ``side_outputs``) such records go to that side output's table instead, with their Kafka
coordinates and raw value, written in the run's commit as any side output is (exactly once), and the others are
processed. A null value (a tombstone) is not malformed: its fields are null, as before.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from typing_extensions import override

from ..errors import ConfigError, InputError
from ..side_outputs import OutputTag
from ..types import RowTypeInfo, Types
from .base import PINNED, Source, null_event_times

KAFKA_COLUMNS = {"kafka_key": Types.STRING(), "kafka_topic": Types.STRING(), "kafka_partition": Types.INT(),
                 "kafka_offset": Types.LONG(), "kafka_timestamp": Types.LONG()}
_FORMATS = ("json", "raw")
_INIT = "init"  # in the initial offset only: the job's first plan applies ``starting_offsets``
# A dead-letter side output's rows: where the poison record is, and its value as the broker has it.
DEAD_LETTER_TYPE = Types.ROW_NAMED(
    ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_key", "kafka_timestamp", "value"],
    [Types.STRING(), Types.INT(), Types.LONG(), Types.STRING(), Types.LONG(), Types.BYTES()])
_PARSED, _CORRUPT = "__lakestate_value", "__lakestate_corrupt"  # the parsed value; Spark's text of a bad one
_EXCERPT = 80  # characters of a poison value an error shows


@dataclass
class KafkaSource(Source):
    """Kafka ``topics`` (or every topic matching ``topic_pattern``) at ``bootstrap_servers``.

    ``starting_offsets``: where the job's first plan starts each partition: ``"earliest"``, ``"latest"``, or
    ``{partition: offset}`` (one topic) / ``{topic: {partition: offset}}``, the partitions it leaves out at
    their earliest. Partitions added later start at their earliest. ``max_records_per_microbatch`` bounds a
    microbatch (split over the partitions by what each has). Offsets no longer on the broker (retention) stop
    the run with an error naming them, or with ``fail_on_data_loss=False`` are skipped with a warning.
    ``kafka_options``: further client settings (``security.protocol`` ...), given to the admin client and, as
    ``kafka.<name>``, to Spark's reader. ``request_timeout_s``: how long a plan waits for the broker's answers.
    ``on_malformed``: what a json value that does not parse as ``schema`` does: ``"fail"`` the run (naming the
    record), or go to the dead-letter side output ``KafkaSource.dead_letters(name)`` (declared in the job's
    ``side_outputs`` too).

    Example::

        CLICK = Types.ROW_NAMED(["user", "amount"], [Types.STRING(), Types.LONG()])
        source = KafkaSource("127.0.0.1:9092", topics=["clicks"], schema=CLICK, starting_offsets="earliest",
                             max_records_per_microbatch=100_000)
        DEAD = KafkaSource.dead_letters("bad_clicks")   # poison records to a side output, not a failed run
        source = KafkaSource("127.0.0.1:9092", topics=["clicks"], schema=CLICK, on_malformed=DEAD)

    :param bootstrap_servers: the brokers, ``host:port[,host:port...]``.
    :param topics: the topics read (or ``topic_pattern``).
    :param topic_pattern: a regular expression: every topic matching it, those created later too.
    :param value_format: how a record's value is read: ``"json"`` (as ``schema``).
    :param schema: the value's columns, ``Types.ROW_NAMED([...], [...])``.
    :param starting_offsets: where the first plan starts each partition (see above).
    :param max_records_per_microbatch: at most this many records a microbatch, over all partitions.
    :param fail_on_data_loss: stop (True) or warn and skip (False) when planned offsets are gone from the broker.
    :param kafka_options: further client settings, for the admin client and Spark's reader.
    :param request_timeout_s: how long a plan waits for the broker's answers.
    :param on_malformed: ``"fail"``, or the dead-letter ``OutputTag`` of ``KafkaSource.dead_letters(name)``.
    """

    bootstrap_servers: str
    topics: list[str] | None = None
    topic_pattern: str | None = None
    value_format: str = "json"
    schema: RowTypeInfo | None = None
    starting_offsets: str | dict = "earliest"
    max_records_per_microbatch: int | None = None
    fail_on_data_loss: bool = True
    kafka_options: dict[str, str] = field(default_factory=dict)
    request_timeout_s: float = 15.0
    on_malformed: str | OutputTag = "fail"

    @staticmethod
    def dead_letters(name: str) -> OutputTag:
        """The side output ``name`` for ``on_malformed``: rows of ``DEAD_LETTER_TYPE``."""
        return OutputTag(name, DEAD_LETTER_TYPE)

    @property
    def dead_letter_tag(self) -> OutputTag | None:
        """The dead-letter side output ``on_malformed`` names, or None when a poison record fails the run."""
        return self.on_malformed if isinstance(self.on_malformed, OutputTag) else None

    # -- declaration --------------------------------------------------------------------------------------
    def validate(self, what: str) -> None:
        """Raise ConfigError, naming the source as ``what`` and the fix, for the first option that is not usable
        (servers, topics or pattern, value format and schema, the numeric options, ``on_malformed``,
        ``starting_offsets``), or when confluent-kafka is not installed."""
        if not isinstance(self.bootstrap_servers, str) or not self.bootstrap_servers.strip():
            raise ConfigError(f"{what}: bootstrap_servers must be 'host:port[,host:port...]'")
        if (self.topics is None) == (self.topic_pattern is None):
            raise ConfigError(f"{what}: give either topics=[...] or topic_pattern='...', not both or neither")
        if self.topics is not None and (isinstance(self.topics, str) or not self.topics or not all(
                isinstance(t, str) and t for t in self.topics)):
            raise ConfigError(f"{what}: topics must be a non-empty list of topic names, e.g. topics=['clicks']")
        if self.topic_pattern is not None:
            try:
                re.compile(self.topic_pattern)
            except (re.error, TypeError) as e:
                raise ConfigError(f"{what}: topic_pattern {self.topic_pattern!r} is not a regular expression: {e}") \
                    from None
        if self.value_format not in _FORMATS:
            raise ConfigError(f"{what}: value_format {self.value_format!r} is not supported; use one of {_FORMATS}")
        if self.value_format == "json":
            if not isinstance(self.schema, RowTypeInfo):
                raise ConfigError(f"{what}: a json value_format needs the value's fields: schema=Types.ROW_NAMED("
                                  f"[...], [...])")
            clash = sorted(set(self.schema.fields) & set(KAFKA_COLUMNS))
            if clash:
                raise ConfigError(f"{what}: schema fields {clash} clash with the Kafka columns {list(KAFKA_COLUMNS)};"
                                  f" rename them in the schema")
        self._validate_options(what)
        self._validate_on_malformed(what)
        self._given_offsets(what)
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            raise ConfigError(f"{what}: a KafkaSource needs the confluent-kafka package: pip install "
                              f"'lakestate[kafka]'") from None

    def _validate_options(self, what: str) -> None:
        """The numeric and boolean options: real booleans and finite numbers only (``"no"`` is truthy, a nan
        timeout never times out, an infinite one waits forever)."""
        bound = self.max_records_per_microbatch
        if bound is not None and (not isinstance(bound, int) or isinstance(bound, bool) or bound <= 0):
            raise ConfigError(f"{what}: max_records_per_microbatch must be a positive integer, got {bound!r}; "
                              f"give e.g. max_records_per_microbatch=10000, or None for no bound")
        timeout = self.request_timeout_s
        if (not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not math.isfinite(timeout)
                or timeout <= 0):
            raise ConfigError(f"{what}: request_timeout_s must be a finite positive number of seconds, got "
                              f"{timeout!r}; give e.g. request_timeout_s=15")
        if not isinstance(self.fail_on_data_loss, bool):
            raise ConfigError(f"{what}: fail_on_data_loss must be True or False, got {self.fail_on_data_loss!r}; "
                              f"give the boolean itself (a string such as 'no' would count as True)")

    def _validate_on_malformed(self, what: str) -> None:
        tag = self.on_malformed
        if isinstance(tag, OutputTag):
            if self.value_format != "json":
                raise ConfigError(f"{what}: on_malformed={tag!r} is for json values; a raw value cannot be "
                                  f"malformed: drop on_malformed")
            if tag.type_info.to_schema() != DEAD_LETTER_TYPE.to_schema():
                raise ConfigError(f"{what}: on_malformed={tag!r} has rows of its own type; declare it with "
                                  f"KafkaSource.dead_letters({tag.name!r}) (topic, partition, offset, key, timestamp "
                                  f"and raw value)")
        elif not (isinstance(tag, str) and tag == "fail"):
            raise ConfigError(f"{what}: on_malformed must be 'fail' or a dead-letter side output "
                              f"KafkaSource.dead_letters('<name>'), got {tag!r}")

    def _given_offsets(self, what: str = "source") -> dict[str, dict[str, int]]:
        """``starting_offsets`` as ``{topic: {partition: offset}}`` ({} for "earliest" and "latest")."""
        given = self.starting_offsets
        if given in ("earliest", "latest"):
            return {}
        if not isinstance(given, dict) or not given:
            raise ConfigError(f"{what}: starting_offsets must be 'earliest', 'latest' or a dict of offsets, got "
                              f"{given!r}")
        if all(isinstance(v, dict) for v in given.values()):
            nested = given
        elif self.topics is not None and len(self.topics) == 1:
            nested = {self.topics[0]: given}
        else:
            raise ConfigError(f"{what}: starting_offsets {{partition: offset}} is for one topic; with several, "
                              f"give {{topic: {{partition: offset}}}}")
        out = {}
        for topic, offsets in nested.items():
            for partition, offset in offsets.items():
                if (not str(partition).isdigit() or not isinstance(offset, int) or isinstance(offset, bool)
                        or offset < 0):
                    raise ConfigError(f"{what}: starting_offsets of topic {topic!r}: partition {partition!r} -> "
                                      f"{offset!r} is not a partition number and an offset >= 0")
                out.setdefault(topic, {})[str(int(partition))] = offset
        return out

    def record_type(self) -> RowTypeInfo:
        """The columns of a record: the value's (parsed fields, or ``value`` bytes), then ``KAFKA_COLUMNS``."""
        value = dict(self.schema.fields) if self.value_format == "json" else {"value": Types.BYTES()}
        columns = {**value, **KAFKA_COLUMNS}
        return Types.ROW_NAMED(list(columns), list(columns.values()))

    @override
    def declared_fields(self) -> dict:
        return self.record_type().fields

    def record_ddl(self, spark) -> str:
        """The record's columns as a Spark DDL type (``struct<...>``): ``record_type()``'s."""
        return self.record_type().spark_ddl()

    def describe(self) -> dict:
        """What the catalog records of this source: its type (``"kafka"``), servers, topics or pattern, and value
        format."""
        return {"type": "kafka", "bootstrap_servers": self.bootstrap_servers, "topics": self.topics,
                "topic_pattern": self.topic_pattern, "value_format": self.value_format}

    def initial_offset(self) -> dict:
        """The offset of nothing read: no partition yet, marked as the job's first plan (the one
        ``starting_offsets`` applies to)."""
        return {"offsets": {}, _INIT: True}

    # -- planning (the driver, through the broker's admin API) ----------------------------------------------
    def _client_conf(self) -> dict:
        return {**self.kafka_options, "bootstrap.servers": self.bootstrap_servers}

    def _admin(self):
        from confluent_kafka.admin import AdminClient

        return AdminClient(self._client_conf())

    def _partitions(self, admin) -> list[tuple[str, int]]:
        """The topic partitions the source reads now, sorted."""
        from confluent_kafka import KafkaException

        try:
            topics = admin.list_topics(timeout=self.request_timeout_s).topics
        except KafkaException as e:
            raise InputError(f"cannot reach Kafka at {self.bootstrap_servers} ({e.args[0]}); start the broker "
                             f"(scripts/kafka.sh start here) or fix bootstrap_servers") from None
        if self.topics is not None:
            missing = [t for t in self.topics if t not in topics]
            if missing:
                raise InputError(f"Kafka topics {missing} do not exist at {self.bootstrap_servers}; create them or "
                                 f"fix the source's topics")
            names = list(self.topics)
        else:
            pattern = re.compile(self.topic_pattern)
            names = [t for t in topics if pattern.fullmatch(t) and not t.startswith("__")]
        return sorted((t, p) for t in names for p in topics[t].partitions)

    def _list_offsets(self, admin, partitions: list[tuple[str, int]], spec: str) -> dict[tuple[str, int], int]:
        from confluent_kafka import KafkaException, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        if not partitions:
            return {}
        which = OffsetSpec.earliest() if spec == "earliest" else OffsetSpec.latest()
        try:
            futures = admin.list_offsets({TopicPartition(t, p): which for t, p in partitions},
                                         request_timeout=self.request_timeout_s)
            return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
        except KafkaException as e:
            raise InputError(f"Kafka at {self.bootstrap_servers} did not give the {spec} offsets of "
                             f"{partitions} ({e.args[0]}); check the broker and retry") from None

    def next_offset(self, spark, start: dict) -> dict | None:
        """The end offset of the microbatch after ``start``, from the broker's admin API: each partition's next
        offset to read (``max_records_per_microbatch`` in all at most), pinning where the partitions it begins
        start. None when there is nothing new (a first plan from ``"latest"`` or given offsets is kept even when
        empty). Raises InputError when the broker does not answer, a topic is missing, a partition read before is
        gone or ends before its offset, or (``fail_on_data_loss``) offsets to read are no longer on the broker."""
        admin = self._admin()
        partitions = self._partitions(admin)
        known = {(t, int(p)): o for t, offsets in start["offsets"].items() for p, o in offsets.items()}
        gone = sorted(set(known) - set(partitions))
        if gone:
            raise InputError(f"Kafka topic partitions {_names(gone)} were read by this job but are no longer at "
                             f"{self.bootstrap_servers} (topic deleted?); a job cannot continue past them: restore "
                             f"the topic, or start a new job")
        earliest = self._list_offsets(admin, partitions, "earliest")
        latest = self._list_offsets(admin, partitions, "latest")
        begin, starts, notes = self._begins(start, partitions, known, earliest, latest)
        for tp in partitions:
            if latest[tp] < begin[tp]:
                raise InputError(f"Kafka partition {_names([tp])} ends at offset {latest[tp]}, before offset "
                                 f"{begin[tp]} this job read up to (was the topic recreated?); restore it, or "
                                 f"start a new job")
        take = self._take({tp: latest[tp] - begin[tp] for tp in partitions})
        if not any(take.values()) and not (starts and _INIT in start and self.starting_offsets != "earliest"):
            return None  # nothing new (a first plan from "latest" or given offsets is kept even when empty)
        offsets: dict[str, dict[str, int]] = {}
        for (t, p) in partitions:
            offsets.setdefault(t, {})[str(p)] = begin[(t, p)] + take[(t, p)]
        pinned = {"starts": _nested(starts), "notes": notes}
        return {"offsets": offsets, PINNED: pinned}

    def _begins(self, start: dict, partitions: list, known: dict, earliest: dict, latest: dict):
        """Where each partition's next range begins, the partitions begun here, and what to say about them."""
        first, given = _INIT in start, self._given_offsets()
        begin, starts, notes = {}, {}, []
        for tp in partitions:
            if tp in known:
                begin[tp] = known[tp]
            else:
                t, p = tp
                if not first:
                    begin[tp] = starts[tp] = earliest[tp]
                    notes.append(f"Kafka partition {t}:{p} is new: read from its earliest offset {earliest[tp]}")
                elif self.starting_offsets == "latest":
                    begin[tp] = starts[tp] = latest[tp]
                else:
                    begin[tp] = starts[tp] = given.get(t, {}).get(str(p), earliest[tp])
            if begin[tp] < earliest[tp]:
                lost = f"Kafka partition {_names([tp])}: offsets {begin[tp]} to {earliest[tp] - 1} are no longer " \
                       f"on the broker (retention or deletion)"
                if self.fail_on_data_loss:
                    raise InputError(f"{lost}; the job cannot read them. Lower the topic's retention pressure, or "
                                     f"set fail_on_data_loss=False on the source to skip them")
                notes.append(f"warning: {lost}; skipped (fail_on_data_loss=False)")
                begin[tp] = starts[tp] = earliest[tp]
        return begin, starts, notes

    def _take(self, available: dict) -> dict:
        """How many records each partition gives the microbatch: all, or ``max_records_per_microbatch`` split
        over the partitions in proportion to what each has (what is left waits for the next microbatch)."""
        total, limit = sum(available.values()), self.max_records_per_microbatch
        if not limit or total <= limit:
            return dict(available)
        take = {tp: n * limit // total for tp, n in available.items()}
        spare = limit - sum(take.values())  # >= 0: each share was rounded down
        for tp in sorted(available):  # what integer division left, to the partitions with more
            extra = min(spare, available[tp] - take[tp])
            take[tp] += extra
            spare -= extra
        return take

    @override
    def plan_notes(self, start: dict, end: dict) -> list[str]:
        return list((end.get(PINNED) or {}).get("notes", ()))

    @staticmethod
    def _ranges(start: dict, end: dict) -> dict[tuple[str, int], tuple[int, int]]:
        """``(topic, partition) -> [begin, end)`` of a microbatch, the empty ones left out. A partition its plan
        began (new, or past a retention gap) begins where the plan pinned, else where the last one ended."""
        starts = (end.get(PINNED) or {}).get("starts", {})
        out = {}
        for t, offsets in end["offsets"].items():
            for p, stop in offsets.items():
                begin = starts.get(t, {}).get(p)
                if begin is None:
                    begin = start["offsets"].get(t, {}).get(p, stop)
                if stop > begin:
                    out[(t, int(p))] = (begin, stop)
        return out

    def _run_index(self, ranges: list[tuple[int, dict, dict]]) -> dict[tuple[str, int], int]:
        """Each partition with records in ``ranges``: its index in a read of them (``file_idx``)."""
        return {tp: i for i, tp in enumerate(sorted({tp for _, s, e in ranges for tp in self._ranges(s, e)}))}

    def count_records(self, start: dict, end: dict) -> int | None:
        """The number of records in ``[start, end)``: the sum of its partitions' offset ranges."""
        return sum(e - b for b, e in self._ranges(start, end).values())

    # -- reading (the run's one pass) ------------------------------------------------------------------------
    def _load(self, spark, ranges: list[tuple[int, dict, dict]]):
        """Spark's Kafka rows of the pinned ranges of every microbatch of a run, each with its microbatch
        (``r_batch``), its partition's index in the run (``r_idx``) and, for json values, the value parsed
        (``_PARSED``, with Spark's text of a value that does not parse in ``_CORRUPT``). None when there are
        none."""
        from pyspark.sql import functions as F

        pieces = [(b, tp, r) for b, s, e in ranges for tp, r in self._ranges(s, e).items()]
        if not pieces:
            return None
        bounds: dict[tuple[str, int], list[int]] = {}
        for _, tp, (lo, hi) in pieces:
            have = bounds.setdefault(tp, [lo, hi])
            have[0], have[1] = min(have[0], lo), max(have[1], hi)
        index = self._run_index(ranges)
        reader = spark.read.format("kafka").option("kafka.bootstrap.servers", self.bootstrap_servers)
        for name, value in {**_READ_DEFAULTS, **self.kafka_options}.items():
            reader = reader.option(f"kafka.{name}", value)
        df = (reader.option("assign", json.dumps(_nested({tp: True for tp in bounds}, as_list=True)))
              .option("startingOffsets", json.dumps(_nested({tp: b[0] for tp, b in bounds.items()})))
              .option("endingOffsets", json.dumps(_nested({tp: b[1] for tp, b in bounds.items()})))
              .option("failOnDataLoss", "true").load())
        # Each record's microbatch: a broadcast join with the run's ranges (a VALUES table: no Python job).
        values = ", ".join(f"({_sql_text(t)}, {p}, {lo}, {hi}, {b}, {index[(t, p)]})" for b, (t, p), (lo, hi)
                           in pieces)
        plan = spark.sql(f"SELECT * FROM VALUES {values} AS r(r_topic, r_partition, r_lo, r_hi, r_batch, r_idx)")
        df = df.join(F.broadcast(plan), (df["topic"] == plan["r_topic"]) & (df["partition"] == plan["r_partition"])
                     & (df["offset"] >= plan["r_lo"]) & (df["offset"] < plan["r_hi"]))
        # The reader's order is taken here, in the projection that parses: its id is not deterministic, so Spark
        # keeps a filter on the parsed value above it instead of parsing each value again for the filter.
        more = [F.monotonically_increasing_id().alias("row")]
        if self.value_format == "json":
            more.append(F.from_json(F.col("value").cast("string"), self.schema.spark_schema_ddl() + f", `{_CORRUPT}` "
                                    f"string", {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT})
                        .alias(_PARSED))
        return df.select("*", *more)

    @staticmethod
    def _malformed():
        """Whether a row of ``_load`` holds a poison value: one Spark did not parse as the schema (an empty or
        non-JSON value has no parse at all); a null value (a tombstone) is not one."""
        from pyspark.sql import functions as F

        parsed = F.col(_PARSED)
        return F.col("value").isNotNull() & (parsed.isNull() | parsed.getField(_CORRUPT).isNotNull())

    def read_run(self, spark, ranges: list[tuple[int, dict, dict]], check: bool = True):
        """The records of every microbatch of a run, in one read of the pinned ranges: the record's columns
        plus ``POSITION_COLUMNS`` (batch, the partition's index in the run, its offset, the reader's order).
        A poison value fails the pass naming it (``check``; a plan's read of event times leaves that to the
        run), or with a dead-letter side output is left out (``read_dead_letters`` reads it). None when there are
        none."""
        from pyspark.sql import functions as F

        df = self._load(spark, ranges)
        if df is None:
            return None
        if self.value_format == "json":
            if self.dead_letter_tag is not None or not check:  # a plan's event times: the run names poison
                df = df.where(~self._malformed())
            else:  # one null test per good record; the error only on a poison one
                df = df.withColumn(_PARSED, F.when(self._malformed(), F.raise_error(self._poison_message()))
                                   .otherwise(F.col(_PARSED)))
            value = [F.col(_PARSED).getField(n).alias(n) for n in self.schema.fields]
        else:
            value = [F.col("value")]
        return df.select(
            *value, F.col("key").cast("string").alias("kafka_key"), F.col("topic").alias("kafka_topic"),
            F.col("partition").cast("int").alias("kafka_partition"), F.col("offset").alias("kafka_offset"),
            F.expr("unix_millis(timestamp)").alias("kafka_timestamp"),
            F.col("r_batch").cast("bigint").alias("batch_id"), F.col("r_idx").cast("int").alias("file_idx"),
            F.col("offset").cast("bigint").alias("block"), F.col("row"))

    def _poison_message(self):
        """The error of a poison record, as a Spark column: where it is, the start of its value, the fix."""
        from pyspark.sql import functions as F

        excerpt = F.regexp_replace(F.substring(F.col("value").cast("string"), 1, _EXCERPT), r"[\r\n]+", " ")
        schema = self.schema.spark_schema_ddl()
        return F.concat(
            F.lit("Kafka record at topic "), F.col("topic"), F.lit(" partition "), F.col("partition").cast("string"),
            F.lit(" offset "), F.col("offset").cast("string"),
            F.lit(f" has a value that is not JSON of the source's schema ({schema}): value starts '"), excerpt,
            F.lit("'. Fix the producer or the schema, or send such records to a dead-letter table: KafkaSource(..., "
                  "on_malformed=KafkaSource.dead_letters('<name>')) with that tag in JobSpec(side_outputs=[...])"))

    def read_dead_letters(self, spark, ranges: list[tuple[int, dict, dict]]):
        """The poison records of a run's pinned ranges as ``(tag, rows)``, rows of ``DEAD_LETTER_TYPE`` plus
        ``batch_id``; None without a dead-letter side output or records."""
        from pyspark.sql import functions as F

        tag = self.dead_letter_tag
        df = self._load(spark, ranges) if tag is not None else None
        if df is None:
            return None
        return tag, df.where(self._malformed()).select(
            F.col("topic").alias("kafka_topic"), F.col("partition").cast("int").alias("kafka_partition"),
            F.col("offset").alias("kafka_offset"), F.col("key").cast("string").alias("kafka_key"),
            F.expr("unix_millis(timestamp)").alias("kafka_timestamp"), F.col("value"),
            F.col("r_batch").cast("bigint").alias("batch_id"))

    def event_time_splits(self, end: dict) -> list[str]:
        """Every topic partition the source reads as of ``end`` (``topic:partition``): the watermark is the least
        over them (``WatermarkStrategy.advance_splits``)."""
        return [f"{t}:{p}" for t in sorted(end["offsets"]) for p in sorted(end["offsets"][t], key=int)]

    def split_max_event_times(self, spark, start: dict, end: dict, column: str) -> dict[str, int | None]:
        """Per topic partition with records in ``[start, end)``, the largest ``column`` value of them: one
        aggregate over a read of those ranges, at plan time (``split_maxima``)."""
        from pyspark.sql import functions as F

        ranges = [(0, start, end)]
        df = self.read_run(spark, ranges, check=False)
        return {} if df is None else self.split_maxima(df, F.col(f"`{column}`"), ranges, column)

    def split_maxima(self, records, value, ranges: list[tuple[int, dict, dict]], column: str) -> dict[str, int | None]:
        """Per topic partition (``topic:partition``) of ``records`` (a read of ``ranges``, or a projection of one
        keeping ``file_idx`` and ``block``), the largest ``value`` (a Spark column: event time ``column``'s). A
        record without one is refused, naming its topic, partition and offset (``sources.null_event_times``)."""
        from pyspark.sql import functions as F

        splits = {i: tp for tp, i in self._run_index(ranges).items()}
        rows = records.select(value.alias("v"), "file_idx", "block").groupBy("file_idx").agg(
            F.max("v").alias("m"), F.count(F.when(F.col("v").isNull(), 1)).alias("nulls"),
            F.min(F.when(F.col("v").isNull(), F.col("block"))).alias("first")).collect()
        bad = sorted((*splits[r["file_idx"]], r["first"]) for r in rows if r["nulls"])
        if bad:
            raise null_event_times(column, sum(r["nulls"] for r in rows),
                                   f"topic {bad[0][0]} partition {bad[0][1]} at offset {bad[0][2]}")
        return {"%s:%s" % splits[r["file_idx"]]: None if r["m"] is None else int(r["m"]) for r in rows}

    def split_entries(self, name: str, offset: dict) -> list[dict[str, Any]]:
        """The source's offsets as operator ListState entries: one per topic partition (its topic, partition and
        next offset), as Flink's Kafka source keeps them; each on the subtask Flink would read the partition
        with (``repartition.place_source_entries``)."""
        return [{"split": f"{name}:{t}:{p}", "topic": t, "partition": int(p), "offset": o}
                for t in sorted(offset["offsets"]) for p, o in sorted(offset["offsets"][t].items(), key=_partition)]


# The Kafka consumer's fetch sizes for a run's read, unless kafka_options says otherwise: a run reads whole pinned
# ranges, and the consumer's defaults (1 MiB a partition per fetch) made R's read of 500,000 small messages 2.5x
# slower (1.65 s -> 0.65 s, bench/kafka.py's topic).
_READ_DEFAULTS = {"max.partition.fetch.bytes": str(16 << 20), "fetch.max.bytes": str(64 << 20)}


def _partition(item) -> int:
    return int(item[0])


def _names(partitions) -> str:
    return ", ".join(f"{t}:{p}" for t, p in partitions)


def _nested(flat: dict, as_list: bool = False) -> dict:
    """``{(topic, partition): value}`` as Kafka's JSON form ``{topic: {"partition": value}}`` (or, for
    ``assign``, ``{topic: [partition, ...]}``)."""
    out: dict = {}
    for (t, p), value in sorted(flat.items()):
        if as_list:
            out.setdefault(t, []).append(p)
        else:
            out.setdefault(t, {})[str(p)] = value
    return out


def _sql_text(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
