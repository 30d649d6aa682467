"""What every source shares: the position columns a run's records carry, the pins of an end offset, the ``Source``
base class (the whole contract a run uses, with defaults for what most sources say the same way), and the
event-time checks.

An offset is JSON. A microbatch's range ``[start, end)`` is fixed in its plan
before it is processed, so a replay reads exactly the same records.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from ..errors import InputError
from ..sinks import SINK_MICROBATCH  # noqa: F401 - the sink's microbatch column, which the sources' face exports

# Columns every source adds to its records for a run: the microbatch, and the source order
# (file, block of the file, position), so a key's records keep the order they were written in.
POSITION_COLUMNS = ("batch_id", "file_idx", "block", "row")

# An end offset in a plan also says what the plan saw of its new input (per file: size and mtime; for a Delta
# source: its end commit file's), so a replay can refuse input that changed. It is not part of the position:
# checkpoints and operator state keep ``position(offset)``.
PINNED = "pinned"

# A file source's position in a checkpoint also keeps the pin of every file read so far, so a later run can tell
# a producer that a file it already read has changed since (``FileSource.changed_since_read``).
READ = "read"


def position(offset: dict) -> dict:
    """An offset without its pins (``PINNED``): the position checkpoints and operator state keep."""
    return {k: v for k, v in offset.items() if k != PINNED}


class Source(ABC):
    """What a job reads: ``FileSource``, ``DeltaSource``, ``KafkaSource``, inside a dataflow an ``EdgeSource``, or
    a subclass of this class of your own. The members below are everything a job and a run ask of a source, in the
    order they ask; the abstract ones each source says in its own way, the others have a default that fits a
    source of one split without a count, notes, dead letters or changes.

    - **Defining the job**: ``validate`` (ConfigError naming the problem, before anything is read), ``describe``
      (what the job's catalog record keeps), ``declared_fields`` (the columns, when declared up front).
    - **Planning a microbatch** (its range is fixed in the plan before it is read, so a replay reads the same
      records; an offset is JSON): ``initial_offset``, ``next_offset``, ``count_records``, ``plan_notes``,
      ``changed_since_read``; with a watermark strategy ``event_time_splits`` and then ``max_event_time`` (one
      split) or ``split_max_event_times`` (each split).
    - **Reading a run**: ``record_ddl`` (the records' Spark type), ``read_run`` (every microbatch's records, with
      ``POSITION_COLUMNS``), ``read_dead_letters``.
    - **Offsets as state**: ``split_entries`` (operator ListState entries a checkpoint keeps).

    Example (a source of the records in a list, the offset an index)::

        class ListSource(Source):
            def __init__(self, rows, schema): self.rows, self.schema = rows, schema
            def validate(self, what): ...
            def describe(self): return {"type": "list", "rows": len(self.rows)}
            def declared_fields(self): return self.schema.fields
            def initial_offset(self): return {"index": 0}
            def next_offset(self, spark, start):
                return {"index": len(self.rows)} if start["index"] < len(self.rows) else None
            def record_ddl(self, spark): return self.schema.spark_ddl()
            def read_run(self, spark, ranges): ...   # a DataFrame of the rows of each range, with POSITION_COLUMNS
    """

    # -- defining the job
    @abstractmethod
    def validate(self, what: str) -> None:
        """Raise ConfigError naming the problem and its fix (``what``: "source", "broadcast_source", ...)."""

    @abstractmethod
    def describe(self) -> dict:
        """What the job's catalog record keeps of this source: its ``type`` and what tells it apart."""

    def declared_fields(self) -> dict | None:
        """The record's columns by name where they are declared before anything is read; None when only the
        input knows them (a Delta table's)."""
        return None

    # -- planning a microbatch
    @abstractmethod
    def initial_offset(self) -> dict:
        """Where a job that never ran starts reading."""

    @abstractmethod
    def next_offset(self, spark, start: dict) -> dict | None:
        """The end of the next microbatch's range from ``start`` (what is there to read now, pinned); None when
        there is nothing new."""

    def count_records(self, start: dict, end: dict) -> int | None:
        """The records in ``[start, end)`` when known without reading them (a plan's progress); None otherwise."""
        return None

    def plan_notes(self, start: dict, end: dict) -> list[str]:
        """Lines for the run's output about a microbatch's planned range (e.g. a partition read for the first
        time)."""
        return []

    def changed_since_read(self, offset: dict) -> list[str]:
        """Warnings about input read up to ``offset`` that has changed since (a file rewritten in place)."""
        return []

    def event_time_splits(self, end: dict) -> list[str] | None:
        """The concurrent splits whose event times combine by their least (a Kafka topic's partitions, which
        then give ``split_max_event_times``); None: the source is one split (``max_event_time``)."""
        return None

    def max_event_time(self, spark, start: dict, end: dict, column: str) -> int | None:
        """The largest ``column`` value of the records in ``[start, end)`` (None: no records), refusing a record
        without one. By default from a read of the range."""
        from pyspark.sql import functions as F

        df = self.read_run(spark, [(0, start, end)])
        if df is None:
            return None
        at = F.concat_ws(":", *[F.col(c).cast("string") for c in POSITION_COLUMNS[1:]])
        return checked_max_event_time(df, column, at, f"{self.describe().get('type', 'source')} record at")

    def batches_event_times(self, column: str) -> bool:
        """Whether ``batch_max_event_times`` reads several ranges' event times of ``column`` at once (asked before
        the ranges are listed, so that a source that does not is not listed twice)."""
        return False

    def batch_max_event_times(self, spark, ranges: list[tuple[int, dict, dict]], column: str) -> dict | None:
        """For a run planning several microbatches, each range's ``max_event_time`` (``ranges``:
        ``[(batch_id, start, end)]``) in one read, by batch id; None: this source gives them range by range."""
        return None

    def split_max_event_times(self, spark, start: dict, end: dict, column: str) -> dict[str, int | None]:
        """Per split of ``event_time_splits``, the largest ``column`` value in ``[start, end)``."""
        raise NotImplementedError(f"{type(self).__name__} names event-time splits but not their event times")

    def split_maxima(self, records, value, ranges: list[tuple[int, dict, dict]], column: str) -> dict[str, int | None]:
        """Per split of ``records`` (a read of ``ranges``, or a projection of one keeping ``POSITION_COLUMNS``),
        the largest ``value`` (a Spark column computing event time ``column``): a query's event time computed
        over a source of several splits (``QuerySource``)."""
        raise NotImplementedError(f"{type(self).__name__} names event-time splits but not their event times")

    # -- reading a run
    @abstractmethod
    def record_ddl(self, spark) -> str:
        """The records' columns as a Spark DDL type (``struct<...>``)."""

    @abstractmethod
    def read_run(self, spark, ranges: list[tuple[int, dict, dict]]):
        """The records of every microbatch of a run (``ranges``: ``[(batch_id, start, end)]``) in one DataFrame:
        the record's columns plus ``POSITION_COLUMNS``; None when there are none."""

    def read_dead_letters(self, spark, ranges: list[tuple[int, dict, dict]]):
        """``(tag, rows)``: the records of ``ranges`` that went to a dead-letter side output instead of the run
        (a ``KafkaSource``'s poison records); None for a source without one."""
        return None

    # -- offsets as state
    def split_entries(self, name: str, offset: dict) -> list[dict[str, Any]]:
        """The source's offsets as operator ListState entries: one per split (a whole directory or table is
        one split; its path is in the job's catalog record). The pins of the files read and a file source's
        folder stay in the checkpoint row: state is the same wherever, and whenever, the same input was
        written."""
        return [{"split": name, "offset": {k: v for k, v in offset.items() if k not in (READ, "dir")}}]


def warn_changed(sources: dict, offsets: dict, warn) -> None:
    """Tell ``warn`` of everything a run of these ``sources`` already read (up to ``offsets``) that changed."""
    for name, source in sources.items():
        if offsets.get(name):
            for line in source.changed_since_read(offsets[name]):
                warn(line)


def checked_max_event_time(df, column: str, where, what: str) -> int | None:
    """The largest ``column`` value of ``df`` (None: no rows), refusing rows without one: one aggregate, which
    also finds the least ``where`` (a column naming each row's file, commit, ...) of a row with a null."""
    from pyspark.sql import functions as F

    df = df.select(F.col(f"`{column}`").alias("v"), where.alias("w"))  # input_file_name: not inside the aggregate
    value = F.col("v")
    row = df.agg(F.max(value).alias("m"), F.count(F.when(value.isNull(), 1)).alias("nulls"),
                 F.min(F.when(value.isNull(), F.col("w"))).alias("first")).first()
    if row["nulls"]:
        raise null_event_times(column, row["nulls"], f"{what} {row['first']}")
    return None if row["m"] is None else int(row["m"])


def batch_maxima(df, value) -> dict[int, int | None] | None:
    """Per ``batch_id`` of ``df`` (a read of several ranges), the largest ``value`` (a Spark column: an event
    time), in one aggregate; None when a row has none, which the range's own read then names
    (``checked_max_event_time``)."""
    from pyspark.sql import functions as F

    rows = df.select(value.alias("v"), "batch_id").groupBy("batch_id").agg(
        F.max("v").alias("m"), F.count(F.when(F.col("v").isNull(), 1)).alias("nulls")).collect()
    if any(r["nulls"] for r in rows):
        return None
    return {r["batch_id"]: None if r["m"] is None else int(r["m"]) for r in rows}


def null_event_times(column: str, count: int, first: str) -> InputError:
    """Records without an event time: Flink's ``TimestampAssigner`` gives every record a long, so a null one
    has no place in event time (it would never be late, nor move the watermark)."""
    return InputError(f"{count} record(s) have no event time: column {column!r} (the watermark strategy's "
                      f"timestamp column) is null or not a whole number of epoch milliseconds, first in {first}. "
                      f"Give every record a timestamp (fill the column, or leave such records out upstream), or "
                      f"point with_timestamp_column at a column that always has one; the run stopped before "
                      f"processing anything")
