"""Flink SQL's Top-N and deduplication, read from their one SQL shape (docs/writing/sql.md):

    SELECT <columns | *> FROM (
        SELECT *, ROW_NUMBER() OVER ([PARTITION BY k ...] ORDER BY c [ASC | DESC] ...) AS rn
        FROM t [WHERE ...] | FROM (<a query>))
    WHERE rn <= N        -- or rn < N, rn = 1, rn BETWEEN 1 AND N

Over a query's rows, the Top-N ranks what that query gives: an updating result (a ``GROUP BY``'s, Flink's
retracting Top-N) or a window aggregation's rows partitioned by ``window_start, window_end`` (window Top-N).

``rn <= 1`` ordered by the table's event-time column (or ``PROCTIME()``) and not selected is a deduplication
(``Dataflow.deduplicate``: ascending keeps the first row, descending the last); any other is a Top-N
(``Dataflow.top_n``), with the row number as its rank column when the outer query selects it. No Spark here.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from .dialect import refuse as _refuse


@dataclass
class RankQuery:
    """A Top-N or deduplication read from the SQL (see the module docstring)."""

    table: str | None  # None: over ``inner``, a subquery
    where: str | None
    keys: list[str]
    order: list[tuple[str, bool]]  # (column, ascending); the column None for PROCTIME()
    n: int
    rank_column: str | None  # the row number's name when the outer query selects it
    columns: list[str] | None  # the outer query's columns (None: all of the table's, and the rank if named)
    inner: exp.Select | None = None  # the query it ranks the rows of, when not a table



def _bound(where, name: str) -> int:
    """N of the outer ``WHERE rn <= N`` (or ``< N``, ``= 1``, ``BETWEEN 1 AND N``)."""
    def number(node) -> int:
        if not isinstance(node, exp.Literal) or node.is_string:
            raise _refuse(f"a row-number bound {node.sql()}")
        return int(node.name)

    def is_rank(node) -> bool:
        return isinstance(node, exp.Column) and node.name == name

    if isinstance(where, exp.Between) and is_rank(where.this) and number(where.args["low"]) == 1:
        return number(where.args["high"])
    for kind, bound in ((exp.LTE, 0), (exp.LT, -1), (exp.EQ, 0)):
        if isinstance(where, kind) and is_rank(where.this):
            n = number(where.expression) + bound
            if kind is exp.EQ and n != 1:
                raise _refuse(f"WHERE {where.sql()}: a row number other than the first ones")
            return n
    raise _refuse(f"WHERE {where.sql() if where is not None else 'nothing'} over the row number "
                  f"(write {name} <= N)")


def read_rank(select: exp.Select) -> RankQuery | None:
    """The Top-N or deduplication ``select`` is, or None when it has no ``ROW_NUMBER()`` subquery."""
    source = select.args.get("from_") or select.args.get("from")
    inner = source.this if source is not None else None
    if not isinstance(inner, exp.Subquery) or not isinstance(inner.this, exp.Select):
        return None
    inner = inner.this
    windows = [(i, i.this if isinstance(i, exp.Alias) else i) for i in inner.expressions]
    ranked = [(i, w) for i, w in windows if isinstance(w, exp.Window)]
    if not ranked:
        return None
    if len(ranked) != 1 or not isinstance(ranked[0][1].this, exp.RowNumber) or not isinstance(ranked[0][0], exp.Alias):
        raise _refuse("a window function other than one ROW_NUMBER() ... AS name")
    if any(not isinstance(w, (exp.Star, exp.Window)) for _, w in windows):
        raise _refuse("a Top-N's inner query selecting columns (select * and the row number)")
    alias, window = ranked[0][0].alias, ranked[0][1]
    table = inner.args.get("from_") or inner.args.get("from")
    nested = table.this.this if isinstance(table.this, exp.Subquery) else None
    if not isinstance(nested, exp.Select) and not (isinstance(table.this, exp.Table)
                                                    and isinstance(table.this.this, exp.Identifier)):
        raise _refuse("a Top-N over anything but a table or a query")
    if nested is not None and inner.args.get("where"):
        raise _refuse("a WHERE beside ROW_NUMBER() over a query's rows", "filter them in that query")
    for arg in ("joins", "group", "having", "order", "limit"):
        if inner.args.get(arg) or select.args.get(arg):
            raise _refuse(f"{arg.upper()} in a Top-N")
    keys = [p.name for p in window.args.get("partition_by") or []]
    if not all(isinstance(p, exp.Column) for p in window.args.get("partition_by") or []):
        raise _refuse("a ROW_NUMBER() PARTITION BY an expression (partition by columns)")
    order = []
    for o in (window.args.get("order").expressions if window.args.get("order") else []):
        node = o.this
        if isinstance(node, exp.CurrentTimestamp):  # PROCTIME() (``dialect``)
            order.append((None, not o.args.get("desc")))
        elif isinstance(node, exp.Column):
            order.append((node.name, not o.args.get("desc")))
        else:
            raise _refuse(f"ORDER BY {node.sql()} in a ROW_NUMBER()")
    if not order:
        raise _refuse("a ROW_NUMBER() without ORDER BY")
    outer = select.expressions
    star = len(outer) == 1 and isinstance(outer[0], exp.Star)
    if not star and not all(isinstance(c, exp.Column) for c in outer):
        raise _refuse("a Top-N's outer query computing columns (select columns by name)")
    columns = None if star else [c.name for c in outer]
    rank_column = alias if star or alias in (columns or []) else None
    where = inner.args.get("where")
    return RankQuery(None if nested is not None else table.this.name,
                     None if where is None else where.this.sql(dialect="spark"), keys, order,
                     _bound(select.args.get("where") and select.args["where"].this, alias), rank_column, columns,
                     nested)
