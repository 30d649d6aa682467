"""Flink's ``CREATE VIEW v AS SELECT ...`` before a SQL job's query (Nexmark's q12), read from the statements:
a view of a table with its processing time, ``SELECT *, PROCTIME() AS p FROM t``, is that table with the
processing-time column ``p`` (``SqlTable.proctime``: windows of ``DESCRIPTOR(p)`` are processing-time windows);
any other view is read where the query reads it, as the subquery it is. No Spark here."""
from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from ..errors import ConfigError
from .dialect import WindowTVF
from .dialect import refuse as _refuse


def with_views(statements: list, tables: dict) -> tuple:
    """The query of ``statements`` (each but the last a ``CREATE VIEW``) with its views read in, and its tables
    (name -> ``SqlTable``), a processing-time view's among them (the module docstring)."""
    *views, query = statements or [None]
    if not isinstance(query, (exp.Select, exp.Union)) or any(
            not (isinstance(v, exp.Create) and str(v.args.get("kind")).upper() == "VIEW") for v in views):
        raise _refuse("SQL other than one SELECT after its CREATE VIEWs (INSERT, CREATE TABLE)",
                      "give the SELECT; tables= names its tables and sink= where it goes")
    tables, inline = dict(tables), {}
    for view in views:
        name, select = view.this.name, _inlined(view.expression, inline)
        if name in tables or name in inline:
            raise ConfigError(f"SQL: view {name!r} is named twice (a table of tables=, or another view); name it "
                              f"otherwise")
        proctime = proctime_of(select, tables)
        if proctime is not None:
            tables[name] = replace(tables[proctime[0]], proctime=proctime[1])
        else:
            inline[name] = select
    return _inlined(query, inline), tables


def proctime_of(select, tables: dict) -> tuple[str, str] | None:
    """(table, column) of ``SELECT *, PROCTIME() AS column FROM table``; None for another query."""
    items = select.expressions if isinstance(select, exp.Select) else []
    source = (select.args.get("from_") or select.args.get("from")) if isinstance(select, exp.Select) else None
    if (len(items) != 2 or not isinstance(items[0], exp.Star) or not isinstance(items[1], exp.Alias)
            or not isinstance(items[1].this, exp.CurrentTimestamp) or source is None
            or not isinstance(source.this, exp.Table) or source.this.name not in tables
            or any(select.args.get(a) for a in ("where", "joins", "group"))):
        return None
    return source.this.name, items[1].alias


def _inlined(node, views: dict):
    """``node`` with each table it reads that is a view of ``views`` read as that view's query."""
    def read(n):
        if not (isinstance(n, exp.Table) and isinstance(n.this, exp.Identifier) and n.name in views):
            return n
        if isinstance(n.parent, WindowTVF):
            raise _refuse(f"a windowing function over view {n.name!r}", "window the table, or a view of it that "
                          "only adds PROCTIME(): SELECT *, PROCTIME() AS p FROM t")
        return exp.Subquery(this=views[n.name].copy(), alias=exp.TableAlias(this=exp.to_identifier(n.alias_or_name)))
    return node.transform(read) if views else node
