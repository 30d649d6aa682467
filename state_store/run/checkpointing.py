"""Step 4 of a run: a checkpoint every ``checkpoint_interval`` microbatches and at the end of the run, each
pinning the table versions of its microbatch, written last; then older ones expire."""
from __future__ import annotations

from ..delta.backends import StateBackend
from ..records.layout import KEYED, OPERATOR, SINK
from ..records.metadata import AirflowRun, CheckpointMetadata, MicrobatchPlan, StateInfo, TableVersion
from ..records.stats import CleanupNote, MicrobatchStats
from ..state.operator import SOURCE_OFFSETS_STATE
from ..state.ttl.tables import count_entries, drop_expired, ttl_states
from ..watermarks import WATERMARK_STATE
from .context import RunContext, wall_clock_ms
from .outputs import sink_targets


def present(checkpoint: CheckpointMetadata | None, states: dict[str, StateInfo],
            entries: dict[str, int]) -> dict[str, StateInfo]:
    """The states still in the tables: this definition's, and those it no longer registers whose entries are
    still there, so a later run that registers them again is checked against the type their values have."""
    kept = {n: d for n, d in (checkpoint.descriptors if checkpoint else {}).items()
            if n not in states and entries.get(n)}
    return {**kept, **states}


def _due(ctx: RunContext, checkpoint_id: int, plans: list[MicrobatchPlan]) -> dict[int, int]:
    """Which microbatches get a checkpoint, and its id: every ``checkpoint_interval``-th and the run's last
    (like stop-with-checkpoint: the next run resumes there, not by replaying); those the retention would
    expire at once are not taken (hashmap snapshots are full)."""
    spec = ctx.spec
    due = [p for p in plans if (p.batch_id + 1) % spec.checkpoint_interval == 0]
    if not due or due[-1] is not plans[-1]:
        due.append(plans[-1])
    numbered = [(checkpoint_id + i, plan.batch_id) for i, plan in enumerate(due)]
    return {batch_id: cid for cid, batch_id in numbered[-spec.num_retained:]}


