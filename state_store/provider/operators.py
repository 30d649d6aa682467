"""Airflow operators over Lakestate's ``spark-submit`` entrypoints (thin: the Spark provider's hook submits).

The Spark master comes from the Airflow connection ``lakestate_spark``; without one, as ``lakestate run`` chooses it
(``LAKESTATE_SPARK_MASTER``, then ``spark-defaults.conf``'s ``spark.master``, then ``local[*]``). A run or an
operation goes to a Spark Connect server instead when that connection is of type ``spark_connect``.
"""
from __future__ import annotations

import json

from airflow.exceptions import AirflowException
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, AssetAlias, BaseSensorOperator

import state_store.entrypoint.main as entrypoint_main

ENTRYPOINT = entrypoint_main.__file__  # spark-submit runs the installed package's file
SPARK_CONN_ID = "lakestate_spark"
# The reservation of a job's lease that a DAG run's sensor takes and its task's command takes the job over from
# (``state_store.catalog.lease.reserve``): one per DAG run and job (a compaction run's mapped tasks each have
# their job).
HANDOFF = "airflow-{{ dag.dag_id }}-{{ run_id }}"
HOLD_S = 900  # how long a reservation holds for a command that never comes (its task killed with its worker)


def reservation(handoff: str, job: str) -> str:
    """The lease reservation's run id of a DAG run (``handoff``, rendered) for job ``job``."""
    return f"{handoff}-{job}"


# The savepoint's label: the DAG run's ``params.label``, else ``airflow-<run id>`` with every character that may
# not name a folder made a '-', at most 64 characters (what ``state_store.ops.savepoint.check_label`` accepts).
LABEL = ("{% for c in (params.label or 'airflow-' ~ run_id)[:64] %}"
         "{{ c if c.isalnum() or c in '_.-' else '-' }}{% endfor %}")


