"""The SparkSession Lakestate runs on, and the key group as a Spark column."""
from __future__ import annotations

import glob
import os
import re
import sys
import time
from pathlib import Path

from .connect import interrupt_all, is_connect, remote_session
from .jars import DELTA_PACKAGE, fetched_jars  # DELTA_PACKAGE: callers import it from here

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
# s3a://, where scripts/setup.sh's jars are not there (an installed package): Spark resolves it and the AWS SDK
# bundle it names from Maven Central; the version scripts/setup.sh fetches.
S3_PACKAGE = "org.apache.hadoop:hadoop-aws:3.4.1"


def delta_jars() -> list[str]:
    """The Delta jars a session and a ``spark-submit`` are given: those LAKESTATE_JARS names (comma-separated),
    else scripts/setup.sh's in a checkout's .cache/jars, else those ``lakestate jars`` fetched into this machine's
    cache (``jars.fetched_jars``); none (Spark then resolves ``DELTA_PACKAGE`` through Ivy at every start) for an
    installed package on a machine where ``lakestate jars`` has not run."""
    if os.environ.get("LAKESTATE_JARS"):
        return [j for j in os.environ["LAKESTATE_JARS"].split(",") if j]
    return sorted(glob.glob(str(PROJECT_ROOT / ".cache" / "jars" / "*.jar"))) or fetched_jars()


def s3_jars() -> list[str]:
    """hadoop-aws and the AWS SDK bundle (scripts/setup.sh fetches them), for ``s3a://`` paths."""
    return sorted(glob.glob(str(PROJECT_ROOT / ".cache" / "jars-s3" / "*.jar")))


def jars_conf(jars: list[str]) -> dict[str, str]:
    """How a session or a ``spark-submit`` is given ``jars``: shipped (``spark.jars``: each application's executors
    copy them into their work folders, the S3 SDK bundle's 560 MB too), or, with ``LAKESTATE_JARS_ON_WORKERS=1``,
    put on the driver's and the executors' class path and copied nowhere: for a cluster whose machines all have
    them at the same paths (docker/'s image, scripts/spark-cluster.sh's workers on this machine)."""
    on_workers = os.environ.get("LAKESTATE_JARS_ON_WORKERS", "")
    if on_workers not in ("", "0", "1"):
        from ..errors import ConfigError

        raise ConfigError(f"LAKESTATE_JARS_ON_WORKERS must be 1 (the jars are at the same paths on every machine of "
                          f"the cluster) or 0 (ship them to each executor), got {on_workers!r}")
    if not jars:
        return {}
    if on_workers == "1":
        path = os.pathsep.join(jars)
        return {"spark.driver.extraClassPath": path, "spark.executor.extraClassPath": path}
    return {"spark.jars": ",".join(jars)}


def delta_submit_args(jars: str | None, packages: str | None) -> tuple[str | None, str | None]:
    """``(jars, packages)`` for spark-submit: the caller's, plus the Delta jars (``delta_jars``, with the S3 jars
    when the warehouse is on ``s3a://``); where they are not on this machine (an installed package where
    ``lakestate jars`` has not run, no checkout and no ``$LAKESTATE_JARS``), their Maven coordinates, which Spark
    resolves through Ivy at every submit (from Maven Central the first time; ~/.ivy2 caches them)."""
    found = delta_jars()
    s3 = wants_s3()
    if s3 and not any("hadoop-aws" in j for j in found):
        found += s3_jars()
    jars = jars or ",".join(found) or None
    wanted = [DELTA_PACKAGE] if "delta-spark" not in (jars or "") else []
    if s3 and "hadoop-aws" not in (jars or ""):
        wanted.append(S3_PACKAGE)
    if wanted:
        packages = ",".join([p for p in (packages or "").split(",") if p] + wanted)
    return jars, packages


def wants_s3() -> bool:
    """Whether this process reaches object storage: a configured root, warehouse or savepoint root on
    ``s3a://``, or ``LAKESTATE_S3=1`` (set it when only a later call names an ``s3a://`` path)."""
    from ..storage import is_remote

    return os.environ.get("LAKESTATE_S3") == "1" or any(
        is_remote(os.environ.get(v, "")) for v in ("LAKESTATE_ROOT", "LAKESTATE_WAREHOUSE", "LAKESTATE_SAVEPOINTS"))


def configure_s3(spark, options=None) -> None:
    """Point Spark's ``s3a://`` at the store ``options`` (default: the AWS environment variables) name, as
    Lakestate's own file operations reach it (``storage.S3Options``). Takes effect for file systems opened
    afterwards, so it can be called on a running session."""
    from ..storage import S3Options

    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in (options or S3Options.from_env()).spark_conf().items():
        conf.set(key, value)


def spark_defaults() -> dict[str, str]:
    """The properties of the ``spark-defaults.conf`` that ``spark-submit`` reads: ``$SPARK_CONF_DIR``'s, else
    ``$SPARK_HOME/conf``'s (``SPARK_HOME`` unset: PySpark's own folder, as ``spark-submit`` takes it); none when
    there is no such file. Lines are ``key value`` (or ``key=value``); ``#`` starts a comment."""
    folder = os.environ.get("SPARK_CONF_DIR")
    if not folder:
        home = os.environ.get("SPARK_HOME")
        if not home:
            import importlib.util

            spec = importlib.util.find_spec("pyspark")
            home = str(Path(spec.origin).parent) if spec and spec.origin else ""
        folder = os.path.join(home, "conf") if home else ""
    path = Path(folder) / "spark-defaults.conf" if folder else None
    if path is None or not path.is_file():
        return {}
    found = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        # As java.util.Properties reads it: the key ends at the first blank, '=' or ':'.
        match = re.match(r"([^\s=:]+)\s*[=:]?\s*(.*)", line)
        if match:
            found[match[1]] = match[2]
    return found


