"""The DAGs Lakestate gives Airflow, built from the pipeline registry (``lakestate.toml``, or
``$LAKESTATE_REGISTRY``). A DAG file holds two lines (``dags/lakestate_pipelines.py``,
``dags/lakestate_operations.py``)::

    from state_store.provider.dags import pipeline_dags
    globals().update(pipeline_dags())

Pipelines, one DAG per registry entry: ``wait_for_lease`` (a sensor in reschedule mode: waiting for another
holder of the job takes no worker slot; once the job is free it holds it for ``run``, whose command takes it
over, so no other DAG's driver of the job starts meanwhile), ``run`` (the job's run through the Spark provider,
``LakestateSubmitOperator``; its XCom and its Asset events' ``extra`` are the run's summary), then checkpoint
housekeeping. Param ``max_microbatches`` caps one run (a catch-up run in steps); ``end_of_input`` ends the
inputs once drained (Flink's ``stop --drain``: every window and timer fires). Runs of a job never overlap
(``max_active_runs=1``). The job's sink is the DAG's Asset, and so is each of its side outputs once the job is
registered (its first run registers it), so downstream DAGs can be scheduled on them. A bad registry entry
shows as the DAG file's import error naming its field; the other entries' DAGs still load. A registry that is
not valid TOML is the file's import error naming its line, and no pipeline DAG loads (the operation DAGs do).

Operations, triggered from the Airflow UI's trigger form with typed params (each DAG's ``doc_md`` says its
params' limits): ``lakestate_savepoint``, ``lakestate_rescale``, ``lakestate_restore``, ``lakestate_dispose``
and the scheduled ``lakestate_compaction``. Savepoints are Assets (``lakestate://<job>/savepoints``), so a backup
DAG can be scheduled on them. The operations' jobs are the registry's good entries; when the registry is not
valid TOML, those of its readable ``[jobs.<id>]`` headers, so these DAGs still load. The rescale, restore and
dispose DAGs begin with ``approve``, which waits for a person's approval when the job's entry lists the
operation in ``require_approval``, or when the registry cannot tell (``provider/approval.py``). The compaction's
schedule is the registry's ``[compaction]`` table's (daily at 03:00 UTC without one); a bad table is the
operation DAG file's import error naming it, and the other operation DAGs still load.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task, task_group
from airflow.timetables.trigger import CronTriggerTimetable

from state_store.catalog.pipelines import (
    PipelineEntry,
    compaction_schedule,
    declared_job_ids,
    load_registry,
    registry_path,
    registry_text,
)
from state_store.errors import ConfigError
from state_store.key_groups import UPPER_BOUND_MAX_PARALLELISM
from state_store.provider.approval import LakestateApprovalOperator

# The Assets live beside the operator whose default outlets they are; imported from here too, as they were.
from state_store.provider.operators import (  # noqa: F401
    LakestateCompactOperator,
    LakestateLeaseSensor,
    LakestateRescaleOperator,
    LakestateRestoreOperator,
    LakestateSavepointOperator,
    LakestateSubmitOperator,
    branch_sink_asset,
    savepoints_asset,
    side_output_asset,
    sink_asset,
)
from state_store.restore_plan import restore_backends

START = datetime(2026, 1, 1)
PAGE = "[the Lakestate page](/lakestate/)"
LEASE_WAIT_S = 3600  # how long a run or an operation waits for another holder of its job (in reschedule mode)
LAST_WAIT_S = 300  # and then the submitted command, for a holder that came in between


def _pipeline_doc(entry: PipelineEntry, cap: str) -> str:
    """The pipeline DAG's docs (the UI renders them as Markdown): no path of the machine that parsed it."""
    return f"""Runs the Lakestate job **{entry.job_id}** ({entry.entrypoint}), as the pipeline registry defines it.

1. **wait_for_lease** waits, without a worker slot, until no other run or operation holds the job (up to
   {LEASE_WAIT_S // 60} minutes), and then holds it for the run.
2. **run** runs the job's pending microbatches.
3. **housekeeping** lists the retained checkpoints and removes what finished or killed runs left.

Param **Max microbatches**: 1 or more; empty for {cap}. A smaller number catches up in steps.
Param **End of input (drain)**: the run ends the job's inputs once it has drained them, as Flink's
`stop --drain`: the watermark goes to its end and every event-time window and timer fires; records that come
after are late.

The run's summary (microbatches, records in and out, checkpoints taken and retained, seconds, records/s) is the XCom of
**run** and the extra of its sink Asset's event; each side output's Asset event carries its own row count.
See {PAGE}."""