class Checkpointer:
    """One operator's part of a run's checkpoints (``take_checkpoints`` takes them): its records of each, from
    the ``checkpoint`` the run restored, its subtasks' ``stats`` per microbatch and what TTL's incremental
    cleanup removed after which microbatch (``sweeps``); ``states`` is every state the run's definition
    registered (lazily registered ones marked)."""

    def __init__(self, ctx: RunContext, keyed: StateBackend, operator: StateBackend, states: dict[str, StateInfo],
                 checkpoint: CheckpointMetadata | None, stats: list[MicrobatchStats], sweeps: dict[int, CleanupNote]):
        self.ctx, self.keyed, self.operator, self.states = ctx, keyed, operator, states
        self.checkpoint, self.stats, self.sweeps = checkpoint, stats, sweeps
        self.cleaned = ttl_states(states, "full_snapshot")
        self._sink, self._sink_run = sink_targets(ctx)[SINK]  # what each checkpoint pins of it: its version

    def _state(self, cid: int, plan: MicrobatchPlan, entries: dict[str, int]) -> dict[str, TableVersion]:
        """Both tables' records for checkpoint ``cid`` of ``plan``'s microbatch; a full snapshot with TTL cleanup
        counts the entries of the states it thinned (what it holds)."""
        cleanup = None
        if self.cleaned and self.keyed.full_snapshot_cleanup:
            cleanup = lambda rows, now=plan.timestamp: drop_expired(rows, self.cleaned, now)  # noqa: E731
        state = {KEYED: self.keyed.snapshot(cid, plan.batch_id, cleanup),
                 OPERATOR: self.operator.snapshot(cid, plan.batch_id)}
        if cleanup and state[KEYED].path:
            counts = count_entries(self.ctx.spark.read.format("delta").load(state[KEYED].path), self.cleaned)
            entries.update({n: counts.get(n, 0) for n in self.cleaned})
        return state

    def _metadata(self, cid: int, plan: MicrobatchPlan, state: dict[str, TableVersion], entries: dict[str, int],
                  checkpoint: CheckpointMetadata | None, cursor) -> CheckpointMetadata:
        ctx, spec = self.ctx, self.ctx.spec
        return CheckpointMetadata.of_state(
            spec, cid, plan.batch_id, ctx.p, ctx.maxp, source_offsets=plan.end_offsets if ctx.keeps_offsets else {},
            state=state, descriptors=present(checkpoint, self.states, entries),
            entries={k: v for k, v in sorted(entries.items()) if v}, completed_ms=wall_clock_ms(),
            processing_time=plan.timestamp, run_id=ctx.run_id, sink=self._sink.version(self._sink_run),
            cleanup_cursor=cursor, airflow_run=AirflowRun.of_environment())

    def start(self) -> None:
        """Count from the checkpoint the run restored (none: from nothing)."""
        checkpoint = self.checkpoint
        self._entries = dict(checkpoint.entries) if checkpoint else {}  # live entries per state, as the run goes
        self._cursor = checkpoint.cleanup_cursor if checkpoint else None  # TTL's incremental cleanup's

    def advance(self, plan: MicrobatchPlan, i: int) -> None:
        """Count in what ``plan``'s microbatch (the run's ``i``-th) changed (and a TTL cleanup after it removed)."""
        entries = self._entries
        for name, delta in self.stats[i].entries_delta.items():
            entries[name] = entries.get(name, 0) + delta
        sweep = self.sweeps.get(plan.batch_id, CleanupNote({}, self._cursor))  # a TTL cleanup after it?
        for name, count in sweep.removed.items():
            entries[name] = entries.get(name, 0) - count
        self._cursor = sweep.cursor
        if self.ctx.keeps_offsets:
            entries[SOURCE_OFFSETS_STATE] = 1
        if plan.event_time is not None and self.ctx.spec.watermark_strategy is not None:
            entries[WATERMARK_STATE] = self.ctx.p  # an entry per subtask (``run.timing.watermark_rows``)

    def record(self, cid: int, plan: MicrobatchPlan) -> CheckpointMetadata:
        """This operator's record of checkpoint ``cid`` at ``plan``'s microbatch (its tables captured)."""
        state = self._state(cid, plan, self._entries)
        return self._metadata(cid, plan, state, self._entries, self.checkpoint, self._cursor)

    def discard(self, old: CheckpointMetadata, retained: list[CheckpointMetadata]) -> None:
        """Release what this operator's part ``old`` of an expired checkpoint alone held."""
        self.keyed.discard(old, retained)
        self.operator.discard(old, retained)


def take_checkpoints(parts: list[Checkpointer], plans: list[MicrobatchPlan], sink_uid: str | None = None
                     ) -> list[int]:
    """Write a run's due checkpoints, then expire old ones; return the ids taken. ``parts`` has a checkpointer per
    operator, the first operator's first (its store keeps the job's checkpoints): each checkpoint holds every
    operator's record of the same microbatch, and the version of the job's sink that ``sink_uid`` writes."""
    head = parts[0]
    ctx = head.ctx
    due = _due(ctx, ctx.store.next_checkpoint_id(), plans)
    for part in parts:
        part.start()
    taken = []
    for i, plan in enumerate(plans):
        for part in parts:
            part.advance(plan, i)
        cid = due.get(plan.batch_id)
        if cid is None:
            continue
        ctx.fault("before_checkpoint", [plan.batch_id])
        row = CheckpointMetadata.of_operators([part.record(cid, plan) for part in parts], sink_uid)
        ctx.store.publish(row)  # last: the checkpoint exists only once this row does
        ctx.fault("after_checkpoint", [plan.batch_id])
        taken.append(cid)
        ctx.say(f"checkpoint {cid} at microbatch {plan.batch_id}, state {row.total_entries} entries, "
                f"{row.size_bytes} bytes in {row.num_files} files")
    by_uid = {part.ctx.spec.uid: part for part in parts}
    ctx.store.expire(ctx.spec.num_retained, lambda uid, old, kept: by_uid[uid].discard(old, kept) if uid in by_uid
                     else None)  # an operator the job no longer has: its folder stays as it was
    return taken
