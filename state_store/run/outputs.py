"""Where a run's subtasks write the rows of its output tables (the sink and each side output), checked before
anything is read, and the poison records of its sources' dead-letter side outputs (``commit`` commits
them)."""
from __future__ import annotations

from ..delta.sink import DeltaSink
from ..records.layout import SINK
from ..records.metadata import MicrobatchPlan
from ..records.stats import MicrobatchStats, WrittenFile
from ..sinks import Sink, SinkRun
from ..sources import SINK_MICROBATCH
from ..subtask.run_files import OutputTable, RunOutputs, SinkFiles
from .context import RunContext


def sink_targets(ctx: RunContext) -> dict[str, tuple[Sink, SinkRun]]:
    """Each table the operator's subtasks write rows of, by table name, with what the run tells its ``Sink``: the
    sink (an operator before a dataflow's last: its edge, a table staged for the next operator), then each side
    output's table beside it (a ``DeltaSink``)."""
    sink = ctx.sink if ctx.sink is not None else DeltaSink(str(ctx.sink_path))
    targets = {SINK: (sink, _run(ctx, SINK, ctx.sink_path, ctx.spec.output_type.spark_schema_ddl(),
                                 ctx.sink_app_id, "the job's output_type"))}
    for tag in ctx.spec.side_outputs:
        staged = ctx.side_edges.get(tag.name)  # read further in the job: staged for the run, as an edge
        location = ctx.side_output_path(tag) if staged is None else staged
        targets[tag.table] = (DeltaSink(ctx.spec.side_output_sink(tag) if staged is None else str(staged)),
                              _run(ctx, tag.table, location, tag.type_info.spark_schema_ddl(),
                                   ctx.side_app_id(tag), f"side output {tag.name!r}'s type"))
    return targets


def _run(ctx: RunContext, table: str, location, columns: str, app_id: str, declared: str) -> SinkRun:
    return SinkRun(table, ctx.spark, location, app_id, f"{columns}, {SINK_MICROBATCH} bigint", declared,
                   ctx.store.staging)


def open_outputs(ctx: RunContext, token: str) -> dict[str, OutputTable]:
    """Where the subtasks write the rows of each table of ``sink_targets``, each sink checked first: an unfit
    table is refused, naming the fix, before anything is read."""
    targets = sink_targets(ctx)
    for sink, run in targets.values():
        sink.check(run)
    return {name: sink.output(run, token) for name, (sink, run) in targets.items()}


def dead_letter_files(ctx: RunContext, plans: list[MicrobatchPlan], outputs: RunOutputs,
                      stats: list[MicrobatchStats], files: dict[str, list[WrittenFile]]) -> None:
    """The poison records of the run's sources that have a dead-letter side output (``KafkaSource``'s
    ``on_malformed``), read again from their pinned ranges and written from the driver into that side output's
    files (``files``, committed with the others by ``write``): a microbatch's rows at or below what the table
    committed are left out (``SinkFiles``), so a replay writes each once. Only such jobs pay this second read."""
    by_batch = {s.batch_id: s for s in stats}
    for input_ in ctx.spec.inputs:
        found = input_.source.read_dead_letters(ctx.spark, [p.range_of(ctx.planned_name(input_)) for p in plans]) \
            if input_.upstream is None else None  # an upstream operator's output has none
        if found is None:
            continue
        tag, rows = found
        table = outputs.tables[tag.table]
        out = SinkFiles(table, outputs.token, ctx.p, tag.type_info.arrow_type())
        count = 0
        for row in rows.collect():  # poison records are few: one Spark job
            record = row.asDict()
            batch_id = record.pop("batch_id")
            out.add(batch_id, record)
            by_batch[batch_id].side_out += 1
            count += 1
        files.setdefault(tag.table, []).extend(out.close())
        if count:
            ctx.say(f"{count} malformed Kafka records to the dead-letter side output {tag.name!r} "
                    f"({ctx.side_output_path(tag)})")