def pipeline_dag(entry: PipelineEntry, registry) -> DAG:
    """The pipeline DAG of registry entry ``entry`` (the registry file ``registry``): ``wait_for_lease``, ``run``
    and ``housekeeping`` on the entry's schedule, one run at a time (see the module docstring)."""
    cap = f"at most {entry.max_microbatches} (the registry's)" if entry.max_microbatches else "all pending"
    with DAG(entry.dag_id, schedule=entry.schedule, start_date=START, catchup=False,
             max_active_runs=1, tags=["lakestate"], default_args={"retries": 1, "retry_delay": timedelta(seconds=30)},
             description=f"Lakestate job {entry.job_id} ({entry.entrypoint})", params={
                 "max_microbatches": Param(None, type=["null", "integer"], **bounded(1), title="Max microbatches",
                                           description=f"Microbatches this run takes at most (empty: {cap}); "
                                                       f"a catch-up in steps"),
                 "end_of_input": Param(False, type="boolean", title="End of input (drain)",
                                       description="The inputs end here: once drained, the watermark goes to its "
                                                   "end, firing every window and timer (Flink's stop --drain); "
                                                   "later records are late"),
             }, doc_md=_pipeline_doc(entry, cap)) as dag:
        wait = LakestateLeaseSensor(task_id="wait_for_lease", job_id=entry.job_id, timeout=LEASE_WAIT_S,
                                    doc_md="Waits, in reschedule mode, until no other run or operation holds the job.")
        # Its outlets, by default: the job's sink, a graph's other sinks and each side output (once registered).
        run = LakestateSubmitOperator(task_id="run", job_id=entry.job_id, registry=str(registry),
                                      wait_for_lease_s=LAST_WAIT_S,
                                      doc_md="lakestate run: the job's pending microbatches; XCom: the summary.")

        @task(task_id="housekeeping", multiple_outputs=False, inlets=[savepoints_asset(entry.job_id)],
              doc_md="Lists the retained checkpoints (XCom) and removes what finished or killed runs left.")
        def housekeeping(job_id: str) -> dict:
            from state_store.ops.housekeeping import housekeeping as run_housekeeping

            return run_housekeeping(job_id)

        wait >> run >> housekeeping(entry.job_id)
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


def _parallelism_param() -> Param:
    """The rescale form's parallelism: no default (a rescale to a number nobody typed would be a surprise) and
    the widest bounds, ``bounded``'s, so a value typed out of range reaches the trigger, which refuses it (HTTP
    400 naming it and the bound) before a run exists; one above the job's own max fails the task at once. What
    a job runs at now is on the Lakestate page, not here: a param that said it would make every rescale a new
    version of the DAG."""
    return Param(type="integer", **bounded(1, UPPER_BOUND_MAX_PARALLELISM), title="New parallelism",
                 description="1 to the job's max parallelism (its key groups); the Lakestate page shows each job's "
                             "current and max")


def _savepoint_first_param() -> Param:
    """The rescale form's "Savepoint first". What one adds to a rescale changes with each savepoint, so the page
    says it (``views._rescale``), from the last savepoint task's duration; the param stays the same."""
    return Param(True, type="boolean", title="Savepoint first",
                 description="Take a savepoint of the latest checkpoint before rescaling; it adds about what a "
                             "savepoint task takes (the Lakestate page gives each job's last)")


