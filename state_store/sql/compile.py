"""SQL text compiled to Lakestate's operators (docs/writing/sql.md): ``SqlJob`` gives the job a query defines,
``explain`` its operators and state.

A ``SELECT`` (after its ``CREATE VIEW`` s: ``views``) in Flink's dialect (``dialect``) is read by the shape it
has (``_Compiler.relation``): a Top-N or deduplication (``rank``), an OVER aggregation (``over``), a join
(``join``: regular, interval, window, lookup), or one table's rows (``_read``):

- **stateless**: ``SELECT <expressions> FROM t [WHERE ...]``: Spark evaluates both as it reads (``QuerySource``),
  and the rows pass through one operator to the sink;
- **window aggregation**: ``... FROM TABLE(TUMBLE | HOP | CUMULATE | SESSION(TABLE t, DESCRIPTOR(ts), ...))
  [WHERE ...] GROUP BY window_start, window_end[, k ...]`` (or a GROUP BY window: Flink's ``SESSION(ts, gap)``,
  Spark's ``window()`` and ``session_window()``): a window of ``ColumnAggregate`` (the vectorised path where it
  applies), insert-only;
- **group aggregation**: ``... FROM t [WHERE ...] GROUP BY k ...``: ``Dataflow.aggregate``, a changelog, which a
  sink given as a path keeps by the group's columns (an ``UpsertDeltaSink``).

A query read by another (``FROM (SELECT ...)``, ``JOIN (SELECT ...)``) compiles first and is read as a table of
its rows (``Subquery``), its filters and computed columns Spark SQL on the edge into the next operator
(``Dataflow.select_expr``); a join of several tables, a GROUP BY of a join and a Top-N of a query's own columns
are rewritten to such queries first. The aggregates are ``COUNT(*)``, ``COUNT(c)``, ``SUM``, ``MIN``, ``MAX``
and ``AVG``, and (without a window) ``COUNT(DISTINCT c)``; an aggregate of an expression, one with ``FILTER
(WHERE ...)`` and a ``GROUP BY`` expression aggregate or group a column the scan computes (``_Query.computed``).
Anything else is refused, naming the construct, before anything runs. Each stateful operator's uid comes from
the query's structure (its kind, table, keys and window), not its text, so a changed filter or output column
keeps the state. No Spark here.
"""
from __future__ import annotations

import datetime
import zlib
from dataclasses import dataclass, field, replace
from typing import Any

from sqlglot import exp

from ..errors import ConfigError
from ..functions import MapFunction
from ..joins.interval import ProcessJoinFunction
from ..joins.window_join import JoinFunction
from ..sources.base import Source
from ..sources.query import QuerySource
from ..tables.changelog import KIND
from ..types import TypeInfo, Types
from ..vectorized import VectorizedKeyedFunction
from ..watermarks import WatermarkStrategy
from ..windows.assigners import TimeWindow, WindowAssigner
from ..windows.columns import DISTINCT, ColumnAggregate
from .dialect import group_window, parse
from .dialect import interval_millis as _millis
from .dialect import refuse as _refuse
from .dialect import window_of as _window_of
from .functions import checked
from .join import RIGHT, JoinQuery, read_join
from .over import OverQuery, read_over
from .rank import RankQuery, read_rank
from .rewrites import join_then_aggregate, named_outputs, rank_of_rows, windowed_rows
from .views import proctime_of, with_views

ALL = "_all"  # the constant key of a query without one
PART = "_part"  # a union's key: a hash of each row's columns
AGGREGATES = {exp.Count: "count", exp.Sum: "sum", exp.Min: "min", exp.Max: "max", exp.Avg: "avg"}
START, END = "window_start", "window_end"
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
ROWTIME = "_rowtime"  # a TIMESTAMP event time in epoch milliseconds, which the operators' event time is
_SPARK_TYPES = {"BIGINT": Types.LONG, "INT": Types.INT, "STRING": Types.STRING, "VARCHAR": Types.STRING,
                "TEXT": Types.STRING, "DOUBLE": Types.DOUBLE, "FLOAT": Types.FLOAT, "BOOLEAN": Types.BOOLEAN,
                "DATE": Types.DATE, "TIMESTAMP": Types.TIMESTAMP, "TIMESTAMPTZ": Types.TIMESTAMP,
                "TIMESTAMPLTZ": Types.TIMESTAMP}  # Flink's TIMESTAMP(3) and TIMESTAMP_LTZ(3): an instant, as Spark's


@dataclass(frozen=True)
class SqlTable:
    """A table of a SQL job: its ``source`` and, for event time, Flink's watermark declaration on a column of
    epoch milliseconds or a ``TIMESTAMP`` (``watermark="ts - INTERVAL '4' SECOND"``, or ``"ts"``); ``proctime``:
    a column of its processing time (Flink's ``PROCTIME()``; a view's, ``views``)."""

    source: Source
    watermark: str | None = None
    proctime: str | None = None


class Rename(MapFunction):
    """A query's output columns from the operator's (``names``: output name -> the operator's column);
    ``integral``: the outputs that are an ``AVG`` of an integer column, whose value is Flink's, of the column's
    type: the mean truncated toward zero (``SUM / COUNT`` in integers)."""

    def __init__(self, names: dict, integral: tuple = ()):
        self.names, self.integral = names, integral

    def map(self, record: dict) -> dict:
        """The record with the output's names."""
        out = {out: record[name] for out, name in self.names.items()}
        for name in self.integral:
            if out[name] is not None:
                out[name] = int(out[name])
        return out

    def map_batch(self, records):
        """``map`` over a table of records: the columns renamed, an integral ``AVG`` truncated toward zero (the
        step's output type, of the column's, then casts it as ``int`` would)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        return pa.table({out: pc.trunc(records.column(name)) if out in self.integral else records.column(name)
                         for out, name in self.names.items()})



def watermark_strategy(declared: str) -> tuple[str, WatermarkStrategy]:
    """The event-time column and strategy of Flink's ``WATERMARK FOR c AS c - INTERVAL ...``: the watermark is
    the largest time less the interval, as Flink SQL's (``for_bounded_out_of_orderness`` trails by 1 ms more)."""
    node = parse(f"SELECT {declared}")[0].expressions[0]
    delay = 0
    if isinstance(node, exp.Sub):
        node, delay = node.this, _millis(node.expression)
    if not isinstance(node, exp.Column):
        raise ConfigError(f"SQL: a watermark is 'column' or 'column - INTERVAL ...', got {declared!r}")
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(max(delay - 1, 0)).with_timestamp_column(node.name)
    return node.name, strategy


def column_type(data_type: exp.DataType) -> TypeInfo:
    """Lakestate's type of a SQL column type (``BIGINT``, ``STRING``, ``DECIMAL(10, 2)``, ...)."""
    name = data_type.this.name if hasattr(data_type.this, "name") else str(data_type.this)
    if name == "DECIMAL" and data_type.expressions:
        precision, scale = (int(e.name) for e in data_type.expressions)
        return Types.DECIMAL(precision, scale)
    maker = _SPARK_TYPES.get(name.upper())
    if maker is None:
        raise _refuse(f"a column of type {data_type.sql()}")
    return maker()


def _columns(table: "SqlTable") -> list:
    """A table's column names: its source's, and its processing-time column, if any."""
    return [*_columns_of(table.source), *([table.proctime] if table.proctime else [])]


def _columns_of(source: Source) -> dict:
    fields = source.declared_fields()
    if fields is None:
        raise ConfigError("SQL: a table's source must declare its columns (a schema)")
    return dict(fields)


