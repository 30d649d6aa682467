"""``QuerySource``: a table's source with the stateless part of a query over it (a ``WHERE`` and the columns a
``SELECT`` computes), evaluated by Spark as the run reads the records, so that scalar expressions keep Spark
SQL's semantics (nulls, casts, overflow). Everything else (offsets, plans, event time) is the source's own: a
watermark is computed on the records before the filter, as Flink's is at its table."""
from __future__ import annotations

from dataclasses import dataclass

from typing_extensions import override

from ..sources.base import POSITION_COLUMNS, Source
from ..types import RowTypeInfo


@dataclass(frozen=True)
class QuerySource(Source):
    """``source``'s records that ``where`` (Spark SQL, None: all) keeps, as the columns ``columns`` (name -> Spark
    SQL expression) of ``row_type``."""

    source: Source
    where: str | None
    columns: tuple[tuple[str, str], ...]
    row_type: RowTypeInfo

    @override
    def validate(self, what: str) -> None:
        self.source.validate(what)

    @override
    def describe(self) -> dict:
        return {**self.source.describe(), "where": self.where, "select": dict(self.columns)}

    @override
    def declared_fields(self) -> dict:
        return self.row_type.fields

    @override
    def initial_offset(self) -> dict:
        return self.source.initial_offset()

    @override
    def next_offset(self, spark, start: dict) -> dict | None:
        return self.source.next_offset(spark, start)

    @override
    def count_records(self, start: dict, end: dict) -> int | None:
        return self.source.count_records(start, end)

    @override
    def plan_notes(self, start: dict, end: dict) -> list[str]:
        return self.source.plan_notes(start, end)

    @override
    def changed_since_read(self, offset: dict) -> list[str]:
        return self.source.changed_since_read(offset)

    @override
    def event_time_splits(self, end: dict) -> list[str] | None:
        return self.source.event_time_splits(end)

    @override
    def max_event_time(self, spark, start: dict, end: dict, column: str) -> int | None:
        return self.source.max_event_time(spark, start, end, column)

    @override
    def split_max_event_times(self, spark, start: dict, end: dict, column: str) -> dict[str, int | None]:
        return self.source.split_max_event_times(spark, start, end, column)

    @override
    def record_ddl(self, spark) -> str:
        return self.row_type.spark_ddl()

    @override
    def read_run(self, spark, ranges):
        from pyspark.sql import functions as F

        records = self.source.read_run(spark, ranges)
        if records is None:
            return None
        if self.where is not None:
            records = records.filter(F.expr(self.where))
        return records.select(*[F.expr(e).cast(self.row_type.fields[n].spark_ddl()).alias(n)
                                for n, e in self.columns], *POSITION_COLUMNS)

    @override
    def read_dead_letters(self, spark, ranges):
        return self.source.read_dead_letters(spark, ranges)

    @override
    def split_entries(self, name: str, offset: dict):
        return self.source.split_entries(name, offset)
