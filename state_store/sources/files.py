"""``FileSource``: a directory of JSON-lines or Parquet files, each read once in name order, its files pinned
(size and mtime) in a plan so a replay refuses input that changed."""
from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from typing_extensions import override

from ..errors import ConfigError, InputError
from ..types import RowTypeInfo, _Scalar
from .base import PINNED, READ, Source, checked_max_event_time, null_event_times

_FORMATS = ("json", "parquet")


@dataclass
class FileSource(Source):
    """A directory of JSON-lines or Parquet files; each file is read once, in name order.

    ``schema`` declares the columns (required for JSON; for Parquet it is checked).
    ``max_files_per_batch`` bounds a microbatch (default: all new files).

    Example::

        CLICK = Types.ROW_NAMED(["user", "ts"], [Types.STRING(), Types.LONG()])
        source = FileSource("data/clicks", "json", CLICK, max_files_per_batch=1)   # a file a microbatch
        spec = JobSpec(job_id="clicks", function=CountClicks(), source=source, key="user", ...)

    :param path: the directory (local or ``s3a://``).
    :param format: ``"json"`` (JSON lines) or ``"parquet"``.
    :param schema: the records' columns, ``Types.ROW_NAMED([...], [...])``.
    :param max_files_per_batch: at most this many new files a microbatch (None: every new file).
    """

    path: str
    format: str
    schema: RowTypeInfo
    max_files_per_batch: int | None = None

    @override
    def declared_fields(self) -> dict:
        return self.schema.fields

    def validate(self, what: str) -> None:
        """Raise ConfigError, naming the source as ``what``, when ``format`` is not json or parquet, ``schema`` is
        not a ``Types.ROW_NAMED``, ``max_files_per_batch`` is not a positive integer or the directory is
        missing."""
        if self.format not in _FORMATS:
            raise ConfigError(f"{what}: format {self.format!r} is not supported; use one of {_FORMATS}")
        if not isinstance(self.schema, RowTypeInfo):
            raise ConfigError(f"{what}: declare the schema with Types.ROW_NAMED([...], [...])")
        if self.max_files_per_batch is not None and (
            not isinstance(self.max_files_per_batch, int) or self.max_files_per_batch <= 0
        ):
            raise ConfigError(f"{what}: max_files_per_batch must be a positive integer, "
                              f"got {self.max_files_per_batch!r}")
        if not Path(self.path).is_dir():
            raise ConfigError(f"{what}: source directory {self.path} does not exist; create it or fix the path")

    def describe(self) -> dict:
        """What the catalog records of this source: its type (``"files"``), resolved folder and format."""
        return {"type": "files", "path": self.folder, "format": self.format}

    @property
    def folder(self) -> str:
        """The source's identity in its offsets: its resolved folder (Flink's ``FileSource`` keeps full paths)."""
        return str(Path(self.path).resolve())

    def initial_offset(self) -> dict:
        """The offset of nothing read: this folder, no file."""
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
        """The end offset of the microbatch after ``start``: the files read so far plus the new ones ready, in
        name order (``.json``/``.jsonl`` or ``.parquet`` files not named ``.*`` or ``_*`` and not empty; at most
        ``max_files_per_batch``), each pinned (size and mtime). None when no new file is ready. Raises
        InputError for a new entry that cannot be read: a folder, a file without read permission, a Parquet file
        that is incomplete or lacks the declared columns and types."""
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

    @override
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
        """The record's columns as a Spark DDL type (``struct<...>``): the declared ``schema``'s."""
        return self.schema.spark_ddl()

    def max_event_time(self, spark, start: dict, end: dict, column: str) -> int | None:
        """The largest ``column`` value of the records in ``[start, end)`` (None: no records): from the Parquet
        footers' statistics where every row group has them, else a read of that column only. A record without
        an event time is refused (``null_event_times``)."""
        files = [Path(self.path, f) for f in self.new_files(start, end)]
        if not files:
            return None
        found = _parquet_max(files, column) if self.format == "parquet" else _json_max(files, column)
        if found is not _UNKNOWN:
            return found
        if self.format == "parquet":
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


JSON_IN_PROCESS_BYTES = 16 * 2**20  # planning reads this much JSON itself; past it, a Spark job does


def _json_max(files: list[Path], column: str):
    """The largest ``column`` value over small JSON-lines ``files``, parsed in this process (a tiny run's planning
    was mostly one Spark job per microbatch and source for this: bench/plan_cost.py), or ``_UNKNOWN`` where
    Spark must read them: files past ``JSON_IN_PROCESS_BYTES``, a value that is not a whole number, a line
    Arrow cannot parse, or a record without one (Spark's read then names the file in its error)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    if sum(os.path.getsize(f) for f in files) > JSON_IN_PROCESS_BYTES:
        return _UNKNOWN
    options = pj.ParseOptions(explicit_schema=pa.schema([(column, pa.int64())]), unexpected_field_behavior="ignore")
    best = None
    for path in files:
        if os.path.getsize(path) == 0:
            continue
        try:
            values = pj.read_json(path, parse_options=options).column(column)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError):
            return _UNKNOWN
        if values.null_count:
            return _UNKNOWN
        if len(values):
            top = pc.max(values).as_py()
            best = top if best is None else max(best, top)
    return best


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