class _LakestateSparkSubmit(SparkSubmitOperator):
    """Submit ``jobs/<entrypoint>.py`` with ``args`` (templated, as ``application_args``) and the wait for the
    lease: the Spark connection (or this process's master choice) and the Delta jars filled in when the hook is
    made. An argument that renders empty is left out: an option the DAG run's params do not ask for.

    The command takes the job over from the lease reservation the DAG run's ``LakestateLeaseSensor`` took
    (``lease_handoff``, templated: the same for both); a task that ends without its command taking it (failed,
    or nothing to do) releases it. A subclass's work is ``work``; ``submit`` runs the command."""

    template_fields = (*SparkSubmitOperator.template_fields, "lease_handoff")

    def __init__(self, *, command: str, args: list[str], conn_id: str = SPARK_CONN_ID,
                 wait_for_lease_s: float = 3600, lease_handoff: str = HANDOFF, approval_task_id: str = "approve",
                 **kwargs):
        kwargs.setdefault("name", f"lakestate-{command}")
        super().__init__(application=ENTRYPOINT, conn_id=conn_id,
                         conf={"spark.log.level": "WARN"},
                         application_args=[command, *args, "--wait-for-lease", str(wait_for_lease_s)], **kwargs)
        self.wait_for_lease_s, self.lease_handoff = wait_for_lease_s, lease_handoff
        self.approval_task_id = approval_task_id  # where a rescale's or a restore's approver is read

    @property
    def lease_job(self) -> str:
        """The job (rendered) whose lease the command takes."""
        return self.job

    @property
    def reservation(self) -> str:
        return reservation(self.lease_handoff, self.lease_job)

    def execute(self, context):
        from state_store.catalog.job_store import JobStore
        from state_store.catalog.lease import release_reservation, remove_if_only_the_lease
        from state_store.settings import Settings

        try:
            return self.work(context)
        finally:
            job_dir = Settings.load().job_dir(self.lease_job)
            if release_reservation(JobStore(job_dir).lease_dir, self.reservation):
                self.log.info("job %s: released the lease reservation %s (not taken over)", self.lease_job,
                              self.reservation)
                remove_if_only_the_lease(job_dir, JobStore(job_dir).lease_dir)

    def work(self, context):
        """What the task does, called by ``execute`` (which then releases the lease reservation if the command
        did not take it over): here ``submit``; a subclass also reads what the command wrote and returns it
        (XCom)."""
        return self.submit(context)

    def approved(self, context) -> None:
        """Hand the command the approver of this DAG run's operation (the ``approve`` task's XCom,
        ``provider/approval.py``) as ``--approved-by``: the command refuses an operation the job's registry entry
        asks about that nobody approved."""
        from state_store.provider.approval import approver

        name = approver(context, self.approval_task_id)
        if name:
            self.application_args = [*self.application_args, f"--approved-by={name}"]

    def render_template_fields(self, context, jinja_env=None) -> None:
        super().render_template_fields(context, jinja_env)
        self.application_args = [a for a in self.application_args if a != ""]

    def submit(self, context):
        """Submit; a failed submit raises with the command's own ``lakestate: error:`` line (logged at ERROR),
        not the provider's ``Cannot execute: spark-submit ... Error code is: N``. With a connection of type
        ``spark_connect``, the command runs in this task's process on that Spark Connect server instead
        (``_run_on``): no ``spark-submit``, no JVM start."""
        from state_store.catalog.lease import HANDOFF_ENV
        from state_store.provider.hooks import spark_connect_url

        url = spark_connect_url(self._conn_id)
        if url:
            return self._run_on(url)

        self.env_vars = {**(self.env_vars or {}), HANDOFF_ENV: self.reservation}
        if self._hook is None:
            self._hook = self._get_hook()
        self.said = _SubmitOutput()
        process = self._hook._process_spark_submit_log
        self._hook._process_spark_submit_log = lambda lines: process(self.said.read(lines))
        try:
            SparkSubmitOperator.execute(self, context)
        except AirflowException:
            if not self.said.errors:
                raise
            reason = "\n".join(self.said.errors)
            self.log.error("%s", reason)
            raise AirflowException(reason) from None  # the command line is in the log above
        finally:
            self._hook._process_spark_submit_log = process

    def _run_on(self, url: str) -> None:
        """The command in this task's process on the Spark Connect server ``url`` (warm: no spark-submit, no JVM
        start): ``lakestate <command> ... --remote <url>``, its output in the task log, read as a submit's is."""
        import contextlib
        import io
        import os

        from state_store.catalog.lease import HANDOFF_ENV
        from state_store.cli import main

        self.said, out = _SubmitOutput(), io.StringIO()
        self.log.info("running on the Spark Connect server %s: lakestate %s", url, " ".join(self.application_args))
        os.environ[HANDOFF_ENV] = self.reservation  # this task's process runs the command: its environment
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                code = main([*self.application_args, "--remote", url])
        finally:
            os.environ.pop(HANDOFF_ENV, None)
        for line in self.said.read(out.getvalue().splitlines()):
            self.log.info("%s", line)
        if code:
            reason = "\n".join(self.said.errors) or f"lakestate {self.application_args[0]} exited with {code}"
            self.log.error("%s", reason)
            raise AirflowException(reason)

    def _get_hook(self):
        """The ``lakestate_spark`` connection's hook (``hooks.LakestateSparkHook``: the Delta jars, or Delta's
        Maven package where no jar is found; without the connection, the master ``lakestate run`` would choose)
        with this task's arguments, as the provider's ``SparkSubmitOperator._get_hook`` gives them to its hook."""
        from state_store.provider.hooks import LakestateSparkHook

        return LakestateSparkHook(
            conf=self.conf, conn_id=self._conn_id, files=self.files, py_files=self.py_files,
            archives=self._archives, driver_class_path=self.driver_class_path, jars=self.jars,
            java_class=self._java_class, packages=self.packages, exclude_packages=self.exclude_packages,
            repositories=self._repositories, total_executor_cores=self._total_executor_cores,
            executor_cores=self._executor_cores, executor_memory=self._executor_memory,
            driver_memory=self._driver_memory, keytab=self.keytab, principal=self.principal,
            proxy_user=self.proxy_user, name=self.name, num_executors=self._num_executors,
            status_poll_interval=self._status_poll_interval, application_args=self.application_args,
            env_vars=self.env_vars, verbose=self._verbose, spark_binary=self._spark_binary,
            properties_file=self.properties_file, yarn_queue=self._yarn_queue, deploy_mode=self._deploy_mode,
            use_krb5ccache=self._use_krb5ccache)


class _SubmitOutput:
    """What a ``lakestate`` command said that the operator acts on, read from the spark-submit output as the
    provider's hook logs it: its ``lakestate: error:`` lines and its ``[lakestate] summary:`` (JSON)."""

    ERROR, SUMMARY = "lakestate: error:", "[lakestate] summary: "

    def __init__(self):
        self.errors: list[str] = []
        self.summary: dict | None = None

    def read(self, lines):
        for line in lines:
            text = line.strip()
            if text.startswith(self.ERROR):
                self.errors.append(text)
            elif text.startswith(self.SUMMARY):
                self.summary = json.loads(text[len(self.SUMMARY):])
            yield line


