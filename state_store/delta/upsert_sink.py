"""``UpsertDeltaSink``: a Delta table kept equal to the result a changelog describes, by its key (issue 62).

The subtasks stage a run's changes (``_kind`` and ``_microbatch`` beside each row) in the run's staging folder;
the commit reduces them to one change per key (the row of its last microbatch that has one: its insert or
update-after row, or none when that microbatch only retracts it) and applies them in one ``MERGE``: a key whose
change retracts it is deleted, any other inserted or updated. The ``MERGE`` carries the job's transaction
(``txnAppId``, and the run's last microbatch as ``txnVersion``), so a replay of committed microbatches changes
nothing, as the append sink's commit. A stream without ``_kind`` is insert-only: each row upserts its key.
The table holds the result's columns and ``_microbatch``, the microbatch of each row's last change.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

from ..errors import ConfigError, InputError
from ..sinks import SINK_MICROBATCH
from ..storage import options_of
from ..subtask.run_files import OutputTable
from ..tables.changelog import ADDS, KIND
from .log import app_transaction_version, table_metadata
from .sink import DeltaSink


@dataclass(frozen=True)
class UpsertDeltaSink(DeltaSink):
    """The Delta table ``path`` inside the warehouse, one row per value of ``key`` (a column or a list of them):
    each change of an updating stream applied to it, exactly once (see the module docstring).

    Example: ``.key_by("user").aggregate(ColumnAggregate(clicks="count(*)"), uid="clicks")
    .sink_to(UpsertDeltaSink("sinks/clicks_per_user", key="user"))``

    :param path: the table, a path inside the warehouse.
    :param key: the column (or list of columns) that names a result row: the upstream aggregate's key.
    """

    key: "str | tuple[str, ...]" = ()

    def __post_init__(self):
        super().__post_init__()
        key = (self.key,) if isinstance(self.key, str) else tuple(self.key)
        if not key or not all(isinstance(c, str) and c for c in key):
            raise ConfigError(f"UpsertDeltaSink({self.path!r}, key=...): name the column (or columns) that names "
                              f"a result row, e.g. key='user' or key=['user', 'device']")
        if KIND in key or SINK_MICROBATCH in key:
            raise ConfigError(f"UpsertDeltaSink({self.path!r}): {KIND!r} and {SINK_MICROBATCH!r} are the sink's own "
                              f"columns, not a key")
        object.__setattr__(self, "key", key)

    def describe(self) -> dict:
        return {"type": "delta-upsert", "path": self.path, "key": list(self.key)}

    def check_rows(self, row_type, what: str) -> None:
        """Refuse rows that lack a key column, naming the fix."""
        missing = [c for c in self.key if c not in row_type.fields]
        if missing:
            raise ConfigError(f"UpsertDeltaSink({self.path!r}, key={list(self.key)}): {what} has no column "
                              f"{missing[0]!r} (columns: {list(row_type.fields)}); key the sink by the result's "
                              f"key columns")

    # -- a run ------------------------------------------------------------------------------------------------
    def _table_run(self, run):
        """``run`` as the target table's: its columns without ``_kind``."""
        schema = _schema(run.spark, run.columns)
        columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema if f.name != KIND)
        return replace(run, columns=columns)

    def check(self, run) -> None:
        schema = _schema(run.spark, run.columns)
        missing = [c for c in self.key if c not in schema.names]
        if missing:
            raise InputError(f"UpsertDeltaSink({self.path!r}, key={list(self.key)}): {run.declared} has no column "
                             f"{missing[0]!r} ({run.columns}); key the sink by the result's key columns")
        meta = table_metadata(run.location)
        if meta is not None:
            self._check_columns(self._table_run(run), meta)

    def output(self, run, token: str) -> OutputTable:
        """The run's changes, staged: the commit merges them into the table."""
        directory = run.staging(token) / f"upsert-{run.table.replace(':', '-')}"
        return OutputTable(run.table, str(directory), run.columns, (),
                           app_transaction_version(run.location, run.app_id), SINK_MICROBATCH, options_of(directory))

    def commit(self, run, table: OutputTable, files: list, last_batch: int) -> None:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        from ..spark.session import ddl_schema
        from .state_tables import TXN_APP_ID_CONF, TXN_VERSION_CONF

        spark, target = run.spark, self._table_run(run)
        committed = app_transaction_version(run.location, run.app_id)
        if committed is not None and committed >= last_batch:
            return  # a replay of what the table has
        if (meta := table_metadata(run.location)) is None:
            spark.createDataFrame([], ddl_schema(spark, target.columns)).write.format("delta").mode("ignore") \
                .save(str(run.location))
        else:
            self._check_columns(target, meta)  # made since the run opened it
        if not files:
            return  # no change in the run's microbatches (the table was made above, for its readers)
        changes = spark.read.schema(table.ddl).parquet(*[str(table.root / f.path) for f in files])
        if committed is not None:
            changes = changes.filter(F.col(SINK_MICROBATCH) > committed)
        updating = KIND in changes.columns
        adds = F.col(KIND).isin(*ADDS) if updating else F.lit(True)
        last = Window.partitionBy(*[F.col(f"`{c}`") for c in self.key]).orderBy(
            F.col(SINK_MICROBATCH).desc(), adds.desc(), F.col("_metadata.file_path").desc(),
            F.col("_metadata.row_index").desc())
        columns = [c for c in changes.columns if c != KIND]
        reduced = (changes.withColumn("_lakestate_add", adds).withColumn("_lakestate_n", F.row_number().over(last))
                   .filter("_lakestate_n = 1").select(*[F.col(f"`{c}`") for c in columns], "_lakestate_add"))
        view = f"lakestate_upsert_{uuid.uuid4().hex}"
        reduced.createOrReplaceTempView(view)
        on = " AND ".join(f"t.`{c}` <=> s.`{c}`" for c in self.key)
        values = ", ".join(f"s.`{c}`" for c in columns)
        names = ", ".join(f"`{c}`" for c in columns)
        update = ", ".join(f"t.`{c}` = s.`{c}`" for c in columns if c not in self.key)
        path = str(run.location).replace("`", "``")
        conf = spark.conf
        conf.set(TXN_APP_ID_CONF, run.app_id)
        conf.set(TXN_VERSION_CONF, str(last_batch))
        try:
            spark.sql(f"MERGE INTO delta.`{path}` AS t USING {view} AS s ON {on} "
                      f"WHEN MATCHED AND NOT s._lakestate_add THEN DELETE "
                      f"WHEN MATCHED THEN UPDATE SET {update} "
                      f"WHEN NOT MATCHED AND s._lakestate_add THEN INSERT ({names}) VALUES ({values})").collect()
        finally:
            conf.unset(TXN_APP_ID_CONF)
            conf.unset(TXN_VERSION_CONF)
            spark.catalog.dropTempView(view)


def _schema(spark, ddl: str):
    from ..spark.session import ddl_schema

    return ddl_schema(spark, ddl)
