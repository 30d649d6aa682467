"""The Delta tables of a run through delta-rs (``deltalake``), in this process, without a Spark job: the commit
of a run's files and the file list of a table version a run reads.

Through Delta's own reader and ``OptimisticTransaction`` on the JVM, each of a run's three commits and each
read of a state table cost Spark jobs of their own (the snapshot's state reconstruction, "Filtering files for
query", "Compute snapshot for version"): most of a small run's time. delta-rs replays the log in Rust in a few
milliseconds, commits with the same add actions, statistics and app transaction (``txnAppId``/``txnVersion``),
and writes the same ``operationMetrics`` Spark's writer reports, so ``DESCRIBE HISTORY``, Spark, delta-rs and
``delta.log`` read the tables alike. Classic log checkpoints every ``CHECKPOINT_INTERVAL`` versions, as Spark
writes them.
"""
from __future__ import annotations

import json
import time
import uuid

from ..records.stats import WrittenFile
from ..spark.session import ddl_schema
from ..storage import ObjectPath, create_exclusive, location, options_of
from .log import committed_before

CHECKPOINT_INTERVAL = 10  # Delta's (Spark's) default: delta-rs's own is 100


class NotWritable(Exception):
    """delta-rs refused to commit to a table whose protocol it cannot write (row tracking, type widening,
    in-commit timestamps...); nothing was committed."""


def table_uri(path) -> str:
    """``path`` as delta-rs names it: ``s3a://`` is Hadoop's scheme, delta-rs reads the same bucket as ``s3://``."""
    text = str(path)
    return "s3://" + text[len("s3a://"):] if text.startswith("s3a://") else text