def sink_asset(job_id: str) -> Asset:
    """The Asset of job ``job_id``'s sink (``lakestate://<job>/sink``): an event each time its pipeline DAG's
    ``run`` task succeeds, its ``extra`` the run's summary; a downstream DAG may be scheduled on it."""
    return Asset(name=f"lakestate-{job_id}-sink", uri=f"lakestate://{job_id}/sink")


def branch_sink_asset(job_id: str, uid: str) -> Asset:
    """In a graph, the Asset of the sink operator ``uid`` writes (``lakestate://<job>/sink/<uid>``; the job's own
    sink is ``sink_asset``): an event each time the pipeline DAG's ``run`` task succeeds, its ``extra`` the rows
    the run wrote to that sink."""
    return Asset(name=f"lakestate-{job_id}-sink-{uid}", uri=f"lakestate://{job_id}/sink/{uid}")


def side_output_asset(job_id: str, tag: str) -> Asset:
    """The Asset of side output ``tag`` of job ``job_id`` (``lakestate://<job>/side/<tag>``): an event each time
    its pipeline DAG's ``run`` task succeeds, its ``extra`` the rows the run wrote to that side output."""
    return Asset(name=f"lakestate-{job_id}-side-{tag}", uri=f"lakestate://{job_id}/side/{tag}")


def output_assets(job_id: str) -> list[Asset]:
    """The Assets of what job ``job_id`` writes besides its sink, as it was last registered (none before its
    first run registers it): a graph's other sinks and each side output. Read from the catalog's record of the
    job (a file; no job code), so a DAG file stays light."""
    from state_store.catalog.jobs import registered_branch_sinks, registered_side_outputs

    return ([branch_sink_asset(job_id, uid) for uid in registered_branch_sinks(job_id)]
            + [side_output_asset(job_id, tag) for tag in registered_side_outputs(job_id)])


class LakestateSubmitOperator(_LakestateSparkSubmit):
    """Submit one run of a job of the pipeline registry: ``lakestate run --job <id> --registry <file>``.

    The run takes the job's pending microbatches (up to ``max_microbatches``: the DAG run's
    ``params.max_microbatches``, else the entry's; with ``params.end_of_input``, ``--end-of-input``) and waits
    up to ``wait_for_lease_s`` for another holder of the job to finish (the pipeline DAG's ``wait_for_lease``
    sensor does the long wait without a worker slot).
    Returns (XCom) the run's summary: microbatches, records in and out (and per side output), checkpoints
    taken, seconds and rate; the sink Asset's event carries the same in ``extra``, each side output's Asset
    event its own row count (``outlet_extras``).

    Outlets: without ``outlets``, the job's sink Asset; and to the outlets, given or not, the Assets of the job's
    other outputs (``output_assets``: a graph's other sinks, each side output) unless already there, so a DAG of
    one's own gives every table the run writes an event, as the pipeline DAG does. ``output_outlets=False``
    keeps the outlets given as they are.
    """

    MAX_MICROBATCHES = ("{% if params.get('max_microbatches') %}--max-microbatches="
                        "{{ params.max_microbatches | int }}{% endif %}")
    END_OF_INPUT = "{% if params.get('end_of_input') %}--end-of-input{% endif %}"

    def __init__(self, *, job_id: str, registry: str, outlets=None, output_outlets: bool = True, **kwargs):
        outlets = [sink_asset(job_id)] if outlets is None else list(outlets)
        if output_outlets:  # a side output's Asset is an outlet of any DAG that runs the job, not only the pipeline's
            uris = {getattr(a, "uri", None) for a in outlets}
            outlets += [a for a in output_assets(job_id) if a.uri not in uris]
        super().__init__(command="run", name=f"lakestate-{job_id}", outlets=outlets,
                         args=["--job", job_id, "--registry", registry, self.MAX_MICROBATCHES,
                                                 self.END_OF_INPUT], **kwargs)
        self.job_id = job_id

    @property
    def lease_job(self) -> str:
        return self.job_id

    def work(self, context):
        """Run the job once (``submit``), put the run's summary in the outlet Assets' events (``outlet_extras``)
        and return it (XCom)."""
        self.submit(context)
        summary = self.said.summary or {}
        for asset, extra in outlet_extras(summary, self.outlets):
            context["outlet_events"][asset].extra.update(extra)
        return summary

    def get_openlineage_facets_on_complete(self, task_instance):
        """The run's inputs, outputs and ``lakestate`` run facet, for Airflow's OpenLineage provider (which
        calls this once the task succeeded; ``provider/lineage.py``)."""
        from state_store.catalog.job_store import JobStore
        from state_store.catalog.jobs import JobCatalog
        from state_store.provider.lineage import run_lineage
        from state_store.settings import Settings

        settings = Settings.load()
        latest = JobStore(settings.job_dir(self.job_id)).latest_checkpoint()
        return run_lineage(JobCatalog(settings).get(self.job_id), self.said.summary or {}, settings.sink, latest)


