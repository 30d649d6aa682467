"""Airflow: Lakestate's operators in DAGs of one's own (docs: operating/operators-in-your-dags.md).

- ``example_lakestate_after_upstream``: an upstream task lands a file of clicks, then the registry's job
  ``clicks`` runs: ``LakestateLeaseSensor`` waits while another run, savepoint, rescale or compaction holds the
  job (without a worker slot), ``LakestateSubmitOperator`` submits one run (its XCom: the run's summary) and gives
  the job's sink Asset an event (its ``extra``: the same summary), and each of its side outputs' Assets one (the
  operator adds them to the outlets it is given, once the job is registered).
- ``example_lakestate_on_asset``: scheduled on that Asset, it runs the job ``sessions`` after each run of
  ``clicks`` that wrote its sink (a producer elsewhere, another DAG or ``lakestate_clicks``, triggers it too).

This file is outside ``dags/``: Airflow does not load it unless it is copied into the DAGs folder. Copy it, name
your own jobs (entries of the pipeline registry, ``$LAKESTATE_REGISTRY``) and your own upstream task. The workers
need the environment the docs list (get-started/install.md): ``LAKESTATE_REGISTRY``, an absolute
``LAKESTATE_ROOT``, the jobs' modules on ``PYTHONPATH``, ``spark-submit`` on ``PATH``.
"""
from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG, Asset, task

from state_store.provider.operators import LakestateLeaseSensor, LakestateSubmitOperator

# Read when the file is parsed; the run task passes it to `lakestate run --registry`, so it must be absolute.
REGISTRY = os.environ.get("LAKESTATE_REGISTRY", "/path/to/lakestate.toml")
# A job's sink Asset, as the pipeline DAG `lakestate_<job>` names it: one Asset whoever runs the job.
CLICKS_SINK = Asset(name="lakestate-clicks-sink", uri="lakestate://clicks/sink")
SESSIONS_SINK = Asset(name="lakestate-sessions-sink", uri="lakestate://sessions/sink")


with DAG("example_lakestate_after_upstream", schedule=None, start_date=datetime(2025, 1, 1), catchup=False,
         max_active_runs=1, tags=["lakestate", "example"]):

    @task
    def land_clicks() -> str:
        """The upstream task: here one Parquet file of the demo's clicks in the job's input folder (the job reads
        each new file once); in a real DAG, whatever lands the job's input."""
        from pathlib import Path

        from demo.generate import write_events, write_rules

        inputs = Path(os.environ["LAKESTATE_ROOT"]) / "input"
        write_rules(inputs / "rules")
        (path,) = write_events(inputs / "clicks", files=1, events=200, keys=50)
        return str(path)

    wait = LakestateLeaseSensor(task_id="wait_for_lease", job_id="clicks")
    run = LakestateSubmitOperator(task_id="run", job_id="clicks", registry=REGISTRY, outlets=[CLICKS_SINK])
    land_clicks() >> wait >> run


with DAG("example_lakestate_on_asset", schedule=[CLICKS_SINK], start_date=datetime(2025, 1, 1), catchup=False,
         max_active_runs=1, tags=["lakestate", "example"]):
    LakestateLeaseSensor(task_id="wait_for_lease", job_id="sessions") >> LakestateSubmitOperator(
        task_id="run", job_id="sessions", registry=REGISTRY, outlets=[SESSIONS_SINK])
