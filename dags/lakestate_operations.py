"""Operations on Lakestate jobs, triggered from the Airflow UI's trigger form with typed params.

- ``lakestate_savepoint``: job (one of the pipeline registry's), optional checkpoint id, optional label. The
  savepoint's path is in the task log and its XCom.
- ``lakestate_rescale``: job, new parallelism, savepoint first (on by default). The job is held meanwhile:
  its pipeline runs wait, none fails; the next one continues at the new parallelism. At the parallelism the
  job already has, the task writes nothing and succeeds saying so.
- ``lakestate_compaction`` (daily): one mapped task per registered job with a checkpoint, each compacting
  that job's state tables (``lakestate compact``) while its pipeline waits.

The jobs are the registry's good entries; when the registry is not valid TOML, those of its readable
``[jobs.<id>]`` headers, so these DAGs still load (the pipeline DAG file's import error names the bad line).
"""
from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param, task
from lakestate.operators import LakestateCompactOperator, LakestateRescaleOperator, LakestateSavepointOperator

from state_store.key_groups import UPPER_BOUND_MAX_PARALLELISM
from state_store.pipelines import declared_job_ids

JOBS = declared_job_ids()  # even when the registry does not parse, so one bad line does not take these DAGs away
COMMON = dict(schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["lakestate"], max_active_runs=1)


def job_param() -> Param:
    return Param(JOBS[0], type="string", enum=JOBS, title="Job", description="A job of the pipeline registry")


if JOBS:
    with DAG("lakestate_savepoint", description="Take a savepoint of a Lakestate job", params={
        "job": job_param(),
        "checkpoint": Param(None, type=["null", "integer"], minimum=1, title="Checkpoint",
                            description="A retained checkpoint id (empty: the latest)"),
        "label": Param(None, type=["null", "string"], pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$",
                       title="Label", description="The savepoint's name (empty: airflow-<run id>)"),
    }, doc_md=__doc__, **COMMON) as savepoint_dag:
        LakestateSavepointOperator(task_id="savepoint")

    with DAG("lakestate_rescale", description="Rescale a Lakestate job", params={
        "job": job_param(),
        "parallelism": Param(2, type="integer", minimum=1, maximum=UPPER_BOUND_MAX_PARALLELISM,
                             title="New parallelism", description="Within the job's max parallelism"),
        "savepoint_first": Param(True, type="boolean", title="Savepoint first",
                                 description="Take a savepoint of the latest checkpoint before rescaling"),
    }, doc_md=__doc__, **COMMON) as rescale_dag:
        LakestateRescaleOperator(task_id="rescale")

    with DAG("lakestate_compaction", description="Compact every Lakestate job's state tables",
             schedule="@daily", start_date=datetime(2026, 1, 1), catchup=False, tags=["lakestate"],
             max_active_runs=1, doc_md=__doc__) as compaction_dag:

        @task
        def jobs_with_checkpoints() -> list[str]:
            """The registered jobs that have a checkpoint (a job that never ran has nothing to compact)."""
            from state_store.job_store import JobStore
            from state_store.settings import Settings

            settings = Settings.load()
            return [j for j in JOBS if JobStore(settings.job_dir(j)).checkpoint_ids()]

        LakestateCompactOperator.partial(task_id="compact").expand(job=jobs_with_checkpoints())