def outlet_extras(summary: dict, outlets: list) -> list[tuple]:
    """``(asset, extra)`` of each outlet Asset of a run: the sink's extra is the run's summary; a side output's
    (``lakestate://<job>/side/<tag>``) says the rows the run wrote to that side output, not the sink's; a graph's
    other sink's (``lakestate://<job>/sink/<uid>``) the rows the run wrote to it."""
    extras = []
    for asset in outlets:
        _, side, tag = asset.uri.partition("/side/")
        _, branch, uid = asset.uri.partition("/sink/")
        common = {"job": summary.get("job"), "run_id": summary.get("run_id"),
                  "microbatches": summary.get("microbatches")}
        if side:
            extras.append((asset, {**common, "side_output": tag,
                                   "records_out": (summary.get("side_outputs") or {}).get(tag, 0)}))
        elif branch:
            written = (summary.get("sinks") or {}).get(uid) or {}
            extras.append((asset, {**common, "operator": uid, "table": written.get("table"),
                                   "records_out": written.get("records_out", 0)}))
        else:
            extras.append((asset, summary))
    return extras


def savepoints_asset(job_id: str) -> Asset:
    """The Asset of job ``job_id``'s savepoints: an event each time one is taken (by the savepoint DAG, or first
    by a rescale), its ``extra`` the savepoint's path, checkpoint, microbatch, entries and bytes."""
    return Asset(name=f"lakestate-{job_id}-savepoints", uri=f"lakestate://{job_id}/savepoints")


SAVEPOINTS = AssetAlias("lakestate-savepoints")  # the operations' outlet: the job is known at run time only


def _savepoint_event(context, savepoint) -> dict:
    """Emit ``savepoint``'s event on its job's savepoints Asset; return what it says (also an XCom)."""
    said = {"path": savepoint.path, "job": savepoint.job_id, "name": savepoint.name,
            "checkpoint": savepoint.checkpoint_id, "microbatch": savepoint.batch_id,
            "entries": savepoint.total_entries, "bytes": savepoint.size_bytes}
    context["outlet_events"][SAVEPOINTS].add(savepoints_asset(savepoint.job_id), extra=said)
    return said


class LakestateSavepointOperator(_LakestateSparkSubmit):
    """Take a savepoint of the DAG run's ``params.job`` (optional ``params.checkpoint``, ``params.label``);
    returns (XCom) the savepoint's path, checkpoint, microbatch and size, and emits an event of the job's
    savepoints Asset (``lakestate://<job>/savepoints``) with the same in ``extra``."""

    template_fields = (*_LakestateSparkSubmit.template_fields, "job", "savepoint_label")

    def __init__(self, **kwargs):
        job, checkpoint = "{{ params.job }}", ("{% if params.checkpoint is not none %}"
                                               "--checkpoint={{ params.checkpoint | int }}{% endif %}")
        kwargs.setdefault("outlets", [SAVEPOINTS])
        super().__init__(command="savepoint", args=[job, "--label", LABEL, checkpoint], **kwargs)
        self.job, self.savepoint_label = job, LABEL

    def work(self, context):
        """Submit ``lakestate savepoint``, then emit the savepoint's event on the job's savepoints Asset and
        return (XCom) what it says: path, job, name, checkpoint, microbatch, entries and bytes."""
        from state_store.catalog.savepoints import load_savepoint
        from state_store.settings import Settings

        self.submit(context)
        savepoint = load_savepoint(Settings.load(), f"{self.job}/{self.savepoint_label}")
        self.log.info("savepoint path: %s", savepoint.path)
        return _savepoint_event(context, savepoint)