def operation_dags(registry=None) -> dict[str, DAG]:
    """The savepoint, rescale, restore, dispose and compaction DAGs, by DAG id (none while the registry names no
    job). A bad ``[compaction]`` table makes the compaction DAG a ``BrokenEntry`` naming it; the others load."""
    registry = registry or registry_path()
    text = registry_text(registry)  # read once per parse: the jobs and the compaction's schedule both come from it
    jobs = declared_job_ids(registry, text)  # even when the registry does not parse: one bad line takes none away
    if not jobs:
        return {}
    dags = [_savepoint_dag(jobs), _rescale_dag(jobs), _restore_dag(jobs), _dispose_dag(jobs)]
    try:
        schedule = compaction_schedule(registry, text)
    except ConfigError as e:
        dags.append(BrokenEntry("lakestate_compaction", f"lakestate_compaction does not load: {e}"))
    else:
        dags.append(_compaction_dag(jobs, schedule))
    return {d.dag_id: d for d in dags}


def compaction_timetable(cron: str | None) -> CronTriggerTimetable | None:
    """The compaction DAG's timetable for the registry's ``[compaction]`` schedule (None: only triggered). A cron
    *trigger* timetable without a start date: unpausing the DAG schedules the cron's next time, not a run for the
    interval that has already passed (with a start date in the past, even without catchup, Airflow would start
    one at once, and a trigger by hand right after would compact a second time). run_immediately=timedelta(0):
    Airflow 3.1 reads run_immediately=False (its default) as "run the past time at once when unpaused within a
    tenth of the interval of it" (2.4 hours of the default 03:00), not as "never"."""
    return None if cron is None else CronTriggerTimetable(cron, timezone="UTC", run_immediately=timedelta(0))


def _when(cron: str | None) -> str:
    """The compaction's schedule in the words of its DAG's doc."""
    if cron is None:
        return "when triggered only"
    said = compaction_timetable(cron).description  # Airflow's own words: "At 03:00", "Every 5 minutes"
    return f"on the cron schedule `{cron}` ({said[:1].lower()}{said[1:]}, in UTC)" if said else f"on `{cron}` (UTC)"


COMMON = dict(schedule=None, start_date=START, catchup=False, tags=["lakestate"], max_active_runs=1)


def _wait_for_job() -> LakestateLeaseSensor:
    """An operation's wait for its job (``params.job``) to be free, without a worker slot."""
    return LakestateLeaseSensor(task_id="wait_for_lease", job_id="{{ params.job }}", timeout=LEASE_WAIT_S,
                                doc_md="Waits, in reschedule mode, until no run or operation holds the job.")


def bounded(minimum: int, maximum: int | None = None) -> dict:
    """A number param's bounds, as JSON schema's ``minimum``/``maximum`` under ``if``/``then`` (applied to an
    integer only). Not at the schema's top level on purpose: Airflow's trigger form reads those into its number
    field, which then clamps a typed value to a bound when the field is left (a typo of 100000 would trigger at
    the max without a word) and marks an empty optional field as an error (it reads empty as 0). Nested, the
    field takes what is typed and the trigger refuses it before a run exists: "0 is less than the minimum of 1"."""
    then = {"minimum": minimum} if maximum is None else {"minimum": minimum, "maximum": maximum}
    return {"if": {"type": "integer"}, "then": then}


def _whole(pattern: str) -> str:
    """A form pattern that matches the whole value in the browser (JavaScript) and in Airflow's check (Python's
    re.search, where "$" also matches before a final newline, so "label\\n" would pass and name a folder)."""
    return rf"^{pattern}(?![\s\S])"


def _job_param(jobs: list[str]) -> Param:
    return Param(jobs[0], type="string", enum=jobs, title="Job", description="A job of the pipeline registry")


