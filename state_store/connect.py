"""What a run does differently on a Spark Connect session (``sc://``, a long-lived server, no JVM in this process):
the few steps that reach the JVM through py4j on a classic session take a Connect-compatible way here.

- ``remote_session``: the session itself, on a server that already has the Delta jars and confs.
- ``spark.wait_for_running_tasks``: after a failed pass, the server is asked to interrupt the session's
  operations (``interruptAll``) instead of watching its executors through the JVM's status tracker.
- ``delete_rows_sql``: TTL cleanup's ``MERGE ... DELETE`` in SQL (``MERGE INTO delta.`<path>```) instead of
  delta-spark's Python ``DeltaTable``, which over Connect needs Delta's Connect server plugin (not published for
  Delta 4.0.0).
- a run's commits and its reads of the state tables go through delta-rs (``delta_rs``) on every session, so
  they need no py4j here either; only a sink table whose protocol delta-rs cannot write is refused.
"""
from __future__ import annotations

import uuid


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
