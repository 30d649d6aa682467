"""Step 3 of a run: write the run's files into the sink and state tables (one idempotent Delta commit each, at
once; the sink checked again first, ``outputs``), write the source offsets, run TTL's incremental cleanup, and
mark each microbatch committed."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from ..delta.backends import StateBackend
from ..records.layout import KEYED, OPERATOR, SINK, OperatorRow
from ..records.metadata import CheckpointMetadata, MicrobatchPlan, StateInfo
from ..records.stats import CleanupNote, MicrobatchStats, WrittenFile
from ..repartition import place_source_entries
from ..side_outputs import SIDE_PREFIX
from ..state.operator import SOURCE_OFFSETS_STATE, SPLIT_DISTRIBUTE
from ..state.ttl.cleanup import run_incremental_cleanup
from ..subtask.run_files import RunOutputs, write_rows
from .context import RunContext, wall_clock_ms
from .outputs import sink_targets
from .timing import watermark_rows


def source_offset_rows(ctx: RunContext, plans: list[MicrobatchPlan]) -> list[OperatorRow]:
    """The source offsets after each microbatch as operator ListState (one entry per source split), placed on
    the subtasks as a rescale places them (``repartition.place_source_entries``)."""
    if not ctx.keeps_offsets:
        return []  # a dataflow's later operator: the first keeps the offsets
    rows = []
    for p in plans:
        entries = [e for name, source in ctx.sources().items()
                   for e in source.split_entries(name, p.end_offsets[name])]
        if not entries:
            continue
        for subtask, part in enumerate(place_source_entries(entries, ctx.p)):
            rows.append(OperatorRow(SOURCE_OFFSETS_STATE, subtask, SPLIT_DISTRIBUTE,
                                    json.dumps(part, sort_keys=True), p.batch_id))
    return rows


def write(ctx: RunContext, plans: list[MicrobatchPlan], outputs: RunOutputs, files: dict[str, list[WrittenFile]],
          backends: dict[str, StateBackend], written: dict[str, set[str]]) -> None:
    """Commit the run's files to the sink and both state tables (``written`` gets, per table, the files its
    commit added). Each commit is idempotent and independent of the others, so they run at once: a commit is
    mostly driver-side latency."""
    batch_ids, last = [p.batch_id for p in plans], plans[-1].batch_id
    ctx.lease.heartbeat()  # a run that lost its lease must not write
    files[OPERATOR] += write_rows(outputs.tables[OPERATOR], outputs.token,
                                  source_offset_rows(ctx, plans) + watermark_rows(ctx, plans))
    staged = {SIDE_PREFIX + n for n in ctx.side_edges} | ({SINK} if ctx.edge else set())
    sinks = {name: target for name, target in sink_targets(ctx).items() if name not in staged}  # edges stay staged

    def sink(name: str) -> None:
        ctx.fault("before_sink_write", batch_ids)
        (target, run), mine = sinks[name], files.get(name, [])
        target.commit(run, outputs.tables[name], mine, last)
        written[name] = {f.path for f in mine}
        ctx.fault("after_sink_write", batch_ids)

    def state(name: str) -> None:
        ctx.fault("before_state_write", batch_ids)
        backends[name].write_run(files[name], last)
        written[name] = {f.path for f in files[name]}
        ctx.fault("after_state_write", batch_ids)

    with ThreadPoolExecutor(2 + len(sinks), thread_name_prefix="lakestate-write") as pool:
        futures = [pool.submit(sink, name) for name in sinks]
        futures += [pool.submit(state, KEYED), pool.submit(state, OPERATOR)]
        for future in futures:
            future.result()


def cleanup(ctx: RunContext, keyed_backend: StateBackend, registered: dict[str, StateInfo],
            checkpoint: CheckpointMetadata | None, plans: list[MicrobatchPlan],
            stats: list[MicrobatchStats]) -> dict[int, CleanupNote]:
    """TTL's incremental cleanup after the run's state is written (``ttl.run_incremental_cleanup``)."""
    return run_incremental_cleanup(keyed_backend, registered, checkpoint, plans, stats, ctx.p, ctx.maxp,
                                   ctx.fault, ctx.say)


def mark_committed(ctx: RunContext, plans: list[MicrobatchPlan], stats: list[MicrobatchStats],
                   record: bool = True) -> None:
    """Mark each microbatch done (its commit file; a dataflow's later operators write none, ``record``), then say
    what each did."""
    batch_ids = [s.batch_id for s in stats]
    ctx.fault("before_commit", batch_ids)
    committed = wall_clock_ms()
    for s in stats if record else ():
        ctx.store.write_commit(s.batch_id, s.commit_record(ctx.run_id, committed))
    ctx.fault("after_commit", batch_ids)
    for s, plan in zip(stats, plans):
        timing = ""
        if plan.event_time is not None:
            timing += f", watermark {plan.watermark}"
        if s.timers_fired or s.timers_in:
            timing += f", {s.timers_fired} timers fired ({s.timers_in} stored timers loaded)"
        side = f", {s.side_out} to side outputs" if s.side_out else ""
        side += f", {s.late_dropped} late records dropped" if s.late_dropped else ""
        ctx.say_of_operator(f"microbatch {s.batch_id}: {s.records_in} records in ({s.broadcast_in} broadcast), "
                            f"{s.keys} keys, {s.records_out} out{side}, {s.state_upserts} state entries written, "
                            f"{s.state_deletes} deleted" + timing)