def storage_options(path) -> dict[str, str] | None:
    """delta-rs's options for the bucket of an ``s3a://`` path (the ones Spark's S3A connector is given)."""
    options = options_of(location(path))
    if options is None:
        return None
    found = {"AWS_REGION": options.region, "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    if options.endpoint:
        found.update(AWS_ENDPOINT_URL=options.endpoint, AWS_ALLOW_HTTP="true")
    if options.access_key and options.secret_key:
        found.update(AWS_ACCESS_KEY_ID=options.access_key, AWS_SECRET_ACCESS_KEY=options.secret_key)
    return found


def commit_files(spark, path, app_id: str, version: int, files: list[WrittenFile], ddl: str,
                 partition_by: tuple[str, ...], expected: int | None, batch_column: str,
                 configuration: dict | None = None) -> bool:
    """``state_tables.commit_files`` through delta-rs: the same contract (False when ``app_id`` already has
    ``version``; an error, with nothing committed, when another writer took a version of ``app_id`` meanwhile).
    Raises ``NotWritable``, with nothing committed, for a table whose protocol delta-rs cannot write."""
    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError, DeltaProtocolError, TableNotFoundError
    from deltalake.transaction import AddAction, CommitProperties, Transaction

    uri, options = table_uri(path), storage_options(path)
    try:
        table = DeltaTable(uri, storage_options=options)
    except TableNotFoundError:
        table = None
    if committed_before(table.transaction_version(app_id) if table is not None else None, version, expected, path,
                        app_id):
        return False
    now = int(time.time() * 1000)
    # What Spark's Delta writer records for an append, for DESCRIBE HISTORY.
    metrics = {"numFiles": str(len(files)), "numOutputRows": str(sum(f.rows for f in files)),
               "numOutputBytes": str(sum(f.size for f in files))}
    if table is None:  # a new table: its first commit written as Spark's writer writes it
        try:
            _create(spark, path, files, ddl, partition_by, app_id, version, metrics, now, batch_column,
                    configuration)
        except FileExistsError:  # another writer created it meanwhile: add to it as to any table
            return commit_files(spark, path, app_id, version, files, ddl, partition_by, expected, batch_column,
                                configuration)
        return True
    actions = []
    for info in files:
        add = info.to_add_action(batch_column)["add"]
        actions.append(AddAction(add["path"], add["size"], add["partitionValues"], add["modificationTime"], True,
                                 add["stats"]))
    commit = CommitProperties(app_transactions=[Transaction(app_id, version, now)],
                              custom_metadata={"operationMetrics": metrics, "isBlindAppend": True})
    try:
        _commit(table, actions, commit, partition_by)
    except DeltaProtocolError as e:
        raise NotWritable(str(e)) from e
    except CommitFailedError as e:
        if "Unsupported table features" in str(e):
            raise NotWritable(str(e)) from e
        raise
    return True


def _create(spark, path, files: list[WrittenFile], ddl: str, partition_by: tuple[str, ...], app_id: str,
            version: int, metrics: dict, now: int, batch_column: str, configuration: dict | None) -> None:
    """Version 0 of a new table with ``files``: the commit Spark's Delta writer makes for an append that creates
    a table (operation WRITE, protocol 1/2, the schema of ``ddl``), put only if absent (FileExistsError when
    another writer created the table first), as Delta's log stores put a commit."""
    commit_info = {"timestamp": now, "operation": "WRITE",
                   "operationParameters": {"mode": "Append",
                                           "partitionBy": json.dumps(list(partition_by), separators=(",", ":"))},
                   "isolationLevel": "Serializable", "isBlindAppend": True, "operationMetrics": metrics,
                   "engineInfo": "Lakestate (delta-rs)", "txnId": str(uuid.uuid4())}
    metadata = {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                "schemaString": ddl_schema(spark, ddl).json(), "partitionColumns": list(partition_by),
                "configuration": dict(configuration or {}), "createdTime": now}
    actions = [{"commitInfo": commit_info}, {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
               {"metaData": metadata}, *(f.to_add_action(batch_column) for f in files),
               {"txn": {"appId": app_id, "version": version, "lastUpdated": now}}]
    log = location(path) / "_delta_log"
    if not isinstance(log, ObjectPath):
        log.mkdir(parents=True, exist_ok=True)
    create_exclusive(log / f"{0:020d}.json", "".join(json.dumps(a) + "\n" for a in actions))


def _commit(table, actions, commit, partition_by: tuple[str, ...]) -> None:
    from deltalake.transaction import PostCommitHookProperties

    table.create_write_transaction(actions, "append", table.schema(), list(partition_by) or None,
                                   commit_properties=commit,
                                   post_commithook_properties=PostCommitHookProperties(create_checkpoint=False))
    table.update_incremental()
    if table.version() % CHECKPOINT_INTERVAL == 0:
        table.create_checkpoint()


def parquet_files(path, version: int, partition_columns: tuple[str, ...], predicate=None) -> list[str] | None:
    """The data files of version ``version`` of the Delta table at ``path`` (only those of the partitions
    ``predicate`` selects, delta-rs's tuple filters), as paths Spark reads as plain Parquet with ``basePath``
    set to the table, or None when the table cannot be read so: a protocol beyond reader version 1 (deletion
    vectors, column mapping) or files outside ``column=value/`` folders of its partition columns."""
    from deltalake import DeltaTable

    table = DeltaTable(table_uri(path), version=version, storage_options=storage_options(path))
    if table.protocol().min_reader_version > 1:
        return None
    uris = table.file_uris(file_pruning_predicate=predicate) if predicate else table.file_uris()
    root = table_uri(path).rstrip("/") + "/"
    names = [f"{c}=" for c in partition_columns]
    found = []
    for uri in uris:
        if not uri.startswith(root):
            return None
        folders = uri[len(root):].split("/")[:-1]
        if len(folders) != len(names) or any(not f.startswith(n) for f, n in zip(folders, names)):
            return None
        found.append(uri)
    scheme = location(path).scheme if isinstance(location(path), ObjectPath) else None
    return [f"{scheme}://{u[len('s3://'):]}" for u in found] if scheme and scheme != "s3" else found
