"""Step 1 of a run: the checkpoint it continues from, and its microbatches, planned write-ahead."""
from __future__ import annotations

import json
from typing import Callable

from ..catalog.job_store import CorruptCheckpoint, JobStore
from ..delta.backends import point_damage
from ..errors import InputError, RestoreError
from ..job import Input, InputRole
from ..records.layout import KEYED
from ..records.metadata import CheckpointMetadata, MicrobatchPlan
from ..sources import warn_changed
from ..sources.base import position
from ..subtask.exchange import MAX_RUN_MICROBATCHES
from ..watermarks import MAX_WATERMARK, MIN_WATERMARK, NO_EVENT_TIME, EventClock, GeneratorRun, generated_clock
from .context import RunContext

TimersDue = Callable[[int, int], bool]


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


def _plan_one(ctx: RunContext, batch_id: int, offsets: dict, clock: EventClock,
              timers_due: TimersDue | None) -> MicrobatchPlan | None:
    """The next microbatch: the new input of each source, or, with none, a timer-only microbatch when timers
    are due at this processing time (``timers_due``); None when there is nothing to do."""
    ranges, records, any_new = {}, 0, False
    now = int(ctx.clock())
    paused = _aligned_out(ctx, batch_id, clock, now)
    for input_ in ctx.planned_inputs:
        name, source = input_.name, input_.source
        start = offsets.get(name) or source.initial_offset()
        end = None if name in paused else source.next_offset(ctx.spark, start)
        if end is not None:  # e.g. Kafka partitions read for the first time
            for line in source.plan_notes(start, end):
                ctx.say(f"microbatch {batch_id}: {line}")
        any_new |= end is not None
        ranges[name] = {"start": start, "end": end if end is not None else start}
        if input_.role is not InputRole.BROADCAST and end is not None:
            counted = source.count_records(start, end)  # None: not known without reading the range
            records = None if counted is None or records is None else records + counted
    timed = [i for i in ctx.planned_inputs if i.watermark_strategy is not None]
    event_time = None
    if len(timed) > 1:
        event_time = _inputs_clock(ctx, timed, ranges, clock, now, paused)
    elif timed and timed[0].watermark_strategy.generator is not None:
        event_time = _generated(ctx, batch_id, timed[0], ranges[timed[0].name], clock, now)
    elif timed:
        strategy = timed[0].watermark_strategy
        splits, latest, has_input = _event_times(ctx, timed[0].source, ranges[timed[0].name],
                                                 strategy.timestamp_column)
        event_time = (strategy.advance(clock, latest, now, has_input) if splits is None
                      else strategy.advance_splits(clock, splits, latest, now))
    if not any_new:
        if timers_due is None or not timers_due(now, (event_time or clock).watermark):
            return None
        ctx.say(f"no new input, timers due at processing time {now}: a timer-only microbatch {batch_id}")
    return MicrobatchPlan(batch_id, ranges, now, ctx.run_id, records if any_new else 0,
                          event_time.to_dict() if event_time is not None else None)


def _generated(ctx: RunContext, batch_id: int, input_: Input, rng: dict, clock: EventClock, now: int) -> EventClock:
    """The clock after a microbatch of an input whose strategy has a ``WatermarkGenerator``: its records, read
    in the source's order (the planning process reads the range: a cost of its own), each given to the run's
    generator with its event time (``watermarks.generated_clock``)."""
    from ..sources.base import POSITION_COLUMNS

    generation = ctx.generators.get(input_.name)
    if generation is None:
        generation = ctx.generators[input_.name] = GeneratorRun(input_.watermark_strategy)
    column, has_input = input_.watermark_strategy.timestamp_column, rng["end"] != rng["start"]
    events = []
    if has_input:
        records = input_.source.read_run(ctx.spark, [(batch_id, rng["start"], rng["end"])])
        if records is not None:
            ordered = records.orderBy(*[c for c in POSITION_COLUMNS if c in records.columns])
            for row in ordered.collect():
                record = {k: v for k, v in row.asDict(recursive=True).items() if k not in POSITION_COLUMNS}
                events.append((record, record.get(column)))
    missing = sum(1 for _, ts in events if ts is None)
    if missing:
        raise InputError(f"microbatch {batch_id}: {missing} records of the {input_.name} input have no event time "
                         f"in column {column!r}; every record needs one (Flink's TimestampAssigner returns a long): "
                         f"fill or filter them in the source")
    return generated_clock(generation, clock, events, now, has_input)


