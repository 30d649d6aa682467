"""A state table's live entries read and selected in this process, with Arrow: no Spark job, where the table's
files are on a local disk and few, or many in small partitions (a savepoint of a job of up to a few hundred MiB
of state). The same rules as ``state_tables.latest_live``
and ``visible``: rows up to the checkpoint's microbatch, of microbatches or of the writes the checkpoint pins,
per entry the newest by ``(batch_id, generation)``, unless that row removed it.

Compaction (RocksDB's compaction filter, docs/operating/compaction.md) selects partition by partition
(``live_partitions``): an
entry's rows are all in one ``(state_name, key_group)`` partition, so its memory is one partition's, whatever the
table's size.
"""
from __future__ import annotations

import itertools
import json
import time

from ..records.layout import TableSpec

# Above this many bytes of a table's files, a savepoint reads it with Spark: Arrow in one process holds the
# decoded rows (a few times the files' size) and sorts them on one core.
DRIVER_MAX_BYTES = 64 * 2**20
# Above this many bytes of one partition's files, compaction rewrites the table with Spark: it holds one
# partition's rows at a time, so its memory follows the largest partition, not the table. Selecting a
# partition's live rows takes about 120 times its files' bytes (1.6 GB for the 13.7 MiB of 2.4M rows read
# whole): 4 MiB keeps it near half a GB, and is 512 MiB of table at 128 key groups of one state.
PARTITION_MAX_BYTES = 4 * 2**20


def read_live(path, version: int, spec: TableSpec, batch_id: int, generations: list[int] | None,
              selected: bool = False):
    """The live entries (a ``pyarrow.Table`` of ``spec``'s columns) of version ``version`` of the state table at
    ``path`` as of microbatch ``batch_id``. A table over ``DRIVER_MAX_BYTES`` whose partitions are each at most
    ``PARTITION_MAX_BYTES`` gives them partition by partition instead: an iterator of ``pyarrow.Table``s, each
    partition read as it is taken, so this process holds one partition's rows, not the table's. None where Spark
    should read it (``read_rows``, ``partitions``). ``selected``: the table holds the live entries alone, a row
    each (a savepoint's), so its rows are taken as they are, without ``latest_live``'s sort and grouping."""
    def select(rows):
        return rows.select(spec.columns) if selected else latest_live(rows, spec, batch_id, generations)

    rows = read_rows(path, version, spec)
    if rows is not None:
        return select(rows)
    parts = partitions(path, version, spec)
    if parts is None:
        return None
    return _ahead(lambda files: select(read_files(path, files, spec)), parts.values())