def spark_master(explicit: str | None = None) -> str:
    """The master a Spark of this process starts on: ``explicit`` (``--spark-master``), else
    ``$LAKESTATE_SPARK_MASTER``, else ``spark.master`` of ``spark-defaults.conf`` (``spark_defaults``), else
    ``local[*]``."""
    return explicit or os.environ.get("LAKESTATE_SPARK_MASTER") or spark_defaults().get("spark.master") or "local[*]"


def session_conf(pythonpath: str) -> dict[str, str]:
    """The confs of a classic session (scripts/spark-connect.sh gives its server the same)."""
    return {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        "spark.executorEnv.PYTHONPATH": pythonpath,
        # pyspark's daemon on a path without Spark's archives, the run's modules imported before it forks.
        "spark.python.daemon.module": "state_store.spark.worker_daemon",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.adaptive.enabled": "true",
        # Smaller than snappy at about its speed; the subtasks write their files with it too (run_files).
        "spark.sql.parquet.compression.codec": "zstd",
        # PySpark's call-site capture for error contexts: a Python stack walk and five JVM calls around every
        # Column function; a run's pass is built of some 200 of them (Lakestate's errors say where they were).
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # No byte limit on the Arrow batches sent to Python (the row limit, 10,000, stays): with one, Spark 4.0
        # measures the batch being built after every row, its struct columns' buffers walked each time; a
        # quarter of the JVM's time in a vectorised run's pass. As Spark 3.5 did; a job whose state values run to
        # megabytes lowers spark.sql.execution.arrow.maxRecordsPerBatch instead.
        "spark.sql.execution.arrow.maxBytesPerBatch": "2147483647",
    }


def build_spark(app_name: str = "lakestate", master: str | None = None, extra_conf: dict | None = None,
                s3: bool | None = None, remote: str | None = None, job_id: str | None = None):
    """A SparkSession with Delta Lake, Python workers on this interpreter, small shuffles; with ``s3`` (default:
    ``wants_s3()``) it reaches ``s3a://`` too. With ``remote`` (``sc://HOST:PORT``), a Spark Connect session on
    that server instead (``connect.remote_session``, in the session of ``job_id``'s runs when given;
    scripts/spark-connect.sh starts one)."""
    from pyspark.sql import SparkSession

    if remote:
        return remote_session(remote, wants_s3() if s3 is None else s3, job_id)

    # Process set-up, kept in the environment: PySpark takes its workers' interpreter only from PYSPARK_PYTHON
    # (no Spark conf sets it for a session started in-process). Defaults only: a caller's choice stands.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Workers import state_store and the user's job modules from the project root: given to them by the
    # executors' environment (spark.executorEnv.PYTHONPATH), not by this process's.
    paths = [str(PROJECT_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    pythonpath = os.pathsep.join(dict.fromkeys(paths))

    builder = SparkSession.builder.appName(app_name)
    # Under spark-submit (which sets PYSPARK_GATEWAY_PORT) the master comes from --master (or spark-defaults).
    if master or "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master(spark_master(master))
    s3 = wants_s3() if s3 is None else s3
    conf = session_conf(pythonpath)
    jars = delta_jars()
    if not jars:
        conf["spark.jars.packages"] = DELTA_PACKAGE
    if s3 and not any("hadoop-aws" in j for j in jars):
        if not s3_jars():
            from ..errors import ConfigError

            raise ConfigError("s3a:// needs the hadoop-aws jars: run scripts/setup.sh (it fetches them into "
                              ".cache/jars-s3), or add them to LAKESTATE_JARS")
        jars += s3_jars()
    conf.update(jars_conf(jars))
    for k, v in {**conf, **(extra_conf or {})}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    if s3:
        configure_s3(spark)
    spark.sparkContext.setLogLevel(os.environ.get("LAKESTATE_SPARK_LOG_LEVEL", "ERROR"))
    return spark


_DDL_SCHEMAS: dict = {}  # DDL -> its StructType (``ddl_schema``)


def ddl_schema(spark, ddl: str):
    """The StructType of a DDL string, as Spark parses it; kept per DDL (parsing it takes some hundred JVM calls,
    and the same few DDLs come back at every table a run creates or checks)."""
    schema = _DDL_SCHEMAS.get(ddl)
    if schema is None:
        schema = _DDL_SCHEMAS[ddl] = spark.createDataFrame([], ddl).schema
    return schema


def wait_for_running_tasks(spark, seconds: float = 60.0) -> None:
    """After a failed pass, let Spark stop its other tasks first: one still running could write a file after
    the run removed its uncommitted ones. An aborted stage leaves the active list before its other tasks are
    killed, so the executors' running tasks are waited for too, then Spark's grace for a killed task's
    Python worker (``spark.python.task.killTimeout``), which may still be writing. A Spark Connect session
    cannot see the server's tasks: it asks the server to interrupt its operations (unless the server is gone),
    then waits out the grace."""
    if is_connect(spark):
        interrupt_all(spark)
        time.sleep(min(2.0, seconds))
        return
    sc, deadline = spark.sparkContext, time.time() + seconds
    tracker, executors = sc.statusTracker(), sc._jsc.sc().statusTracker()
    while (tracker.getActiveStageIds() or any(e.numRunningTasks() for e in executors.getExecutorInfos())) \
            and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(min(2.0, max(0.0, deadline - time.time())))
