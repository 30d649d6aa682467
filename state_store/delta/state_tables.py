"""The state tables (layout v2): their schemas, idempotent appends, and the live entries at a checkpoint.

Keyed state: one row per entry ``(state_name, key_group, key, namespace,
user_key)``, partitioned by ``state_name`` and ``key_group``; ``user_key`` is
the JSON text of a MapState key (each map entry is a row of its own) and null
for the other kinds. Operator state: one row per ``(state_name, subtask)``,
partitioned by ``state_name``. Values are JSON text (null: the entry was
removed). Every row says which microbatch wrote it (``batch_id``); writes that
are not microbatches (restore, rescale) carry the microbatch their state
stands for and a ``generation`` of their own: the generation of the lease the
attempt held, so it is unique to the attempt and grows with each one. They use
their own Delta ``txnAppId`` at that generation, so they can never be taken for
a replay nor tie with one, and a retry is never skipped as "already written"
by the attempt it retries: the live entry is the newest by ``(batch_id,
generation)``. A checkpoint lists the generations it pins (``visible``): rows
of an attempt killed before its checkpoint stay in the table but are read by
no one. ``expiry`` (epoch ms, null without TTL) lets TTL cleanup filter in the
JVM.
"""
from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ..errors import ConfigError
from ..records.layout import TableSpec
from ..records.stats import WrittenFile
from ..spark.connect import delete_rows_sql, is_connect
from ..spark.session import ddl_schema
from ..storage import is_remote, options_of
from ..subtask.run_files import OutputTable, new_token, write_batches
from . import delta_rs
from .log import app_transaction_version, committed_before


def latest_live(df: DataFrame, spec: TableSpec, batch_id: int | None = None) -> DataFrame:
    """The live entries: per entry, the newest row written up to ``batch_id`` (all when None), unless
    that row removed it."""
    if batch_id is not None:
        df = df.filter(F.col("batch_id") <= batch_id)
    newest = Window.partitionBy(*spec.id_columns).orderBy(F.col("batch_id").desc(), F.col("generation").desc())
    return (df.withColumn("_rank", F.row_number().over(newest))
            .filter("_rank = 1 AND value IS NOT NULL").drop("_rank"))


def read_version(spark, path, version: int, spec: TableSpec, partitions=None) -> DataFrame:
    """Version ``version`` of the state table at ``path`` (its files in ``partitions`` only, when given:
    delta-rs's tuple filters on the partition columns; the caller still filters the rows). Read as plain Parquet
    from the file list delta-rs gives (``delta_rs.parquet_files``), which costs no Spark job; through Delta's own
    reader for a table that cannot be read so."""
    files = delta_rs.parquet_files(path, version, spec.partition_columns, partitions)
    if files is None:
        return spark.read.format("delta").option("versionAsOf", version).load(str(path))
    if not files:
        return spark.createDataFrame([], spec.schema)
    conf, local = spark.conf, not is_remote(str(path))
    # Above this many paths Spark lists them in a Spark job of their own; on a local disk a listing in the
    # driver costs less than that job's start.
    before = conf.get(LISTING_THRESHOLD_CONF) if local else None
    if local:
        conf.set(LISTING_THRESHOLD_CONF, str(max(len(files), 32)))
    try:
        return spark.read.schema(spec.schema).option("basePath", str(path)).parquet(*files)
    finally:
        if local:
            conf.set(LISTING_THRESHOLD_CONF, before)


LISTING_THRESHOLD_CONF = "spark.sql.sources.parallelPartitionDiscovery.threshold"


def visible(df: DataFrame, generations: list[int] | None) -> DataFrame:
    """The rows a checkpoint sees: every microbatch's (generation 0) and those of the writes that are not
    microbatches it pins, ``generations``; None (a checkpoint recorded before they were listed) sees them all."""
    if generations is None:
        return df
    return df.filter((F.col("generation") == 0) | F.col("generation").isin([int(g) for g in generations]))


# A state table's properties, set when a run creates it. Compaction deletes what no retained checkpoint pins
# (never VACUUM), so a Delta checkpoint need not carry a week of tombstones (Delta's default): with compaction
# every few minutes they would be most of each log checkpoint, read on every state read.
STATE_TABLE_CONF = {"delta.deletedFileRetentionDuration": "interval 0 seconds"}


