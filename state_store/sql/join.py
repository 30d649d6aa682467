"""Flink SQL's regular equi-join of two tables, read from SQL (docs/writing/sql.md):

    SELECT a.x, b.y AS why FROM a [INNER | LEFT | RIGHT | FULL [OUTER]] JOIN b ON a.k = b.k [AND a.j = b.j]
    [WHERE <conditions on one table each>]

It compiles to ``Dataflow.regular_join``. An inner join's ``WHERE`` conjuncts each read one table, and Spark
evaluates them as it reads that table. An outer join takes no ``WHERE`` yet. The output is the selected columns.
An inner join of insert-only tables only inserts, so it is a plain stream; an outer join is a changelog (its
null-padded rows retracted once a match comes). No Spark here.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from ..errors import ConfigError

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


def _refuse(construct: str) -> ConfigError:
    return ConfigError(f"SQL: {construct} is not supported yet (docs/writing/sql.md lists what is)")


def _conjuncts(node) -> list:
    return _conjuncts(node.this) + _conjuncts(node.expression) if isinstance(node, exp.And) else [node]


def read_join(select: exp.Select, columns: dict) -> JoinQuery | None:
    """The join ``select`` is (``columns``: each table's column names by table name), or None without a JOIN."""
    joins = select.args.get("joins") or []
    if not joins:
        return None
    if len(joins) != 1:
        raise _refuse("a join of more than two tables")
    join, source = joins[0], select.args.get("from_") or select.args.get("from")
    if join.args.get("kind") not in (None, "", "INNER", "OUTER") or join.args.get("using") or not join.args.get("on"):
        raise _refuse(f"a {join.args.get('kind') or ''} JOIN without ON equalities (CROSS, SEMI, ANTI, USING)")
    sides = []
    for table in (source.this, join.this):
        if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
            raise _refuse("a join of anything but two tables by their names")
        if table.name not in columns:
            raise ConfigError(f"SQL: the query reads table {table.name!r} but tables= has {sorted(columns)}")
        sides.append((table.name, table.alias_or_name))

    def side_of(column: exp.Column) -> int:
        if column.table:
            found = [i for i, (_, alias) in enumerate(sides) if alias == column.table]
        else:
            found = [i for i, (name, _) in enumerate(sides) if column.name in columns[name]]
        if len(found) != 1 or column.name not in columns[sides[found[0]][0]]:
            raise ConfigError(f"SQL: the column {column.sql()} is not one column of {sides[0][1]} or "
                              f"{sides[1][1]}: qualify it (a.column)")
        return found[0]

    keys: tuple[list, list] = ([], [])
    for condition in _conjuncts(join.args["on"]):
        ends = (condition.this, condition.expression) if isinstance(condition, exp.EQ) else ()
        if not ends or not all(isinstance(e, exp.Column) for e in ends) or side_of(ends[0]) == side_of(ends[1]):
            raise _refuse(f"the join condition {condition.sql()} (equalities of a column of each table)")
        left, right = sorted(ends, key=side_of)
        keys[0].append(left.name)
        keys[1].append(right.name)
    how = HOW.get(join.args.get("side") or None)
    where: list[list[str]] = [[], []]
    if select.args.get("where") is not None:
        if how != "inner":
            raise _refuse("WHERE with an outer join")
        for condition in _conjuncts(select.args["where"].this):
            touched = {side_of(c) for c in condition.find_all(exp.Column)}
            if len(touched) != 1:
                raise _refuse(f"the condition {condition.sql()}, which reads both tables")
            unqualified = condition.copy().transform(
                lambda n: exp.column(n.name, quoted=True) if isinstance(n, exp.Column) else n)
            where[touched.pop()].append(f"({unqualified.sql(dialect='spark')})")
    outputs = {}
    for item in select.expressions:
        node, alias = (item.this, item.alias) if isinstance(item, exp.Alias) else (item, None)
        if not isinstance(node, exp.Column):
            raise _refuse(f"{node.sql()} in a join's SELECT (select columns, each of one table)")
        name = alias or node.name
        if name in outputs:
            raise ConfigError(f"SQL: the join's output has two columns {name!r}; name one otherwise (AS ...)")
        outputs[name] = (side_of(node), node.name)
    return JoinQuery((sides[0][0], sides[1][0]), keys, tuple(" AND ".join(w) or None for w in where), how,
                     outputs)