def _ahead(select, items):
    """``select`` of each of ``items`` in order, the next one's computed in a thread while the caller takes this
    one (Arrow's reads and kernels release the GIL: the caller's writes and the next selection share the cores),
    so at most three are in memory at once."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="lakestate-live") as pool:
        pending = None
        for item in items:
            future = pool.submit(select, item)
            if pending is not None:
                yield pending.result()
            pending = future
        if pending is not None:
            yield pending.result()


def read_rows(path, version: int, spec: TableSpec):
    """Every row of version ``version`` of the state table at ``path`` (a ``pyarrow.Table`` of ``spec``'s
    columns); None where Spark should read it instead: a table on object storage, one delta-rs cannot list as
    plain Parquet files, or files over ``DRIVER_MAX_BYTES``."""
    import os

    from ..storage import is_remote
    from . import delta_rs

    if is_remote(str(path)):
        return None
    files = delta_rs.parquet_files(path, version, spec.partition_columns)  # the version's one log replay
    if files is None:
        return None
    local = [_local(f) for f in files]
    if sum(os.path.getsize(f) for f in local) > DRIVER_MAX_BYTES:  # the files' sizes, not the log again
        return None
    return read_files(path, local, spec)


def partitions(path, version: int, spec: TableSpec) -> dict[tuple, list[str]] | None:
    """The data files of version ``version`` of the local state table at ``path`` per partition (its values of
    ``spec``'s partition columns, as the log writes them -> local paths, in the log's order); None where Spark
    should read it instead: a table on object storage, one delta-rs cannot list as plain Parquet files, or a
    partition whose files are over ``PARTITION_MAX_BYTES``."""
    from urllib.parse import unquote

    from ..storage import is_remote, location
    from . import delta_rs
    from .log import live_adds

    if is_remote(str(path)) or delta_rs.parquet_files(path, version, spec.partition_columns) is None:
        return None
    grouped: dict[tuple, list[str]] = {}
    sizes: dict[tuple, int] = {}
    for relative, add in live_adds(path, version).items():
        values = partition_of(add, spec)
        grouped.setdefault(values, []).append(str(location(path) / unquote(relative)))
        sizes[values] = sizes.get(values, 0) + int(add["size"])
    if max(sizes.values(), default=0) > PARTITION_MAX_BYTES:
        return None
    return grouped


def partition_of(add: dict, spec: TableSpec) -> tuple:
    """The partition of a file's ``add`` action: its values of ``spec``'s partition columns, as the log has them."""
    from .log import partition_values

    values = partition_values(add)
    return tuple(values.get(c) for c in spec.partition_columns)


def live_partitions(path, parts: dict[tuple, list[str]], spec: TableSpec, batch_id: int,
                    generations: list[int] | None):
    """Per partition of ``parts`` (``partitions``), one after the other: (the partition, its rows up to
    ``batch_id``, its live entries as ``latest_live`` selects them). Only one partition's rows are read at a time:
    an entry's rows are all in its partition, so these are the live entries of the whole table."""
    import pyarrow.compute as pc

    for values, files in parts.items():
        rows = read_files(path, files, spec)
        yield (values, pc.sum(pc.less_equal(rows["batch_id"], batch_id)).as_py() or 0,
               latest_live(rows, spec, batch_id, generations))


def rewrite_live(path, version: int, spec: TableSpec, batch_id: int, generations: list[int] | None):
    """Replace every row up to ``batch_id`` of the local state table at ``path`` by the live entries of its
    version ``version`` (Spark's ``replaceWhere batch_id <= batch_id``), in one Delta commit: compaction's rewrite
    in this process. One partition after the other: its live rows are selected (``live_partitions``) and written
    as one file with the runs' writer, closed before the next partition is read, so this process holds one
    partition's rows, not the table's (delta-rs's own overwrite keeps every partition's file open, and its bytes
    in memory, until the last). Rows after ``batch_id`` (a killed run's) stay. Returns (rows scanned, rows
    written, rows written per state name); None where Spark must do it (``partitions``)."""
    from urllib.parse import unquote

    import pyarrow.compute as pc
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction, CommitProperties, PostCommitHookProperties, RemoveAction

    from ..storage import location
    from ..subtask import run_files
    from .delta_rs import storage_options, table_uri
    from .log import live_adds, partition_values

    parts = partitions(path, version, spec)
    if parts is None:
        return None
    # The commit replaces rows of the table's latest version, which a killed run may have added to since.
    table = DeltaTable(table_uri(path), storage_options=storage_options(path))
    current: dict[tuple, list[tuple[str, dict]]] = {}
    for relative, add in live_adds(path, table.version()).items():
        current.setdefault(partition_of(add, spec), []).append((relative, add))
    out = run_files.OutputTable.of_spec(spec, path, None)
    token, now, written, removed = run_files.new_token(), int(time.time() * 1000), [], []
    scanned = live_rows = 0
    per_state: dict[str, int] = {}
    selected = live_partitions(path, parts, spec, batch_id, generations)
    empty = [(values, 0, None) for values in current if values not in parts]  # only a killed run's rows
    for values, count, live in itertools.chain(selected, empty):
        scanned += count
        kept = [] if live is None else [live]
        if live is not None:
            live_rows += live.num_rows
            for name, n in _per_state(live).items():
                per_state[name] = per_state.get(name, 0) + n
        for relative, add in current.get(values, []):
            low, high = _batch_range(add)
            if low is not None and low > batch_id:
                continue  # only rows after the checkpoint: the file stays as it is
            removed.append(RemoveAction(relative, True, now, int(add["size"]), partition_values(add)))
            if high is None or high > batch_id:  # its rows after the checkpoint stay, in the new file
                rows = read_files(path, [str(location(path) / unquote(relative))], spec)
                kept.append(rows.filter(pc.greater(rows["batch_id"], batch_id)).select(spec.columns))
        written += run_files.write_batches(out, token, 0, [b for t in kept for b in t.to_batches()])
    adds = [AddAction(a["path"], a["size"], a["partitionValues"], a["modificationTime"], True, a["stats"])
            for a in (f.to_add_action("batch_id")["add"] for f in written)]
    # What Spark's writer reports for an overwrite, for DESCRIBE HISTORY.
    metrics = {"numFiles": str(len(adds)), "numOutputRows": str(sum(f.rows for f in written)),
               "numOutputBytes": str(sum(f.size for f in written)), "numRemovedFiles": str(len(removed))}
    table.create_write_transaction(adds + removed, "append", table.schema(), list(spec.partition_columns),
                                   commit_properties=CommitProperties(custom_metadata={
                                       "operationMetrics": metrics, "predicate": f"batch_id <= {batch_id}"}),
                                   post_commithook_properties=PostCommitHookProperties(create_checkpoint=False))
    return scanned, live_rows, per_state


