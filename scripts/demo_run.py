"""A real DAG run for the demo: ``python scripts/demo_run.py DAG_ID [CONF_JSON]``.

Triggers the DAG as ``airflow dags trigger`` does (unpaused first, once the DAG processor has parsed it) and waits
for the running scheduler (``scripts/airflow-ui.sh``) to finish the run, so the UI shows it with its task logs, as
it shows any run. Prints Lakestate's progress lines from the task logs and where the logs are; exits 1 when the run
fails or does not finish in ``DEMO_RUN_TIMEOUT`` seconds (default 1800).
"""
from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path

FINISHED = ("success", "failed")
# This process only triggers and waits: Airflow's info lines and deprecation warnings would bury the demo's own.
os.environ["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "WARNING"
warnings.simplefilter("ignore")


def _wait_for_dag(dag_id: str, timeout_s: float = 180) -> None:
    """Until the DAG processor has written the DAG to the database; then unpause it (a paused DAG's run stays
    queued)."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    deadline = time.monotonic() + timeout_s
    while True:
        with create_session() as session:
            dag = session.get(DagModel, dag_id)
            if dag is not None and not dag.is_stale:
                if dag.is_paused:
                    dag.is_paused = False
                return
        if time.monotonic() > deadline:
            sys.exit(f"[demo] DAG {dag_id} was not parsed in {timeout_s:.0f} s: see the DAG processor's log in "
                     f"{os.environ['AIRFLOW_HOME']}/standalone.log")
        time.sleep(1)


def _wait_for_run(dag_id: str, run_id: str, timeout_s: float) -> str:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with create_session() as session:
            run = session.query(DagRun).filter_by(dag_id=dag_id, run_id=run_id).one()
            if run.state in FINISHED:
                return run.state
        time.sleep(2)
    return "not finished"


def _lakestate_lines(log: Path) -> list[str]:
    """Lakestate's own progress lines of a task log (Airflow 3 writes one JSON object a line)."""
    lines = []
    for raw in log.read_text(errors="replace").splitlines():
        try:
            event = str(json.loads(raw).get("event", ""))
        except (ValueError, AttributeError):
            event = raw
        at = event.find("[lakestate] ")
        if at >= 0:
            lines.append(event[at:])
    return lines


def main() -> int:
    dag_id, conf = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else None
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.utils.types import DagRunTriggeredByType

    _wait_for_dag(dag_id)
    run_id = f"demo__{time.strftime('%Y-%m-%dT%H:%M:%S')}"
    started = time.monotonic()
    trigger_dag(dag_id, run_id=run_id, conf=conf, triggered_by=DagRunTriggeredByType.CLI,
                triggering_user_name="demo")
    print(f"[demo] triggered {dag_id} run {run_id}{' with ' + json.dumps(conf) if conf else ''}", flush=True)
    state = _wait_for_run(dag_id, run_id, float(os.environ.get("DEMO_RUN_TIMEOUT", 1800)))
    logs = Path(os.environ["AIRFLOW_HOME"], "logs", f"dag_id={dag_id}", f"run_id={run_id}")
    for log in sorted(logs.glob("task_id=*/**/attempt=*.log"), key=lambda p: p.stat().st_mtime):  # tasks' order
        for line in _lakestate_lines(log):
            print(line)
    print(f"[demo] {dag_id} run {run_id}: {state} in {time.monotonic() - started:.0f} s (task logs: {logs})",
          flush=True)
    return 0 if state == "success" else 1


if __name__ == "__main__":
    sys.exit(main())
