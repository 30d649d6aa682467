"""Flink SQL's regular equi-join of two tables, read from SQL (docs/writing/sql.md):

    SELECT a.x, b.y AS why FROM a [INNER | LEFT | RIGHT | FULL [OUTER]] JOIN b ON a.k = b.k [AND a.j = b.j]
    [WHERE <conditions on one table each>]

It compiles to ``Dataflow.regular_join``. An inner join's ``WHERE`` conjuncts each read one table, and Spark
evaluates them as it reads that table. An outer join takes no ``WHERE`` yet. The output is the selected columns.
An inner join of insert-only tables only inserts, so it is a plain stream; an outer join is a changelog (its
null-padded rows retracted once a match comes).

An inner join whose conditions (in ``ON`` or ``WHERE``) also bound one table's event time by the other's is
Flink SQL's interval join, ``Dataflow.interval_join``:

    ... FROM a JOIN b ON a.k = b.k AND a.ts BETWEEN b.ts - INTERVAL '10' SECOND AND b.ts
    ... FROM a, b WHERE a.k = b.k AND b.ts >= a.ts AND b.ts < a.ts + INTERVAL '1' MINUTE

Each bound is ``<time> <op> <time> [+|- INTERVAL ...]`` (``<``, ``<=``, ``>``, ``>=``, ``BETWEEN``) over the
two tables' event-time columns, and both a lower and an upper bound are needed. Its rows are insert-only. No Spark
here.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from ..errors import ConfigError
from .dialect import interval_millis, window_of
from .dialect import refuse as _refuse

START, END = "window_start", "window_end"
RIGHT = "_right_"  # a joined row's right columns' prefix (``compile``'s joins)

HOW = {None: "inner", "": "inner", "INNER": "inner", "LEFT": "left", "RIGHT": "right", "FULL": "full"}


@dataclass
class JoinQuery:
    """A join read from the SQL: each side's table, keys and pushed-down filter, how, and the output columns
    (output name -> (side 0 or 1, column))."""

    tables: tuple[str, str]
    keys: tuple[list[str], list[str]]
    where: tuple[str | None, str | None]
    how: str
    outputs: dict
    # An interval join's bounds of the right table's time less the left's: (lower, upper, lower inclusive, upper
    # inclusive); None: a regular join.
    interval: tuple[int, int, bool, bool] | None = None
    window: tuple | None = None  # a window join's window (kind, time column, size, slide): both sides'
    residual: str | None = None  # an inner join's conditions over both tables, on its joined rows (Spark SQL)
    computed: tuple = ({}, {})  # each side's key columns computed as it is read (name -> Spark SQL)
    as_of: str | None = None  # a temporal join's FOR SYSTEM_TIME AS OF column (the left table's)



def _conjuncts(node) -> list:
    return _conjuncts(node.this) + _conjuncts(node.expression) if isinstance(node, exp.And) else [node]


_FLIPPED = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}


def _time_term(node, side_of, times: tuple) -> tuple[int, int] | None:
    """``(side, offset ms)`` of ``t``, ``t + INTERVAL ...`` or ``t - INTERVAL ...`` where ``t`` is a table's
    event-time column (``times``: each side's), else None."""
    offset = 0
    if isinstance(node, (exp.Add, exp.Sub)) and isinstance(node.expression, exp.Interval):
        offset = interval_millis(node.expression) * (1 if isinstance(node, exp.Add) else -1)
        node = node.this
    if not isinstance(node, exp.Column):
        return None
    side = side_of(node)
    return (side, offset) if times[side] == node.name else None


def _time_bounds(condition, side_of, times: tuple) -> list[tuple[type, int]] | None:
    """A condition bounding one side's event time by the other's, as bounds of ``d`` = right's time less left's:
    ``[(exp.GTE, -5000), ...]``; None for any other condition."""
    if isinstance(condition, exp.Between):
        parts = [exp.GTE(this=condition.this, expression=condition.args["low"]),
                 exp.LTE(this=condition.this, expression=condition.args["high"])]
        bounds = [_time_bounds(p, side_of, times) for p in parts]
        return None if None in bounds else [b for found in bounds for b in found]
    if type(condition) not in _FLIPPED:
        return None
    terms = _time_term(condition.this, side_of, times), _time_term(condition.expression, side_of, times)
    if None in terms or terms[0][0] == terms[1][0]:
        return None
    (side, first), (_, second) = terms
    # first side's time + first OP the other's + second
    if side == 1:  # right + first op left + second: d op second - first
        return [(type(condition), second - first)]
    return [(_FLIPPED[type(condition)], first - second)]  # left + first op right + second: d flipped first - second


def _interval(bounds: list) -> tuple[int, int, bool, bool]:
    """The tightest lower and upper bound of ``bounds`` (``_time_bounds``'), each with whether it is inclusive."""
    lower = max(((v, op is exp.GTE) for op, v in bounds if op in (exp.GT, exp.GTE)), default=None,
                key=lambda b: (b[0], not b[1]))
    upper = min(((v, op is exp.LTE) for op, v in bounds if op in (exp.LT, exp.LTE)), default=None,
                key=lambda b: (b[0], b[1]))
    if lower is None or upper is None:
        raise _refuse("an interval join bounded on one side only (give a lower and an upper bound of the "
                      "time, as BETWEEN ... AND ...)")
    return lower[0], upper[0], lower[1], upper[1]


def _unqualified(condition) -> str:
    """``condition`` in Spark SQL over its table's columns alone (``a.x > 1``: ```x` > 1``)."""
    return condition.copy().transform(
        lambda n: exp.column(n.name, quoted=True) if isinstance(n, exp.Column) else n).sql(dialect="spark")


def _joined(condition, side_of, prefix: str) -> str:
    """``condition`` in Spark SQL over a joined row's columns: the left table's as they are, the right's with
    ``prefix``."""
    return condition.copy().transform(
        lambda n: exp.column(n.name if side_of(n) == 0 else prefix + n.name, quoted=True)
        if isinstance(n, exp.Column) else n).sql(dialect="spark")


def _sides_of(node, side_of) -> set:
    return {side_of(c) for c in node.find_all(exp.Column)}


def _conditions(on: list, where_conditions: list, how: str, side_of, times: tuple) -> tuple:
    """The join's keys (each side's columns), its time bounds (``_time_bounds``'), each side's own conditions
    (Spark SQL, read with its table), an inner join's conditions over both (on the joined rows), and the key
    columns each side computes (``mod(b.auction, 10) = s.key``: ``_key0`` of ``mod(auction, 10)``), from the
    conjuncts of ``ON`` and ``WHERE``."""
    keys: tuple[list, list] = ([], [])
    bounds: list = []
    where: list[list[str]] = [[], [], []]  # the left table's, the right table's, and both tables' conditions
    computed: tuple[dict, dict] = ({}, {})
    for condition in on + where_conditions:
        in_on = any(condition is c for c in on)
        ends = (condition.this, condition.expression) if isinstance(condition, exp.EQ) else ()
        touched = _sides_of(condition, side_of)
        sides = [_sides_of(e, side_of) for e in ends]
        if ends and all(len(t) == 1 for t in sides) and sides[0] != sides[1]:
            for end, (side,) in sorted(zip(ends, sides), key=lambda pair: min(pair[1])):
                name = end.name if isinstance(end, exp.Column) else f"_key{len(keys[side])}"
                if not isinstance(end, exp.Column):  # an expression of one table's columns: computed as it is read
                    computed[side][name] = _unqualified(end)
                keys[side].append(name)
            continue
        found = _time_bounds(condition, side_of, times) if how == "inner" else None
        if found is not None:
            bounds += found
        elif how == "inner" and len(touched) == 2 and not condition.find(exp.AggFunc, exp.Window, exp.Subquery):
            where[2].append(f"({_joined(condition, side_of, RIGHT)})")
        elif (in_on and how != "inner") or len(touched) != 1:
            raise _refuse(f"the join condition {condition.sql()} (equalities of a column of each table, and an inner "
                          f"join's bounds of one table's event time by the other's)")
        else:
            where[touched.pop()].append(f"({_unqualified(condition)})")
    if not keys[0]:
        raise _refuse("a join without an equality of a column of each table (a cross join)")
    return keys, bounds, where, computed


def _side(node, columns: dict) -> tuple:
    """One side of a join: ``(table, alias, window, WHERE)`` of a table by its name, a windowing function of one
    (``TABLE(TUMBLE(TABLE t, ...)) AS a``) or ``(SELECT * FROM TABLE(TUMBLE(...)) [WHERE ...]) AS a``."""
    alias, where = node.alias, None
    if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select):
        query = node.this
        star = len(query.expressions) == 1 and isinstance(query.expressions[0], exp.Star)
        if not star or any(query.args.get(a) for a in ("joins", "group", "having", "order", "limit")):
            raise _refuse("a join of a query other than SELECT * FROM TABLE(<windowing function>) [WHERE ...]")
        node = (query.args.get("from_") or query.args.get("from")).this
        where = query.args["where"].this if query.args.get("where") is not None else None
        if where is not None and any(c.name in (START, END) for c in where.find_all(exp.Column)):
            raise _refuse("a condition on window_start or window_end in a window join's input")
    table, window = window_of(node)
    if (where is not None or isinstance(node, exp.Subquery)) and window is None:
        raise _refuse("a join of a query other than SELECT * FROM TABLE(<windowing function>) [WHERE ...]")
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        raise _refuse("a join of anything but two tables by their names (or their windowing functions)")
    if table.name not in columns:
        raise ConfigError(f"SQL: the query reads table {table.name!r} but tables= has {sorted(columns)}")
    return table.name, alias or table.alias_or_name, window, where


