"""Step 4 of a run: a checkpoint every ``checkpoint_interval`` microbatches and at the end of the run, each
pinning the table versions of its microbatch, written last; then older ones expire."""
from __future__ import annotations

from ..delta.backends import StateBackend
from ..delta.log import sink_version
from ..records.layout import KEYED, OPERATOR
from ..records.metadata import AirflowRun, CheckpointMetadata, MicrobatchPlan, StateInfo, TableVersion
from ..records.stats import CleanupNote, MicrobatchStats
from ..state.operator import SOURCE_OFFSETS_STATE
from ..state.ttl.tables import count_entries, drop_expired, ttl_states
from ..watermarks import WATERMARK_STATE
from .context import RunContext, wall_clock_ms


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
    """Takes one run's checkpoints: ``Checkpointer(ctx, backends, states).take(checkpoint, plans, stats, sweeps)``
    with ``states`` every state the run's definition registered (lazily registered ones marked)."""

    def __init__(self, ctx: RunContext, keyed: StateBackend, operator: StateBackend, states: dict[str, StateInfo]):
        self.ctx, self.keyed, self.operator, self.states = ctx, keyed, operator, states
        self.cleaned = ttl_states(states, "full_snapshot")

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
            processing_time=plan.timestamp, run_id=ctx.run_id, sink=sink_version(ctx.sink_path),
            cleanup_cursor=cursor, airflow_run=AirflowRun.of_environment())

    def _start(self, checkpoint: CheckpointMetadata | None) -> None:
        self._entries = dict(checkpoint.entries) if checkpoint else {}  # live entries per state, as the run goes
        self._cursor = checkpoint.cleanup_cursor if checkpoint else None  # TTL's incremental cleanup's

    def _advance(self, plan: MicrobatchPlan, s: MicrobatchStats, sweeps: dict[int, CleanupNote]) -> None:
        """Count in what ``plan``'s microbatch changed (and a TTL cleanup after it removed)."""
        entries = self._entries
        for name, delta in s.entries_delta.items():
            entries[name] = entries.get(name, 0) + delta
        sweep = sweeps.get(plan.batch_id, CleanupNote({}, self._cursor))  # a TTL cleanup after it?
        for name, count in sweep.removed.items():
            entries[name] = entries.get(name, 0) - count
        self._cursor = sweep.cursor
        if self.ctx.keeps_offsets:
            entries[SOURCE_OFFSETS_STATE] = 1
        if plan.event_time is not None and self.ctx.spec.watermark_strategy is not None:
            entries[WATERMARK_STATE] = self.ctx.p  # an entry per subtask (``run.timing.watermark_rows``)

    def _record(self, cid: int, plan: MicrobatchPlan, checkpoint: CheckpointMetadata | None) -> CheckpointMetadata:
        """This operator's record of checkpoint ``cid`` at ``plan``'s microbatch (its tables captured)."""
        state = self._state(cid, plan, self._entries)
        return self._metadata(cid, plan, state, self._entries, checkpoint, self._cursor)

    def take(self, checkpoint: CheckpointMetadata | None, plans: list[MicrobatchPlan], stats: list[MicrobatchStats],
             sweeps: dict[int, CleanupNote], downstream: list[tuple] = (), sink_uid: str | None = None) -> list[int]:
        """Write the run's due checkpoints (``sweeps``: what TTL's incremental cleanup removed after which
        microbatch, and its cursor), then expire old ones; return the ids taken. In a dataflow this is the first
        operator's checkpointer, and ``downstream`` has each later operator's ``(checkpointer, checkpoint,
        stats, sweeps)``: each checkpoint holds every operator's record of the same microbatch, and the version of the
        job's sink that ``sink_uid`` writes."""
        ctx = self.ctx
        due = _due(ctx, ctx.store.next_checkpoint_id(), plans)
        self._start(checkpoint)
        for c, old, _, _ in downstream:
            c._start(old)
        taken = []
        for i, plan in enumerate(plans):
            self._advance(plan, stats[i], sweeps)
            for c, _, their_stats, their_sweeps in downstream:
                c._advance(plan, their_stats[i], their_sweeps)
            cid = due.get(plan.batch_id)
            if cid is None:
                continue
            ctx.fault("before_checkpoint", [plan.batch_id])
            row = self._record(cid, plan, checkpoint)
            if downstream:
                row.operators = {c.ctx.spec.uid: c._record(cid, plan, old) for c, old, _, _ in downstream}
                row.sink = row.operators[sink_uid].sink if sink_uid in row.operators else row.sink
            ctx.store.publish(row)  # last: the checkpoint exists only once this row does
            ctx.fault("after_checkpoint", [plan.batch_id])
            taken.append(cid)
            ctx.say(f"checkpoint {cid} at microbatch {plan.batch_id}, state {row.total_entries} entries, "
                    f"{row.size_bytes} bytes in {row.num_files} files")
        ctx.store.expire(ctx.spec.num_retained, lambda old, retained: self._discard(old, retained, downstream))
        return taken

    def _discard(self, old: CheckpointMetadata, retained: list[CheckpointMetadata], others=()) -> None:
        self.keyed.discard(old, retained)
        self.operator.discard(old, retained)
        for c, _, _, _ in others:
            mine = old.of_operator(c.ctx.spec.uid)
            if mine is not None:
                kept = [r for r in (k.of_operator(c.ctx.spec.uid) for k in retained) if r is not None]
                c._discard(mine, kept)