@dataclass
class _Query:
    """What the compiler read from the SELECT."""

    table: str
    window: tuple | None  # (kind, time column, size ms, slide ms)
    where: str | None
    keys: list[str]
    aggregates: dict  # output name -> "op(column)"
    outputs: dict  # output name -> what it is: a key column, START / END, an aggregate, or a Spark expression
    computed: dict = field(default_factory=dict)  # the columns the scan adds for a GROUP BY's or an aggregate's
    # expressions (name -> Spark SQL)


def _from_table(select: exp.Select, tables: dict) -> tuple[str, tuple | None, tuple | None]:
    """The table a one-table SELECT reads, its windowing function's window (``window_of``'s first four items)
    and a session's PARTITION BY columns."""
    for arg, construct in (("joins", "a JOIN with GROUP BY"), ("having", "HAVING"), ("order", "ORDER BY"),
                           ("limit", "LIMIT"), ("distinct", "SELECT DISTINCT"), ("with_", "WITH")):
        if select.args.get(arg):
            raise _refuse(construct)
    source = select.args.get("from_") or select.args.get("from")
    table, window = _window_of(source.this if source is not None else None)
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        raise _refuse(source.sql() if source is not None else "FROM nothing", "read one table by its name")
    if table.name not in tables:
        raise ConfigError(f"SQL: the query reads table {table.name!r} but tables= has {sorted(tables)}")
    partition = window[4] if window is not None and len(window) > 4 else None
    return table.name, window[:4] if window is not None else None, partition


def _read(select: exp.Select, tables: dict) -> _Query:
    name, window, partition = _from_table(select, tables)
    where = select.args.get("where")
    if where is not None and where.find(exp.AggFunc, exp.Window, exp.Subquery):
        raise _refuse("an aggregate, window function or subquery in WHERE")
    group = select.args.get("group")
    items, computed = _group_items(list(group.expressions) if group else [], select.expressions)
    keys, window, struct = _grouped_window(items, window, partition)
    grouped = {e: n for n, e in computed.items()}  # a GROUP BY expression (Spark SQL) -> its column
    outputs, aggregates = {}, {}
    for position, item in enumerate(select.expressions):
        node, alias = (item.this, item.alias) if isinstance(item, exp.Alias) else (item, None)
        condition = None
        if isinstance(node, exp.Filter):  # agg(...) FILTER (WHERE condition)
            node, condition = node.this, node.expression.this
        if isinstance(node, exp.Star):
            if group:
                raise _refuse("SELECT * with GROUP BY")
            for column in _columns(tables[name]):
                outputs[column] = ("expr", f"`{column}`")
            continue
        bound = _window_bound(node, struct)
        agg = next((a for t, a in AGGREGATES.items() if isinstance(node, t)), None)
        if condition is not None and agg is None:
            raise _refuse(f"FILTER (WHERE ...) on {node.sql()}", "filter an aggregate: COUNT(*) FILTER (WHERE ...)")
        if bound is not None:
            outputs[alias or (node.name if isinstance(node, exp.Column) else bound)] = ("column", bound)
        elif agg is not None:
            internal, aggregates[internal] = _aggregate(node, agg, condition, computed)
            outputs[alias or internal] = ("aggregate", internal)
        elif node.sql(dialect="spark") in grouped:
            outputs[alias or grouped[node.sql(dialect="spark")]] = ("column", grouped[node.sql(dialect="spark")])
        elif node.find(exp.AggFunc):
            raise _refuse(f"{node.sql()}: an aggregate inside an expression", "select the aggregate itself")
        elif keys or aggregates or window:
            if not isinstance(node, exp.Column) or (node.name not in keys):
                raise ConfigError(f"SQL: {node.sql()} is neither a GROUP BY column nor an aggregate")
            outputs[alias or node.name] = ("column", node.name)
        else:
            # an expression without AS is named as Flink names it, EXPR$<its place in the SELECT>
            outputs[alias or (node.name if isinstance(node, exp.Column) else f"EXPR${position}")] = (
                "expr", node.sql(dialect="spark"))
    if window is not None and not {START, END} <= set(keys):
        raise ConfigError("SQL: a windowing function's rows are grouped by window_start and window_end (GROUP BY "
                          "window_start, window_end, ...)")
    if aggregates and not keys:
        raise _refuse("an aggregate without GROUP BY")
    if keys and not aggregates:  # the groups themselves (SELECT DISTINCT): a count of each, not selected
        aggregates["count_all"] = "count(*)"
    return _Query(name, window, None if where is None else where.this.sql(dialect="spark"),
                  [k for k in keys if k not in (START, END)], aggregates, outputs, computed)


def _group_items(items: list, selected: list) -> tuple[list, dict]:
    """A GROUP BY's items with each expression (``DATE_FORMAT(ts, 'yyyy-MM-dd')``; not a window) replaced by a
    column the scan computes: named as the SELECT's item of that expression is (``AS day``), else ``_group<i>``.
    Returns the items and the computed columns (name -> Spark SQL)."""
    aliases = {i.this.sql(dialect="spark"): i.alias for i in selected if isinstance(i, exp.Alias)}
    out, computed = [], {}
    for i, item in enumerate(items):
        if isinstance(item, exp.Column) or group_window(item) is not None:
            out.append(item)
            continue
        if item.find(exp.AggFunc, exp.Window, exp.Subquery):
            raise _refuse(f"GROUP BY {item.sql()}: an aggregate, window function or subquery in GROUP BY")
        expression = item.sql(dialect="spark")
        name = aliases.get(expression) or f"_group{i}"
        computed[name] = expression
        out.append(exp.column(name))
    return out, computed


def _aggregate(node, agg: str, condition, computed: dict) -> tuple[str, str]:
    """An aggregate's name in the state and its ``ColumnAggregate`` spec (``count(*)``, ``sum(amount)``): its own
    name, not its alias, so that renaming an output keeps the state. An aggregate of an expression, or one with
    ``FILTER (WHERE condition)``, aggregates a column the scan computes (added to ``computed``): the expression,
    or ``CASE WHEN condition THEN <the value, or 1 for COUNT(*)> END``, whose nulls every aggregate skips."""
    argument = node.this
    if isinstance(argument, exp.Distinct):
        if agg != "count" or len(argument.expressions) != 1:
            raise _refuse(f"{node.sql()}: an aggregate of DISTINCT values other than COUNT(DISTINCT value)")
        agg, argument = DISTINCT, argument.expressions[0]
    if isinstance(argument, exp.Star) and agg != "count":
        raise _refuse(f"{node.sql()}", f"{agg} takes a column")
    if condition is None and isinstance(argument, (exp.Star, exp.Column)):
        column = "*" if isinstance(argument, exp.Star) else argument.name
        return f"{agg}_{'all' if column == '*' else column}", f"{agg}({column})"
    if argument.find(exp.AggFunc, exp.Window, exp.Subquery):
        raise _refuse(f"{node.sql()}: an aggregate of an aggregate, window function or subquery")
    value = "1" if isinstance(argument, exp.Star) else argument.sql(dialect="spark")
    expression = value if condition is None else f"CASE WHEN {condition.sql(dialect='spark')} THEN {value} END"
    column = f"_x{zlib.crc32(expression.encode()):08x}"  # from the expression: a changed one is a new state
    computed[column] = expression
    return f"{agg}{column}", f"{agg}({column})"


