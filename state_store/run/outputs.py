"""Where a run's subtasks write the rows of its output tables (the sink and each side output), checked before
anything is read, and the poison records of its sources' dead-letter side outputs (``commit`` commits
them)."""
from __future__ import annotations

import json

from ..delta.log import app_transaction_version, table_metadata
from ..errors import InputError
from ..records.layout import SINK
from ..records.metadata import MicrobatchPlan
from ..records.stats import MicrobatchStats, WrittenFile
from ..sources import SINK_MICROBATCH
from ..spark.session import ddl_schema
from ..storage import options_of
from ..subtask.run_files import OutputTable, RunOutputs, SinkFiles
from .context import RunContext


def _shape(field_type):
    """A Spark schema's JSON without what does not change what a column holds (nullability, metadata)."""
    if isinstance(field_type, dict):
        return {k: _shape(v) for k, v in field_type.items()
                if k not in ("nullable", "metadata", "containsNull", "valueContainsNull")}
    if isinstance(field_type, list):
        return [_shape(v) for v in field_type]
    return field_type


def sink_output(ctx: RunContext, token: str) -> OutputTable:
    """Where the subtasks write the sink rows (``sink_like_output``)."""
    return sink_like_output(ctx, token, SINK, ctx.sink_path, ctx.spec.output_type.spark_schema_ddl(),
                            ctx.sink_app_id, "the job's output_type")


def side_outputs(ctx: RunContext, token: str) -> dict[str, OutputTable]:
    """Where the subtasks write each side output's rows (``sink_like_output``), by table name."""
    return {tag.table: sink_like_output(ctx, token, tag.table, ctx.side_output_path(tag),
                                        tag.type_info.spark_schema_ddl(), ctx.side_app_id(tag),
                                        f"side output {tag.name!r}'s type")
            for tag in ctx.spec.side_outputs}


def sink_like_output(ctx: RunContext, token: str, name: str, path, columns: str, app_id: str,
                     declared: str) -> OutputTable:
    """Where the subtasks write the rows of the sink (or a side output): the table itself when Lakestate can
    add files to it directly, else a staging directory whose rows a Spark append then writes (see ``write``).
    Refuses, before anything is read, a table whose columns are not the ``declared`` ones."""
    ddl = columns + f", {SINK_MICROBATCH} bigint"
    meta = table_metadata(path)
    if meta is None:  # created by the run's commit
        return OutputTable(name, str(path), ddl, (), None, SINK_MICROBATCH, options_of(path), declared)
    check_columns(ctx, name, path, ddl, declared, meta)
    committed = app_transaction_version(path, app_id)
    text, conf = meta["schemaString"], meta["configuration"]
    plain = (not any(k.startswith("delta.constraints.") for k in conf)
             and conf.get("delta.columnMapping.mode", "none") == "none"
             and not any(m in text for m in ("delta.generationExpression", "delta.identity", "delta.invariants")))
    directory = path if plain else ctx.store.staging(token) / name.replace(":", "-")
    return OutputTable(name, str(directory), ddl, (), committed, SINK_MICROBATCH, options_of(directory))


def check_columns(ctx: RunContext, name: str, path, ddl: str, declared: str, meta: dict) -> None:
    """Refuse a sink (or side output) table ``path`` whose columns (``meta``, its Delta metadata) are not
    ``ddl``'s, ``declared`` naming where they were declared."""
    actual = _shape(json.loads(meta["schemaString"]))
    expected = _shape(ddl_schema(ctx.spark, ddl).jsonValue())
    if actual != expected or meta.get("partitionColumns"):
        names = [f["name"] for f in actual["fields"]]
        raise InputError(
            f"the {'sink' if name == SINK else 'side output table'} {path} has columns {names}"
            f"{' partitioned' if meta.get('partitionColumns') else ''} "
            f"that do not match {declared} ({ddl}); point the job at a new table, or change the type back")


def dead_letter_files(ctx: RunContext, plans: list[MicrobatchPlan], outputs: RunOutputs,
                      stats: list[MicrobatchStats], files: dict[str, list[WrittenFile]]) -> None:
    """The poison records of the run's sources that have a dead-letter side output (``KafkaSource``'s
    ``on_malformed``), read again from their pinned ranges and written from the driver into that side output's
    files (``files``, committed with the others by ``write``): a microbatch's rows at or below what the table
    committed are left out (``SinkFiles``), so a replay writes each once. Only such jobs pay this second read."""
    by_batch = {s.batch_id: s for s in stats}
    for input_ in ctx.spec.inputs:
        found = input_.source.read_dead_letters(ctx.spark, [p.range_of(input_.name) for p in plans]) \
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
