"""Sources: what a microbatch reads, and offsets that say how far a job has read.

An offset is JSON. A microbatch's range ``[start, end)`` is fixed in its plan
before it is processed, so a replay reads exactly the same records.
"""
from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InputError
from ..types import RowTypeInfo, _Scalar

# Columns every source adds to its records for a run: the microbatch, and the source order
# (file, block of the file, position), so a key's records keep the order they were written in.
POSITION_COLUMNS = ("batch_id", "file_idx", "block", "row")

_FORMATS = ("json", "parquet")
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
        one split; its path is in the job's registry record). The pins of the files read and a file source's
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


@dataclass
class FileSource(SourceDefaults):
    """A directory of JSON-lines or Parquet files; each file is read once, in name order.

    ``schema`` declares the columns (required for JSON; for Parquet it is checked).
    ``max_files_per_batch`` bounds a microbatch (default: all new files).
    """

    path: str
    format: str
    schema: RowTypeInfo
    max_files_per_batch: int | None = None

    def declared_fields(self) -> dict:
        return self.schema.fields

    def validate(self, what: str) -> None:
        if self.format not in _FORMATS:
            raise ConfigError(f"{what}: format {self.format!r} is not supported; use one of {_FORMATS}")
        if not isinstance(self.schema, RowTypeInfo):
            raise ConfigError(f"{what}: declare the schema with Types.ROW_NAMED([...], [...])")
        if self.max_files_per_batch is not None and (
            not isinstance(self.max_files_per_batch, int) or self.max_files_per_batch <= 0
        ):
            raise ConfigError(f"{what}: max_files_per_batch must be a positive integer, got {self.max_files_per_batch!r}")
        if not Path(self.path).is_dir():
            raise ConfigError(f"{what}: source directory {self.path} does not exist; create it or fix the path")

    def describe(self) -> dict:
        return {"type": "files", "path": self.folder, "format": self.format}

    @property
    def folder(self) -> str:
        """The source's identity in its offsets: its resolved folder (Flink's ``FileSource`` keeps full paths)."""
        return str(Path(self.path).resolve())

    def initial_offset(self) -> dict:
        return {"dir": self.folder, "files": []}

    def _own(self, offset: dict) -> dict:
        """``offset`` if it is this source's, else the offset of nothing read: offsets restored from another
        job's savepoint name another folder's files, and a file of the same name here is not one of them.
        Offsets of releases that did not record the folder are taken as this source's."""
        return offset if offset.get("dir", self.folder) == self.folder else self.initial_offset()

    def _files(self) -> list[str]:
        suffixes = (".json", ".jsonl") if self.format == "json" else (".parquet",)
        return sorted(f for f in os.listdir(self.path) if not f.startswith((".", "_")) and f.endswith(suffixes))

    def _ready(self, name: str) -> list[int] | None:
        """The pin ``[size, mtime_ns]`` of a file that can be read now; None for one still empty (a producer
        may be writing it: it is neither read nor marked, and is taken once it has content). A file that
        cannot be read is refused before anything is written."""
        path = Path(self.path, name)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None  # removed since it was listed
        if stat.S_ISDIR(st.st_mode):
            raise InputError(f"source {self.path} holds a folder {name}: a FileSource reads the files in its folder, "
                             f"not folders; move it out of {self.path}, or read it with a FileSource of its own")
        if st.st_size == 0:
            return None
        if not os.access(path, os.R_OK):
            raise InputError(f"source file {path} cannot be read by this user; fix its permissions or move it "
                             f"out of {self.path}")
        if self.format == "parquet":
            with open(path, "rb") as f:
                head = f.read(4)
                f.seek(max(0, st.st_size - 4))
                tail = f.read(4)
            if head != b"PAR1" or tail != b"PAR1":
                raise InputError(f"source file {path} is not a complete Parquet file (no PAR1 header and footer): "
                                 f"a producer may still be writing it, or it is not Parquet; producers must write "
                                 f"to a name starting with '.' or '_' and rename when done. Move the file out of "
                                 f"{self.path} or finish writing it")
            self._check_parquet_schema(path)
        return [st.st_size, st.st_mtime_ns]

    def _check_parquet_schema(self, path: Path) -> None:
        """Each file's own column types against the declared ones (Spark takes one file's schema for all)."""
        import pyarrow.parquet as pq

        try:
            schema = pq.read_schema(path)
        except Exception as e:  # noqa: BLE001 - any unreadable footer
            raise InputError(f"source file {path} is not a readable Parquet file ({e}); move it out of "
                             f"{self.path} or rewrite it") from None
        have = {f.name: _arrow_ddl(f.type) for f in schema}
        missing = sorted(set(self.schema.fields) - set(have))
        if missing:
            raise InputError(f"parquet file {path} lacks the declared columns {missing}; add them to the file or "
                             f"fix the source schema")
        for name, t in self.schema.fields.items():
            if isinstance(t, _Scalar) and have[name] != t.spark_ddl():
                raise InputError(f"column {name!r} is {have[name]} in the parquet file {path} but the source "
                                 f"schema declares {t.name} ({t.spark_ddl()}); write it as {t.spark_ddl()} or "
                                 f"change the declared type")

    def next_offset(self, spark, start: dict) -> dict | None:
        start = self._own(start)
        seen = set(start["files"])
        pins: dict[str, list[int]] = {}
        for name in self._files():
            if name in seen:
                continue
            pin = self._ready(name)
            if pin is not None:
                pins[name] = pin
                if self.max_files_per_batch and len(pins) == self.max_files_per_batch:
                    break
        if not pins:
            return None
        # The files read so far, and what each new file was when planned: a replay must read the same bytes.
        return {"dir": self.folder, "files": sorted(seen | set(pins)), READ: {**start.get(READ, {}), **pins},
                PINNED: pins}

    def plan_notes(self, start: dict, end: dict) -> list[str]:
        if start.get("dir", self.folder) == self.folder:
            return []
        return [f"the offsets this job continues from are of another folder ({start['dir']}): every file of "
                f"{self.folder} is new to it and is read (as Flink reads splits a restored job never saw)"]

    def changed_since_read(self, offset: dict) -> list[str]:
        """A line for each file read up to ``offset`` that is no longer what was read. It is not read again
        (each file is read once), so what was added to it is lost unless its producer is told."""
        lines = []
        for name, pinned in sorted(self._own(offset).get(READ, {}).items()):
            try:
                st = os.stat(Path(self.path, name))
            except FileNotFoundError:
                continue  # removed after it was read: nothing is lost
            if [st.st_size, st.st_mtime_ns] != list(pinned):
                verb = "grew" if st.st_size > pinned[0] else "changed"
                lines.append(f"source file {Path(self.path, name)} {verb} after a run read it ({pinned[0]} -> "
                             f"{st.st_size} bytes): each file is read once, so what changed in it is never read; "
                             f"its producer must write new data to a new file")
        return lines

    @staticmethod
    def new_files(start: dict, end: dict) -> list[str]:
        """The files of ``[start, end)``; all of ``end``'s when ``start`` is another folder's (``_own``)."""
        seen = start["files"] if start.get("dir", end.get("dir")) == end.get("dir") else []
        return sorted(set(end["files"]) - set(seen))

    def count_records(self, start: dict, end: dict) -> int | None:
        """The records in ``[start, end)`` from Parquet footers, or None for JSON (not read to count)."""
        if self.format != "parquet":
            return None
        import pyarrow.parquet as pq

        try:
            return sum(pq.ParquetFile(Path(self.path, f)).metadata.num_rows for f in self.new_files(start, end))
        except Exception:  # noqa: BLE001 - a file the reader cannot open is reported when it is read
            return None

    def record_ddl(self, spark) -> str:
        return self.schema.spark_ddl()

    def max_event_time(self, spark, start: dict, end: dict, column: str) -> int | None:
        """The largest ``column`` value of the records in ``[start, end)`` (None: no records): from the Parquet
        footers' statistics where every row group has them, else a read of that column only. A record without
        an event time is refused (``null_event_times``)."""
        files = [Path(self.path, f) for f in self.new_files(start, end)]
        if not files:
            return None
        if self.format == "parquet":
            found = _parquet_max(files, column)
            if found is not _UNKNOWN:
                return found
            df = spark.read.parquet(*[str(f) for f in files]).select(f"`{column}`")
        else:
            df = spark.read.schema(f"`{column}` bigint").json([str(f) for f in files])
        from pyspark.sql import functions as F

        return checked_max_event_time(df, column, F.input_file_name(), "file")

    def read_run(self, spark, ranges: list[tuple[int, dict, dict]]):
        """The records of every microbatch of a run, in one read: the declared columns plus
        ``POSITION_COLUMNS``. ``ranges`` is ``[(batch_id, start, end)]``. None when there are none."""
        from pyspark.sql import functions as F

        names, batch_of = [], {}
        for batch_id, start, end in ranges:
            for f in self.new_files(start, end):
                names.append(f)
                batch_of[f] = batch_id
        if not names:
            return None
        files = [str(Path(self.path, f)) for f in names]
        missing = [f for f in files if not os.path.exists(f)]
        if missing:
            raise InputError(f"source files planned for these microbatches are gone: {missing}; restore them to "
                             f"replay the microbatches")
        self._check_unchanged(ranges)
        if self.format == "json":
            df = spark.read.schema(self.schema.spark_schema_ddl()).option("mode", "FAILFAST").json(files)
        else:
            reader = spark.read
            if all(isinstance(t, _Scalar) for t in self.schema.fields.values()):
                # Each file's scalar columns are the declared types (checked when it was planned): given, Spark
                # skips the job that reads the files' footers to infer them.
                reader = reader.schema(self.schema.spark_schema_ddl())
            df = reader.parquet(*files)
        file_name = F.col("_metadata.file_name")
        batch_map = F.create_map(*[x for f in names for x in (F.lit(f), F.lit(batch_of[f]))])
        index_map = F.create_map(*[x for i, f in enumerate(names) for x in (F.lit(f), F.lit(i))])
        return df.select(
            *[F.col(f"`{c}`") for c in self.schema.fields],
            F.element_at(batch_map, file_name).cast("bigint").alias("batch_id"),
            F.element_at(index_map, file_name).cast("int").alias("file_idx"),
            F.col("_metadata.file_block_start").cast("bigint").alias("block"),
            F.monotonically_increasing_id().alias("row"),
        )

    def _check_unchanged(self, ranges: list[tuple[int, dict, dict]]) -> None:
        """Refuse to read a file that is not what its microbatch's plan pinned (rewritten or grown)."""
        for batch_id, start, end in ranges:
            pins = end.get(PINNED) or {}
            for name in self.new_files(start, end):
                pinned = pins.get(name)
                if pinned is None:
                    continue  # planned by a release that did not pin files
                st = os.stat(Path(self.path, name))
                if [st.st_size, st.st_mtime_ns] != list(pinned):
                    raise InputError(
                        f"source file {Path(self.path, name)} changed after microbatch {batch_id} was planned "
                        f"(size {pinned[0]} -> {st.st_size} bytes, modified "
                        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(st.st_mtime_ns / 1e9))} UTC); a planned "
                        f"microbatch must read the same input, or its sink rows and state would disagree. Put the "
                        f"original file back, and write new data to a new file name")


