"""The restore rules, pure: may a job definition go on from a checkpoint or savepoint, and how.

``plan_restore`` is the one place they are decided, for the start of a run (the job's own latest checkpoint,
nothing changed) and for a restore or rescale (a parallelism, backend, uid map or dropped states asked for).
It returns a ``RestorePlan`` (which stored states are kept under which names, which are dropped, the
parallelism and backend, and the fast path) or raises the error that names the fix. No Spark and no I/O:
metadata in, a plan out, as Flink's ``StateAssignmentOperation`` decides before any state moves.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple, Union

from .errors import ConfigError, RestoreError
from .key_groups import check_parallelism
from .records.layout import LAYOUT_VERSION, STATE_LAYOUTS
from .records.metadata import CheckpointMetadata, StateInfo
from .state.backend import backend_kind, backend_names
from .state.descriptors import check_state_name
from .state.operator import SOURCE_STATE_PREFIX
from .types import StateMigrationError, check_compatibility, shown_type

# The new definition's states, or how to find them at the planned (parallelism, max_parallelism): a dry run of
# the user's hooks, made only once those are valid.
Descriptors = Union[Mapping[str, StateInfo], Callable[[int, int], Mapping[str, StateInfo]]]


@dataclass(frozen=True)
class JobFacts:
    """What the rules need of a job definition."""

    job_id: str
    uid: str
    key_type: Any  # the key type's schema, as checkpoints record it
    max_parallelism: int | None = None  # None: take the restored one

    @classmethod
    def of(cls, spec) -> "JobFacts":
        return cls(spec.job_id, spec.uid, spec.key_type.to_schema(), spec.max_parallelism)


@dataclass(frozen=True)
class RestoreRequest:
    """The changes a restore or rescale asks for (nothing: go on as stored)."""

    parallelism: int | None = None
    backend: str | None = None
    uid_map: Mapping[str, str] = field(default_factory=dict)  # old uid -> new uid
    allow_non_restored_state: bool = False
    own_latest: bool = False  # the source is the job's own latest checkpoint


@dataclass(frozen=True)
class RestorePlan:
    """A restore that passed every rule: what it keeps, drops and changes."""

    kept: dict[str, str]  # stored state name -> its name in the job
    dropped: list[str]
    parallelism: int
    backend: str
    from_parallelism: int
    from_backend: str
    rescale: bool  # the job's own latest checkpoint, same backend and states: keyed rows are not rewritten
    nothing_to_do: bool  # a rescale to the parallelism it has: a new checkpoint would only push out the oldest

    def changes(self) -> str:
        return "; ".join(c for c in (
            f"parallelism {self.from_parallelism} -> {self.parallelism}"
            if self.parallelism != self.from_parallelism else "",
            f"backend {self.from_backend} -> {self.backend}" if self.backend != self.from_backend else "",
            f"dropped {self.dropped}" if self.dropped else "",
            ", ".join(f"{a} -> {b}" for a, b in self.kept.items() if a != b)) if c) or "unchanged"


def plan_restore(job: JobFacts, point, descriptors: Descriptors, request: RestoreRequest | None = None,
                 where: str | None = None) -> RestorePlan:
    """Decide how ``job`` goes on from ``point`` (a checkpoint's or savepoint's metadata, called ``where`` in
    messages), registering ``descriptors``. ``request`` None is the start of a run: the job's own latest
    checkpoint, nothing changed, its operator uid the stored one. Raises ConfigError or RestoreError naming
    the fix.

    Example::

        plan = plan_restore(JobFacts.of(spec), savepoint, descriptors, RestoreRequest(parallelism=4))
        plan.kept        # {"count.count": "count.count"}
    """
    run = request is None
    request = request or RestoreRequest(own_latest=True)
    where = where or f"checkpoint {point.checkpoint_id}"
    _check_layout(point, where, run)
    check_max_parallelism(job, point.max_parallelism, where)
    parallelism = _parallelism(point, request.parallelism, where)
    backend = request.backend or point.backend
    if not run:
        check_restore_backend(backend)  # a rescale of a job on the memory backend too
    _check_key_type(job, point, where)
    if run:
        _check_uid(job, point)
    registered = descriptors(parallelism, point.max_parallelism) if callable(descriptors) else descriptors
    stored = sorted(set(point.descriptors) | set(point.entries))
    kept, dropped = ({n: n for n in stored}, []) if run else _kept_states(job, point, where, registered, request)
    check_descriptors({kept[n]: d for n, d in point.descriptors.items() if n in kept}, registered, where)
    rescale = (request.own_latest and not dropped and all(n == m for n, m in kept.items())
               and backend == point.backend)
    return RestorePlan(kept, dropped, parallelism, backend, point.parallelism, point.backend, rescale,
                       rescale and parallelism == point.parallelism)


def _check_layout(point, where: str, run: bool) -> None:
    layout = getattr(point, "layout", LAYOUT_VERSION)
    if layout not in STATE_LAYOUTS:
        fix = ": run the job with a new job id (or a fresh warehouse)" if run else ""
        raise RestoreError(f"{where} was written with state layout {layout}; this release reads layouts "
                           f"{' and '.join(map(str, STATE_LAYOUTS))}{fix}")


def check_max_parallelism(job, max_parallelism: int, where: str) -> None:
    """max_parallelism is fixed for a job's life (it is the number of key groups)."""
    if job.max_parallelism is not None and job.max_parallelism != max_parallelism:
        raise RestoreError(
            f"{where} has max_parallelism {max_parallelism} but the job now sets {job.max_parallelism}; "
            f"max_parallelism is the number of key groups and is fixed for a job's life: set it back to "
            f"{max_parallelism} (or leave it unset to take the restored one)"
        )