def _grouped_window(items: list, window: tuple | None, partition: tuple | None) -> tuple[list, tuple | None, Any]:
    """A GROUP BY's columns (``window_start`` and ``window_end`` among them when it has a window: Flink's
    ``SESSION(ts, gap)``, Spark's ``window()`` and ``session_window()``), the query's window, and the name of the
    struct Spark's window is selected by (``window.start``; None for Flink's ``SESSION``; False: no window in the
    GROUP BY). A session windowing function's ``partition`` must be the columns grouped by."""
    found = [(item, group_window(item)) for item in items]
    windows = [w for _, w in found if w is not None]
    if windows and (window is not None or len(windows) > 1):
        raise _refuse("two windows in one query (a windowing function and a GROUP BY window, or two of those)")
    columns = [item for item, w in found if w is None]  # each a column (``_group_items``)
    keys = [c.name for c in columns]
    if partition is not None and sorted(partition) != sorted(k for k in keys if k not in (START, END)):
        raise _refuse(f"a SESSION window grouped by {[k for k in keys if k not in (START, END)]}, not by its "
                      f"PARTITION BY columns {list(partition)}", "GROUP BY window_start, window_end and the "
                      "PARTITION BY columns")
    if not windows:
        return keys, window, False
    return keys + [START, END], windows[0][:4], windows[0][5]  # its rows are grouped by their window too


def _window_bound(node, struct) -> str | None:
    """START or END when ``node`` selects a bound of the GROUP BY's window: Flink's ``SESSION_START(ts, gap)``
    and ``SESSION_END``, Spark's ``window.start`` and ``window.end`` (``session_window.start`` ...)."""
    if struct is None and isinstance(node, exp.Anonymous) and node.name.upper() in ("SESSION_START", "SESSION_END"):
        return START if node.name.upper() == "SESSION_START" else END
    if struct and isinstance(node, exp.Column) and node.table == struct:
        if node.name not in ("start", "end"):
            raise _refuse(f"{node.sql()}", f"select {struct}.start and {struct}.end")
        return START if node.name == "start" else END
    if struct and isinstance(node, exp.Column) and not node.table and node.name == struct:
        raise _refuse(f"the struct {struct}", f"select {struct}.start and {struct}.end")
    return None


def _assigner(kind: str, size: int, slide: int, processing: bool = False) -> WindowAssigner:
    """The window assigner of a query's window (``dialect.window_of``'s kind, size and slide), in processing time
    when its ``DESCRIPTOR`` is a ``PROCTIME()`` column."""
    from ..windows.assigners import (
        CumulativeEventTimeWindows,
        EventTimeSessionWindows,
        ProcessingTimeSessionWindows,
        SlidingEventTimeWindows,
        SlidingProcessingTimeWindows,
        TumblingEventTimeWindows,
        TumblingProcessingTimeWindows,
    )

    if processing:
        if kind == "cumulate":
            raise _refuse("CUMULATE in processing time", "window by the table's event time")
        return (TumblingProcessingTimeWindows.of(size) if kind == "tumble" else SlidingProcessingTimeWindows.of(
            size, slide) if kind == "hop" else ProcessingTimeSessionWindows.with_gap(size))
    if kind == "tumble":
        return TumblingEventTimeWindows.of(size)
    if kind == "hop":
        return SlidingEventTimeWindows.of(size, slide)
    if kind == "cumulate":
        return CumulativeEventTimeWindows.of(size, slide)
    return EventTimeSessionWindows.with_gap(size)


def _spark_types(fields: dict, outputs: dict, functions: tuple = ()) -> dict:
    """Each stateless output column's type, as sqlglot types the Spark expression over the table's columns (a
    call of one of ``functions``, a user's, of its declared type)."""
    from sqlglot.optimizer.annotate_types import annotate_types
    from sqlglot.optimizer.qualify import qualify

    from .decimals import with_decimal_types

    schema = {"t": {n: t.spark_ddl() for n, t in fields.items()}}
    declared = {name: ddl for name, _, ddl in functions}
    types = {}
    for out, (_, expression) in outputs.items():
        node = parse(f"SELECT {expression} AS x FROM t")[0].transform(
            lambda n: exp.cast(exp.null(), declared[n.name.lower()], dialect="spark")
            if isinstance(n, exp.Anonymous) and n.name.lower() in declared else n)
        node = qualify(node, schema=schema, dialect="spark")
        node = with_decimal_types(annotate_types(node, schema=schema, dialect="spark"))
        data_type = node.expressions[0].type
        if data_type is None or data_type.this == exp.DataType.Type.UNKNOWN:
            raise _refuse(f"the expression {expression}, whose type sqlglot cannot tell", "CAST it")
        types[out] = column_type(data_type)
    return types


def _stateful(flow, query: _Query, parallelism: int, fresh=lambda uid: uid, shared: dict | None = None,
              processing: bool = False):
    """The query's window or group aggregation of ``flow``, then (when its names are not the operator's) the
    renaming step to its output columns. ``shared``: the aggregations compiled so far by what they compute, so
    that two parts of a query that aggregate alike (Nexmark's q5) read one operator, whose branches a join can
    then join."""
    names: dict[str, str] = {}  # an aggregate's output column: its first AS name (its state keeps its own)
    for out, (kind, what) in query.outputs.items():
        if kind == "aggregate":
            names.setdefault(what, out)
    signature = repr((query.table, query.window, processing, query.where, query.keys, query.aggregates,
                      query.computed, names))
    if shared is not None and signature in shared:
        return _renamed(shared[signature], query, names, parallelism, fresh, flow._fields())
    aggregate = ColumnAggregate(**query.aggregates).named(**names)
    structure = "-".join([query.table, *query.keys])
    if query.window is not None:
        if any(spec.startswith(DISTINCT) for spec in query.aggregates.values()):
            raise _refuse("COUNT(DISTINCT ...) in a window aggregation", "count distinct values in a GROUP BY "
                          "without a window")
        kind, _, size, slide = query.window
        assigner = _assigner(kind, size, slide, processing)
        windowed = (flow.key_by(query.keys if len(query.keys) != 1 else query.keys[0]).window(assigner)
                    if query.keys else flow.window_all(assigner))
        uid = f"sql-window-{structure}-{kind}-{size}-{slide}{'-proctime' if processing else ''}"
        options = {"parallelism": parallelism if query.keys else 1}
        out = windowed.aggregate(aggregate, uid=uid, **options)
        wanted = {o: names[w] if k == "aggregate" else w for o, (k, w) in query.outputs.items()}
        produced = out._fields()
        if all(o == n for o, n in wanted.items()) and [c for c in produced if c in wanted] == list(wanted):
            # The columns selected are some of the window's, in its order: the window emits those alone.
            out = windowed.aggregate(aggregate, uid=uid, output_type=Types.ROW_NAMED(
                list(wanted), [produced[c] for c in wanted]), **options)
    else:
        keyed = flow.key_by(query.keys if len(query.keys) != 1 else query.keys[0])
        out = keyed.aggregate(aggregate, uid=f"sql-group-{structure}", parallelism=parallelism)
    if shared is not None:
        shared[signature] = out
    return _renamed(out, query, names, parallelism, fresh, flow._fields())


def _renamed(out, query: _Query, names: dict, parallelism: int, fresh, fields: dict):
    """An aggregation's rows (``out``) as the query's output columns: a renaming step when they differ, or when
    an ``AVG`` of an integer column (of ``fields``, the aggregation's input) is of the column's type, as Flink's
    ``AVG`` (a mean truncated toward zero)."""
    wanted = {o: names[w] if k == "aggregate" else w for o, (k, w) in query.outputs.items()}
    if query.window is None:
        wanted["_kind"] = "_kind"
    produced = dict(out._fields())
    integral = {}
    for o, (k, w) in query.outputs.items():
        spec = query.aggregates.get(w, "") if k == "aggregate" else ""
        if spec.startswith("avg(") and fields[spec[4:-1]].name in ("LONG", "INT"):
            integral[o] = fields[spec[4:-1]]
    if integral or list(wanted) != list(produced) or any(o != n for o, n in wanted.items()):
        out_type = Types.ROW_NAMED(list(wanted), [integral.get(o) or produced[n] for o, n in wanted.items()])
        out = out.map(Rename(wanted, tuple(integral)), output_type=out_type, uid=fresh("sql-select"),
                      parallelism=parallelism)
    return out


