"""The DAGs Lakestate gives Airflow, built from the pipeline registry (``lakestate.toml``, or
``$LAKESTATE_REGISTRY``). A DAG file holds two lines (``dags/lakestate_pipelines.py``,
``dags/lakestate_operations.py``)::

    from state_store.provider.dags import pipeline_dags
    globals().update(pipeline_dags())

Pipelines, one DAG per registry entry: each run submits the job's run with the Spark provider
(``LakestateSubmitOperator``), then does checkpoint housekeeping. Runs of a job never overlap
(``max_active_runs=1``, and the run waits for the job's lease). The job's sink is the DAG's Asset, and so is each
of its side outputs once the job is registered (its first run registers it), so downstream DAGs can be scheduled
on them. A bad registry entry shows as the DAG file's import error naming its field; the other entries' DAGs still
load. A registry that is not valid TOML is the file's import error naming its line, and no pipeline DAG loads
(the operation DAGs do).

Operations, triggered from the Airflow UI's trigger form with typed params:

- ``lakestate_savepoint``: job (one of the pipeline registry's), optional checkpoint id, optional label. The
  savepoint's path is in the task log and its XCom.
- ``lakestate_rescale``: job, new parallelism, savepoint first (on by default). The job is held meanwhile:
  its pipeline runs wait, none fails; the next one continues at the new parallelism. At the parallelism the
  job already has, the task writes nothing and succeeds saying so.
- ``lakestate_compaction`` (daily): one mapped task per registered job with a checkpoint, each compacting
  that job's state tables (``lakestate compact``) while its pipeline waits.

The operations' jobs are the registry's good entries; when the registry is not valid TOML, those of its readable
``[jobs.<id>]`` headers, so these DAGs still load.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, Param, task

from state_store.catalog import registered_side_outputs
from state_store.key_groups import UPPER_BOUND_MAX_PARALLELISM
from state_store.pipelines import PipelineEntry, declared_job_ids, load_registry, registry_path
from state_store.provider.operators import (LakestateCompactOperator, LakestateRescaleOperator,
                                            LakestateSavepointOperator, LakestateSubmitOperator)

START = datetime(2026, 1, 1)


def sink_asset(job_id: str) -> Asset:
    return Asset(name=f"lakestate-{job_id}-sink", uri=f"lakestate://{job_id}/sink")


def side_output_asset(job_id: str, tag: str) -> Asset:
    return Asset(name=f"lakestate-{job_id}-side-{tag}", uri=f"lakestate://{job_id}/side/{tag}")


def pipeline_dag(entry: PipelineEntry, registry) -> DAG:
    with DAG(entry.dag_id, schedule=entry.schedule, start_date=START, catchup=False,
             max_active_runs=1, tags=["lakestate"], default_args={"retries": 1, "retry_delay": timedelta(seconds=30)},
             description=f"Lakestate job {entry.job_id} ({entry.entrypoint})",
             doc_md=f"Runs Lakestate job `{entry.job_id}` from `{registry}`, then checkpoint housekeeping.") as dag:
        run = LakestateSubmitOperator(task_id="run", job_id=entry.job_id, registry=str(registry),
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
    """Stands for a bad registry entry: Airflow records its error as the DAG file's import error."""

    def __init__(self, dag_id: str, error: str):
        super().__init__(dag_id, schedule=None)
        self.error = error

    def validate(self):
        raise ValueError(self.error)


def pipeline_dags(registry=None) -> dict[str, DAG]:
    """One DAG per good entry of the registry, a ``BrokenEntry`` per bad one, by DAG id."""
    registry = registry or registry_path()
    entries, errors = load_registry(registry)
    dags: dict[str, DAG] = {entry.dag_id: pipeline_dag(entry, registry) for entry in entries.values()}
    for job_id, error in errors.items():
        dags[f"lakestate_{job_id}"] = BrokenEntry(f"lakestate_{job_id}", error)
    return dags


def operation_dags() -> dict[str, DAG]:
    """The savepoint, rescale and compaction DAGs, by DAG id (none while the registry names no job)."""
    jobs = declared_job_ids()  # even when the registry does not parse, so one bad line does not take these away
    if not jobs:
        return {}
    common = dict(schedule=None, start_date=START, catchup=False, tags=["lakestate"], max_active_runs=1)

    def job_param() -> Param:
        return Param(jobs[0], type="string", enum=jobs, title="Job", description="A job of the pipeline registry")

    with DAG("lakestate_savepoint", description="Take a savepoint of a Lakestate job", params={
        "job": job_param(),
        "checkpoint": Param(None, type=["null", "integer"], minimum=1, title="Checkpoint",
                            description="A retained checkpoint id (empty: the latest)"),
        "label": Param(None, type=["null", "string"], pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$",
                       title="Label", description="The savepoint's name (empty: airflow-<run id>)"),
    }, doc_md=__doc__, **common) as savepoint_dag:
        LakestateSavepointOperator(task_id="savepoint")

    with DAG("lakestate_rescale", description="Rescale a Lakestate job", params={
        "job": job_param(),
        "parallelism": Param(2, type="integer", minimum=1, maximum=UPPER_BOUND_MAX_PARALLELISM,
                             title="New parallelism", description="Within the job's max parallelism"),
        "savepoint_first": Param(True, type="boolean", title="Savepoint first",
                                 description="Take a savepoint of the latest checkpoint before rescaling"),
    }, doc_md=__doc__, **common) as rescale_dag:
        LakestateRescaleOperator(task_id="rescale")

    with DAG("lakestate_compaction", description="Compact every Lakestate job's state tables",
             schedule="@daily", start_date=START, catchup=False, tags=["lakestate"],
             max_active_runs=1, doc_md=__doc__) as compaction_dag:

        @task
        def jobs_with_checkpoints() -> list[str]:
            """The registered jobs that have a checkpoint (a job that never ran has nothing to compact)."""
            from state_store.job_store import JobStore
            from state_store.settings import Settings

            settings = Settings.load()
            return [j for j in jobs if JobStore(settings.job_dir(j)).checkpoint_ids()]

        LakestateCompactOperator.partial(task_id="compact").expand(job=jobs_with_checkpoints())
    return {d.dag_id: d for d in (savepoint_dag, rescale_dag, compaction_dag)}