def _parallelism(point, asked: int | None, where: str) -> int:
    parallelism = point.parallelism if asked is None else asked
    try:
        check_parallelism(parallelism, point.max_parallelism)
    except ValueError as e:
        raise ConfigError(f"cannot restore {where} at parallelism {parallelism!r}: {e} (max_parallelism is fixed "
                          f"for a job's life)") from None
    return parallelism


def check_requested_parallelism(parallelism: int) -> None:
    """Refuse a ``--parallelism`` that is no positive integer (before anything is read)."""
    if parallelism <= 0:
        raise ConfigError(f"--parallelism must be a positive integer, got {parallelism}")


class RescaleRequest(NamedTuple):
    """A rescale request that passed its checks: the operators it rescales, and whether any runs at another
    parallelism (``changed`` False: nothing to submit or write)."""

    uids: list[str]
    changed: bool


def rescale_request(job_id: str, latest, parallelism: int, operator: str | None = None) -> RescaleRequest:
    """Check a rescale of job ``job_id``, whose latest checkpoint is ``latest``, to ``parallelism`` (for its
    ``operator`` only, or every operator of a dataflow): the one place the CLI and the Airflow operator check
    it, before Spark starts or anything is submitted. Raises ConfigError naming the range."""
    check_requested_parallelism(parallelism)
    everyone = latest.uids
    uids = [operator] if operator else everyone
    for uid in uids:  # a dataflow's operators each have their own parallelism and key groups
        point = latest.of_operator(uid)
        if point is None:
            raise ConfigError(f"job {job_id!r} has no operator {uid!r} with state; its operators are {everyone}")
        which = f"operator {uid!r}" if len(uids) > 1 or operator else f"job {job_id!r}"
        if parallelism > point.max_parallelism:
            raise ConfigError(f"--parallelism {parallelism} is above {which}'s max parallelism "
                              f"{point.max_parallelism} (its key groups); give 1 to {point.max_parallelism} (it "
                              f"runs at {point.parallelism})")
    return RescaleRequest(uids, any(latest.of_operator(uid).parallelism != parallelism for uid in uids))


def already_at(job_id: str, checkpoint, operator: str | None = None) -> str:
    """What a rescale to the parallelism the job (or its ``operator``) already has says: it writes nothing."""
    point = checkpoint.of_operator(operator) if operator else checkpoint
    who = f"job {job_id}" + (f" operator {operator}" if operator and operator != checkpoint.uid else "")
    return (f"[lakestate] {who}: already at parallelism {point.parallelism}, nothing to do (checkpoint "
            f"{checkpoint.checkpoint_id} stays the latest; nothing was written)")


def restore_backends() -> tuple[str, ...]:
    """The backends a restore or rescale can write: those whose checkpoints outlive the process (not ``in_process``)."""
    return tuple(name for name in backend_names() if not backend_kind(name).in_process)


def check_restore_backend(backend: str | None) -> None:
    """Refuse a backend that a restore or rescale cannot write (its checkpoint is for a later process)."""
    if backend is None:
        return
    if backend_kind(backend).in_process:
        raise ConfigError(f"a restore or rescale writes a checkpoint for the job's next run, and the {backend} backend "
                          f"keeps checkpoints only in the process that took them; choose --backend "
                          f"{' or '.join(restore_backends())}")


def _check_key_type(job: JobFacts, point, where: str) -> None:
    if point.key_type != job.key_type:
        raise RestoreError(
            f"{where} keys records by {shown_type(point.key_type)} but the job now declares key_type "
            f"{shown_type(job.key_type)}; a key's hash, and so its key group, depends on its type: keep "
            f"{shown_type(point.key_type)}"
        )


def _check_uid(job: JobFacts, checkpoint) -> None:
    """A run goes on only with the operator uid its checkpoint holds; a restore moves state to another uid."""
    cid = checkpoint.checkpoint_id
    if checkpoint.uid != job.uid:
        raise RestoreError(
            f"checkpoint {cid} holds the state of operator uid {checkpoint.uid!r} but the job's operator is now "
            f"{job.uid!r}; its state would not be restored: set uid={checkpoint.uid!r}, or move the state to "
            f"the new uid with: lakestate restore {job.job_id} --checkpoint {cid} --uid-map "
            f"{checkpoint.uid}={job.uid}"
        )