def commit_state_files(spark, path: Path, spec: TableSpec, app_id: str, version: int, files: list[WrittenFile],
                       expected: int | None, batch_column: str = "batch_id") -> bool:
    """``commit_files`` for a state table of ``spec``: its columns, partitions and properties (``STATE_TABLE_CONF``)
    from the one place that knows them, so no writer of a state table can make one without them."""
    return commit_files(spark, path, app_id, version, files, spec.ddl, spec.partition_columns, expected,
                        batch_column, STATE_TABLE_CONF)


def commit_files(spark, path: Path, app_id: str, version: int, files: list[WrittenFile], ddl: str,
                 partition_by: tuple[str, ...], expected: int | None, batch_column: str = "batch_id",
                 configuration: dict | None = None) -> bool:
    """Add the Parquet ``files`` a run wrote (``run_files``) to the Delta table at ``path`` in one
    commit with ``txnAppId``/``txnVersion``; a table not there yet is created by the same commit, with columns
    ``ddl``. ``expected`` is the ``app_id`` version the files' rows were filtered against. Returns False when
    the table already has ``version``. Through delta-rs (``delta_rs``), without a Spark job; a table whose
    protocol delta-rs cannot write (a user's sink with features it lacks) through Delta's own transaction on
    the JVM, which a Spark Connect session cannot reach: there it is refused."""
    try:
        return delta_rs.commit_files(spark, path, app_id, version, files, ddl, partition_by, expected, batch_column,
                                     configuration)
    except delta_rs.NotWritable as e:
        if is_connect(spark):
            raise ConfigError(f"the Delta table {path} has a protocol delta-rs cannot write ({e}); over Spark "
                              f"Connect a run commits only through delta-rs: run this job with spark-submit") from e
        return _commit_files_on_jvm(spark, path, app_id, version, files, ddl, partition_by, expected, batch_column)


def _commit_files_on_jvm(spark, path: Path, app_id: str, version: int, files: list[WrittenFile], ddl: str,
                         partition_by: tuple[str, ...], expected: int | None, batch_column: str) -> bool:
    """``commit_files`` through Delta's own ``OptimisticTransaction`` (its log store, conflict checks and log
    checkpoints), reached through py4j."""
    jvm = spark._jvm
    txn = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(path)).startTransaction()
    action = jvm.org.apache.spark.sql.delta.actions.Action
    if txn.readVersion() < 0:  # a new table: its metadata (and so its protocol) come with the first files
        txn.updateMetadataForNewTable(action.fromJson(json.dumps({"metaData": {
            "id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
            "schemaString": ddl_schema(spark, ddl).json(), "partitionColumns": list(partition_by),
            "configuration": {}, "createdTime": int(time.time() * 1000)}})))
    # -1: never; reading it also makes a concurrent commit of it a conflict
    if committed_before(txn.txnVersion(app_id), version, expected, path, app_id):
        return False
    actions = jvm.java.util.ArrayList()
    for info in files:
        actions.add(action.fromJson(json.dumps(info.to_add_action(batch_column))))
    actions.add(action.fromJson(json.dumps(
        {"txn": {"appId": app_id, "version": version, "lastUpdated": int(time.time() * 1000)}})))
    # The operation metrics Spark's own Delta writer reports, for DESCRIBE HISTORY.
    metrics = jvm.java.util.HashMap()
    for name, value in (("numFiles", len(files)), ("numOutputRows", sum(f.rows for f in files)),
                        ("numOutputBytes", sum(f.size for f in files))):
        metric = jvm.org.apache.spark.sql.execution.metric.SQLMetrics.createMetric(spark._jsc.sc(), name)
        metric.set(value)
        metrics.put(name, metric)
    utils = jvm.org.apache.spark.api.python.PythonUtils
    txn.registerSQLMetrics(spark._jsparkSession, utils.toScalaMap(metrics))
    partitions = jvm.java.util.ArrayList()
    for column in partition_by:
        partitions.add(column)
    none = jvm.scala.Option.empty()
    write = getattr(jvm.org.apache.spark.sql.delta, "DeltaOperations$Write")(
        jvm.org.apache.spark.sql.SaveMode.Append, jvm.scala.Option.apply(utils.toSeq(partitions)), none, none)
    txn.commit(utils.toSeq(actions), write)
    return True


