"""The files a run writes: sink rows and state changes, written by the subtasks themselves.

A run's subtasks write their sink rows and state changes straight to Parquet
files (``RunFiles``), one file per touched ``(state_name, key_group)``
partition per subtask per run (one sink file per subtask), and return only a
description of each file. The driver then adds the files to each table in one
Delta commit (``state_tables.commit_files``). Nothing crosses back into the
JVM row by row and nothing is cached, so the write costs what writing Parquet
costs. Files that no commit names (a failed task attempt, a crashed run) are
never read; a run removes those of its own (``remove_uncommitted``).

No Spark import here: the executors and the tests use it alone.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ..records.layout import KEYED, OPERATOR, SINK, TABLE_SPECS, TYPED_KEY, KeyedRow, OperatorRow, TableSpec
from ..records.stats import WrittenFile
from ..sources import SINK_MICROBATCH
from ..storage import S3Options, location, output_stream, remove_empty_folders, walk_files

FLUSH_ROWS = 65_536  # rows held as Python objects before they are written as Parquet row groups
# Bytes held as Arrow (a microbatch's state changes and sink rows, converted once) before they are written: a
# run's files get one row group per partition per flush, so a run of a few microbatches writes each file once.
FLUSH_BYTES = 64 << 20


@dataclass(frozen=True)
class OutputTable:
    """Where and how one table's rows of a run are written; shipped to the executors."""

    name: str  # SINK, KEYED or OPERATOR
    directory: str  # the Delta table's directory, or a staging directory
    ddl: str  # the table's columns, partition columns included
    partition_columns: tuple[str, ...]
    committed: int | None  # rows of microbatches at or below this are already in the table: left out
    batch_column: str = "batch_id"
    storage: S3Options | None = None  # how to reach an s3a:// directory (travels to the executors)
    # A sink or side output table the run's commit creates: where its columns were declared; its columns are
    # checked at the commit against a table made meanwhile.
    declared: str | None = None
    key_type: Any = None  # a keyed table's key type (a TypeInfo): its files get the column ``typed_key`` of it

    @classmethod
    def of_spec(cls, spec: TableSpec, directory, committed: int | None, batch_column: str = "batch_id",
                storage: S3Options | None = None) -> "OutputTable":
        """Where a state table of ``spec`` gets a run's (or a restore's, a snapshot's) files."""
        return cls(spec.name, str(directory), spec.schema, spec.partition_columns, committed, batch_column, storage,
                   key_type=spec.key_type)

    @property
    def root(self):
        """The directory as a Path or ObjectPath."""
        return location(self.directory, self.storage)


@dataclass(frozen=True)
class RunOutputs:
    token: str  # in every file name of the run, so its uncommitted files can be found
    tables: dict[str, OutputTable]


def local_outputs(directory, token: str, committed: int | None = None, key_type=None) -> RunOutputs:
    """The three tables' files under ``directory`` (one folder each), as a run on the staging backends
    writes them (``key_type``: the keyed table's, which types its keys): for running subtasks without Spark
    (tests, ``bench/profile_subtask.py``)."""
    from ..records.layout import table_spec

    directory = Path(directory)
    tables = {SINK: OutputTable(SINK, str(directory / SINK), "", (), committed, SINK_MICROBATCH)}
    for name in TABLE_SPECS:
        tables[name] = OutputTable.of_spec(table_spec(name, key_type), directory / name, committed)
    return RunOutputs(token, tables)


def new_token() -> str:
    return uuid.uuid4().hex[:12]


def arrow_schema(ddl: str, exclude: tuple[str, ...] = ()):
    """The Arrow schema of a flat DDL of string, int and bigint columns (the state tables', the result rows')."""
    import pyarrow as pa

    types = {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64()}
    fields = [part.strip().split(" ", 1) for part in ddl.split(",")]
    return pa.schema([(name, types[t.strip()]) for name, t in fields if name not in exclude])


