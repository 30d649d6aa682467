"""A run on a Spark standalone cluster (a master and a worker started here, on loopback) gives the
same sink and state as the same job on local[*] (DESIGN §6)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyspark
import pytest

from state_store.spark.session import PROJECT_ROOT, delta_jars
from tests.conftest import Lake
from tests.helpers import run, sink_rows, state_at_latest_checkpoint, write_job_module
from tests.jobs import all_states_job, events
from tests.ports import free_ports



def _wait_for_worker(ui_port: int, deadline_s: float = 90) -> None:
    end = time.time() + deadline_s
    while time.time() < end:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as r:
                if json.load(r).get("aliveworkers", 0) >= 1:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise TimeoutError("the standalone worker did not register with the master")


@pytest.fixture
def standalone_cluster(tmp_path):
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    port, ui_port, worker_ui = free_ports(3)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(tmp_path / "logs"),
           "SPARK_WORKER_DIR": str(tmp_path / "work")}
    logs = open(tmp_path / "cluster.log", "w")
    master = subprocess.Popen([str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui_port)], env=env, stdout=logs, stderr=logs)
    worker = subprocess.Popen([str(spark_class), "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                               "--host", "127.0.0.1", "--cores", "2", "--memory", "2g", "--webui-port", str(worker_ui),
                               "--work-dir", str(tmp_path / "work")], env=env, stdout=logs, stderr=logs)
    try:
        _wait_for_worker(ui_port)
        yield f"spark://127.0.0.1:{port}"
    finally:
        for p in (worker, master):
            p.terminate()
        for p in (worker, master):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        logs.close()


def test_a_run_on_a_standalone_cluster_equals_a_local_run(spark, tmp_path, standalone_cluster):
    on_cluster, local = Lake(tmp_path / "cluster"), Lake(tmp_path / "local")
    for lake in (on_cluster, local):
        lake.write_rules("r0.json", [{"name": "factor", "factor": 2}])
        for b in range(2):
            lake.write_events(f"e{b}.json", events(b))
    modules = tmp_path / "modules"
    modules.mkdir()
    write_job_module(modules, "cluster_job", on_cluster, "on-cluster")
    env = {**os.environ, "PYTHONPATH": f"{modules}{os.pathsep}{PROJECT_ROOT}",
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    root = ["--root", str(on_cluster.root)]
    subprocess.run([sys.executable, "-m", "state_store.cli", "register", "cluster_job:job", *root],
                   env=env, check=True, capture_output=True)
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    done = subprocess.run(
        [str(submit), "--master", standalone_cluster, "--jars", ",".join(delta_jars()),
         "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.executor.memory=1g",
         str(PROJECT_ROOT / "jobs" / "run_microbatches.py"), "--job", "on-cluster", *root],
        env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 microbatches" in done.stdout

    reference = all_states_job(local, job_id="on-cluster")
    run(spark, reference, local)
    spec = all_states_job(on_cluster, job_id="on-cluster")
    assert sink_rows(spark, on_cluster, spec) == sink_rows(spark, local, reference)
    assert state_at_latest_checkpoint(spark, on_cluster, spec) == state_at_latest_checkpoint(spark, local, reference)