class LakestateRescaleOperator(_LakestateSparkSubmit):
    """Rescale the DAG run's ``params.job`` to ``params.parallelism`` (a savepoint first when
    ``params.savepoint_first``; then only the newest ``params.retain_savepoints`` of the savepoints rescales
    took are kept); returns (XCom) the latest checkpoint's id, microbatch and parallelism, and whether the
    rescale ``changed`` anything: at the parallelism the job already has, nothing is submitted or written and
    the task succeeds saying so. A parallelism out of 1..the job's max parallelism fails the task at once,
    naming the value given, before anything is submitted. The savepoint taken first is an event of the job's
    savepoints Asset."""

    template_fields = (*_LakestateSparkSubmit.template_fields, "job", "parallelism", "operator")

    def __init__(self, **kwargs):
        job, parallelism = "{{ params.job }}", "{{ params.parallelism | int }}"
        first = "{{ '--savepoint-first' if params.get('savepoint_first', true) else '' }}"
        retain = ("{% if params.get('retain_savepoints') is not none %}--retain-savepoints="
                  "{{ params.retain_savepoints | int }}{% endif %}")
        operator = "{{ params.get('operator') or '' }}"  # a dataflow's operator (empty: every operator)
        which = "{% if params.get('operator') %}--operator={{ params.operator }}{% endif %}"
        kwargs.setdefault("outlets", [SAVEPOINTS])
        super().__init__(command="rescale", args=[job, "--parallelism", parallelism, first, retain, which], **kwargs)
        self.job, self.parallelism, self.operator = job, parallelism, operator

    def work(self, context):
        """Check the request as the CLI does (AirflowException, nothing submitted, when it is not usable); submit
        ``lakestate rescale`` unless the job is at that parallelism already, with an event for each savepoint it
        took; return (XCom) the latest checkpoint's id, microbatch and parallelism, and ``changed``."""
        from state_store.catalog.job_store import JobStore
        from state_store.catalog.savepoints import list_savepoints
        from state_store.errors import ConfigError
        from state_store.restore_plan import already_at, rescale_request
        from state_store.settings import Settings

        settings = Settings.load()
        store = JobStore(settings.job_dir(self.job))
        latest = store.latest_checkpoint()
        request = None  # no checkpoint: the submitted CLI refuses it, with the fix
        try:  # the CLI's own checks, so a bad request fails here at once rather than in a submitted job
            if latest is not None:
                request = rescale_request(self.job, latest, int(self.parallelism), self.operator or None)
        except ConfigError as e:
            raise AirflowException(f"lakestate: error: {e}; nothing was submitted") from None
        changed = request is None or request.changed
        if changed:
            before = {s.name for s in list_savepoints(settings, self.job)}
            self.approved(context)
            self.submit(context)
            for savepoint in list_savepoints(settings, self.job):
                if savepoint.name not in before:
                    _savepoint_event(context, savepoint)
            latest = store.latest_checkpoint()
            self.log.info("job %s: checkpoint %s at parallelism %s", self.job, latest.checkpoint_id,
                          latest.parallelism)
        else:
            self.log.info("%s", already_at(self.job, latest, self.operator))
        return {"job": self.job, "checkpoint": latest.checkpoint_id, "microbatch": latest.batch_id,
                "parallelism": latest.parallelism, "changed": changed}


class LakestateCompactOperator(_LakestateSparkSubmit):
    """Compact job ``job`` (``lakestate compact``): its state tables rewritten to their live entries, expired
    ones dropped (TTL's compaction filter), files no retained checkpoint needs deleted; the job is held meanwhile
    (its pipeline runs wait). Right after another compaction (no run since) there is nothing to do: nothing is
    written and Spark is not started. Returns (XCom) the compaction's report, which the Lakestate page shows
    too (its history lists every one)."""

    template_fields = (*_LakestateSparkSubmit.template_fields, "job")

    def __init__(self, *, job: str, **kwargs):
        super().__init__(command="compact", args=[job], **kwargs)
        self.job = job

    def work(self, context):
        """Submit ``lakestate compact``; log and return (XCom) the compaction's report (the newest of the job's
        compaction history)."""
        from state_store.catalog.job_store import JobStore
        from state_store.settings import Settings

        self.submit(context)
        report = JobStore(Settings.load().job_dir(self.job)).compaction_history(1)[0]
        if report.get("nothing_to_do"):
            self.log.info("job %s: nothing to do: %s", self.job, report["reason"])
        else:
            self.log.info("job %s: %s rows scanned, %s expired and %s superseded removed, files %s -> %s, %s "
                          "bytes reclaimed", self.job, report["rows_scanned"], report["expired_removed"],
                          report["superseded_removed"], report["files_before"], report["files_after"],
                          report["bytes_reclaimed"])
        return report