def _aligned_out(ctx: RunContext, batch_id: int, clock: EventClock, now: int) -> frozenset[str]:
    """The inputs watermark alignment pauses in microbatch ``batch_id`` (Flink's FLIP-182, once a microbatch):
    those whose own watermark after the last microbatch is past the least of their alignment group's (over the
    group's inputs not idle at ``now``) plus the group's max drift. Each is named in the run's log."""
    groups: dict[str, list[Input]] = {}
    for input_ in ctx.planned_inputs:
        strategy = input_.watermark_strategy
        if strategy is not None and strategy.alignment_group is not None:
            groups.setdefault(strategy.alignment_group, []).append(input_)
    paused = set()
    for group, members in sorted(groups.items()):
        own = {i.name: i.watermark_strategy.input_watermark(clock, i.name, now) for i in members}
        known = [w for w in own.values() if w is not None]
        if not known:  # every input of the group idle: nothing to align with
            continue
        least = min(known)
        for input_ in members:
            drift = input_.watermark_strategy.max_drift_ms
            if own[input_.name] is not None and own[input_.name] - drift > least:
                paused.add(input_.name)
                ctx.say(f"microbatch {batch_id}: input {input_.name!r} paused by watermark alignment: its watermark "
                        f"{own[input_.name]} is past group {group!r}'s least, {_shown(least)}, by more than "
                        f"{drift} ms")
    return frozenset(paused)


def _shown(watermark: int) -> str:
    return "none yet" if watermark == MIN_WATERMARK else str(watermark)


def _inputs_clock(ctx: RunContext, timed: list[Input], ranges: dict, clock: EventClock, now: int,
                  paused: frozenset[str] = frozenset()) -> EventClock:
    """The clock of an operator of several inputs with event time (``timed``): each input's splits (a Kafka
    topic's partitions, or the input as one) are splits of one clock, named ``<input>`` or ``<input>/<split>``,
    so the watermark is the least over the inputs (Flink's ``processWatermark1/2``), an input with no record yet
    holding it at none, and an idle split left out as that input's ``with_idleness`` says; each input's splits
    with its own strategy's bound and idleness."""
    splits, latest, strategies, held = [], {}, {}, set()
    for input_ in timed:
        name, strategy = input_.name, input_.watermark_strategy
        own, found, has_input = _event_times(ctx, input_.source, ranges[name], strategy.timestamp_column)
        if own is None:
            names = [name]
            if has_input:
                latest[name] = found
        else:
            names = [f"{name}/{s}" for s in own]
            latest.update({f"{name}/{s}": v for s, v in found.items()})
        splits += names
        strategies.update(dict.fromkeys(names, strategy))
        if name in paused:
            held.update(names)
    return timed[0].watermark_strategy.advance_splits(clock, splits, latest, now, strategies, frozenset(held))


def _event_times(ctx: RunContext, source, rng: dict, column: str):
    """``(splits, latest, has_input)`` of a source's range: its concurrent splits (None: it is one) and the largest
    event time of its records (one value, None without input) or of each split's (a dict, empty without input)."""
    start, end = rng["start"], rng["end"]
    has_input = end != start
    splits = source.event_time_splits(end)
    read = _range_key(source, column, start, end)
    if splits is None and read in ctx.event_times:
        latest = ctx.event_times.pop(read)
    elif splits is None:
        latest = source.max_event_time(ctx.spark, start, end, column) if has_input else None
    else:
        latest = source.split_max_event_times(ctx.spark, start, end, column) if has_input else {}
    return splits, latest, has_input


def _range_key(source, column: str, start: dict, end: dict) -> str:
    """A range of a source's event-time column, as ``ctx.event_times`` keeps it: by its positions (``position``:
    a plan's next start has its end's pins left out)."""
    return json.dumps([source.describe(), column, position(start), position(end)], sort_keys=True, default=str)