def _savepoint_dag(jobs: list[str]) -> DAG:
    with DAG("lakestate_savepoint", description="Take a savepoint of a Lakestate job", params={
        "job": _job_param(jobs),
        "checkpoint": Param(None, type=["null", "integer"], **bounded(1), title="Checkpoint",
                            description="A retained checkpoint id (empty: the latest)"),
        "label": Param(None, type=["null", "string"], pattern=_whole(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}"),
                       title="Label", description="The savepoint's name: 1 to 64 letters, digits and _ . - (no space), "
                                                   "starting with a letter or digit; new for the job (empty: "
                                                   "airflow-<run id>)"),
    }, doc_md=f"""Takes a savepoint of a job (lakestate savepoint) once no run or operation holds it.

- **Job**: a job of the pipeline registry.
- **Checkpoint**: a retained checkpoint id, 1 or more; empty for the latest.
- **Label**: the savepoint's name, new for the job: 1 to 64 letters, digits and the marks _ . - (no space),
  starting with a letter or digit; empty for airflow-(the run id).

The savepoint's path is in the task log and its XCom, and the job's savepoints Asset gets an event.
See {PAGE}.""",
             **COMMON) as dag:
        _wait_for_job() >> LakestateSavepointOperator(task_id="savepoint", wait_for_lease_s=LAST_WAIT_S)
    return dag


def _rescale_dag(jobs: list[str]) -> DAG:
    with DAG("lakestate_rescale", description="Rescale a Lakestate job", params={
        "job": _job_param(jobs),
        "parallelism": _parallelism_param(),
        "savepoint_first": _savepoint_first_param(),
        "retain_savepoints": Param(None, type=["null", "integer"], **bounded(0), title="Rescale savepoints kept",
                                   description="Keep only the newest N savepoints rescales took (empty: all)"),
        "operator": Param(None, type=["null", "string"], title="Operator (a dataflow's)",
                          description="The uid of the one operator of a dataflow to rescale (empty: every operator)"),
    }, doc_md=f"""Rescales a job (lakestate rescale) once no run or operation holds it; its pipeline runs wait
meanwhile.

- **Job**: a job of the pipeline registry.
- **New parallelism**: 1 to the job's max parallelism (its key groups); {PAGE} gives each job's current and
  max. A value out of range is refused with the value typed; at the parallelism the job already has, nothing
  is written and the task says so.
- **Savepoint first** (on by default): a savepoint named rescale-(checkpoint)-(time) is taken first, an event
  of the job's savepoints Asset; the page says how long each job's last savepoint task took.
- **Rescale savepoints kept**: 0 or more; all but the newest N savepoints that rescales took are disposed;
  empty keeps them all.
- **Operator (a dataflow's)**: for a job of several operators, the uid of the one to rescale; empty
  rescales every operator.

See {PAGE}.""", **COMMON) as dag:
        (LakestateApprovalOperator(task_id="approve", operation="rescale") >> _wait_for_job()
         >> LakestateRescaleOperator(task_id="rescale", wait_for_lease_s=LAST_WAIT_S))
    return dag


def _restore_dag(jobs: list[str]) -> DAG:
    with DAG("lakestate_restore", description="Restore a Lakestate job from a savepoint or checkpoint", params={
        "job": _job_param(jobs),
        "savepoint": Param(None, type=["null", "string"],
                           pattern=_whole(r"[A-Za-z0-9_-]+/[A-Za-z0-9][A-Za-z0-9_.\-]*"),
                           title="Savepoint", description="<job>/<name> as the Lakestate page lists it"),
        "checkpoint": Param(None, type=["null", "integer"], **bounded(1), title="Checkpoint",
                            description="Or a retained checkpoint id of the job"),
        "parallelism": Param(None, type=["null", "integer"], **bounded(1, UPPER_BOUND_MAX_PARALLELISM),
                             title="Parallelism", description="Empty: the source's"),
        "backend": Param(None, type=["null", "string"], enum=[None, *restore_backends()], title="Backend",
                         description="Empty: the source's"),
        "allow_non_restored_state": Param(False, type="boolean", title="Allow non-restored state",
                                          description="Drop state the job no longer registers instead of refusing"),
    }, doc_md=f"""Makes a savepoint or a retained checkpoint the job's next checkpoint (lakestate restore). A
restore never rewinds a job past what its sink holds.

- **Job**: a job of the pipeline registry.
- **Savepoint** (job/name, as the Lakestate page lists it) or **Checkpoint** (a retained id, 1 or more):
  exactly one of them.
- **Parallelism**: 1 to the job's max parallelism; empty keeps the source's.
- **Backend**: delta or hashmap; empty keeps the source's.
- **Allow non-restored state**: drop state the job no longer registers instead of refusing.

See {PAGE}.""",
             **COMMON) as dag:
        (LakestateApprovalOperator(task_id="approve", operation="restore") >> _wait_for_job()
         >> LakestateRestoreOperator(task_id="restore", wait_for_lease_s=LAST_WAIT_S))
    return dag


