"""``kill -9`` of a ``spark-submit`` run at a moment of its protocol: what test_kill and test_kafka share."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyspark

from state_store.cli import main as lakestate
from state_store.spark.session import PROJECT_ROOT, delta_jars

# In the killed run only (its environment sets KILL_TEST_WINDOW): each commit of the sink and of the state tables
# is followed by a pause, a window for the kill to land in before the checkpoint. A run's commits and checkpoint
# take milliseconds (delta-rs), which a poll of the folders would miss: the run would be done before the kill.
SLOW_COMMITS = """
import os
import time

if os.environ.get("KILL_TEST_WINDOW"):
    import state_store.delta.backends as _backends
    import state_store.delta.state_tables as _tables

    def _paused(commit):
        def paused(*args, **kwargs):
            result = commit(*args, **kwargs)
            time.sleep(float(os.environ["KILL_TEST_WINDOW"]))
            return result
        return paused

    _tables.commit_files = _paused(_tables.commit_files)  # the sink's commit (DeltaSink.commit imports it when called)
    _backends.commit_state_files = _paused(_backends.commit_state_files)
"""

MOMENTS = ("plans_written", "sink_committed", "state_committed", "first_checkpoint_written")


def register_module(lake, module_dir: Path, module: str) -> None:
    """Register ``<module_dir>/<module>.py``'s ``job`` (with the slow commits appended) in ``lake``."""
    with open(module_dir / f"{module}.py", "a") as text:
        text.write(SLOW_COMMITS)
    sys.path.insert(0, str(module_dir))
    try:
        assert lakestate(["register", f"{module}:job", "--root", str(lake.root)]) == 0
    finally:
        sys.path.remove(str(module_dir))
        sys.modules.pop(module, None)


def moment_reached(lake, job_id: str, moment: str) -> bool:
    job_dir = lake.settings.job_dir(job_id)
    where = {
        "plans_written": job_dir / "_meta" / "plans",
        "sink_committed": lake.settings.warehouse / "sinks" / job_id / "_delta_log",
        "state_committed": job_dir / "state" / "keyed" / "_delta_log",
        "first_checkpoint_written": job_dir / "_meta" / "checkpoints",
    }[moment]
    return where.is_dir() and any(p.suffix == ".json" and not p.name.startswith(".") for p in where.iterdir())


def kill_spark_submit_at(lake, job_id: str, moment: str, module_dir: Path, log_path: Path) -> None:
    """Submit the registered job's run with ``spark-submit`` and ``kill -9`` its process group at ``moment``;
    fail if the run ended before it (the kill would prove nothing)."""
    env = {**os.environ, "LAKESTATE_ROOT": str(lake.root), "KILL_TEST_WINDOW": "3",
           "PYTHONPATH": os.pathsep.join([str(module_dir), str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")])}
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [str(spark_submit), "--master", "local[2]", "--jars", ",".join(delta_jars()), "--conf",
             "spark.ui.enabled=false", str(PROJECT_ROOT / "jobs" / "run_microbatches.py"), "--job", job_id,
             "--root", str(lake.root)],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 300
        while not moment_reached(lake, job_id, moment):
            assert process.poll() is None, f"spark-submit ended before {moment}: see {log_path}"
            assert time.time() < deadline, f"spark-submit never reached {moment}"
            time.sleep(0.02)
        os.killpg(process.pid, signal.SIGKILL)
        assert process.wait(60) == -signal.SIGKILL, "the run had already finished: the kill proved nothing"


def kill_job_of(lake, tmp_path: Path, job_id: str, job_module: str, moment: str = "state_committed") -> None:
    """Register ``job_module`` (a module's text defining ``job()``) in ``lake`` from a folder under ``tmp_path``
    and ``kill -9`` its run's spark-submit at ``moment`` (``kill_spark_submit_at``)."""
    modules = tmp_path / "modules"
    modules.mkdir(exist_ok=True)
    name = job_id.replace("-", "_") + "_killed"
    (modules / f"{name}.py").write_text(job_module)
    register_module(lake, modules, name)
    kill_spark_submit_at(lake, job_id, moment, modules, tmp_path / "spark-submit.log")
