"""Rewrites of a SQL query into the shapes ``compile`` reads (docs/writing/sql.md): a GROUP BY of a join's rows
as the aggregation of a query of them (``join_then_aggregate``), a Top-N whose ROW_NUMBER() query has columns of
its own as the Top-N of that query (``rank_of_rows``), and a rewritten query's outputs named as they were
(``named_outputs``); ``windowed_rows`` tells a window join's input from a query read as a table. sqlglot's
trees in, trees out. No Spark here."""
from __future__ import annotations

from sqlglot import exp

from .dialect import refuse as _refuse
from .dialect import window_of


def windowed_rows(node) -> bool:
    """``(SELECT * FROM TABLE(<windowing function>) [WHERE ...])``: a window join's input, which it reads itself."""
    inner = node.this
    source = (inner.args.get("from_") or inner.args.get("from")) if isinstance(inner, exp.Select) else None
    return (source is not None and window_of(source.this)[1] is not None and not inner.args.get("group")
            and not inner.args.get("joins"))

def join_then_aggregate(select: exp.Select) -> exp.Select:
    """A ``GROUP BY`` (or aggregate) of a join's rows (Nexmark's q4) as the aggregation of a query, the join's rows
    as a subquery ``joined`` of each column the rest reads (``a.x`` as ``x``, or ``a_x`` where two tables' columns
    share a name); ``select`` as it is for anything else."""
    group = select.args.get("group")
    if not select.args.get("joins") or not (group or any(e.find(exp.AggFunc) for e in select.expressions)):
        return select
    parts = [*select.expressions, *(group.expressions if group else [])]
    read = {(c.table, c.name): c for part in parts for c in part.find_all(exp.Column)}
    clash = {n for (_, n) in read if sum(name == n for _, name in read) > 1}
    names = {k: f"{k[0]}_{k[1]}" if k[1] in clash else k[1] for k in read}
    inner = select.copy()
    inner.set("expressions", [exp.alias_(column.copy(), names[k], quoted=True) for k, column in read.items()])
    for arg in ("group", "having", "order", "limit"):
        inner.set(arg, None)
    outer = named_outputs(select.copy())
    key = "from_" if outer.args.get("from_") is not None else "from"
    outer.set(key, exp.From(this=exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("joined")))))
    outer.set("joins", None)
    outer.set("where", None)
    for part in [*outer.expressions, *(outer.args["group"].expressions if group else [])]:
        for column in list(part.find_all(exp.Column)):
            column.replace(exp.column(names[(column.table, column.name)], quoted=True))
    return outer

def rank_of_rows(select: exp.Select) -> exp.Select:
    """A Top-N whose ``ROW_NUMBER()`` query selects columns of its own, reads a join or filters a query's rows
    (Nexmark's q9) as the row number of that query's rows (less the row number) read as a query of their own:
    ``SELECT *, ROW_NUMBER() OVER (...) AS rn FROM (SELECT <its columns> FROM ... [WHERE ...])``, its PARTITION BY
    and ORDER BY columns as that query names them; ``select`` as it is for any other."""
    source = select.args.get("from_") or select.args.get("from")
    if source is None or not isinstance(source.this, exp.Subquery) or not isinstance(source.this.this, exp.Select):
        return select
    inner = source.this.this
    ranked = [e for e in inner.expressions if isinstance(e, exp.Alias) and isinstance(e.this, exp.Window)]
    others = [e for e in inner.expressions if not (isinstance(e, exp.Alias) and isinstance(e.this, exp.Window))]
    read = inner.args.get("from_") or inner.args.get("from")
    nested = read is not None and isinstance(read.this, exp.Subquery)
    plain = all(isinstance(e, exp.Star) for e in others) and not inner.args.get("joins")
    if len(ranked) != 1 or len(others) + 1 != len(inner.expressions) or (plain and not (nested and inner.args.get(
            "where"))):
        return select
    rows = inner.copy()
    rows.set("expressions", [e.copy() for e in others])
    window = ranked[0].this.copy()
    for column in list(window.find_all(exp.Column)):
        column.replace(exp.column(_selected_name(column, others), quoted=True))
    numbered = exp.select(exp.Star(), exp.alias_(window, ranked[0].alias, quoted=True)).from_(
        exp.Subquery(this=rows, alias=exp.TableAlias(this=exp.to_identifier("ranked"))))
    out = select.copy()
    (out.args.get("from_") or out.args.get("from")).this.set("this", numbered)
    return out

def _selected_name(column: exp.Column, items: list) -> str:
    """The name under which ``items`` (a SELECT's) select ``column`` (``b.ts AS bid_ts``: bid_ts; ``a.*``: its
    name)."""
    for item in items:
        node = item.this if isinstance(item, exp.Alias) else item
        star = isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star)
                                               and node.table == column.table)
        if star or (isinstance(node, exp.Column) and node.name == column.name
                    and (node.table == column.table or not column.table)):
            return column.name if star else item.alias_or_name
    raise _refuse(f"a ROW_NUMBER() over {column.sql()}, a column its query does not select", "select it too")

def named_outputs(select: exp.Select) -> exp.Select:
    """``select`` with each column it selects without ``AS`` named as it is (``a.x AS x``; a name selected twice
    is left to the join's naming), so that reading it from a rewritten query keeps the output's names."""
    bare = [e.name for e in select.expressions if isinstance(e, exp.Column)]
    select.set("expressions", [exp.alias_(e, e.name, quoted=True) if isinstance(e, exp.Column)
                               and bare.count(e.name) == 1 else e for e in select.expressions])
    return select
