"""``OverAggregate``: Flink SQL's OVER aggregation in event time (``agg(...) OVER (PARTITION BY k ORDER BY t ROWS |
RANGE BETWEEN ... PRECEDING AND CURRENT ROW)``) as a keyed function (``Dataflow.over``).

Each row is emitted once, when the watermark passes its time, with the aggregates of its window: in ``RANGE``,
the rows of its key whose time is within ``preceding`` milliseconds before its own, or every earlier one
(``preceding=None``, ``UNBOUNDED``), its peers of the same time included; in ``ROWS``, the ``preceding`` rows before
it in time order (ties in the order they came), or every earlier one. The output is insert-only: the input's
columns and each aggregate's. A row at or behind the watermark when it comes is late and dropped, counted in
the run's line (Flink's ``RowTime*PrecedingFunction`` s). As Flink's, the rows wait in keyed state (ListState
``rows``) with a timer at each row's time, and a window's rows no later row can need are dropped. No Spark here.
"""
from __future__ import annotations

from typing_extensions import override

from ..errors import ConfigError
from ..functions import KeyedProcessFunction
from ..state.descriptors import ListStateDescriptor, ValueStateDescriptor
from ..types import RowTypeInfo, Types
from ..windows.columns import ColumnAggregate

FRAMES = ("rows", "range")


class OverAggregate(KeyedProcessFunction):
    """``aggregate``'s columns over each row's window of ``frame`` (``rows`` or ``range``) and ``preceding`` (rows,
    or milliseconds; None: unbounded), ordered by ``time_column``; see the module docstring."""

    def __init__(self, aggregate: ColumnAggregate, row_type: RowTypeInfo, key_name, key_type, time_column: str,
                 frame: str, preceding: int | None):
        self.row_type, self.time_column, self.frame, self.preceding = row_type, time_column, frame, preceding
        self.aggregate = aggregate.bind(dict(row_type.fields), key_name, key_type)
        clash = [self.aggregate.output_name(n) for n, _, _ in self.aggregate.aggregates
                 if self.aggregate.output_name(n) in row_type.fields]
        if clash:
            raise ConfigError(f"over(...): the stream already has a column {clash[0]!r}; name the aggregate otherwise")

    def output_type(self) -> RowTypeInfo:
        """The input's columns, then each aggregate under its name."""
        agg, fields = self.aggregate, self.row_type.fields
        return Types.ROW_NAMED([*fields] + [agg.output_name(n) for n, _, _ in agg.aggregates],
                               [*fields.values()] + [agg.value_type(op, c) for _, op, c in agg.aggregates])

    @override
    def open(self, ctx) -> None:
        self.rows = ctx.get_list_state(ListStateDescriptor("rows", self.row_type))
        # An unbounded window's aggregates of every row fired so far (and, in ROWS, nothing else is kept).
        self.acc = ctx.get_state(ValueStateDescriptor("acc", self.aggregate.accumulator_type()))

    @override
    def process(self, key, records, ctx):
        timers, t = ctx.timer_service(), self.time_column
        watermark, kept = timers.current_watermark(), []
        for record in records:
            if record[t] is None or record[t] <= watermark:
                ctx.count_late_dropped()
                continue
            kept.append(record)
            timers.register_event_time_timer(record[t])
        if kept:
            self.rows.add_all(kept)
        return None

    @override
    def on_timer(self, timestamp: int, ctx):
        t, agg = self.time_column, self.aggregate
        buffered = list(self.rows.get() or [])
        due = [r for r in buffered if r[t] == timestamp]
        if not due:
            return None
        if self.preceding is None:  # unbounded: the rows fired so far are their accumulator
            acc, out = self.acc.value() or agg.create_accumulator(), []
            if self.frame == "range":
                for r in due:
                    acc = agg.add(r, acc)
                out = [{**r, **agg.get_result(acc)} for r in due]
            else:
                for r in due:
                    acc = agg.add(r, acc)
                    out.append({**r, **agg.get_result(acc)})
            self.acc.update(acc)
            self.rows.update([r for r in buffered if r[t] != timestamp])
            return out
        if self.frame == "range":
            window = [r for r in buffered if timestamp - self.preceding <= r[t] <= timestamp]
            acc = agg.create_accumulator()
            for r in window:
                acc = agg.add(r, acc)
            result = agg.get_result(acc)
            # A later row's window starts after this one's: what is older than this one's start is not needed.
            self.rows.update([r for r in buffered if r[t] >= timestamp - self.preceding])
            return [{**r, **result} for r in due]
        ordered = sorted((r for r in buffered if r[t] <= timestamp), key=lambda r: r[t])  # stable: ties by arrival
        out = []
        for i, r in enumerate(ordered):
            if r[t] != timestamp:
                continue
            acc = agg.create_accumulator()
            for w in ordered[max(0, i - self.preceding):i + 1]:
                acc = agg.add(w, acc)
            out.append({**r, **agg.get_result(acc)})
        # The last `preceding` rows up to this time are what a later row's window can still reach.
        later = [r for r in buffered if r[t] > timestamp]
        self.rows.update(ordered[max(0, len(ordered) - self.preceding):] + later if self.preceding else later)
        return out
