"""Flink SQL's OVER aggregation in event time, read from SQL (docs/writing/sql.md):

    SELECT user, amount, SUM(amount) OVER (PARTITION BY user ORDER BY ts
                                           ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS last_three
    FROM clicks [WHERE ...]

Every aggregate's window is the same one: ``PARTITION BY`` columns, ``ORDER BY`` the table's event-time column
(ascending), and ``ROWS`` or ``RANGE BETWEEN <n | INTERVAL ...> PRECEDING AND CURRENT ROW``, ``UNBOUNDED
PRECEDING``, or no frame (``RANGE`` unbounded, Flink's default). It compiles to ``Dataflow.over``: each row once
the watermark passes its time, with the aggregates of its window; insert-only. No Spark here.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from ..errors import ConfigError
from .dialect import interval_millis
from .dialect import refuse as _refuse

AGGREGATES = {exp.Count: "count", exp.Sum: "sum", exp.Min: "min", exp.Max: "max", exp.Avg: "avg"}


@dataclass
class OverQuery:
    """An OVER aggregation read from the SQL: its table, filter, window and output columns (output name ->
    ``("column", c)`` or ``("aggregate", internal name)``), and each aggregate's ``op(column)``."""

    table: str
    where: str | None
    keys: list[str]
    time_column: str
    frame: str  # "rows" or "range"
    preceding: int | None  # rows, or milliseconds; None: unbounded
    outputs: dict
    aggregates: dict



def _frame(window: exp.Window) -> tuple[str, int | None]:
    spec = window.args.get("spec")
    if spec is None:
        return "range", None
    kind = str(spec.args.get("kind") or "").lower()
    start, end = spec.args.get("start"), spec.args.get("end")
    if kind not in ("rows", "range") or spec.args.get("start_side") != "PRECEDING" or str(end) != "CURRENT ROW":
        raise _refuse(f"the OVER frame {spec.sql()} (ROWS or RANGE BETWEEN ... PRECEDING AND CURRENT ROW)")
    if str(start).upper() == "UNBOUNDED":
        return kind, None
    if kind == "rows":
        if not isinstance(start, exp.Literal) or start.is_string:
            raise _refuse(f"ROWS BETWEEN {start.sql()} PRECEDING (a number of rows)")
        return kind, int(start.name)
    return kind, interval_millis(start)


def _window_of(window: exp.Window, time_column: str | None) -> tuple:
    keys = window.args.get("partition_by") or []
    order = window.args["order"].expressions if window.args.get("order") else []
    if not all(isinstance(k, exp.Column) for k in keys) or not keys:
        raise _refuse("an OVER window without PARTITION BY columns")
    if len(order) != 1 or not isinstance(order[0].this, exp.Column) or order[0].args.get("desc"):
        raise _refuse("an OVER window not ordered by one time column, ascending")
    if time_column is None or order[0].this.name != time_column:
        raise ConfigError(f"SQL: an OVER window is ordered by its table's event time ({time_column!r}, its "
                          f"watermark's column), not {order[0].this.name!r}: declare SqlTable(source, "
                          f"watermark=\"{order[0].this.name} - INTERVAL '4' SECOND\")")
    return tuple(k.name for k in keys), *_frame(window)


def read_over(select: exp.Select, times: dict) -> OverQuery | None:
    """The OVER aggregation ``select`` is (``times``: each table's event-time column), or None without one."""
    if not any(isinstance(i.this if isinstance(i, exp.Alias) else i, exp.Window) for i in select.expressions):
        return None
    source = select.args.get("from_") or select.args.get("from")
    table = source.this if source is not None else None
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        raise _refuse("an OVER aggregation of anything but a table by its name")
    for arg in ("joins", "group", "having", "order", "limit"):
        if select.args.get(arg):
            raise _refuse(f"{arg.upper()} beside an OVER aggregation")
    window, outputs, aggregates = None, {}, {}
    for item in select.expressions:
        node, alias = (item.this, item.alias) if isinstance(item, exp.Alias) else (item, None)
        if isinstance(node, exp.Column):
            outputs[alias or node.name] = ("column", node.name)
            continue
        agg = next((a for t, a in AGGREGATES.items() if isinstance(getattr(node, "this", None), t)), None)
        if not isinstance(node, exp.Window) or agg is None:
            raise _refuse(f"{node.sql()} in an OVER aggregation's SELECT (columns, and COUNT, SUM, MIN, MAX or AVG "
                          f"of a column OVER a window)")
        spec = _window_of(node, times.get(table.name))
        if window is not None and spec != window:
            raise _refuse("OVER aggregates of different windows in one query")
        window, argument = spec, node.this.this
        column = "*" if isinstance(argument, exp.Star) else argument.name if isinstance(argument, exp.Column) else None
        if column is None or (column == "*" and agg != "count") or node.this.args.get("distinct"):
            raise _refuse(f"{node.this.sql()} OVER ...: an aggregate of an expression or of DISTINCT values")
        internal = f"{agg}_{'all' if column == '*' else column}"
        aggregates[internal] = f"{agg}({column})"
        outputs[alias or internal] = ("aggregate", internal)
    where = select.args.get("where")
    return OverQuery(table.name, None if where is None else where.this.sql(dialect="spark"), list(window[0]),
                     times[table.name], window[1], window[2], outputs, aggregates)
