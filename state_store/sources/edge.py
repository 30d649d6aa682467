"""``EdgeSource``: inside a dataflow's run, what the operator upstream emitted (its subtasks' output files)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typing_extensions import override

from ..errors import ConfigError
from ..types import RowTypeInfo
from .base import SINK_MICROBATCH, Source


def edge_name(uid: str, side_output: str | None = None) -> str:
    """What a run calls an operator's emitted rows ("<uid>") or one of its side outputs read as a stream
    ("<uid>/side:<tag>")."""
    return uid if side_output is None else f"{uid}/side:{side_output}"


@dataclass
class EdgeSource(Source):
    """Inside a dataflow's run (``dataflow``), what operator ``upstream`` emitted: its subtasks' output files of
    the run (``files``, set by the run), each row in the microbatch it was emitted for. A record's place is its
    file (the files ordered by subtask), then its position there: operator k+1 gets operator k's output of a
    microbatch in one deterministic order. It plans nothing and keeps no offsets (the dataflow's source does)."""

    upstream: str
    schema: RowTypeInfo
    files: tuple[str, ...] = ()
    output: str | None = None  # the side output of ``upstream`` it reads (``get_side_output``); None: its rows
    # Spark SQL between the operators (``Dataflow.select_expr``): the rows ``where`` keeps, as ``columns`` (name ->
    # expression over ``schema``'s columns) of ``row_type``; none: the rows as they were emitted.
    where: str | None = None
    columns: tuple[tuple[str, str], ...] = ()
    row_type: RowTypeInfo | None = None
    functions: tuple = ()  # the scalar functions they call: (name, Python function, Spark type) each

    @property
    def edge(self) -> str:
        """The name of what it reads among a run's emitted outputs (``edge_name``)."""
        return edge_name(self.upstream, self.output)

    @override
    def declared_fields(self) -> dict:
        return (self.row_type or self.schema).fields

    @override
    def validate(self, what: str) -> None:
        if not isinstance(self.schema, RowTypeInfo):
            raise ConfigError(f"{what}: operator {self.upstream!r} must declare its output_type with "
                              f"Types.ROW_NAMED([...], [...])")

    @override
    def describe(self) -> dict:
        described = {"type": "operator", "uid": self.upstream}
        if self.output is not None:
            described["side_output"] = self.output
        if self.row_type is not None:
            described |= {"where": self.where, "select": dict(self.columns)}
        return described

    @override
    def initial_offset(self) -> dict:
        return {}

    def next_offset(self, spark, start: dict) -> dict | None:
        """Never planned: a run hands it what the upstream operator emitted (``files``)."""
        return None

    @override
    def split_entries(self, name: str, offset: dict) -> list[dict[str, Any]]:
        return []  # the dataflow's source keeps the offsets

    @override
    def record_ddl(self, spark) -> str:
        return (self.row_type or self.schema).spark_ddl()

    def read_run(self, spark, ranges: list[tuple[int, dict, dict]]):
        """The upstream operator's rows of this run (every microbatch of ``ranges``), with
        ``POSITION_COLUMNS`` (the places of the rows as emitted, so a filter keeps the order); None when it
        emitted nothing."""
        from pyspark.sql import functions as F

        if not self.files:
            return None
        names = [Path(f).name for f in self.files]
        df = spark.read.schema(f"{self.schema.spark_schema_ddl()}, `{SINK_MICROBATCH}` bigint").parquet(*self.files)
        index_map = F.create_map(*[x for i, n in enumerate(names) for x in (F.lit(n), F.lit(i))])
        df = df.select(
            *[F.col(f"`{c}`") for c in self.schema.fields],
            F.col(f"`{SINK_MICROBATCH}`").alias("batch_id"),
            F.element_at(index_map, F.col("_metadata.file_name")).cast("int").alias("file_idx"),
            F.col("_metadata.file_block_start").cast("bigint").alias("block"),
            F.monotonically_increasing_id().alias("row"),
        )
        if self.row_type is None:
            return df
        from .query import queried

        return queried(spark, df, self.where, self.columns, self.row_type, self.functions)