_UNKNOWN = object()


def _parquet_max(files: list[Path], column: str):
    """The largest value of ``column`` over ``files`` from their row groups' statistics (None: no value), or
    ``_UNKNOWN`` when a row group with values has none; a null value is refused (``null_event_times``)."""
    import pyarrow.parquet as pq

    best, nulls, first = None, 0, None
    for path in files:
        meta = pq.ParquetFile(path).metadata
        index = meta.schema.to_arrow_schema().get_field_index(column)
        if index < 0:
            return _UNKNOWN
        for g in range(meta.num_row_groups):
            chunk = meta.row_group(g).column(index)
            stats = chunk.statistics
            if meta.row_group(g).num_rows == 0:
                continue
            if stats is None or not stats.has_null_count:
                return _UNKNOWN
            if stats.null_count:
                nulls, first = nulls + stats.null_count, first or str(path)
            if stats.null_count == chunk.num_values:
                continue
            if not stats.has_min_max:
                return _UNKNOWN
            best = stats.max if best is None else max(best, stats.max)
    if nulls:
        raise null_event_times(column, nulls, f"file {first}")
    return None if best is None else int(best)


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
                      f"point with_timestamp_column at a column that always has one; the run stopped before processing anything")


def _arrow_ddl(arrow_type) -> str:
    """Spark's simple type name for an Arrow column type, as Spark reads it from Parquet."""
    import pyarrow as pa

    for test, ddl in ((pa.types.is_int64, "bigint"), (pa.types.is_int32, "int"), (pa.types.is_int16, "smallint"),
                      (pa.types.is_int8, "tinyint"), (pa.types.is_float64, "double"), (pa.types.is_float32, "float"),
                      (pa.types.is_boolean, "boolean"), (pa.types.is_string, "string"),
                      (pa.types.is_large_string, "string"), (pa.types.is_binary, "binary"),
                      (pa.types.is_large_binary, "binary"), (pa.types.is_date32, "date"),
                      (pa.types.is_timestamp, "timestamp")):
        if test(arrow_type):
            return ddl
    return str(arrow_type)


