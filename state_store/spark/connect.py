"""What a run does differently on a Spark Connect session (``sc://``, a long-lived server, no JVM in this process):
the few steps that reach the JVM through py4j on a classic session take a Connect-compatible way here.

- ``remote_session``: the session itself, on a server that already has the Delta jars and confs; the address is
  probed first, and the client gives up on a lost server within ``LOST_AFTER_S`` (``lost_server_said`` names it).
- ``spark.wait_for_running_tasks``: after a failed pass, the server is asked to interrupt the session's
  operations (``interrupt_all``, unless it is gone) instead of watching its executors through the JVM's status
  tracker.
- ``delete_rows_sql``: TTL cleanup's ``MERGE ... DELETE`` in SQL (``MERGE INTO delta.`<path>```) instead of
  delta-spark's Python ``DeltaTable``, which over Connect needs Delta's Connect server plugin (not published for
  Delta 4.0.0).
- a run's commits and its reads of the state tables go through delta-rs (``delta_rs``) on every session, so
  they need no py4j here either; only a sink table whose protocol delta-rs cannot write is refused.
"""
from __future__ import annotations

import re
import socket
import time
import uuid
from contextlib import contextmanager

# How long a TCP connect to the server's address may take before the address is called unanswered: a local or
# LAN server accepts in milliseconds, a firewalled address never refuses.
PROBE_S = 3.0
# Spark Connect's client retries an unreachable server for over ten minutes without a word (DefaultPolicy: 15
# retries, backoff growing to 60 s). A run gives up on a lost server after these (LOST_AFTER_S): long enough for a
# blip of the network, while a server restart takes longer anyway and the rerun resumes exactly once from the last
# commit.
LOST_AFTER = {"max_retries": 7, "initial_backoff": 50, "backoff_multiplier": 4.0, "max_backoff": 2000,
              "jitter": 500, "min_jitter_threshold": 2000}


def _lost_after_s(max_retries, initial_backoff, backoff_multiplier, max_backoff, jitter, min_jitter_threshold) -> int:
    waits = [min(max_backoff, initial_backoff * backoff_multiplier ** i) for i in range(max_retries)]
    return round(sum(w + (jitter if w >= min_jitter_threshold else 0) for w in waits) / 1000)


LOST_AFTER_S = _lost_after_s(**LOST_AFTER)
STATUS = "scripts/spark-connect.sh status"


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

    from ..errors import ConfigError

    if s3:
        raise ConfigError("s3a:// warehouses are not run over Spark Connect yet (the server's Hadoop configuration "
                          "is not set from the client): run with spark-submit, without --remote")
    check_answers(url)
    if job_id is None or "session_id=" in url:
        return _bounded(SparkSession.builder.remote(url).getOrCreate(), url)
    shared = _bounded(SparkSession.builder.remote(_with_params(url, f"session_id={job_session_id(job_id)}"))
                      .create(), url)
    try:
        shared.conf.get("spark.sql.session.timeZone")  # the first call that reaches the session
        return shared
    except Exception as e:  # a closed or expired session: any other error recurs below
        if "StatusCode.UNIMPLEMENTED" in str(e):  # an HTTP server that is not Spark Connect's (a wrong port)
            details = re.search(r'details = "([^"]*)"', str(e))
            raise _unavailable(url, "what answers there is not Spark Connect"
                               + (f": {details.group(1)}" if details else "")) from None
        if "SESSION_CLOSED" not in str(e) and "SESSION_NOT_FOUND" not in str(e):
            raise
        return _bounded(SparkSession.builder.remote(url).create(), url)


def _bounded(session, url: str):
    """``session`` with its client's retries of an unreachable server bounded (``LOST_AFTER``)."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    class Bounded(DefaultPolicy):
        """Once the server is found lost (``lost_server_said``), no call retries it any more: the client's
        background calls (ReleaseExecute) would otherwise hold the process's exit for as long again."""

        def can_retry(self, e: BaseException) -> bool:
            return where not in _GIVEN_UP and super().can_retry(e)

    where = address(url)
    session.client.set_retry_policies([Bounded(**LOST_AFTER)])
    return session


_GIVEN_UP: set[str] = set()  # the addresses this process found lost: not retried again


def address(url: str) -> str:
    """``sc://HOST:PORT`` of a Spark Connect URL, without its parameters (a token among them is not printed);
    the port Spark Connect's client takes when none is given is 15002."""
    netloc = url[len("sc://"):].split("/", 1)[0].split(";", 1)[0]
    host, _, port = netloc.partition(":")
    return f"sc://{host}:{port or 15002}"


def answers(url: str, timeout_s: float = PROBE_S) -> str | None:
    """None when something accepts a TCP connection at ``url``'s address within ``timeout_s``, else why not."""
    host, port = address(url)[len("sc://"):].rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except ValueError:
        return f"{port!r} is not a port number"
    except socket.timeout:
        return f"no answer in {timeout_s:g} s"
    except OSError as e:
        return e.strerror or str(e)
    return None


def check_answers(url: str) -> None:
    """Refuse, within ``PROBE_S``, an address where no server accepts a connection: Spark Connect's client would
    retry it for ten minutes without a word."""
    from ..errors import ConfigError

    if not url.startswith("sc://"):
        raise ConfigError(f"{url!r} is not a Spark Connect address: write it as sc://HOST:PORT "
                          f"({STATUS} prints the server's)")
    why = answers(url)
    if why is not None:
        raise _unavailable(url, why)


def _unavailable(url: str, why: str):
    from ..errors import ServerUnavailable

    return ServerUnavailable(f"no Spark Connect server answers at {address(url)} ({why}): {STATUS} prints the "
                             f"address of the one this checkout runs, scripts/spark-connect.sh start --background "
                             f"starts one")


def is_lost(error: BaseException) -> bool:
    """Whether ``error``, or one it was raised from, is the client giving up on a server it cannot reach."""
    import grpc
    from pyspark.errors import RetriesExceeded

    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, RetriesExceeded) or (
                isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.UNAVAILABLE):
            return True
        error = error.__cause__ or error.__context__
    return False


AGAIN = {"the run": "run again: the run resumes from the last commit, and what this one had not committed is "
                      "done once",
         "the operation": "run the command again: an operation cut short published no checkpoint or savepoint, "
                          "and a later one removes what it left"}


@contextmanager
def lost_server_said(url: str | None, what: str = "the run"):
    """Within it, the client giving up on the server at ``url`` (none: a classic session, nothing to say) is
    one clear error naming the address and ``what`` it cut short: what a run had not committed is redone by the
    next run; an operation publishes its checkpoint or savepoint last, so one cut short left nothing a run
    reads."""
    from ..errors import ServerUnavailable

    try:
        yield
    except Exception as e:
        if url is None or not is_lost(e):
            raise
        _GIVEN_UP.add(address(url))
        raise ServerUnavailable(
            f"the Spark Connect server at {address(url)} stopped answering during {what} (no answer in about "
            f"{LOST_AFTER_S} s of retries): see {STATUS}, restart it with scripts/spark-connect.sh start "
            f"--background, then {AGAIN.get(what, AGAIN['the run'])}") from e


def interrupt_all(spark) -> None:
    """Ask the server to interrupt ``spark``'s operations, unless it is gone (then it runs none of them):
    waiting out the client's retries of a lost server would only delay the error that says so."""
    if answers(f"sc://{spark.client._builder.endpoint}") is None:
        spark.interruptAll()


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