def _event_time(name: str, table: SqlTable) -> tuple[dict, WatermarkStrategy | None]:
    """A table's columns and its watermark strategy (None: no event time), on the declared column."""
    fields = _columns_of(table.source)
    if table.proctime is not None:
        fields[table.proctime] = Types.TIMESTAMP()
    if table.watermark is None:
        return fields, None
    column, strategy = watermark_strategy(table.watermark)
    if column not in fields:
        raise ConfigError(f"SQL: table {name!r}'s watermark is on {column!r}, not one of its columns {list(fields)}")
    return fields, strategy


def _is_instant(fields: dict, column: str | None) -> bool:
    return column is not None and fields[column].name == "TIMESTAMP"


def _rowtime(fields: dict, column: str, columns: dict) -> str | None:
    """The Spark expression of ``ROWTIME`` when a scan of ``columns`` needs it for event time ``column`` (a
    ``TIMESTAMP``'s epoch milliseconds, or the column not read as itself), None when the column itself is it."""
    if _is_instant(fields, column):
        return f"unix_millis(`{column}`)"
    return None if columns.get(column) == f"`{column}`" else f"`{column}`"


class Instants(MapFunction):
    """The record with its columns ``names`` (epoch milliseconds: a window's bounds in a TIMESTAMP event time)
    as the instants they are, as Flink's ``TIMESTAMP(3)`` window_start and window_end."""

    def __init__(self, names: tuple):
        self.names = names

    def map(self, record: dict) -> dict:
        """The record, those columns as UTC datetimes (exact: a millisecond is a whole number of microseconds)."""
        return {**record, **{n: None if record[n] is None else _EPOCH + datetime.timedelta(milliseconds=record[n])
                             for n in self.names}}

    def map_batch(self, records):
        """``map`` over a table of records: those columns cast to instants (UTC), the others as they are."""
        import pyarrow as pa

        for n in self.names:
            records = records.set_column(records.column_names.index(n), n,
                                         records.column(n).cast(pa.timestamp("ms", tz="UTC")))
        return records


class JoinedRows(ProcessJoinFunction):
    """An interval join's pair as one row: the left's columns, then the right's after ``prefix``."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def process_element(self, left: dict, right: dict, ctx):
        """The joined row."""
        yield {**left, **{self.prefix + c: v for c, v in right.items()}}


class PairRows(JoinFunction):
    """A window join's pair as one row: the left's columns, then the right's after ``prefix``."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def join(self, left: dict, right: dict) -> dict:
        """The joined row."""
        return {**left, **{self.prefix + c: v for c, v in right.items()}}


class Rows(VectorizedKeyedFunction):
    """A key's records as they came, with ``columns`` alone (a union's, without the column it was keyed by), a
    subtask's records of a microbatch at once (key by key, each key's as they came)."""

    def __init__(self, columns: list[str]):
        self.columns = columns

    def process_batch(self, records, state, ctx):
        """The records, those columns."""
        return records.select(self.columns), None


class Constant(MapFunction):
    """The record with one more column, ``name``, of one value: the key of a query without one (a Top-N without
    ``PARTITION BY``), whose rows all go to one subtask."""

    def __init__(self, name: str):
        self.name = name

    def map(self, record: dict) -> dict:
        """The record and the constant."""
        return {**record, self.name: 0}

    def map_batch(self, records):
        """``map`` over a table of records: the constant as one more column."""
        import pyarrow as pa

        return records.append_column(self.name, pa.repeat(pa.scalar(0, pa.int32()), records.num_rows))


class WindowColumns(WindowAssigner):
    """Each row in the window its columns ``start`` and ``end`` name: the rows of a windowing function's query
    (Flink's windows attached to the rows, which a window Top-N after a window aggregation ranks)."""

    def __init__(self, start: str, end: str):
        self.start, self.end = start, end

    def assign_windows(self, element, timestamp, processing_time) -> list:
        """The row's own window."""
        return [TimeWindow(element[self.start], element[self.end])]


@dataclass
class _Rel:
    """A query's rows: the stream (not keyed), the upsert key of an updating result (None: insert-only, or a
    changelog kept as it is; []: one without a key), and the window whose ``window_start`` and ``window_end``
    the rows carry (a window aggregation's)."""

    flow: Any
    key: list[str] | None = None
    window: tuple | None = None
    structure: str = ""  # what names its stateful operator: a query over it names its own after it
    instants: tuple = ()  # its columns of epoch milliseconds that are instants (``Instants``): TIMESTAMP windows'
    unkeyed: str = ""  # why an updating result has no key (``key`` []), when it is not a Top-N's


@dataclass(frozen=True)
class Subquery:
    """A query's rows read as a table by the query around it (``FROM (SELECT ...) AS q``, ``JOIN (SELECT ...) AS
    q``): ``rel``, what the query compiled to; a table's source to the compiler (``_columns_of``, ``scan``)."""

    rel: Any

    def declared_fields(self) -> dict:
        """The query's columns."""
        return dict(self.rel.flow._fields())