def append_idempotent(df: DataFrame, path: Path, app_id: str, version: int,
                      partition_by: tuple[str, ...] = (), batch_column: str = "batch_id") -> bool:
    """Append the rows of ``df`` with Delta's ``txnAppId``/``txnVersion``; rows tagged with a ``batch_id``
    at or below what ``app_id`` already committed are left out, so a replay that groups microbatches
    differently still writes each row once. Returns False when there was nothing new to write."""
    committed = app_transaction_version(path, app_id)
    if committed is not None:
        if committed >= version:
            return False
        df = df.filter(F.col(batch_column) > committed)
    writer = df.write.format("delta").option("txnAppId", app_id).option("txnVersion", version).mode("append")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(str(path))
    return True


def append_state_rows(df, path, app_id: str, version: int, spec: TableSpec, batch_column: str = "batch_id",
                      spark=None) -> bool:
    """``append_idempotent`` for a state table's rows (``spec``'s columns): the tasks write them as a run's
    subtasks write their changes (``run_files.write_batches``) and one commit adds the files
    (``commit_files``, through delta-rs), so a restore or a snapshot costs one Spark job over its rows, not
    Delta's writer and the log replays around it. Rows given as a ``pyarrow.Table`` (``live_arrow``: a small
    savepoint's), or as an iterator of them (a larger one's, a partition at a time), are written by this process the
    same way, with no Spark job (``spark``: the session whose type names the columns of a table the commit
    creates). Returns False when ``app_id`` already has ``version``."""
    import pyarrow as pa

    committed = app_transaction_version(path, app_id)
    if committed is not None and committed >= version:
        return False
    table = OutputTable.of_spec(spec, path, committed, batch_column, options_of(path))
    token = new_token()
    if isinstance(df, pa.Table):  # rows in this process
        df = [df]
    if not hasattr(df, "sparkSession"):  # pyarrow.Tables, one partition's after another (``live_arrow``)
        batches = (b for part in df for b in part.select(spec.columns).to_batches())
        files = write_batches(table, token, 0, batches)
        return commit_state_files(spark, path, spec, app_id, version, files, committed, batch_column)

    def write(batches):
        from pyspark import TaskContext

        for f in write_batches(table, token, TaskContext.get().partitionId(), batches):
            yield pa.RecordBatch.from_pydict({"file": [f.to_json()]})

    described = df.select(*spec.columns).mapInArrow(write, "file string").collect()
    files = [WrittenFile.from_json(r.file) for r in described]
    return commit_state_files(df.sparkSession, path, spec, app_id, version, files, committed, batch_column)


TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"


def remove_rows(spark, path, rows: DataFrame, app_id: str, version: int, spec: TableSpec,
                note: str | None = None) -> bool:
    """Delete from the Delta table at ``path`` every row of the entries in ``rows`` (matched on
    ``spec.id_columns``, nulls equal) written up to microbatch ``version``: one MERGE ... DELETE, which
    rewrites only the files holding them, in the partitions ``rows`` name, committed with ``txnAppId`` /
    ``txnVersion``. Delta takes those for a DML only from the session, and leaves them set: they are set
    around this one commit and always unset, as is ``note``, the commit's ``userMetadata``. Returns False when
    ``app_id`` already committed ``version``. On a Spark Connect session, the same MERGE in SQL (``connect``)."""
    from delta.tables import DeltaTable

    committed = app_transaction_version(path, app_id)
    if committed is not None and committed >= version:
        return False
    partitions = rows.select(*spec.partition_columns).distinct().collect()
    if not partitions:
        return False
    # Literal partition values, so that Delta prunes the files it reads to those partitions.
    pruning = F.lit(False)
    for row in partitions:
        one = F.lit(True)
        for c in spec.partition_columns:
            one = one & (F.col(f"t.{c}") == F.lit(row[c]))
        pruning = pruning | one
    condition = pruning & (F.col("t.batch_id") <= F.lit(int(version)))
    for c in spec.id_columns:
        condition = condition & F.col(f"t.{c}").eqNullSafe(F.col(f"s.{c}"))
    conf = spark.conf
    conf.set(TXN_APP_ID_CONF, app_id)
    conf.set(TXN_VERSION_CONF, str(version))
    if note is not None:
        conf.set(USER_METADATA_CONF, note)
    try:
        if is_connect(spark):
            delete_rows_sql(spark, path, rows, partitions, spec.partition_columns, spec.id_columns, version)
        else:
            (DeltaTable.forPath(spark, str(path)).alias("t")
             .merge(rows.select(*spec.id_columns).alias("s"), condition)
             .whenMatchedDelete().execute())
    finally:
        conf.unset(TXN_APP_ID_CONF)
        conf.unset(TXN_VERSION_CONF)
        conf.unset(USER_METADATA_CONF)
    return True