def parse_uid_map(items: list[str] | dict | None) -> dict[str, str]:
    """``["old=new", ...]`` (or a dict) as a checked mapping."""
    if not items:
        return {}
    pairs = items.items() if isinstance(items, dict) else []
    if not isinstance(items, dict):
        parsed = []
        for item in items:
            old, sep, new = str(item).partition("=")
            if not sep:
                raise ConfigError(f"uid mapping {item!r} must look like OLD_UID=NEW_UID")
            parsed.append((old.strip(), new.strip()))
        pairs = parsed
    out = {}
    for old, new in pairs:
        for uid in (old, new):
            try:
                check_state_name(uid, "operator uid")
            except ValueError as e:
                raise ConfigError(f"uid mapping {old}={new}: {e}") from None
        out[old] = new
    return out


def _stored_uids(point) -> list[str]:
    return sorted({n.partition(".")[0] for n in set(point.descriptors) | set(point.entries)} - {
        SOURCE_STATE_PREFIX.rstrip(".")})


def _kept_states(job: JobFacts, point, where: str, registered: Mapping[str, StateInfo],
                 request: RestoreRequest) -> tuple[dict[str, str], list[str]]:
    """Which stored states the job restores (stored name -> the job's name) and which it drops. A state the
    old definition registered up front and the new one does not is not restored; raw state and state
    registered only while processing (broadcast state in process_broadcast_element) follow their uid."""
    uid_map = request.uid_map
    unknown = sorted(set(uid_map) - set(_stored_uids(point)))
    if unknown:  # a mapping that maps nothing is a mistake (a typo, the wrong savepoint), not a no-op
        raise ConfigError(f"--uid-map {unknown[0]}={uid_map[unknown[0]]} maps nothing: {where} has no operator uid "
                          f"{unknown[0]!r}; the uids it has are {_stored_uids(point)}")

    def mapped(name: str) -> str | None:
        if name.startswith(SOURCE_STATE_PREFIX):  # the sources' own state (offsets, watermark) has no uid
            return name
        uid, _, rest = name.partition(".")
        new = f"{uid_map.get(uid, uid)}.{rest}"
        registered_up_front = name in point.descriptors and not point.descriptors[name].lazy
        return new if uid_map.get(uid, uid) == job.uid and (new in registered or not registered_up_front) \
            else None

    stored = sorted(set(point.descriptors) | set(point.entries))
    kept = {n: m for n in stored if (m := mapped(n)) is not None}
    dropped = [n for n in stored if n not in kept]
    if dropped and not request.allow_non_restored_state:
        _refuse_dropping(job, point, where, dropped)
    return kept, dropped


def _refuse_dropping(job: JobFacts, point, where: str, dropped: list[str]) -> None:
    shown = ", ".join(f"{n!r} ({point.descriptors[n].label if n in point.descriptors else 'raw state'}, "
                      f"{point.entries.get(n, 0)} entries)" for n in dropped)
    uids = sorted({n.partition(".")[0] for n in dropped} - {job.uid})
    hint = f" map its uid with --uid-map {uids[0]}={job.uid}," if uids else ""
    raise RestoreError(f"{where} holds state that job {job.job_id!r} (operator uid {job.uid!r}) would not restore: "
                       f"{shown}. Register it again in the job,{hint} or pass --allow-non-restored-state to "
                       f"drop it")


def check_descriptors(stored: Mapping[str, StateInfo], descriptors: Mapping[str, StateInfo], where: str) -> None:
    """Refuse, with the fix, a state whose kind or type the new definition changed incompatibly."""
    for name, old in stored.items():
        new = descriptors.get(name)
        if new is None:
            continue
        if (old.kind, old.mode) != (new.kind, new.mode):
            raise RestoreError(
                f"state {name!r} was {old.kind} state in {where} and is now {new.kind} state; "
                f"give the new state another name"
            )
        try:
            check_compatibility(old.type, new.type, where=f"state {name!r}")
        except StateMigrationError as e:
            raise RestoreError(
                f"{e} (since {where}); keep the old type, make a compatible change "
                f"(widen a number, add a row field), or give the new state another name"
            ) from None


def check_restorable(spec, checkpoint: CheckpointMetadata, descriptors: dict[str, StateInfo]) -> None:
    """Refuse, with the fix, a checkpoint this definition cannot continue from (the rules above, for the start
    of a run)."""
    plan_restore(JobFacts.of(spec), checkpoint, descriptors)


def continuing_spec(spec, checkpoint: CheckpointMetadata):
    """The definition a run continuing from ``checkpoint`` runs with: that checkpoint's parallelism, backend
    and max_parallelism (a rescale or restore set them; the definition's values shape a job's first run)."""
    return spec.with_overrides(parallelism=checkpoint.parallelism, backend=checkpoint.backend,
                               max_parallelism=checkpoint.max_parallelism)
