"""Operations that ask first: the rescale, restore and dispose DAGs begin with an approval (Airflow's
human-in-the-loop ``ApprovalOperator``) when the job's pipeline registry entry lists the operation in
``require_approval``. The request shows what the operation will change, read from the job's checkpoint and
savepoint metadata (no Spark): the parallelism from and to, the checkpoint or savepoint and its size, and the
state a restore drops. "Reject" skips every task after it: nothing is written. A job whose entry does not ask
is approved at once, and the task says so. It fails closed: a registry that is missing or does not parse, or a
job whose entry has a problem (or no entry), is asked about too, the request naming the problem and its fix
(``catalog.pipelines.approval_asked``). An approval's XCom names the approver (``approved_by``), which the
rescale, restore and dispose tasks after it hand to the command (``lakestate rescale --approved-by NAME``):
the command itself refuses an operation the entry asks about that nobody approved."""
from __future__ import annotations

from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator

from state_store.catalog.job_store import JobStore
from state_store.catalog.pipelines import approval_asked
from state_store.catalog.savepoints import load_savepoint
from state_store.delta.sizes import human_bytes
from state_store.settings import Settings


def _point(point, kind: str) -> str:
    return (f"{kind} {getattr(point, 'checkpoint_id', '')} (microbatch {point.batch_id}): state "
            f"{human_bytes(point.size_bytes)} in {point.num_files} files, {point.total_entries} entries, "
            f"parallelism {point.parallelism}")


def _states(point) -> dict[str, int]:
    """Live entries per state of a checkpoint or savepoint, every operator's (names qualified by uid)."""
    return {n: c for part in point.parts for n, c in part.entries.items()}


def job_of(operation: str, params: dict) -> str:
    """The job an operation DAG's run is about: its ``job`` param (a dispose: the savepoint's job part)."""
    return params["savepoint"].split("/", 1)[0] if operation == "dispose" else params["job"]


def describe_change(operation: str, params: dict, settings: Settings) -> str:
    """What the operation asked by ``params`` will change, as lines of Markdown, from the job's metadata now."""
    job = job_of(operation, params)
    latest = JobStore(settings.job_dir(job)).latest_checkpoint()
    now = f"- Now: {_point(latest, 'checkpoint')}" if latest else "- Now: the job has no checkpoint"
    if operation == "dispose":
        savepoint = load_savepoint(settings, params["savepoint"], own_tables=False)
        return "\n".join([f"Deletes savepoint **{params['savepoint']}** ({savepoint.path}), for good:",
                          f"- {_point(savepoint, 'of checkpoint')}", now])
    if operation == "rescale":
        operator = params.get("operator")
        before = (latest.of_operator(operator).parallelism if latest and operator else
                  latest.parallelism if latest else None)
        what = f"operator {operator} of job **{job}**" if operator else f"job **{job}**"
        return "\n".join([f"Rescales {what}: parallelism **{before} -> {params['parallelism']}**.", now,
                          "- A savepoint of it is taken first." if params.get("savepoint_first", True) else
                          "- No savepoint is taken first."])
    if params.get("savepoint"):
        point, source = load_savepoint(settings, params["savepoint"]), f"savepoint {params['savepoint']}"
        lines = [f"- From: {_point(point, 'savepoint of checkpoint')}"]
    else:
        point = JobStore(settings.job_dir(job)).checkpoint(int(params["checkpoint"]))
        source, lines = f"checkpoint {params['checkpoint']}", [f"- From: {_point(point, 'checkpoint')}"]
    after = [] if not params.get("parallelism") else [f"- Parallelism {point.parallelism} -> {params['parallelism']}"]
    dropped = sorted(set(_states(latest)) - set(_states(point))) if latest else []
    drops = [f"- State dropped (at the latest checkpoint, not in the {source}): {', '.join(dropped)}"] if dropped \
        else []
    if params.get("allow_non_restored_state"):
        drops.append("- State the job no longer registers is dropped (allow non-restored state).")
    return "\n".join([f"Restores job **{job}** from {source}: it becomes the job's next checkpoint.", now, *lines,
                      *after, *drops])


class LakestateApprovalOperator(ApprovalOperator):
    """Waits for "Approve" or "Reject" of ``operation`` (rescale, restore or dispose) when the job's registry
    entry lists it in ``require_approval``, or when the registry cannot tell (``asked``), with
    ``describe_change`` as the request's body; "Reject" skips every later task. Otherwise it approves at once,
    and says why."""

    def __init__(self, *, operation: str, **kwargs: Any) -> None:
        super().__init__(subject=f"Approve this {operation}?", ignore_downstream_trigger_rules=True,
                         doc_md=f"Asks a person to approve the {operation} first when the job's registry entry says "
                                f"so (require_approval), or when the registry cannot be read or the entry is bad; "
                                f"otherwise goes on at once.", **kwargs)
        self.operation = operation

    def asked(self, params: dict):
        """Whether this DAG run's operation waits for a person, and why (``approval_asked``: None only when the
        job's entry is read and does not list the operation; a registry or entry with a problem asks)."""
        return approval_asked(job_of(self.operation, params), self.operation)

    def execute(self, context):
        params = context["params"]
        job = job_of(self.operation, params)
        asked = self.asked(params)
        if asked is None:
            self.log.info("job %s: its registry entry does not ask for an approval of a %s (require_approval): "
                          "going on", job, self.operation)
            return {"chosen_options": [self.APPROVE], "asked": False}
        self.subject = f"Approve the {self.operation} of job {job}?"
        self.body = describe_change(self.operation, params, Settings.load())
        if asked.problem:  # the person sees first why this asks: nothing the registry says can be trusted
            self.body = (f"**Asked because {asked.why}.** Fix the pipeline registry (LAKESTATE_REGISTRY) so the "
                         f"job's entry decides again.\n\n{self.body}")
            self.log.warning("job %s: %s: asking a person to approve this %s", job, asked.why, self.operation)
        self.log.info("job %s: waiting for an approval of this %s:\n%s", job, self.operation, self.body)
        return super().execute(context)

    def execute_complete(self, context, event):
        """The answer; an approval's XCom also names who gave it (``approved_by``), for the command after it."""
        answer = super().execute_complete(context, event)
        if answer["chosen_options"] == [self.APPROVE]:
            user = answer.get("responded_by_user") or {}
            answer = {**answer, "approved_by": user.get("name") or user.get("id") or "an Airflow user"}
        return answer


def approver(context, task_id: str = "approve") -> str | None:
    """Who approved this DAG run's operation: the ``approved_by`` of its approval task's XCom (None: no approval
    task, or it did not ask)."""
    ti = context.get("ti") or context.get("task_instance")
    said = ti.xcom_pull(task_ids=task_id) if ti is not None and task_id else None
    return said.get("approved_by") if isinstance(said, dict) else None