class TableFiles:
    """One table's files written by one subtask in one run: a Parquet file per partition touched."""

    def __init__(self, table: OutputTable, token: str, subtask: int, schema):
        self.table, self.schema = table, schema
        # A keyed table's files hold each key as its type too (``typed_key``), decoded from its text once per batch
        # of changes (``_typed``).
        self._key_type = table.key_type if table.name == KEYED else None
        self._file_schema = schema
        if self._key_type is not None:
            self._file_schema = schema.append(_typed_key_field(self._key_type))
        self.prefix = f"part-{token}-{subtask:05d}-{uuid.uuid4().hex[:8]}"
        # zstd, as Spark writes the tables (build_spark); no Arrow schema in the footer (Spark reads the Parquet
        # schema). A run file of a state table holds a few hundred entries of one partition, so its footer and
        # pages weigh as much as its rows: keys and values (nearly all distinct) get no dictionary and no
        # min/max statistics (Delta skips files by the log's statistics); the small columns keep both.
        self._options = {"compression": "zstd", "store_schema": False}
        if table.name != SINK:
            small = [f.name for f in schema if f.name not in ("key", "value")]
            self._options.update(use_dictionary=small, write_statistics=small)
        self._pending: dict[tuple, list] = {}
        # partition -> [(Arrow table of its file's columns, its rows' least and largest microbatch)]
        self._tables: dict[tuple, list] = {}
        self._cut = len(table.partition_columns)
        # partition -> [writer, relative path, rows, min batch, max batch, stream]
        self._writers: dict[tuple, list] = {}
        self.pending_rows = 0  # held in ``_pending``, as Python rows
        self.pending_bytes = 0  # held in ``_tables``, as Arrow

    def _path(self, partition: tuple) -> str:
        dirs = "".join(f"{c}={v}/" for c, v in zip(self.table.partition_columns, partition))
        return f"{dirs}{self.prefix}-{len(self._writers):05d}.zstd.parquet"

    def add_row(self, row: KeyedRow | OperatorRow) -> None:
        """A state table row: its leading partition columns go to the file's folder, the rest into the file
        (a row record's fields are its table's columns, in order). Once per changed entry: kept lean."""
        committed, cut = self.table.committed, self._cut
        if committed is not None and row.batch_id <= committed:
            return  # a replay: the table already has this microbatch's rows
        self._pending.setdefault(row[:cut], []).append((row.batch_id, row[cut:]))
        self.pending_rows += 1

    def add_columns(self, batch_id: int, columns: list, last: int | None = None) -> None:
        """Rows of microbatch ``batch_id`` as columns (lists in the table's column order, partition columns
        first): each converted to Arrow once, the rows ordered by partition in Arrow and each partition's run
        kept as a slice (no Python object per row, as ``add_row`` makes). ``last``: rows of microbatches
        ``batch_id`` to ``last`` (a savepoint's, a restore's: ``write_batches``)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        committed, n = self.table.committed, len(columns[0]) if columns else 0
        if not n or (committed is not None and batch_id <= committed):
            return  # nothing, or a replay: the table already has this microbatch's rows
        schema = arrow_schema(self.table.ddl)
        table = pa.table([_arrow_column(c, f.type) for c, f in zip(columns, schema)], schema=schema)
        parts = self.table.partition_columns
        # Ordered by the entry (partition columns first): the same files whatever order the changes came in.
        order = [(c, "ascending") for c in TABLE_SPECS[self.table.name].id_columns]
        table = table.take(pc.sort_indices(table, order))
        starts = [0]
        if n > 1:
            changed = [pc.not_equal(table.column(c).slice(1), table.column(c).slice(0, n - 1)) for c in parts]
            for more in changed[1:]:
                changed[0] = pc.or_(changed[0], more)
            starts += [i + 1 for i in pc.indices_nonzero(changed[0]).to_pylist()]
        file_columns = self._typed(table.select(self.schema.names))
        for start, end in zip(starts, starts[1:] + [n]):
            partition = tuple(table.column(c)[start].as_py() for c in parts)
            self._tables.setdefault(partition, []).append((file_columns.slice(start, end - start), batch_id,
                                                           batch_id if last is None else last))
        self.pending_bytes += file_columns.nbytes

    def _columns(self, pending: list) -> tuple[list, list]:
        """The file's columns and their rows' microbatches, from a partition's pending ``(batch_id, row)`` pairs
        (rows are tuples in schema order)."""
        import pyarrow as pa

        columns = list(zip(*[r for _, r in pending]))
        return [pa.array(c, type=f.type) for c, f in zip(columns, self.schema)], [b for b, _ in pending]

    def flush(self) -> None:
        import pyarrow as pa

        for partition, pending in self._pending.items():
            arrays, batches = self._columns(pending)
            table = pa.Table.from_batches([pa.RecordBatch.from_arrays(arrays, schema=self.schema)])
            self._write(partition, self._typed(table), min(batches), max(batches))
        for partition, tables in self._tables.items():
            self._write(partition, pa.concat_tables([t for t, _, _ in tables]), min(b for _, b, _ in tables),
                        max(b for _, _, b in tables))
        self._pending, self._tables, self.pending_rows, self.pending_bytes = {}, {}, 0, 0

    def _typed(self, table):
        """A keyed table's file columns with ``typed_key``, decoded from ``key`` at once (once a microbatch's
        changes, before they are cut into partitions); any other table's as they are."""
        if self._key_type is None:
            return table
        from ..keys import arrow_keys

        return table.append_column(self._file_schema.field(TYPED_KEY),
                                   arrow_keys(self._key_type, table.column("key"), lenient=True))

    def _write(self, partition: tuple, table, low: int, high: int) -> None:
        """``table``'s rows (of microbatches ``low`` to ``high``) to the partition's file, opened on first use."""
        import pyarrow.parquet as pq

        entry = self._writers.get(partition)
        if entry is None:
            relative = self._path(partition)
            sink = output_stream(self.table.root / relative)
            writer = pq.ParquetWriter(sink, self._file_schema, **self._options)
            entry = [writer, relative, 0, None, None, sink]
            self._writers[partition] = entry
        entry[0].write_table(table)
        entry[2] += table.num_rows
        entry[3] = low if entry[3] is None else min(entry[3], low)
        entry[4] = high if entry[4] is None else max(entry[4], high)

    def close(self) -> list[WrittenFile]:
        """Write what is pending, close the files and describe each."""
        self.flush()
        infos = []
        for partition, (writer, relative, rows, low, high, sink) in self._writers.items():
            writer.close()
            size = sink.tell()
            sink.close()
            values = {c: str(v) for c, v in zip(self.table.partition_columns, partition)}
            infos.append(WrittenFile(self.table.name, relative, values, size, rows, low, high))
        self._writers = {}
        return infos