def _window_pair(sides: list, keys: tuple, how: str) -> tuple | None:
    """A window join's window, its ``window_start`` and ``window_end`` equalities taken out of ``keys``; None
    when neither side is windowed."""
    windows = [side[2] for side in sides]
    if windows == [None, None]:
        return None
    pairs = list(zip(*keys))
    kinds = sorted({w[0] for w in windows if w is not None} - {"tumble", "hop"})
    if kinds:
        raise _refuse(f"a window join of {kinds[0].upper()} windows", "join TUMBLE or HOP windows")
    if None in windows or windows[0][0::2] != windows[1][0::2] or windows[0][3] != windows[1][3]:
        raise _refuse("a join of windowed rows with rows of another window (a window join joins the same "
                      "windowing function of each table)")
    if (START, START) not in pairs or (END, END) not in pairs or how != "inner":
        raise _refuse("a window join other than an inner one ON l.window_start = r.window_start AND l.window_end = "
                      "r.window_end AND ...")
    kept = [(a, b) for a, b in pairs if (a, b) not in ((START, START), (END, END))]
    if not kept or any(c in (START, END) for pair in kept for c in pair):
        raise _refuse("a window join without an equality of a column of each table besides the window's")
    keys[0][:], keys[1][:] = [a for a, _ in kept], [b for _, b in kept]
    return windows[0]


