"""A state table's live entries read and selected in this process, with Arrow: no Spark job, where the table's
files are few and on a local disk (a savepoint of a small job). The same rules as ``state_tables.latest_live``
and ``visible``: rows up to the checkpoint's microbatch, of microbatches or of the writes the checkpoint pins,
per entry the newest by ``(batch_id, generation)``, unless that row removed it.
"""
from __future__ import annotations

from ..records import TableSpec

# Above this many bytes of a table's files, a savepoint reads it with Spark: Arrow in one process holds the
# decoded rows (a few times the files' size) and sorts them on one core.
DRIVER_MAX_BYTES = 64 * 2**20


def read_live(path, version: int, spec: TableSpec, batch_id: int, generations: list[int] | None):
    """The live entries (a ``pyarrow.Table`` of ``spec``'s columns) of version ``version`` of the state table at
    ``path`` as of microbatch ``batch_id``; None where Spark should read it instead (``read_rows``)."""
    rows = read_rows(path, version, spec)
    return None if rows is None else latest_live(rows, spec, batch_id, generations)


def read_rows(path, version: int, spec: TableSpec):
    """Every row of version ``version`` of the state table at ``path`` (a ``pyarrow.Table`` of ``spec``'s
    columns); None where Spark should read it instead: a table on object storage, one delta-rs cannot list as
    plain Parquet files, or files over ``DRIVER_MAX_BYTES``."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    from ..storage import is_remote
    from ..subtask.run_files import arrow_schema
    from . import delta_rs
    from .log import table_snapshot

    if is_remote(str(path)) or table_snapshot(path, version)["size_bytes"] > DRIVER_MAX_BYTES:
        return None
    files = delta_rs.parquet_files(path, version, spec.partition_columns)
    if files is None:
        return None
    schema = arrow_schema(spec.schema)
    if not files:
        return schema.empty_table()
    local = [f[len("file://"):] if f.startswith("file://") else f for f in files]
    partitioning = ds.partitioning(pa.schema([schema.field(c) for c in spec.partition_columns]), flavor="hive")
    return ds.dataset(local, schema=schema, format="parquet", partitioning=partitioning,
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