class SinkFiles(TableFiles):
    """The sink's file of one subtask: rows are the typed sink rows (what ``to_arrow`` gives, or the tuples of
    ``arrow_tuple_converter``). A file is fed one way: row by row (``add``: a side output's rows, held as two
    lists, microbatches and rows, until the flush), or in runs of rows (``add_rows``: the output rows of an
    exchange batch, converted to Arrow at once) or tables (``add_table``)."""

    def __init__(self, table: OutputTable, token: str, subtask: int, out_type):
        import pyarrow as pa

        self.out_type = out_type
        schema = pa.schema(list(out_type) + [(SINK_MICROBATCH, pa.int64())])
        super().__init__(table, token, subtask, schema)

    def add(self, batch_id: int, row) -> None:
        """A row of microbatch ``batch_id``."""
        committed = self.table.committed
        if committed is not None and batch_id <= committed:
            return  # a replay: the table already has this microbatch's rows
        pending = self._pending.get(())
        if pending is None:
            pending = self._pending[()] = ([], [])
        pending[0].append(batch_id)
        pending[1].append(row)
        self.pending_rows += 1

    def add_rows(self, batch_id: int, rows: list) -> None:
        """Rows of microbatch ``batch_id``, held as Arrow from now on."""
        import pyarrow as pa

        committed = self.table.committed
        if not rows or (committed is not None and batch_id <= committed):
            return  # nothing, or a replay: the table already has this microbatch's rows
        arrays = pa.array(rows, type=self.out_type).flatten() + [pa.array([batch_id] * len(rows), type=pa.int64())]
        table = pa.Table.from_batches([pa.RecordBatch.from_arrays(arrays, schema=self.schema)])
        self._tables.setdefault((), []).append((table, batch_id, batch_id))
        self.pending_bytes += table.nbytes

    def add_table(self, batch_id: int, table) -> None:
        """Rows of microbatch ``batch_id`` as an Arrow table of the sink's columns (the vectorised path)."""
        import pyarrow as pa

        committed = self.table.committed
        if not table.num_rows or (committed is not None and batch_id <= committed):
            return  # nothing, or a replay: the table already has this microbatch's rows
        table = table.append_column(SINK_MICROBATCH, pa.array([batch_id] * table.num_rows, type=pa.int64()))
        table = table.cast(self.schema)
        self._tables.setdefault((), []).append((table, batch_id, batch_id))
        self.pending_bytes += table.nbytes

    def _columns(self, pending: tuple[list, list]) -> tuple[list, list]:
        import pyarrow as pa

        batches, rows = pending
        return pa.array(rows, type=self.out_type).flatten() + [pa.array(batches, type=pa.int64())], batches


def _typed_key_field(key_type):
    import pyarrow as pa

    return pa.field(TYPED_KEY, key_type.arrow_type())


def _arrow_column(values, arrow_type):
    """A column given as a list or an Arrow array, as an Arrow array of ``arrow_type`` (an Arrow one cast, not
    walked value by value as ``pa.array`` walks it)."""
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return values if values.type == arrow_type else values.cast(arrow_type)
    return pa.array(values, type=arrow_type)


