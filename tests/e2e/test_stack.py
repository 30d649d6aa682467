"""The pinned stack works together: full pyspark (not clobbered by pyspark-client), Delta, and
pandas/pyarrow with applyInPandasWithState (pyarrow 26 breaks it on PySpark 4.0.1)."""
from __future__ import annotations

import pandas as pd
import pyarrow
import pyspark
from pyspark.sql.streaming.state import GroupStateTimeout


def test_pinned_versions_are_the_ones_installed():
    pins = {}
    from state_store.spark.session import PROJECT_ROOT

    for line in (PROJECT_ROOT / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.strip()] = version.strip()
    assert pyspark.__version__ == pins["pyspark"]
    assert pyarrow.__version__ == pins["pyarrow"]
    assert pd.__version__ == pins["pandas"]


def test_apply_in_pandas_with_state_runs_with_the_pinned_pandas_and_pyarrow(spark, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    (source / "a.json").write_text('{"k": "x"}\n{"k": "x"}\n{"k": "y"}\n')

    def count(key, frames, state):
        n = (state.get[0] if state.exists else 0) + sum(len(f) for f in frames)
        state.update((n,))
        yield pd.DataFrame({"k": [key[0]], "n": [n]})

    stream = spark.readStream.schema("k string").json(str(source))
    out = stream.groupBy("k").applyInPandasWithState(count, "k string, n long", "n long", "Update",
                                                     GroupStateTimeout.NoTimeout)
    query = (out.writeStream.format("memory").queryName("stack_counts").outputMode("update")
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
    query.awaitTermination()
    assert sorted(map(tuple, spark.sql("SELECT k, n FROM stack_counts").collect())) == [("x", 2), ("y", 1)]


def test_delta_reads_back_what_it_wrote(spark, tmp_path):
    path = str(tmp_path / "t")
    spark.range(5).write.format("delta").save(path)
    assert spark.read.format("delta").load(path).count() == 5


def test_python_workers_run_without_sparks_archives_on_their_path_and_start_warm(spark):
    """Lakestate's worker daemon (state_store/spark/worker_daemon.py): pyspark and py4j come from the install, not
    from pyspark.zip, py4j-*.zip or the spark-core jar (which a task's invalidate_caches would read again),
    and a worker has the run's modules before its task imports them."""
    from tests.support.worker_probe import worker_path

    row = spark.range(1).mapInArrow(worker_path, "path string, modules string, seconds double").collect()[0]
    path = row["path"].split("\n")
    assert not [p for p in path if p.endswith((".zip", ".jar")) and ("pyspark" in p or "py4j" in p or "spark-" in p)]
    assert {"state_store.subtask.reader", "pyarrow.parquet", "orjson", "pandas"} <= set(row["modules"].split())


def test_the_worker_daemon_keeps_the_archives_when_pyspark_is_only_in_them(tmp_path):
    from state_store.spark.worker_daemon import lean_path

    archive = str(tmp_path / "python" / "lib" / "pyspark.zip")
    assert lean_path([archive, str(tmp_path)]) == [archive, str(tmp_path)]  # nothing else has pyspark
    import sys

    with_install = [archive] + sys.path
    assert lean_path(with_install) == sys.path


def test_the_spark_connect_server_gets_the_confs_of_a_classic_session():
    """scripts/spark-connect.sh repeats state_store/spark/session.py's session confs as server confs (its sessions
    inherit them): each one is there with the same value."""
    from pathlib import Path

    from state_store.spark.session import session_conf

    script = (Path(__file__).resolve().parents[2] / "scripts" / "spark-connect.sh").read_text()
    missing = [f"{k}={v}" for k, v in session_conf("").items()
               if k != "spark.executorEnv.PYTHONPATH" and f"{k}={v}" not in script]
    assert not missing, f"scripts/spark-connect.sh lacks {missing}"
    assert '"spark.executorEnv.PYTHONPATH=$PYTHONPATH_WORKERS"' in script