@dataclass
class _Compiler:
    """What every part of one query is compiled with: the job's id, its tables, parallelism and settings."""

    job_id: str
    tables: dict
    parallelism: int
    settings: dict
    functions: tuple = ()  # the user's scalar functions (``functions.checked``)
    used: set = field(default_factory=set)
    shared: dict = field(default_factory=dict)  # the aggregations compiled, by what they compute (``_stateful``)
    scans: dict = field(default_factory=dict)  # tables read as one stream with another (``share_tables``)

    def fresh(self, uid: str) -> str:
        """``uid``, or (given already, in a query of several parts) ``uid-2``, ``uid-3``, ...: a stateless step's."""
        n, found = 1, uid
        while found in self.used:
            n += 1
            found = f"{uid}-{n}"
        self.used.add(found)
        return found

    def scan(self, name: str, where: str | None, columns: dict | None = None, types: dict | None = None):
        """Table ``name``'s rows that ``where`` keeps, as ``columns`` (name -> Spark SQL; None: all as they are),
        evaluated by Spark as they are read: a Dataflow from its source, with the table's watermark."""
        from ..dataflow import Dataflow  # the builder; the model does not import this wing at load

        if name not in self.tables:
            raise ConfigError(f"SQL: the query reads table {name!r} but tables= has {sorted(self.tables)}")
        if isinstance(self.tables[name].source, Subquery):
            return _rows_of(self.tables[name].source.rel.flow, where, columns, types, self.functions)
        if name in self.scans:  # a table read as one stream with another (``share_tables``)
            flow = self.scans[name]
            if columns is not None and ROWTIME in flow._fields():
                columns, types = {**columns, ROWTIME: f"`{ROWTIME}`"}, {**(types or {}), ROWTIME: Types.LONG()}
            return _rows_of(flow, where, columns, types, self.functions)
        fields, strategy = _event_time(name, self.tables[name])
        columns = dict(columns or {n: f"`{n}`" for n in fields})
        types = dict(types or fields)
        if strategy is not None:  # the event time the operators see: epoch milliseconds, always read
            expression = _rowtime(fields, strategy.timestamp_column, columns)
            if expression is not None:
                columns[ROWTIME], types[ROWTIME] = expression, Types.LONG()
                strategy = strategy.with_timestamp_column(ROWTIME)
        row_type = Types.ROW_NAMED(list(columns), [types[n] for n in columns])
        source = QuerySource(self.tables[name].source, where, tuple(columns.items()), row_type, self.functions,
                             self.tables[name].proctime)
        return Dataflow.from_source(source, job_id=self.job_id, watermark_strategy=strategy, **self.settings)

    def time_column(self, name: str | None) -> str | None:
        """The column table ``name``'s event time is in as its operators see it in a scan of all its columns
        (``scan``'s rule, ``_rowtime``; None: it has none)."""
        if name is None or self.tables[name].watermark is None:
            return None
        fields, strategy = _event_time(name, self.tables[name])
        column = strategy.timestamp_column
        return column if _rowtime(fields, column, {n: f"`{n}`" for n in fields}) is None else ROWTIME

    def relation(self, select: exp.Select) -> _Rel:
        """The rows of ``select``, compiled (the module docstring's shapes)."""
        ranked = read_rank(rank_of_rows(select))
        if ranked is not None:
            return self.ranked(ranked)
        select = self.subqueries_as_tables(join_then_aggregate(select))
        while len(select.args.get("joins") or []) > 1:
            select = self.cascade_joins(select)
        times = {n: watermark_strategy(t.watermark)[0] if t.watermark else None for n, t in self.tables.items()}
        over = read_over(select, times)
        if over is not None:
            return self.overed(over)
        joined = read_join(select, {n: _columns(t) for n, t in self.tables.items()}, times)
        if joined is not None:
            return self.joined(joined)
        return self.selected(_read(select, self.tables))

    def subqueries_as_tables(self, select: exp.Select) -> exp.Select:
        """``select`` with each query it reads in ``FROM`` or ``JOIN`` compiled and read as a table of its rows (a
        ``Subquery`` named as its alias), but a window join's input (``windowed_rows``)."""
        source = select.args.get("from_") or select.args.get("from")
        nodes = [source.this] if source is not None else []
        nodes += [join.this for join in select.args.get("joins") or []]
        if not any(isinstance(n, exp.Subquery) and not windowed_rows(n) for n in nodes):
            return select
        read = [self.base_tables(n) for n in nodes if isinstance(n, exp.Subquery) and not windowed_rows(n)]
        if len(nodes) == len(read) == 2 and all(len(r) == 1 for r in read) and read[0] != read[1] and not (
                (read[0] | read[1]) & set(self.scans)):
            self.share_tables([*read[0], *read[1]])  # two queries over two tables joined: one stream of both
        select = select.copy()
        source = select.args.get("from_") or select.args.get("from")
        for node in [source.this] + [join.this for join in select.args.get("joins") or []]:
            if not isinstance(node, exp.Subquery) or windowed_rows(node):
                continue
            name = node.alias or "subquery"
            while name in self.tables:
                name = f"{name}_"
            proctime = proctime_of(node.this, self.tables)
            if proctime is not None:  # SELECT *, PROCTIME() AS p FROM t: the table, with its processing time
                self.tables[name] = replace(self.tables[proctime[0]], proctime=proctime[1])
            else:
                rel = self.union_all(node.this) if isinstance(node.this, exp.Union) else self.relation(node.this)
                self.tables[name] = SqlTable(Subquery(self.with_instants(rel)))
            table = exp.Table(this=exp.to_identifier(name))
            if node.alias:
                table.set("alias", exp.TableAlias(this=exp.to_identifier(node.alias)))
            node.replace(table)
        joins = select.args.get("joins") or []
        if len(joins) == 1 and self.is_query(joins[0].this) and not self.is_query(source.this):
            # a query's rows first: a table's records are read by the join itself (a later operator's source)
            first, second = source.this.copy(), joins[0].this.copy()
            source.this.replace(second)
            joins[0].this.replace(first)
            side = joins[0].args.get("side")
            if side:
                joins[0].set("side", {"LEFT": "RIGHT", "RIGHT": "LEFT"}.get(side.upper(), side))
        return select

    def base_tables(self, node) -> set:
        """The tables of ``tables=`` that ``node`` (a query) reads."""
        return {t.name for t in node.find_all(exp.Table) if t.name in self.tables
                and not isinstance(self.tables[t.name].source, Subquery)}

    def share_tables(self, names: list) -> None:
        """Tables whose queries are joined to each other (Nexmark's q8: a window aggregation of each), read as one
        stream, so that the queries' operators branch from one first operator, as a join's inputs do: a union of
        their rows (each table's columns under ``_<i>_``, the others' null; its side; its event time) by an
        operator of its own, then each table's rows again (``scans``), which its queries read as the table. The
        union's watermark is the least of the tables', so a window of one fires once both have passed it."""
        fields = {name: _event_time(name, self.tables[name])[0] for name in names}
        if len({self.tables[name].watermark is None for name in names}) > 1:
            raise _refuse(f"a join of queries over {names[0]!r} and {names[1]!r}, one with event time and one "
                          f"without", "declare a watermark on both tables, or on neither")
        every = [(i, n, t) for i, name in enumerate(names) for n, t in fields[name].items()]
        types = {f"_{j}_{n}": t for j, n, t in every} | {"_side": Types.INT(), PART: Types.INT()}
        branches = []
        for i, name in enumerate(names):
            columns = {f"_{j}_{n}": f"`{n}`" if j == i else f"CAST(NULL AS {t.spark_ddl()})" for j, n, t in every}
            own = ", ".join(f"`{n}`" for n in fields[name])
            columns |= {"_side": str(i), PART: f"CAST(pmod(hash({own}), 1024) AS INT)"}
            branches.append(self.scan(name, None, columns, types))
        union = branches[0]._fields()
        both = branches[0].union(branches[1]).key_by(PART).process(
            Rows(list(union)), uid=self.fresh("sql-union-" + "-".join(names)), parallelism=self.parallelism,
            output_type=Types.ROW_NAMED(list(union), list(union.values())))
        for i, name in enumerate(names):
            own = {n: f"`_{i}_{n}`" for n in fields[name]} | ({ROWTIME: f"`{ROWTIME}`"} if ROWTIME in union else {})
            row_type = Types.ROW_NAMED(list(own), [fields[name].get(n) or Types.LONG() for n in own])
            self.scans[name] = both.select_expr(own, output_type=row_type, where=f"`_side` = {i}").map(
                Rename({n: n for n in own}), output_type=row_type, uid=self.fresh(f"sql-rows-{name}"),
                parallelism=self.parallelism)

    def cascade_joins(self, select: exp.Select) -> exp.Select:
        """A join of more than two tables (``a JOIN b ON ... JOIN c ON ...``, Nexmark's q23) with its first two
        tables' join as a query (``joined``) of all their columns (``a.x`` as ``x``, or ``a_x`` where both have an
        ``x``), which the next table joins."""
        source, joins = select.args.get("from_") or select.args.get("from"), select.args["joins"]
        tables = [source.this, joins[0].this]
        if not all(isinstance(t, exp.Table) and isinstance(t.this, exp.Identifier) for t in tables):
            raise _refuse("a join of more than two tables but tables by their names")
        for table in tables:
            if table.name not in self.tables:
                raise ConfigError(f"SQL: the query reads table {table.name!r} but tables= has {sorted(self.tables)}")
        columns = [(t.alias_or_name, _columns(self.tables[t.name])) for t in tables]
        clash = set(columns[0][1]) & set(columns[1][1])
        names = {(alias, c): f"{alias}_{c}" if c in clash else c for alias, cs in columns for c in cs}
        inner = exp.select(*[exp.alias_(exp.column(c, table=alias, quoted=True), name, quoted=True)
                             for (alias, c), name in names.items()]).from_(tables[0].copy())
        inner.set("joins", [joins[0].copy()])
        outer = named_outputs(select.copy())
        later = outer.args["joins"][1:]
        for part in [*outer.expressions, *later, *(outer.args[a] for a in ("where", "group") if outer.args.get(a))]:
            for column in list(part.find_all(exp.Column)):
                if (column.table, column.name) in names:
                    column.replace(exp.column(names[(column.table, column.name)], table="joined", quoted=True))
        key = "from_" if outer.args.get("from_") is not None else "from"
        outer.set(key, exp.From(this=exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("joined")))))
        outer.set("joins", later)
        return self.subqueries_as_tables(outer)

    def is_query(self, node) -> bool:
        """``node`` reads a query's rows (a ``Subquery`` table of ``subqueries_as_tables``)."""
        return isinstance(node, exp.Table) and isinstance(getattr(self.tables.get(node.name), "source", None),
                                                          Subquery)

    def with_instants(self, rel: _Rel) -> _Rel:
        """``rel`` with its columns of instants (``_Rel.instants``) as ``TIMESTAMP`` s (``Instants``)."""
        if not rel.instants:
            return rel
        fields = rel.flow._fields()
        flow = rel.flow.map(Instants(rel.instants), output_type=Types.ROW_NAMED(list(fields), [
            Types.TIMESTAMP() if c in rel.instants else t for c, t in fields.items()]),
            uid=self.fresh("sql-instants"), parallelism=self.parallelism)
        return _Rel(flow, rel.key, rel.window, rel.structure)

    def selected(self, query: _Query) -> _Rel:
        """A stateless SELECT, or a window or group aggregation, of one table."""
        fields, strategy = _event_time(query.table, self.tables[query.table])
        processing = query.window is not None and query.window[1] == self.tables[query.table].proctime
        if query.window is not None and not processing and (strategy is None
                                                            or strategy.timestamp_column != query.window[1]):
            raise ConfigError(f"SQL: the window's DESCRIPTOR({query.window[1]}) must be table {query.table!r}'s "
                              f"event time: declare it, SqlTable(source, watermark=\"{query.window[1]} - INTERVAL "
                              f"'4' SECOND\")")
        if query.aggregates:
            columns = {n: f"`{n}`" for n in fields} | query.computed
            types = fields | _spark_types(fields, {n: ("expr", e) for n, e in query.computed.items()}, self.functions)
            out = _stateful(self.scan(query.table, query.where, columns, types), query, self.parallelism,
                            self.fresh, self.shared, processing)
            key = None if query.window else [o for o, (k, _) in query.outputs.items() if k == "column"]
            missing = [k for k in query.keys if query.window is None and ("column", k) not in query.outputs.values()]
            unkeyed = (f"an updating result is kept by its GROUP BY columns: select {missing[0]!r} too"
                       if missing else "")
            key = [] if missing else key
            instants = tuple(o for o, (k, w) in query.outputs.items() if k == "column" and w in (START, END)
                             and query.window is not None and _is_instant(fields, query.window[1]))
            return _Rel(out, key, query.window, "-".join(["window" if query.window else "group", query.table,
                                                          *query.keys]), instants, unkeyed)
        flow = self.stateless(query)
        produced = flow._fields()
        names = [*query.outputs, *([KIND] if KIND in produced else [])]  # an updating query's rows stay changes
        out = flow.map(Rename({n: n for n in names}), output_type=Types.ROW_NAMED(names, [produced[n] for n in names]),
                       uid=self.fresh("sql-select"), parallelism=self.parallelism)
        inner = self.tables[query.table].source
        if KIND not in produced or not isinstance(inner, Subquery) or inner.rel.key is None:
            return _Rel(out)
        key = inner.rel.key  # kept when the outer query selects it as it is
        kept = bool(key) and all(query.outputs.get(k) in (("expr", k), ("expr", f"`{k}`")) for k in key)
        return _Rel(out, key if kept else [], unkeyed="" if kept else inner.rel.unkeyed or
                    f"a query over an updating result keeps its key: select {key} as they are")

    def stateless(self, query: _Query):
        """A stateless SELECT's rows as Spark reads them (its columns computed and its WHERE applied)."""
        fields = _event_time(query.table, self.tables[query.table])[0]
        columns = {o: e for o, (_, e) in query.outputs.items()}
        return self.scan(query.table, query.where, columns, _spark_types(fields, query.outputs, self.functions))

    def union_all(self, union: exp.Union) -> _Rel:
        """``SELECT ... UNION ALL SELECT ...`` of stateless SELECTs: each read as Spark evaluates it, one stream of
        their rows (``Dataflow.union``), in the order of the SELECTs in each microbatch; insert-only."""
        branches, node = [], union
        while isinstance(node, exp.Union):
            if node.args.get("distinct") or not isinstance(node.expression, exp.Select):
                raise _refuse("UNION (DISTINCT), INTERSECT or EXCEPT", "write UNION ALL of SELECTs")
            branches.insert(0, node.expression)
            node = node.this
        if not isinstance(node, exp.Select):
            raise _refuse("UNION ALL of anything but SELECTs")
        queries = [_read(b, self.tables) for b in [node, *branches]]
        if any(q.aggregates for q in queries):
            raise _refuse("UNION ALL of a SELECT with an aggregate", "union the rows, then aggregate them")
        for q in queries:  # a union is keyed: by a hash of each row's columns, which Spark computes as it reads
            q.outputs[PART] = ("expr", f"CAST(pmod(hash({', '.join(e for _, e in q.outputs.values())}), 1024) AS INT)")
        flows = [self.stateless(q) for q in queries]
        shapes = [list(f._fields().items()) for f in flows]
        if any(s != shapes[0] for s in shapes):
            raise ConfigError(f"SQL: UNION ALL of SELECTs whose columns differ: "
                              f"{[{c: str(t) for c, t in s if c != PART} for s in shapes]}; give each the same names "
                              f"and types, in the same order (CAST, AS)")
        fields = {c: t for c, t in shapes[0] if c not in (PART, ROWTIME)}
        out = flows[0].union(*flows[1:]).key_by(PART).process(
            Rows(list(fields)), uid=self.fresh("sql-union"), parallelism=self.parallelism,
            output_type=Types.ROW_NAMED(list(fields), list(fields.values())))
        return _Rel(out)

    def overed(self, over: OverQuery) -> _Rel:
        """An OVER aggregation: the table's rows, each with the aggregates of its window (``Dataflow.over``)."""
        names: dict[str, str] = {}
        for out, (kind, what) in over.outputs.items():
            if kind == "aggregate":
                names.setdefault(what, out)
        keyed = self.scan(over.table, over.where).key_by(over.keys if len(over.keys) != 1 else over.keys[0])
        reach = "unbounded" if over.preceding is None else str(over.preceding)
        out = keyed.over(ColumnAggregate(**over.aggregates).named(**names),
                         uid="-".join(["sql-over", over.table, *over.keys, over.frame, reach]),
                         time_column=self.time_column(over.table), frame=over.frame, preceding=over.preceding,
                         parallelism=self.parallelism)
        produced = out._fields()
        wanted = {o: names[w] if k == "aggregate" else w for o, (k, w) in over.outputs.items()}
        if list(wanted) != list(produced) or any(o != n for o, n in wanted.items()):
            out = out.map(Rename(wanted), output_type=Types.ROW_NAMED(list(wanted), [produced[n] for n in
                          wanted.values()]), uid=self.fresh("sql-select"), parallelism=self.parallelism)
        return _Rel(out)

    def ranked(self, rank: RankQuery) -> _Rel:
        """A Top-N or deduplication (``rank``) of a table's rows, or of a query's (``rank.inner``)."""
        up = self.relation(rank.inner) if rank.inner is not None else None
        if up is not None and up.window is not None and {START, END} <= set(rank.keys):
            return self.window_ranked(rank, up)
        flow = up.flow if up is not None else self.scan(rank.table, rank.where)
        strategy = self.tables[rank.table] if rank.table is not None else None
        time_column = _event_time(rank.table, strategy)[1] if strategy is not None else None
        time_column = time_column.timestamp_column if time_column is not None else None
        keys, structure = rank.keys, "-".join([rank.table or up.structure, *rank.keys])
        if not keys:
            fields = flow._fields()
            keys = [ALL]
            flow = flow.map(Constant(ALL), output_type=Types.ROW_NAMED([*fields, ALL], [*fields.values(),
                            Types.INT()]), uid=self.fresh("sql-all"), parallelism=self.parallelism)
        keyed = flow.key_by(keys if len(keys) != 1 else keys[0])
        (column, ascending) = rank.order[0]
        parallelism = self.parallelism if rank.keys else 1
        if (up is None and rank.n == 1 and rank.rank_column is None and len(rank.order) == 1
                and column in (None, time_column)):
            out = keyed.deduplicate(uid=f"sql-dedup-{structure}", keep="first" if ascending else "last",
                                    time_column=column and self.time_column(rank.table), parallelism=parallelism)
        elif any(c is None for c, _ in rank.order):
            raise _refuse("a Top-N ordered by PROCTIME() (a deduplication orders by it alone, keeping row 1)")
        else:
            out = keyed.top_n(rank.n, rank.order, uid=f"sql-top-{structure}", rank_column=rank.rank_column,
                              parallelism=parallelism)
        out = _select(out, rank, [c for c in out._fields() if c not in (ALL, ROWTIME)], parallelism, self.fresh)
        if "_kind" not in out._fields():
            return _Rel(out, instants=tuple(c for c in (up.instants if up else ()) if c in out._fields()))
        if rank.n > 1 and rank.rank_column is None:
            return _Rel(out, [])
        return _Rel(out, rank.keys + ([rank.rank_column] if rank.rank_column else []))

    def window_ranked(self, rank: RankQuery, up: _Rel) -> _Rel:
        """A window Top-N over a window aggregation's rows (``up``): each window's rows ranked once it fires,
        insert-only (Flink's ``WindowRank`` after a ``WindowAggregate``)."""
        fields = up.flow._fields()
        hidden = {c: c for c in fields if c not in (START, END)} | {"_start": START, "_end": END}
        flow = up.flow.map(Rename(hidden), output_type=Types.ROW_NAMED(list(hidden), [fields[c] for c in
                           hidden.values()]), uid=self.fresh("sql-window-rows"), parallelism=self.parallelism)
        keys = [k for k in rank.keys if k not in (START, END)]
        assigner = WindowColumns("_start", "_end")
        windowed = (flow.key_by(keys if len(keys) != 1 else keys[0]).window(assigner, timestamp_column="_start")
                    if keys else flow.window_all(assigner, timestamp_column="_start"))
        kind, _, size, slide = up.window
        out = windowed.top_n(rank.n, rank.order, uid="-".join(["sql-window-top", *keys, kind, str(size), str(slide)]),
                             rank_column=rank.rank_column, parallelism=self.parallelism if keys else 1)
        out = _select(out, rank, list(fields) + ([rank.rank_column] if rank.rank_column else []), self.parallelism,
                      self.fresh)
        return _Rel(out, instants=tuple(c for c in up.instants if c in out._fields()))

    def joined(self, join: JoinQuery) -> _Rel:
        """A join (``join``: regular, interval, window or temporal), then its conditions over both tables and the
        selected columns (an inner join's of insert-only rows without ``_kind``: it only inserts)."""
        structure = "-".join([*join.tables, join.how, *join.keys[0], *join.keys[1]])
        out, updating = (self.lookup_joined(join, structure) if join.as_of is not None
                         else self.paired(join, structure))
        if join.residual is not None:  # the conditions over both tables, on the joined rows as Spark reads them
            out = out.select_expr({c: f"`{c}`" for c in out._fields()}, output_type=out._row_type(),
                                  where=join.residual, functions=self.functions)
        produced = out._fields()
        wanted = {o: (c if side == 0 or c in (START, END) else RIGHT + c) for o, (side, c) in join.outputs.items()}
        if join.how != "inner" or updating:  # an outer join, or a join of an updating query's rows
            wanted[KIND] = KIND
        out = out.map(Rename(wanted), output_type=Types.ROW_NAMED(list(wanted), [produced[c] for c in
                      wanted.values()]), uid=self.fresh("sql-select"), parallelism=self.parallelism)
        instant = join.window is not None and self.time_column(join.tables[0]) == ROWTIME
        # an outer join's changelog is kept as it is: its rows have no key
        return _Rel(out, structure=f"join-{structure}",
                    instants=tuple(o for o, c in wanted.items() if instant and c in (START, END)))

    def paired(self, join: JoinQuery, structure: str) -> tuple:
        """The joined rows of a regular, interval or window join, each table read with its pushed-down filter,
        and whether they are changes (an updating query's joined)."""
        streams = [self.join_input(join, i).key_by(join.keys[i] if len(join.keys[i]) != 1 else join.keys[i][0])
                   for i in range(2)]
        if streams[0]._steps and streams[1]._steps and streams[0]._steps[0] is not streams[1]._steps[0]:
            raise _refuse("a join of two queries over different tables (each query's operators before the join)",
                          "join the tables first, then aggregate their joined rows")
        if join.window is not None:
            out = self.window_joined(join, structure)
        elif join.interval is not None:
            lower, upper, lower_inclusive, upper_inclusive = join.interval
            paired = streams[0].interval_join(streams[1]).between(lower, upper)
            paired = paired if lower_inclusive else paired.lower_bound_exclusive()
            paired = paired if upper_inclusive else paired.upper_bound_exclusive()
            left, right = streams[0]._fields(), streams[1]._fields()
            both = {**left, **{RIGHT + c: t for c, t in right.items()}}
            out = paired.process(JoinedRows(RIGHT), uid=f"sql-interval-join-{structure}-{lower}-{upper}",
                                 output_type=Types.ROW_NAMED(list(both), list(both.values())),
                                 parallelism=self.parallelism)
        else:
            out = streams[0].regular_join(streams[1], how=join.how, uid=f"sql-join-{structure}", right_prefix=RIGHT,
                                          parallelism=self.parallelism)
        return out, any(KIND in stream._fields() for stream in streams)

    def lookup_joined(self, join: JoinQuery, structure: str) -> tuple:
        """A processing-time temporal join (``lookup``): the looked-up table broadcast to every subtask of an
        operator that joins each row of the first table with its key's rows (``LookupRows``)."""
        from .lookup import LookupRows

        if join.as_of != self.tables[join.tables[0]].proctime:
            raise _refuse(f"a temporal join AS OF {join.as_of}, not a PROCTIME() column (an event-time temporal "
                          f"join of a versioned table)", "look the table up AS OF the processing time: FROM "
                          "(SELECT *, PROCTIME() AS p FROM t) a JOIN s FOR SYSTEM_TIME AS OF a.p")
        if join.how != "inner" or len(join.keys[0]) != 1:
            raise _refuse("a temporal join other than an inner one ON one equality")
        left, right = self.join_input(join, 0), self.join_input(join, 1)
        if right._steps:
            raise _refuse("a temporal join of a query's rows", "look up a table")
        rows, (key,), (looked_up,) = right._row_type(), *join.keys
        function = LookupRows(f"sql-lookup-{join.tables[1]}", key, looked_up, rows.fields[looked_up], rows, RIGHT)
        both = {**left._fields(), **{RIGHT + c: t for c, t in rows.fields.items()}}
        out = left.connect(right.broadcast(function.descriptor)).process(
            function, uid=f"sql-lookup-join-{structure}", output_type=Types.ROW_NAMED(list(both), list(both.values())),
            parallelism=self.parallelism)
        return out, KIND in left._fields()

    def join_input(self, join: JoinQuery, i: int):
        """Side ``i`` of ``join`` as the join reads it: its table's rows that its conditions keep, with the key
        columns it computes. A null key joins nothing (SQL's equality), so the rows of a side not kept unmatched
        are dropped as read."""
        name, computed = join.tables[i], join.computed[i]
        dropped = i in {"inner": (0, 1), "left": (1,), "right": (0,)}.get(join.how, ())
        where = " AND ".join([*([join.where[i]] if join.where[i] else []), *(
            f"({computed.get(k, f'`{k}`')}) IS NOT NULL" for k in (join.keys[i] if dropped else []))]) or None
        if not computed:
            return self.scan(name, where)
        fields = _event_time(name, self.tables[name])[0]
        types = fields | _spark_types(fields, {n: ("expr", e) for n, e in computed.items()}, self.functions)
        return self.scan(name, where, {n: f"`{n}`" for n in fields} | computed, types)

    def window_joined(self, join: JoinQuery, structure: str):
        """A window join: each table's rows of one key and window joined when the window fires (Flink SQL's
        window join), each joined row with the window's ``window_start`` and ``window_end``; insert-only."""
        kind, _, size, slide = join.window
        streams = [self.join_input(join, i) for i in range(2)]
        left, right = streams[0]._fields(), streams[1]._fields()
        both = {**left, **{RIGHT + c: t for c, t in right.items()}, START: Types.LONG(), END: Types.LONG()}
        assigner = _assigner(kind, size, slide)
        keys = [k if len(k) != 1 else k[0] for k in join.keys]
        return (streams[0].join(streams[1]).where(keys[0]).equal_to(keys[1]).window(assigner)
                .apply(PairRows(RIGHT), uid=f"sql-window-join-{structure}-{kind}-{size}-{slide}",
                       output_type=Types.ROW_NAMED(list(both), list(both.values())), window_columns=(START, END),
                       parallelism=self.parallelism))