def write_rows(table: OutputTable, token: str, rows: Iterable[KeyedRow | OperatorRow]) -> list[WrittenFile]:
    """Write state table ``rows`` as files of ``table`` (from the driver: e.g. source offsets)."""
    files = TableFiles(table, token, 0, arrow_schema(table.ddl, table.partition_columns))
    for row in rows:
        files.add_row(row)
    return files.close()


def write_batches(table: OutputTable, token: str, subtask: int, batches) -> list[WrittenFile]:
    """Write Arrow record ``batches`` of state table rows (the table's columns, in order) as files of ``table``,
    as a run's subtask writes its changes (one file per partition; rows of microbatches at or below
    ``table.committed`` left out, by ``table.batch_column``): what a task writes for a restore or a snapshot."""
    import pyarrow.compute as pc

    files = TableFiles(table, token, subtask, arrow_schema(table.ddl, table.partition_columns))
    schema = arrow_schema(table.ddl)
    for batch in batches:
        if not batch.num_rows:
            continue
        batch = batch.cast(schema)  # Spark's Arrow types (large strings) as the files have them, once per batch
        marks = batch.column(table.batch_column)
        bounds = pc.min_max(marks)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if table.committed is None or low > table.committed:  # nothing replayed: all at once (a savepoint's rows)
            parts = [(low, batch.columns, high)]
        else:  # microbatch by microbatch, so the replayed ones are left out
            parts = ((b, batch.filter(pc.equal(marks, b)).columns, None) for b in pc.unique(marks).to_pylist())
        for batch_id, columns, last in parts:
            files.add_columns(batch_id, columns, last=last)
            if files.pending_bytes >= FLUSH_BYTES:
                files.flush()
    return files.close()


def remove_uncommitted(directory, token: str, keep: set[str], storage: S3Options | None = None,
                       partition_columns: tuple[str, ...] | None = None) -> int:
    """Delete the files of run ``token`` under ``directory`` that are not in ``keep`` (relative paths), and
    the folders left empty. With ``partition_columns`` (the table's), only files where the table's own writer
    puts them (``<column>=<value>/`` folders, in order): another table in a folder inside this one keeps its
    files. Best effort: this runs after a failure too, whose error must not be hidden by one of its own."""
    removed, marker = 0, f"part-{token}-"
    root = location(directory, storage)
    if not root.is_dir():
        return 0
    for path in walk_files(root):
        relative = path.relative_to(root)
        if (not path.name.startswith(marker) or relative.as_posix() in keep
                or not _placed_by_table(relative.parts[:-1], partition_columns)):
            continue
        try:
            path.unlink(missing_ok=True)
            removed += 1
        except OSError:
            pass  # a read-only volume: the file is named by no commit, so nothing ever reads it
    # And the folders left empty (a failed first run leaves no table folder behind), up to the table's parent
    # when that is empty too (a job's ``state`` folder).
    remove_empty_folders(root)
    if not root.exists():
        try:
            root.parent.rmdir()
        except OSError:
            pass  # not empty: another table lives there
    return removed


def _placed_by_table(folders: tuple[str, ...], partition_columns: tuple[str, ...] | None) -> bool:
    if partition_columns is None:
        return True
    return len(folders) == len(partition_columns) and all(
        folder.startswith(f"{column}=") for folder, column in zip(folders, partition_columns))


class SubtaskFiles:
    """The tables' files of one subtask's run: the sink, the state tables, and each side output
    (``side_types``: table name -> the Arrow struct type of its rows)."""

    def __init__(self, outputs: RunOutputs, subtask: int, out_type, side_types: dict | None = None):
        tables, token = outputs.tables, outputs.token
        self.sink = SinkFiles(tables[SINK], token, subtask, out_type)
        self.keyed = TableFiles(tables[KEYED], token, subtask,
                                arrow_schema(tables[KEYED].ddl, tables[KEYED].partition_columns))
        self.operator = TableFiles(tables[OPERATOR], token, subtask,
                                   arrow_schema(tables[OPERATOR].ddl, tables[OPERATOR].partition_columns))
        self.sides = {name: SinkFiles(tables[name], token, subtask, arrow_type)
                      for name, arrow_type in (side_types or {}).items()}
        self._all = (self.sink, self.keyed, self.operator, *self.sides.values())

    def maybe_flush(self) -> None:
        """Bound memory: write what is held once it reaches ``FLUSH_ROWS`` Python rows or ``FLUSH_BYTES`` of
        Arrow."""
        if (sum(f.pending_rows for f in self._all) >= FLUSH_ROWS
                or sum(f.pending_bytes for f in self._all) >= FLUSH_BYTES):
            for f in self._all:
                f.flush()

    def close(self) -> list[WrittenFile]:
        return [info for f in self._all for info in f.close()]
