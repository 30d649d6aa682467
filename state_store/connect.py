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

import time
import uuid


def is_connect(spark) -> bool:
    """Whether ``spark`` is a Spark Connect session (``SparkSession.builder.remote(...)``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def remote_session(url: str, s3: bool = False, job_id: str | None = None):
    """A Spark Connect session on the server at ``url`` (``sc://HOST:PORT``). The server holds the Delta jars and
    confs (scripts/spark-connect.sh starts one so); this process starts no JVM. With ``job_id`` (and no
    ``session_id`` in ``url``), the session of that job for the current UTC hour (``job_session_id``): a job's
    runs, which its lease keeps one at a time, find the server's Python workers of their session warm (a new
    session costs about 1.5 s of worker start here); one the server has closed meanwhile is replaced by a new
    one."""
    from pyspark.sql import SparkSession

    from .errors import ConfigError

    if not url.startswith("sc://"):
        raise ConfigError(f"{url!r} is not a Spark Connect address: write it as sc://HOST:PORT "
                          f"(scripts/spark-connect.sh status prints the server's)")
    if s3:
        raise ConfigError("s3a:// warehouses are not run over Spark Connect yet (the server's Hadoop configuration "
                          "is not set from the client): run with spark-submit, without --remote")
    if job_id is None or "session_id=" in url:
        return SparkSession.builder.remote(url).getOrCreate()
    shared = SparkSession.builder.remote(_with_params(url, f"session_id={job_session_id(job_id)}")).create()
    try:
        shared.conf.get("spark.sql.session.timeZone")  # the first call that reaches the session
        return shared
    except Exception as e:  # noqa: BLE001 - a closed or expired session: any other error recurs below
        if "SESSION_CLOSED" not in str(e) and "SESSION_NOT_FOUND" not in str(e):
            raise
        return SparkSession.builder.remote(url).create()


def job_session_id(job_id: str, now: float | None = None) -> str:
    """The Spark Connect session id of ``job_id``'s runs in the current UTC hour: a new one every hour, so that
    an id is never reused after the server's default idle timeout (60 minutes) closed its session."""
    hour = int((time.time() if now is None else now) // 3600)
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"lakestate://{job_id}/sessions/{hour}"))


def _with_params(url: str, param: str) -> str:
    """``url`` with the Spark Connect parameter ``param`` (``sc://host:port/;a=b;c=d``)."""
    return f"{url};{param}" if "/;" in url else f"{url.rstrip('/')}/;{param}"


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
