"""One pipeline DAG per entry of the pipeline registry (``lakestate.toml``, or ``$LAKESTATE_REGISTRY``).

Each DAG run submits the job's run with the Spark provider (``LakestateSubmitOperator``), then does
checkpoint housekeeping. Runs of a job never overlap (``max_active_runs=1``, and the run waits for the job's
lease). The job's sink is the DAG's Asset, and so is each of its side outputs once the job is registered (its
first run registers it), so downstream DAGs can be scheduled on them. A bad registry entry
shows as this file's import error naming its field; the other entries' DAGs still load. A registry that is not
valid TOML is this file's import error naming its line, and no pipeline DAG loads (the operation DAGs do).
"""
from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, task
from lakestate.operators import LakestateSubmitOperator

from state_store.catalog import registered_side_outputs
from state_store.pipelines import PipelineEntry, load_registry, registry_path

REGISTRY = registry_path()


def sink_asset(job_id: str) -> Asset:
    return Asset(name=f"lakestate-{job_id}-sink", uri=f"lakestate://{job_id}/sink")


def side_output_asset(job_id: str, tag: str) -> Asset:
    return Asset(name=f"lakestate-{job_id}-side-{tag}", uri=f"lakestate://{job_id}/side/{tag}")


def pipeline_dag(entry: PipelineEntry) -> DAG:
    with DAG(entry.dag_id, schedule=entry.schedule, start_date=datetime(2026, 1, 1), catchup=False,
             max_active_runs=1, tags=["lakestate"], default_args={"retries": 1, "retry_delay": timedelta(seconds=30)},
             description=f"Lakestate job {entry.job_id} ({entry.entrypoint})",
             doc_md=f"Runs Lakestate job `{entry.job_id}` from `{REGISTRY}`, then checkpoint housekeeping.") as dag:
        run = LakestateSubmitOperator(task_id="run", job_id=entry.job_id, registry=str(REGISTRY),
                                      outlets=[sink_asset(entry.job_id)] + [
                                          side_output_asset(entry.job_id, tag)
                                          for tag in registered_side_outputs(entry.job_id)])

        @task(task_id="housekeeping")
        def housekeeping(job_id: str) -> dict:
            from state_store.housekeeping import housekeeping as run_housekeeping

            return run_housekeeping(job_id)

        run >> housekeeping(entry.job_id)
    return dag


class BrokenEntry(DAG):
    """Stands for a bad registry entry: Airflow records its error as this file's import error."""

    def __init__(self, dag_id: str, error: str):
        super().__init__(dag_id, schedule=None)
        self.error = error

    def validate(self):
        raise ValueError(self.error)


entries, errors = load_registry(REGISTRY)
for _entry in entries.values():
    globals()[_entry.dag_id] = pipeline_dag(_entry)
for _job_id, _error in errors.items():
    globals()[f"lakestate_{_job_id}"] = BrokenEntry(f"lakestate_{_job_id}", _error)
