"""What every source shares: the position columns a run's records carry, the pins of an end offset, the defaults
of ``SourceDefaults``, the ``Source`` protocol a job's source meets, and the event-time checks.

An offset is JSON. A microbatch's range ``[start, end)`` is fixed in its plan
before it is processed, so a replay reads exactly the same records.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..errors import InputError

# Columns every source adds to its records for a run: the microbatch, and the source order
# (file, block of the file, position), so a key's records keep the order they were written in.
POSITION_COLUMNS = ("batch_id", "file_idx", "block", "row")

SINK_MICROBATCH = "_microbatch"  # the sink's column naming each row's microbatch

# An end offset in a plan also says what the plan saw of its new input (per file: size and mtime; for a Delta
# source: its end commit file's), so a replay can refuse input that changed. It is not part of the position:
# checkpoints and operator state keep ``position(offset)``.
PINNED = "pinned"

# A file source's position in a checkpoint also keeps the pin of every file read so far, so a later run can tell
# a producer that a file it already read has changed since (``FileSource.changed_since_read``).
READ = "read"


def position(offset: dict) -> dict:
    return {k: v for k, v in offset.items() if k != PINNED}


class SourceDefaults:
    """What every source says the same way unless it has more to say (``KafkaSource`` does)."""

    def declared_fields(self) -> dict | None:
        """The record's columns by name where they are declared before anything is read; None when only the
        input knows them (a Delta table's)."""
        return None

    def split_entries(self, name: str, offset: dict) -> list[dict[str, Any]]:
        """The source's offsets as operator ListState entries: one per split (a whole directory or table is
        one split; its path is in the job's catalog record). The pins of the files read and a file source's
        folder stay in the checkpoint row: state is the same wherever, and whenever, the same input was
        written."""
        return [{"split": name, "offset": {k: v for k, v in offset.items() if k not in (READ, "dir")}}]

    def plan_notes(self, start: dict, end: dict) -> list[str]:
        """Lines for the run's output about a microbatch's planned range (e.g. a partition read for the first
        time)."""
        return []

    def read_dead_letters(self, spark, ranges: list[tuple[int, dict, dict]]):
        """``(tag, rows)``: the records of ``ranges`` that went to a dead-letter side output instead of the run
        (a ``KafkaSource``'s poison records); None for a source without one."""
        return None

    def event_time_splits(self, end: dict) -> list[str] | None:
        """The concurrent splits whose event times combine by their least (a Kafka topic's partitions, which
        then give ``split_max_event_times``); None: the source is one split (``max_event_time``)."""
        return None


@runtime_checkable
class Source(Protocol):
    """What a job reads (``JobSpec`` checks its ``source`` and ``broadcast_source`` against it): a ``FileSource``,
    a ``DeltaSource``, a ``KafkaSource``, or inside a dataflow an ``EdgeSource``. A source plans (its offsets,
    pinned in a microbatch's plan), reads a run's ranges and keeps its position as split entries of operator
    state; ``SourceDefaults`` gives the members most sources say the same way."""

    def validate(self, what: str) -> None: ...

    def describe(self) -> dict: ...

    def initial_offset(self) -> dict: ...

    def record_ddl(self, spark) -> str: ...

    def read_run(self, spark, ranges: list[tuple[int, dict, dict]]): ...

    def split_entries(self, name: str, offset: dict) -> list[dict[str, Any]]: ...

    def declared_fields(self) -> dict | None: ...

    def plan_notes(self, start: dict, end: dict) -> list[str]: ...


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


def null_event_times(column: str, count: int, first: str) -> InputError:
    """Records without an event time: Flink's ``TimestampAssigner`` gives every record a long, so a null one
    has no place in event time (it would never be late, nor move the watermark)."""
    return InputError(f"{count} record(s) have no event time: column {column!r} (the watermark strategy's "
                      f"timestamp column) is null or not a whole number of epoch milliseconds, first in {first}. "
                      f"Give every record a timestamp (fill the column, or leave such records out upstream), or "
                      f"point with_timestamp_column at a column that always has one; the run stopped before "
                      f"processing anything")