@dataclass
class DeltaSource(SourceDefaults):
    """An append-only Delta table read through its change data feed, a range of versions per microbatch.

    The table needs ``delta.enableChangeDataFeed = true``.
    """

    path: str
    max_versions_per_batch: int | None = None

    def validate(self, what: str) -> None:
        if self.max_versions_per_batch is not None and (
            not isinstance(self.max_versions_per_batch, int) or self.max_versions_per_batch <= 0
        ):
            raise ConfigError(f"{what}: max_versions_per_batch must be a positive integer")

    def describe(self) -> dict:
        return {"type": "delta", "path": str(Path(self.path).resolve())}

    def initial_offset(self) -> dict:
        return {"version": -1}

    def next_offset(self, spark, start: dict) -> dict | None:
        from delta.tables import DeltaTable

        if not DeltaTable.isDeltaTable(spark, self.path):
            raise InputError(f"source {self.path} is not a Delta table; create it or fix the path")
        table = DeltaTable.forPath(spark, self.path)
        props = table.detail().select("properties").first()[0] or {}
        if props.get("delta.enableChangeDataFeed", "false").lower() != "true":
            raise InputError(
                f"source table {self.path} has no change data feed; run "
                f"ALTER TABLE delta.`{self.path}` SET TBLPROPERTIES (delta.enableChangeDataFeed = true)"
            )
        latest = table.history(1).select("version").first()[0]
        if latest <= start["version"]:
            return None
        end = latest
        if self.max_versions_per_batch:
            end = min(latest, start["version"] + self.max_versions_per_batch)
        return {"version": end, PINNED: self._commit_pin(end)}

    def _commit_pin(self, version: int) -> list[int] | None:
        """``[size, mtime_ns]`` of the version's commit file: a table recreated under the same path since the
        plan has another one. None where the log is not a local path."""
        try:
            st = os.stat(Path(self.path, "_delta_log", f"{version:020d}.json"))
        except OSError:
            return None
        return [st.st_size, st.st_mtime_ns]

    def count_records(self, start: dict, end: dict) -> int | None:
        return None

    def max_event_time(self, spark, start: dict, end: dict, column: str) -> int | None:
        """The largest ``column`` value inserted by the versions ``(start, end]``: a read of that column only."""
        if end["version"] <= start["version"]:
            return None
        from pyspark.sql import functions as F

        df = (spark.read.format("delta").option("readChangeFeed", "true")
              .option("startingVersion", start["version"] + 1).option("endingVersion", end["version"])
              .load(self.path).filter("_change_type = 'insert'"))
        if column not in df.columns:
            raise InputError(f"source table {self.path} has no column {column!r} (the watermark strategy's "
                             f"timestamp column); fix with_timestamp_column")
        return checked_max_event_time(df, column, F.col("_commit_version"), f"{self.path} at commit version")

    def record_ddl(self, spark) -> str:
        return spark.read.format("delta").load(self.path).schema.simpleString()

    def read_run(self, spark, ranges: list[tuple[int, dict, dict]]):
        """The inserted rows of every microbatch of a run, in one change-feed read, plus
        ``POSITION_COLUMNS`` (commit version, then the reader's order within it)."""
        from pyspark.sql import functions as F

        ranges = [(b, s, e) for b, s, e in ranges if e["version"] > s["version"]]
        if not ranges:
            return None
        for batch_id, _, end in ranges:
            pinned, now = end.get(PINNED), self._commit_pin(end["version"])
            if pinned is not None and now is not None and now != list(pinned):  # a log file gone: Delta says so
                raise InputError(
                    f"source table {self.path} changed after microbatch {batch_id} was planned: its commit "
                    f"{end['version']} is not the one planned (was the table recreated or its log rewritten?); "
                    f"a planned microbatch must read the same input. Restore the table, or give the job a new "
                    f"source path")
        df = (
            spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", min(s["version"] for _, s, _ in ranges) + 1)
            .option("endingVersion", max(e["version"] for _, _, e in ranges))
            .load(self.path)
        ).filter("_change_type = 'insert'")
        version = F.col("_commit_version")
        batch = None
        for batch_id, start, end in ranges:
            cond = (version > start["version"]) & (version <= end["version"])
            batch = F.when(cond, F.lit(batch_id)) if batch is None else batch.when(cond, F.lit(batch_id))
        columns = [c for c in df.columns if c not in ("_change_type", "_commit_version", "_commit_timestamp")]
        return df.select(*[F.col(f"`{c}`") for c in columns], batch.cast("bigint").alias("batch_id"),
                         version.cast("int").alias("file_idx"), F.lit(0).cast("bigint").alias("block"),
                         F.monotonically_increasing_id().alias("row"))