def _outputs(items: list, sides: list, names: list, side_of) -> dict:
    """A join's output columns (name -> (side, column)) from its SELECT's ``items``: columns of one table each,
    or ``a.*``; a name selected twice without ``AS`` named as Calcite names it (``ts``, ``ts0``)."""
    outputs = {}
    for item in items:
        node, alias = (item.this, item.alias) if isinstance(item, exp.Alias) else (item, None)
        if isinstance(node, exp.Column) and isinstance(node.this, exp.Star):  # a.*: each of a's columns
            side = [i for i, found in enumerate(sides) if found[1] == node.table]
            if len(side) != 1:
                raise ConfigError(f"SQL: {node.sql()} names no table of the join ({sides[0][1]}, {sides[1][1]})")
            for column in names[side[0]]:
                if column in outputs:
                    raise ConfigError(f"SQL: the join's output has two columns {column!r}; select them one by one "
                                      f"and name one otherwise (AS ...)")
                outputs[column] = (side[0], column)
            continue
        if not isinstance(node, exp.Column):
            raise _refuse(f"{node.sql()} in a join's SELECT (select columns, each of one table)")
        name, n = alias or node.name, 0
        while name in outputs and not alias:  # Calcite's names of a repeated column, as Flink's: dateTime0, ...
            name, n = f"{node.name}{n}", n + 1
        if name in outputs:
            raise ConfigError(f"SQL: the join's output has two columns {name!r}; name one otherwise (AS ...)")
        outputs[name] = (side_of(node), node.name)
    return outputs