class LakestateLeaseSensor(BaseSensorOperator):
    """Wait until no run, savepoint, rescale or compaction holds job ``job_id`` (its lease is free, released or
    stale), without holding a worker slot: in ``reschedule`` mode the task gives its slot back between pokes.
    Reads and writes the lease's files only (no Spark).

    When the job is free, the poke that says so takes the lease for the task after it (a reservation,
    ``state_store.catalog.lease.reserve``, named by ``lease_handoff``, templated: the DAG run and the job), whose
    command takes the job over from it as its JVM starts: another DAG's sensor keeps waiting meanwhile, so
    one driver of a job runs at a time. A reservation nobody takes over holds ``hold_s`` seconds at most. A
    sensor that finds the job held joins its line (``state_store.catalog.lease.join_line``) and reserves only
    once no sensor that waited longer is left: first come, first served."""

    template_fields = ("job_id", "lease_handoff")  # an operation DAG's job is ``{{ params.job }}``

    def __init__(self, *, job_id: str, lease_handoff: str = HANDOFF, hold_s: float = HOLD_S, **kwargs):
        kwargs.setdefault("mode", "reschedule")
        kwargs.setdefault("poke_interval", 30)
        kwargs.setdefault("timeout", 3600)
        super().__init__(**kwargs)
        self.job_id, self.lease_handoff, self.hold_s = job_id, lease_handoff, hold_s

    def poke(self, context) -> bool:
        from state_store.catalog.job_store import JobStore
        from state_store.catalog.lease import ahead_in_line, join_line, leave_line, live_holder, reserve
        from state_store.errors import JobLocked
        from state_store.settings import Settings

        lease_dir = JobStore(Settings.load().job_dir(self.job_id)).lease_dir
        mine = reservation(self.lease_handoff, self.job_id)
        interval = getattr(self.poke_interval, "total_seconds", lambda: self.poke_interval)()
        ahead = ahead_in_line(lease_dir, mine, stale_s=3 * interval + 60)
        if ahead:  # first come, first served: not this one's turn yet, whether the job is held or not
            why = f"{len(ahead)} waiting before this one, first {ahead[0]['run_id']}"
        else:
            try:
                reserve(lease_dir, self.job_id, mine, self.hold_s)
                why = None
            except JobLocked as e:  # another holder has it: the lease's own answer
                why = str(e)
        if why is None:
            leave_line(lease_dir, mine)
            self.log.info("job %s is free: reserved for the task after this one (%s)", self.job_id, mine)
            return True
        holder = live_holder(lease_dir) or {}
        join_line(lease_dir, mine)
        self.log.info("job %s is held by %s (on %s): waiting in line (%s)", self.job_id, holder.get("run_id"),
                      holder.get("host"), why)
        return False


class LakestateRestoreOperator(_LakestateSparkSubmit):
    """Restore the DAG run's ``params.job`` from ``params.savepoint`` (``<job>/<name>``) or from its retained
    checkpoint ``params.checkpoint``, optionally at ``params.parallelism``, onto ``params.backend``, dropping
    state the job no longer registers when ``params.allow_non_restored_state`` (``lakestate restore``); returns
    (XCom) the checkpoint the restore wrote (id, microbatch, parallelism, backend)."""

    template_fields = (*_LakestateSparkSubmit.template_fields, "job")

    def __init__(self, **kwargs):
        args = ["{{ params.job }}",
                "{% if params.savepoint %}--savepoint={{ params.savepoint }}{% endif %}",
                "{% if params.checkpoint is not none %}--checkpoint={{ params.checkpoint | int }}{% endif %}",
                "{% if params.parallelism is not none %}--parallelism={{ params.parallelism | int }}{% endif %}",
                "{% if params.backend %}--backend={{ params.backend }}{% endif %}",
                "{{ '--allow-non-restored-state' if params.get('allow_non_restored_state') else '' }}"]
        super().__init__(command="restore", args=args, **kwargs)
        self.job = args[0]

    def work(self, context):
        """Submit ``lakestate restore``; return (XCom) the checkpoint the restore wrote: its id, microbatch,
        parallelism and backend (the job's latest checkpoint after it)."""
        from state_store.catalog.job_store import JobStore
        from state_store.settings import Settings

        self.approved(context)
        self.submit(context)
        latest = JobStore(Settings.load().job_dir(self.job)).latest_checkpoint()
        return {"job": self.job, "checkpoint": latest.checkpoint_id, "microbatch": latest.batch_id,
                "parallelism": latest.parallelism, "backend": latest.backend}