def _dispose_dag(jobs: list[str]) -> DAG:
    with DAG("lakestate_dispose", description="Delete a Lakestate savepoint", params={
        "savepoint": Param("", type="string", pattern=_whole(r"[A-Za-z0-9_-]+/[A-Za-z0-9][A-Za-z0-9_.\-]*"),
                           title="Savepoint", description="<job>/<name> as the Lakestate page lists it"),
    }, doc_md=f"""Deletes a savepoint (lakestate dispose): reads and deletes files only, no Spark.

- **Savepoint**: job/name, as {PAGE} lists it.

Its XCom names what was deleted.""", **COMMON) as dag:

        @task(task_id="dispose", multiple_outputs=False)
        def dispose(params=None, ti=None) -> dict:
            from state_store.catalog.savepoints import dispose_savepoint
            from state_store.cli import check_approved, savepoint_job
            from state_store.provider.approval import approver
            from state_store.settings import Settings

            settings = Settings.load()  # as `lakestate dispose` does: nobody's approval, no dispose it asks about
            check_approved(savepoint_job(settings, params["savepoint"]), "dispose", approver({"ti": ti}))
            gone = dispose_savepoint(settings, params["savepoint"])
            print(f"[lakestate] disposed savepoint {gone.job_id}/{gone.name} ({gone.path})")
            return {"job": gone.job_id, "name": gone.name, "path": gone.path}

        LakestateApprovalOperator(task_id="approve", operation="dispose") >> dispose()
    return dag


def _compaction_dag(jobs: list[str], cron: str | None) -> DAG:
    with DAG("lakestate_compaction", description="Compact every Lakestate job's state tables",
             schedule=compaction_timetable(cron), catchup=False, tags=["lakestate"], max_active_runs=1,
             doc_md=f"""Compacts every registered job's state tables (lakestate compact), {_when(cron)}.
Unpausing starts no run: trigger it for one now. The schedule is the pipeline registry's: the field schedule of
its `[compaction]` table, a cron expression in UTC (default 0 3 * * *, daily at 03:00) or "none".

- One mapped task per job with a checkpoint, labelled by the job, waits for the job without a worker slot,
  then compacts it while its pipeline waits.
- Right after another compaction (no run since), a job's task says "nothing to do" and writes nothing.

The XCom is the report; {PAGE} shows the last report that did work and the history.""") as dag:

        @task
        def jobs_with_checkpoints() -> list[str]:
            """The registered jobs that have a checkpoint (a job that never ran has nothing to compact)."""
            from state_store.catalog.job_store import JobStore
            from state_store.settings import Settings

            settings = Settings.load()
            return [j for j in jobs if JobStore(settings.job_dir(j)).checkpoint_ids()]

        @task_group(group_id="per_job")
        def compact_one(job):
            """One job: wait for it without a worker slot, then compact it."""
            wait = LakestateLeaseSensor(task_id="wait_for_lease", job_id=job, timeout=LEASE_WAIT_S,
                                        map_index_template="{{ task.job_id }}")
            wait >> LakestateCompactOperator(task_id="compact", job=job, wait_for_lease_s=LAST_WAIT_S,
                                             map_index_template="{{ task.job }}")

        compact_one.expand(job=jobs_with_checkpoints())
    return dag