def prefetch_event_times(ctx: RunContext, offsets: dict, count: int) -> None:
    """Before a run's first new plan, the largest event time of each of the next ``count`` ranges of each input
    with event time, read at once where the source can (``Source.batch_max_event_times``: one Spark job, all
    the cores, where each plan would read its own range), into ``ctx.event_times`` for ``_event_times``. A plan
    whose range is not one of these (an input paused, new input in between) reads its own. Not for inputs of
    several splits, a ``WatermarkGenerator`` or watermark alignment, nor for a single range."""
    if count < 2 or any(i.watermark_strategy is not None and i.watermark_strategy.alignment_group is not None
                        for i in ctx.planned_inputs):
        return
    for input_ in ctx.planned_inputs:
        strategy, source = input_.watermark_strategy, input_.source
        if strategy is None or strategy.generator is not None or not source.batches_event_times(
                strategy.timestamp_column):
            continue
        start = offsets.get(input_.name) or source.initial_offset()
        ranges = []
        while len(ranges) < count:
            end = source.next_offset(ctx.spark, start)
            if end is None or source.event_time_splits(end) is not None:
                break
            ranges.append((len(ranges), start, end))
            start = position(end)
        found = source.batch_max_event_times(ctx.spark, ranges, strategy.timestamp_column) if len(ranges) > 1 \
            else None
        if found is None:
            continue
        ctx.say(f"event times of the next {len(ranges)} microbatches of input {input_.name!r} read in one pass")
        for i, begin, end in ranges:
            ctx.event_times[_range_key(source, strategy.timestamp_column, begin, end)] = found.get(i)


def _timed(ctx: RunContext) -> bool:
    return any(i.watermark_strategy is not None for i in ctx.planned_inputs)


def _ended(ctx: RunContext, batch_id: int, offsets: dict, clock: EventClock) -> MicrobatchPlan:
    """The microbatch that ends bounded inputs: no records, the watermark at its end."""
    ctx.say(f"end of input: microbatch {batch_id} takes the watermark to its end, firing every event-time window "
            f"and timer")
    ranges = {}
    for input_ in ctx.planned_inputs:
        start = offsets.get(input_.name) or input_.source.initial_offset()
        ranges[input_.name] = {"start": start, "end": start}
    ended = EventClock(MAX_WATERMARK, clock.max_event_time, clock.input_ms, clock.splits)
    return MicrobatchPlan(batch_id, ranges, int(ctx.clock()), ctx.run_id, 0, ended.to_dict())


def plan_run(ctx: RunContext, checkpoint: CheckpointMetadata | None, max_microbatches: int | None,
             max_records: int | None, clock: EventClock = NO_EVENT_TIME, timers_due: TimersDue | None = None,
             end_of_input: bool = False) -> tuple[list[MicrobatchPlan], list[MicrobatchPlan]]:
    """The run's microbatches (recorded plans first, then new ones) and which of them are new; the new ones
    are written before this returns (write-ahead: every range is fixed before anything is read). ``clock`` is
    where event time stood at ``checkpoint``; ``timers_due(now, watermark)`` tells whether a run without new
    input has timers to fire (a timer-only microbatch, at most one per run)."""
    batch_id = checkpoint.batch_id + 1 if checkpoint else 0
    offsets = dict(checkpoint.source_offsets) if checkpoint else {}
    warn_changed(ctx.sources(), offsets, lambda line: ctx.say(f"warning: {line}"))  # once per run
    plans: list[MicrobatchPlan] = []
    new: list[MicrobatchPlan] = []
    records = 0
    limit = min(max_microbatches or MAX_RUN_MICROBATCHES, MAX_RUN_MICROBATCHES)
    while len(plans) < limit:
        plan = ctx.store.read_plan(batch_id)
        if plan is None and not new and max_records is None:
            prefetch_event_times(ctx, offsets, limit - len(plans))
        if plan is None:
            plan = _plan_one(ctx, batch_id, offsets, clock, None if plans else timers_due)
            if plan is None and end_of_input and clock.watermark != MAX_WATERMARK and _timed(ctx):
                plan = _ended(ctx, batch_id, offsets, clock)
            if plan is None:
                ctx.say(f"source drained: no new input after microbatch {batch_id - 1}" if batch_id
                        else "source drained: no input yet")
                break
            if max_records is not None and plans and records + (plan.records or 0) > max_records:
                break
            new.append(plan)
        plans.append(plan)
        records += plan.records or 0
        offsets, clock = plan.end_offsets, plan.clock
        batch_id += 1
    for plan in new:
        ctx.store.write_plan(plan)
    return plans, new
