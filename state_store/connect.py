"""What a run does differently on a Spark Connect session (``sc://``, a long-lived server, no JVM in this process):
the few steps that reach the JVM through py4j on a classic session take a Connect-compatible way here.

- ``remote_session``: the session itself, on a server that already has the Delta jars and confs.
- ``spark.wait_for_running_tasks``: after a failed pass, the server is asked to interrupt the session's
  operations (``interruptAll``) instead of watching its executors through the JVM's status tracker.
- ``delete_rows_sql``: TTL cleanup's ``MERGE ... DELETE`` in SQL (``MERGE INTO delta.`<path>```) instead of
  delta-spark's Python ``DeltaTable``, which over Connect needs Delta's Connect server plugin (not published for
  Delta 4.0.0).
- ``commit_files_without_jvm``: a run's files are committed to their Delta table through delta-rs
  (``deltalake``) instead of Delta's ``OptimisticTransaction`` reached through py4j: the same add actions with
  their statistics, the same ``txnAppId``/``txnVersion`` (Delta's app transaction), in one commit.
"""
from __future__ import annotations

import time
import uuid

from .records import WrittenFile


def is_connect(spark) -> bool:
    """Whether ``spark`` is a Spark Connect session (``SparkSession.builder.remote(...)``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def remote_session(url: str, s3: bool = False):
    """A Spark Connect session on the server at ``url`` (``sc://HOST:PORT``). The server holds the Delta jars and
    confs (scripts/spark-connect.sh starts one so); this process starts no JVM."""
    from pyspark.sql import SparkSession

    from .errors import ConfigError

    if not url.startswith("sc://"):
        raise ConfigError(f"{url!r} is not a Spark Connect address: write it as sc://HOST:PORT "
                          f"(scripts/spark-connect.sh status prints the server's)")
    if s3:
        raise ConfigError("s3a:// warehouses are not run over Spark Connect yet (the server's Hadoop configuration "
                          "is not set from the client): run with spark-submit, without --remote")
    return SparkSession.builder.remote(url).getOrCreate()


def _storage_options(path) -> dict[str, str] | None:
    from .storage import options_of

    options = options_of(path)
    if options is None:
        return None
    found = {"AWS_REGION": options.region, "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    if options.endpoint:
        found.update(AWS_ENDPOINT_URL=options.endpoint, AWS_ALLOW_HTTP="true")
    if options.access_key and options.secret_key:
        found.update(AWS_ACCESS_KEY_ID=options.access_key, AWS_SECRET_ACCESS_KEY=options.secret_key)
    return found


def _uri(path) -> str:
    text = str(path)
    return "s3://" + text[len("s3a://"):] if text.startswith("s3a://") else text


def commit_files_without_jvm(spark, path, app_id: str, version: int, files: list[WrittenFile], ddl: str,
                             partition_by: tuple[str, ...], expected: int | None, batch_column: str) -> bool:
    """``state_tables.commit_files`` through delta-rs: the same contract (False when ``app_id`` already has
    ``version``; an error, with nothing committed, when another writer took a version of ``app_id`` meanwhile)."""
    from deltalake import DeltaTable, Schema
    from deltalake.exceptions import TableNotFoundError
    from deltalake.transaction import AddAction, CommitProperties, Transaction, create_table_with_add_actions

    uri, options = _uri(path), _storage_options(path)
    try:
        table = DeltaTable(uri, storage_options=options)
    except TableNotFoundError:
        table = None
    current = table.transaction_version(app_id) if table is not None else None
    current = -1 if current is None else current
    if current >= version:
        return False
    if current != (-1 if expected is None else expected):
        raise RuntimeError(f"{path} took a commit of {app_id} (version {current}) while this run held the job "
                           f"(it read version {expected}); nothing was committed, rerun the job")
    now = int(time.time() * 1000)
    actions = []
    for info in files:
        add = info.to_add_action(batch_column)["add"]
        actions.append(AddAction(add["path"], add["size"], add["partitionValues"], add["modificationTime"], True,
                                 add["stats"]))
    commit = CommitProperties(app_transactions=[Transaction(app_id, version, now)])
    if table is None:  # a new table: its schema (Spark's JSON is Delta's schemaString) comes with the first files
        schema = Schema.from_json(spark.createDataFrame([], ddl).schema.json())
        create_table_with_add_actions(uri, schema, actions, "error", list(partition_by) or None,
                                      storage_options=options, commit_properties=commit)
    else:
        table.create_write_transaction(actions, "append", table.schema(), list(partition_by) or None,
                                       commit_properties=commit)
    return True


def delete_rows_sql(spark, path, rows, partitions, partition_columns: tuple[str, ...], id_columns: tuple[str, ...],
                    version: int) -> None:
    """``state_tables.remove_rows``'s MERGE ... DELETE as SQL: the rows of the table at ``path`` that match
    ``rows`` on ``id_columns`` (nulls equal), written up to microbatch ``version``, in the ``partitions`` given
    (literal values, bound as parameters, so that Delta prunes the files it reads to them)."""
    args, pruning = {"version": int(version)}, []
    for i, row in enumerate(partitions):
        one = []
        for j, c in enumerate(partition_columns):
            args[f"p{i}_{j}"] = row[c]
            one.append(f"t.`{c}` = :p{i}_{j}")
        pruning.append("(" + " AND ".join(one) + ")")
    on = " AND ".join([f"({' OR '.join(pruning)})", "t.batch_id <= :version"]
                      + [f"t.`{c}` <=> s.`{c}`" for c in id_columns])
    view = f"lakestate_remove_{uuid.uuid4().hex}"
    rows.select(*id_columns).createOrReplaceTempView(view)
    table = str(path).replace("`", "``")
    try:
        spark.sql(f"MERGE INTO delta.`{table}` AS t USING {view} AS s ON {on} WHEN MATCHED THEN DELETE",
                  args=args).collect()
    finally:
        spark.catalog.dropTempView(view)
