"""Step 1 of a run: the checkpoint it continues from, and its microbatches, planned write-ahead."""
from __future__ import annotations

from ..backends import point_damage
from ..errors import RestoreError
from ..exchange import MAX_RUN_MICROBATCHES
from ..job_store import CorruptCheckpoint, JobStore
from ..records import KEYED, CheckpointMetadata, MicrobatchPlan
from ..sources import warn_changed
from .context import RunContext


def restore_point(spark, store: JobStore, say) -> CheckpointMetadata | None:
    """The newest retained checkpoint that can be restored: its file readable, and every log and data file
    it pins there. A damaged one is named in a warning and the one before it is used (its later
    microbatches are replayed from their recorded plans), except where the delta backend's table itself is
    damaged: every run appends to that table, so an older checkpoint cannot stand in for it."""
    problems: list[str] = []
    for cid in reversed(store.checkpoint_ids()):
        try:
            checkpoint = store.checkpoint(cid)
        except CorruptCheckpoint as e:
            problems.append(str(e))
            continue
        damage = point_damage(spark, checkpoint, store.job_dir)
        if damage and checkpoint.table(KEYED).incremental:
            raise RestoreError("; ".join(damage) + ". The delta backend appends every run to its state "
                               "tables, so an older checkpoint cannot stand in for a damaged table")
        if damage:
            problems.extend(damage)
            continue
        for problem in problems:
            say(f"warning: {problem}")
        if problems:
            say(f"warning: falling back to checkpoint {cid} (microbatch {checkpoint.batch_id}); the "
                f"microbatches after it are replayed from their recorded plans")
        return checkpoint
    if problems:
        raise RestoreError("no retained checkpoint can be restored: " + " | ".join(problems))
    return None


def _plan_one(ctx: RunContext, batch_id: int, offsets: dict) -> MicrobatchPlan | None:
    ranges, records, any_new = {}, 0, False
    for name, source in ctx.sources().items():
        start = offsets.get(name) or source.initial_offset()
        end = source.next_offset(ctx.spark, start)
        any_new |= end is not None
        ranges[name] = {"start": start, "end": end if end is not None else start}
        if name == "main" and end is not None:
            records = source.count_records(start, end)
    if not any_new:
        return None
    return MicrobatchPlan(batch_id, ranges, int(ctx.clock()), ctx.run_id, records)


def plan_run(ctx: RunContext, checkpoint: CheckpointMetadata | None, max_microbatches: int | None,
             max_records: int | None) -> tuple[list[MicrobatchPlan], list[MicrobatchPlan]]:
    """The run's microbatches (recorded plans first, then new ones) and which of them are new; the new ones
    are written before this returns (write-ahead: every range is fixed before anything is read)."""
    batch_id = checkpoint.batch_id + 1 if checkpoint else 0
    offsets = dict(checkpoint.source_offsets) if checkpoint else {}
    warn_changed(ctx.sources(), offsets, lambda line: ctx.say(f"warning: {line}"))  # once per run
    plans: list[MicrobatchPlan] = []
    new: list[MicrobatchPlan] = []
    records = 0
    limit = min(max_microbatches or MAX_RUN_MICROBATCHES, MAX_RUN_MICROBATCHES)
    while len(plans) < limit:
        plan = ctx.store.read_plan(batch_id)
        if plan is None:
            plan = _plan_one(ctx, batch_id, offsets)
            if plan is None:
                ctx.say(f"source drained: no new input after microbatch {batch_id - 1}" if batch_id
                        else "source drained: no input yet")
                break
            if max_records is not None and plans and records + (plan.records or 0) > max_records:
                break
            new.append(plan)
        plans.append(plan)
        records += plan.records or 0
        offsets = plan.end_offsets
        batch_id += 1
    for plan in new:
        ctx.store.write_plan(plan)
    return plans, new