def _rows_of(flow, where: str | None, columns: dict | None, types: dict | None, functions: tuple = ()):
    """A subquery's rows (``flow``) that ``where`` keeps, as ``columns`` (name -> Spark SQL; None: all as they are),
    computed by Spark as the next operator reads them (``Dataflow.select_expr``); an updating query's keep their
    ``_kind``."""
    fields = flow._fields()
    columns = dict(columns or {n: f"`{n}`" for n in fields})
    if KIND in fields:
        columns[KIND] = f"`{KIND}`"
    if where is None and list(columns.items()) == [(n, f"`{n}`") for n in fields]:
        return flow
    types = {**fields, **(types or {})}
    return flow.select_expr(columns, output_type=Types.ROW_NAMED(list(columns), [types[n] for n in columns]),
                            where=where, functions=functions)


def _select(out, rank: RankQuery, available: list[str], parallelism: int, fresh):
    """A Top-N's rows as its outer query selects them (``available``: its columns, in order, for ``*``)."""
    produced = out._fields()
    wanted = {c: c for c in (rank.columns if rank.columns is not None else available)}
    missing = [c for c in wanted if c not in produced]
    if missing:
        raise ConfigError(f"SQL: the query selects {missing[0]!r}, not a column of the rows it ranks "
                          f"({[c for c in available if c != '_kind']})")
    wanted |= {"_kind": "_kind"} if "_kind" in produced else {}
    if list(wanted) == list(produced):
        return out
    return out.map(Rename(wanted), output_type=Types.ROW_NAMED(list(wanted), [produced[c] for c in wanted]),
                   uid=fresh("sql-select"), parallelism=parallelism)