def _batch_range(add: dict) -> tuple[int | None, int | None]:
    """The microbatches of a file's rows, from its ``add`` action's statistics ((None, None) without them)."""
    stats = add.get("stats")
    stats = json.loads(stats) if isinstance(stats, str) else stats or {}
    low, high = (stats.get(k, {}).get("batch_id") for k in ("minValues", "maxValues"))
    return (None, None) if low is None or high is None else (int(low), int(high))


def _per_state(rows) -> dict[str, int]:
    """Rows per state name of a ``pyarrow.Table`` of state rows."""
    grouped = rows.group_by("state_name").aggregate([("state_name", "count")]).to_pydict()
    return dict(zip(grouped["state_name"], grouped["state_name_count"]))


def _local(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


def read_files(path, files: list[str], spec: TableSpec):
    """The rows of ``files`` (local data files of the state table at ``path``), partition columns from their
    folders."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    from ..subtask.run_files import arrow_schema

    schema = arrow_schema(spec.schema)
    if not files:
        return schema.empty_table()
    partitioning = ds.partitioning(pa.schema([schema.field(c) for c in spec.partition_columns]), flavor="hive")
    return ds.dataset(files, schema=schema, format="parquet", partitioning=partitioning,
                      partition_base_dir=str(path)).to_table()


def latest_live(rows, spec: TableSpec, batch_id: int, generations: list[int] | None):
    """``state_tables.latest_live(visible(rows, generations), spec, batch_id)`` over a ``pyarrow.Table``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keep = pc.less_equal(rows["batch_id"], batch_id)
    if generations is not None:
        keep = pc.and_(keep, pc.or_(pc.equal(rows["generation"], 0),
                                    pc.is_in(rows["generation"], pa.array([int(g) for g in generations], pa.int64()))))
    rows = rows.filter(keep).sort_by([("batch_id", "ascending"), ("generation", "ascending")])
    rows = rows.append_column("_row", pa.array(range(rows.num_rows), pa.int64()))
    # Sorted so, an entry's newest row is its last: the largest row number of its group.
    newest = rows.group_by(list(spec.id_columns), use_threads=False).aggregate([("_row", "max")])
    live = rows.take(newest["_row_max"].sort())  # in the sorted order: stable, whatever the grouping's
    return live.filter(pc.is_valid(live["value"])).select(spec.columns)
