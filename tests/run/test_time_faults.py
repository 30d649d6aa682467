"""Exactly once with time: a crash at each fault point, and a ``kill -9`` of ``spark-submit`` mid-run, then a
rerun, give the sink, side output and state (timers and the watermark's union state included) of a clean run."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyspark
import pytest

from state_store.cli import main as lakestate
from state_store.run.runtime import FaultInjector, InjectedFault
from state_store.spark.session import PROJECT_ROOT, delta_jars
from tests.support.helpers import run, sink_rows, state_at_latest_checkpoint
from tests.support.lake import Lake
from tests.support.time_jobs import session_input, sessions_job, side_rows

JOB = "timed-eo"


def _outcome(spark, lake):
    spec = sessions_job(lake, job_id=JOB)
    return sink_rows(spark, lake, spec), side_rows(spark, lake, spec), state_at_latest_checkpoint(spark, lake, spec)


@pytest.fixture(scope="module")
def reference(spark, tmp_path_factory):
    lake = Lake(tmp_path_factory.mktemp("clean"))
    session_input(lake)
    run(spark, sessions_job(lake, job_id=JOB), lake)
    return _outcome(spark, lake)


# The points where an event-time run's durable state is its own: the watermark pinned in the plan, the side
# outputs committed with the sink, the timers and watermark state written. The others: test_exactly_once[point].
TIME_POINTS = ("after_plan", "after_sink_write", "after_state_write")


@pytest.mark.parametrize("point", TIME_POINTS)
def test_a_crash_at_each_fault_point_then_a_rerun_equals_a_clean_run(spark, lake, reference, point):
    session_input(lake)
    spec = sessions_job(lake, job_id=JOB)
    with pytest.raises(InjectedFault):
        run(spark, spec, lake, faults=FaultInjector(point, batch_id=1))
    run(spark, spec, lake)
    assert _outcome(spark, lake) == reference


@pytest.mark.e2e
def test_kill_9_of_spark_submit_mid_run_then_a_rerun_equals_a_clean_run(spark, tmp_path, reference):
    lake = Lake(tmp_path)
    session_input(lake)
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "timed_job.py").write_text(textwrap.dedent(f"""
        from pathlib import Path
        from tests.support.time_jobs import sessions_job

        class _Lake:
            events = Path({str(lake.events)!r})

        def job():
            return sessions_job(_Lake, job_id={JOB!r})
    """))
    sys.path.insert(0, str(modules))
    try:
        assert lakestate(["register", "timed_job:job", "--root", str(lake.root)]) == 0
    finally:
        sys.path.remove(str(modules))
        sys.modules.pop("timed_job", None)
    env = {**os.environ, "LAKESTATE_ROOT": str(lake.root),
           "PYTHONPATH": os.pathsep.join([str(modules), str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")])}
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    log = open(tmp_path / "spark-submit.log", "w")
    process = subprocess.Popen(
        [str(spark_submit), "--master", "local[2]", "--jars", ",".join(delta_jars()),
         "--conf", "spark.ui.enabled=false", str(PROJECT_ROOT / "jobs" / "run_microbatches.py"),
         "--job", JOB, "--root", str(lake.root)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    side_log = (lake.settings.in_warehouse(sessions_job(lake, job_id=JOB).side_output_sink("late"), "sink")
                / "_delta_log")
    deadline = time.time() + 300
    while not (side_log.is_dir() and any(p.suffix == ".json" for p in side_log.iterdir())):  # mid-commit
        assert process.poll() is None, f"spark-submit ended before its side output commit: see {log.name}"
        assert time.time() < deadline, "spark-submit never wrote its side output"
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait(60) == -signal.SIGKILL, "the run had already finished: the kill proved nothing"
    run(spark, sessions_job(lake, job_id=JOB), lake, lease_wait_s=20)
    # The killed run planned with the wall clock, the reference with the tests' fixed one: only the processing
    # time the watermark's state keeps (of the last input, for idleness) may differ.
    assert _without_processing_time(_outcome(spark, lake)) == _without_processing_time(reference)


def _without_processing_time(outcome):
    sink, side, (keyed, operator) = outcome
    operator = [(n, s, m, re.sub(r'"input_ms": \d+', '"input_ms": _', v) if n == "__source__.watermark" else v)
                for n, s, m, v in operator]
    return sink, side, (keyed, operator)