def compile_query(job_id: str, sql: str, tables: dict, sink, parallelism: int = 2, functions: dict | None = None,
                  **settings):
    """The Dataflow of ``sql`` over ``tables`` (name -> ``SqlTable`` or ``Source``), ended in ``sink``: what
    ``SqlJob`` validates and returns. An updating result's sink given as a path is an ``UpsertDeltaSink`` by the
    result's key."""
    from ..delta.upsert_sink import UpsertDeltaSink

    query, tables = with_views(parse(sql), {n: t if isinstance(t, SqlTable) else SqlTable(t)
                                            for n, t in tables.items()})
    compiler = _Compiler(job_id, tables, parallelism, settings, checked(functions))
    rel = compiler.union_all(query) if isinstance(query, exp.Union) else compiler.relation(query)
    if isinstance(sink, str) and rel.key is not None:
        if not rel.key and rel.unkeyed:
            raise ConfigError(f"SQL: {rel.unkeyed}")
        if not rel.key:
            raise ConfigError("SQL: this updating result's rows have no key to upsert by (a Top-N without its row "
                              "number): select the row number, or give sink=UpsertDeltaSink(path, "
                              "key=[columns naming a row]), or a DeltaSink to keep every change")
        sink = UpsertDeltaSink(sink, key=rel.key)
    return compiler.with_instants(rel).flow.sink_to(sink)


