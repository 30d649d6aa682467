"""``QuerySource``: a source with the stateless part of a query over it (a ``WHERE`` and the columns a ``SELECT``
computes: SQL's, or ``Dataflow.select_expr``'s on a source), evaluated by Spark as the run reads the records, so
that scalar expressions keep Spark SQL's semantics (nulls, casts, overflow). Everything else (offsets, plans,
event time) is the source's own: a watermark is computed on the records before the filter, as Flink's is at its
table."""
from __future__ import annotations

from dataclasses import dataclass

from typing_extensions import override

from ..types import RowTypeInfo
from .base import POSITION_COLUMNS, Source


def queried(spark, records, where: str | None, columns: tuple, row_type: RowTypeInfo, functions: tuple = ()):
    """``records`` (a DataFrame with ``POSITION_COLUMNS``) that ``where`` keeps, as ``columns`` (name -> Spark SQL)
    cast to ``row_type``, each keeping its place; ``functions`` ((name, Python function, Spark type) each) made
    callable by their names first, as Arrow-optimised Python UDFs."""
    from pyspark.sql import functions as F

    for name, function, result_type in functions:
        spark.udf.register(name, F.udf(function, result_type, useArrow=True))
    if where is not None:
        records = records.filter(F.expr(where))
    return records.select(*[F.expr(e).cast(row_type.fields[n].spark_ddl()).alias(n) for n, e in columns],
                          *POSITION_COLUMNS)


@dataclass(frozen=True)
class QuerySource(Source):
    """``source``'s records that ``where`` (Spark SQL, None: all) keeps, as the columns ``columns`` (name -> Spark
    SQL expression) of ``row_type``."""

    source: Source
    where: str | None
    columns: tuple[tuple[str, str], ...]
    row_type: RowTypeInfo
    functions: tuple = ()  # the scalar functions the expressions call: (name, Python function, Spark type) each
    proctime: str | None = None  # a column of the records' processing time (Flink's PROCTIME()), for the rest

    @override
    def validate(self, what: str) -> None:
        self.source.validate(what)

    @override
    def describe(self) -> dict:
        return {**self.source.describe(), "where": self.where, "select": dict(self.columns),
                **({"functions": [n for n, _, _ in self.functions]} if self.functions else {}),
                **({"proctime": self.proctime} if self.proctime else {})}

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

    def _source_column(self, column: str) -> str | None:
        """The source's column that ``column`` is as it is (None: one this query computes)."""
        expression = dict(self.columns).get(column)
        return column if expression is None else expression[1:-1] if expression == f"`{column}`" else None

    @override
    def max_event_time(self, spark, start: dict, end: dict, column: str) -> int | None:
        """The source's, for a column of its own; for one computed here (a TIMESTAMP's epoch milliseconds), the
        largest of the expression over every record of the range, before the WHERE (as Flink's watermark)."""
        from pyspark.sql import functions as F

        from .base import checked_max_event_time

        own = self._source_column(column)
        if own is not None:
            return self.source.max_event_time(spark, start, end, own)
        records = self.source.read_run(spark, [(0, start, end)])
        if records is None:
            return None
        records = records.select(F.expr(dict(self.columns)[column]).alias(column), *POSITION_COLUMNS)
        at = F.concat_ws(":", *[F.col(c).cast("string") for c in POSITION_COLUMNS[1:]])
        return checked_max_event_time(records, column, at, f"{self.source.describe().get('type', 'source')} record at")

    @override
    def batches_event_times(self, column: str) -> bool:
        own = self._source_column(column)
        return True if own is None else self.source.batches_event_times(own)

    @override
    def batch_max_event_times(self, spark, ranges: list[tuple[int, dict, dict]], column: str) -> dict | None:
        """The source's, for a column of its own; for one computed here, the expression's largest value per
        range over one read of them all (``max_event_time``'s, range by range)."""
        own = self._source_column(column)
        if own is not None:
            return self.source.batch_max_event_times(spark, ranges, own)
        from pyspark.sql import functions as F

        from .base import batch_maxima

        records = self.source.read_run(spark, ranges)
        return {} if records is None else batch_maxima(records, F.expr(dict(self.columns)[column]))

    @override
    def split_max_event_times(self, spark, start: dict, end: dict, column: str) -> dict[str, int | None]:
        """The source's, for a column of its own; for one computed here (a TIMESTAMP's epoch milliseconds), the
        largest of the expression per split over every record of the range, before the WHERE."""
        own = self._source_column(column)
        if own is not None:
            return self.source.split_max_event_times(spark, start, end, own)
        from pyspark.sql import functions as F

        ranges = [(0, start, end)]
        records = self.source.read_run(spark, ranges)
        return {} if records is None else self.split_maxima(records, F.expr(dict(self.columns)[column]), ranges,
                                                            column)

    @override
    def split_maxima(self, records, value, ranges: list[tuple[int, dict, dict]], column: str) -> dict[str, int | None]:
        return self.source.split_maxima(records, value, ranges, column)

    @override
    def record_ddl(self, spark) -> str:
        return self.row_type.spark_ddl()

    @override
    def read_run(self, spark, ranges):
        from pyspark.sql import functions as F

        records = self.source.read_run(spark, ranges)
        if records is None:
            return None
        if self.proctime is not None:
            records = records.withColumn(self.proctime, F.current_timestamp())
        return queried(spark, records, self.where, self.columns, self.row_type, self.functions)

    @override
    def read_dead_letters(self, spark, ranges):
        return self.source.read_dead_letters(spark, ranges)

    @override
    def split_entries(self, name: str, offset: dict):
        return self.source.split_entries(name, offset)