def read_join(select: exp.Select, columns: dict, times: dict | None = None) -> JoinQuery | None:
    """The join ``select`` is (``columns``: each table's column names by table name; ``times``: its event-time
    column, if any), or None without a JOIN."""
    joins = select.args.get("joins") or []
    if not joins:
        return None
    if len(joins) != 1:
        raise _refuse("a join of more than two tables")
    join, source = joins[0], select.args.get("from_") or select.args.get("from")
    # FROM a, b (sqlglot's CROSS join): an inner join whose equalities are in WHERE
    comma = not join.args.get("on") and join.args.get("kind") == "CROSS" and not join.args.get("side")
    if (join.args.get("kind") not in (None, "", "INNER", "OUTER", "CROSS" if comma else "")
            or join.args.get("using") or not (join.args.get("on") or comma)):
        raise _refuse(f"a {join.args.get('kind') or ''} JOIN without ON equalities (CROSS, SEMI, ANTI, USING)")
    sides = [_side(table, columns) for table in (source.this, join.this)]  # (table, alias, window, its WHERE)
    if source.this.args.get("version") is not None:
        raise _refuse("FOR SYSTEM_TIME AS OF on the first table of a join", "put the table looked up second")
    version = join.this.args.get("version")
    names = [columns[name] + ([START, END] if window else []) for name, _, window, _ in sides]

    def side_of(column: exp.Column) -> int:
        if column.table:
            found = [i for i, side in enumerate(sides) if side[1] == column.table]
        else:
            found = [i for i in range(2) if column.name in names[i]]
        if len(found) != 1 or column.name not in names[found[0]]:
            raise ConfigError(f"SQL: the column {column.sql()} is not one column of {sides[0][1]} or "
                              f"{sides[1][1]}: qualify it (a.column)")
        return found[0]

    how, times = HOW.get(join.args.get("side") or None), tuple((times or {}).get(side[0]) for side in sides)
    if how != "inner" and select.args.get("where") is not None:
        raise _refuse("WHERE with an outer join")
    on = _conjuncts(join.args["on"]) if join.args.get("on") else []
    where_conditions = _conjuncts(select.args["where"].this) if select.args.get("where") is not None else []
    keys, bounds, where, computed = _conditions(on, where_conditions, how, side_of, times)
    for i, side in enumerate(sides):  # a windowed side's own WHERE, read with its table
        if side[3] is not None:
            where[i].append(f"({_unqualified(side[3])})")
    window = _window_pair(sides, keys, how)
    for i, side in enumerate(sides):
        if window is not None and side[2][1] != times[i]:
            raise ConfigError(f"SQL: the window's DESCRIPTOR({side[2][1]}) must be table {side[0]!r}'s event time: "
                              f"declare it, SqlTable(source, watermark=\"{side[2][1]} - INTERVAL '4' SECOND\")")
    outputs = _outputs(select.expressions, sides, names, side_of)
    if window is not None and bounds:
        raise _refuse("a window join with bounds of event time (an interval join of windowed rows)")
    as_of = None
    if version is not None:
        column = version.expression
        if str(version.args.get("kind")).upper() != "AS OF" or not isinstance(column, exp.Column) or side_of(
                column) != 0 or bounds or window is not None:
            raise _refuse(f"the temporal join FOR SYSTEM_TIME {version.args.get('kind')} {column.sql()}",
                          "look the table up AS OF a column of the first table's, without bounds of time")
        as_of = column.name
    return JoinQuery((sides[0][0], sides[1][0]), keys, tuple(" AND ".join(w) or None for w in where[:2]), how,
                     outputs, _interval(bounds) if bounds else None, window, " AND ".join(where[2]) or None,
                     computed, as_of)