def SqlJob(job_id: str, sql: str, *, tables: dict, sink, parallelism: int = 2,  # noqa: N802
           functions: dict | None = None, **settings):
    """The job a SQL query defines (docs/writing/sql.md): ``sql`` one ``SELECT`` in Flink's dialect over
    ``tables`` (name -> a ``Source``, or an ``SqlTable`` with its watermark), its rows to ``sink`` (a warehouse
    path: a Delta table; an updating result's path, an ``UpsertDeltaSink`` keyed by its group's columns). Returns
    the job (a ``JobSpec`` or ``Job``), which runs as any other. ``functions``: the user's scalar functions the
    query calls (name -> ``@udf(result_type=...)``). ``settings``: ``backend``, ``checkpoint_interval``,
    ``num_retained``.

    Example::

        SqlJob("clicks-per-minute", \"\"\"
            SELECT country, window_start, window_end, COUNT(*) AS clicks
            FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
            GROUP BY country, window_start, window_end\"\"\",
            tables={"clicks": SqlTable(FileSource("input/clicks", "json", CLICK), watermark="ts")},
            sink="sinks/clicks_per_minute")
    """
    return compile_query(job_id, sql, tables, sink, parallelism, functions, **settings)


def explain(job) -> str:
    """The operators of a compiled job (``SqlJob``'s), one line each: its uid, what it runs, its key and the
    state it registers (each state's name and type, as a checkpoint records it)."""
    from ..graph import as_job
    from ..registered_states import discover_descriptors

    lines = []
    for op in as_job(job).operators:
        states = ", ".join(f"state {name}" for name in sorted(discover_descriptors(op))) or "no state"
        key = "not keyed" if op.key == "__share__" else f"keyed by {op.key!r}"
        lines.append(f"{op.uid}: {type(op.function).__name__}, {key}; {states}")
    return "\n".join(lines)