Source = FileSource | DeltaSource


def warn_changed(sources: dict, offsets: dict, warn) -> None:
    """Tell ``warn`` of every file a run of these ``sources`` already read (up to ``offsets``) that changed."""
    for name, source in sources.items():
        if isinstance(source, FileSource) and offsets.get(name):
            for line in source.changed_since_read(offsets[name]):
                warn(line)


@dataclass
class EdgeSource(SourceDefaults):
    """Inside a dataflow's run (``dataflow``), what operator ``upstream`` emitted: its subtasks' output files of
    the run (``files``, set by the run), each row in the microbatch it was emitted for. A record's place is its
    file (the files ordered by subtask), then its position there: operator k+1 gets operator k's output of a
    microbatch in one deterministic order. It plans nothing and keeps no offsets (the dataflow's source does)."""

    upstream: str
    schema: RowTypeInfo
    files: tuple[str, ...] = ()

    def declared_fields(self) -> dict:
        return self.schema.fields

    def validate(self, what: str) -> None:
        if not isinstance(self.schema, RowTypeInfo):
            raise ConfigError(f"{what}: operator {self.upstream!r} must declare its output_type with "
                              f"Types.ROW_NAMED([...], [...])")

    def describe(self) -> dict:
        return {"type": "operator", "uid": self.upstream}

    def initial_offset(self) -> dict:
        return {}

    def split_entries(self, name: str, offset: dict) -> list[dict[str, Any]]:
        return []  # the dataflow's source keeps the offsets

    def record_ddl(self, spark) -> str:
        return self.schema.spark_ddl()

    def read_run(self, spark, ranges: list[tuple[int, dict, dict]]):
        """The upstream operator's rows of this run (every microbatch of ``ranges``), with
        ``POSITION_COLUMNS``; None when it emitted nothing."""
        from pyspark.sql import functions as F

        if not self.files:
            return None
        names = [Path(f).name for f in self.files]
        df = spark.read.schema(f"{self.schema.spark_schema_ddl()}, `{SINK_MICROBATCH}` bigint").parquet(*self.files)
        index_map = F.create_map(*[x for i, n in enumerate(names) for x in (F.lit(n), F.lit(i))])
        return df.select(
            *[F.col(f"`{c}`") for c in self.schema.fields],
            F.col(f"`{SINK_MICROBATCH}`").alias("batch_id"),
            F.element_at(index_map, F.col("_metadata.file_name")).cast("int").alias("file_idx"),
            F.col("_metadata.file_block_start").cast("bigint").alias("block"),
            F.monotonically_increasing_id().alias("row"),
        )
