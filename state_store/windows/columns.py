"""``ColumnAggregate``: a window's aggregate over a record's columns (count, sum, min, max, avg, last), the one a
tumbling or sliding event-time window runs on the vectorised path (docs/writing/windows.md).

    .window(TumblingEventTimeWindows.of(timedelta(minutes=1)))
    .aggregate(ColumnAggregate(clicks="count(*)", revenue="sum(amount)", top="max(amount)"), uid="per-minute")

Each firing emits one row: the key (under the key column's name), ``window_start``, ``window_end`` and each
aggregate under its name. ``count(*)`` counts records and ``count(c)`` those where ``c`` is not null; ``sum``,
``min``, ``max`` and ``avg`` skip nulls (null when every value was null, as SQL's); ``last(c)`` is the value of
the window's last record, null included; ``count_distinct(c)``, the number of distinct non-null values, is a
group aggregation's alone (``GroupAggregate`` keeps the values). The accumulator (a row of one field per
aggregate; ``avg``'s a row of ``count`` and ``sum``) is stored as any AggregatingState's, so the per-record and
the vectorised path read each other's windows through a savepoint. No Spark here.
"""
from __future__ import annotations

import re
from typing import Any

from typing_extensions import override

from ..errors import ConfigError
from ..keys import key_columns, key_fields
from ..state.descriptors import AggregateFunction
from ..types import RowTypeInfo, Types
from .functions import ProcessWindowFunction

OPS = ("count", "sum", "min", "max", "avg", "last", "count_distinct")
DISTINCT = "count_distinct"  # a group aggregation's only (``GroupAggregate``): it keeps the values it has seen
START, END = "window_start", "window_end"
_SPEC = re.compile(r"\s*(\w+)\s*\(\s*(\*|[A-Za-z_][\w]*)\s*\)\s*")
_NUMERIC = ("LONG", "INT", "DOUBLE", "FLOAT")


class ColumnAggregate(AggregateFunction):
    """Aggregates of columns, each ``name="op(column)"`` with op one of count, sum, min, max, avg, last (and a
    group aggregation's count_distinct; see the module docstring). Give it to ``WindowedStream.aggregate``; it
    needs no ``accumulator_type`` nor ``output_type``: both follow from the stream's columns."""

    def __init__(self, **aggregates: str):
        if not aggregates:
            raise ConfigError('ColumnAggregate needs at least one aggregate, e.g. ColumnAggregate(n="count(*)")')
        self.aggregates: list[tuple[str, str, str | None]] = []  # (name, op, column or None for count(*))
        for name, spec in aggregates.items():
            match = _SPEC.fullmatch(spec) if isinstance(spec, str) else None
            if match is None or match.group(1).lower() not in OPS:
                raise ConfigError(f"ColumnAggregate({name}={spec!r}): write an aggregate as 'op(column)' with op one "
                                  f"of {', '.join(OPS)} (or 'count(*)')")
            op, column = match.group(1).lower(), match.group(2)
            if column == "*" and op != "count":  # count_distinct(*) too: name the column
                raise ConfigError(f"ColumnAggregate({name}={spec!r}): only count takes '*'; name a column")
            self.aggregates.append((name, op, None if column == "*" else column))
        self._types: dict[str, Any] | None = None
        self.names: dict[str, str] = {}  # an aggregate's output column, when not its name (``named``)

    def named(self, **outputs: str) -> "ColumnAggregate":
        """Emit aggregate ``name`` as column ``outputs[name]``, its state keeping the aggregate's own name: a
        renamed output column keeps the state (a SQL query's ``AS`` names). Returns self.

        Example: ``ColumnAggregate(count_all="count(*)").named(count_all="clicks")``
        """
        unknown = sorted(set(outputs) - {n for n, _, _ in self.aggregates})
        if unknown:
            raise ConfigError(f"ColumnAggregate.named({unknown[0]}=...): no aggregate is named {unknown[0]!r} "
                              f"(aggregates: {[n for n, _, _ in self.aggregates]})")
        self.names = {**self.names, **outputs}
        return self

    def output_name(self, name: str) -> str:
        """The output column of aggregate ``name``."""
        return self.names.get(name, name)

    # -- types, from the stream's columns ----------------------------------------------------------------------
    def bind(self, fields: dict, key_name: str, key_type, distinct: bool = False) -> "ColumnAggregate":
        """Check the columns against the stream's (``fields``: name -> type) and fix the accumulator's and the
        output row's types; returns self. ``distinct``: ``count_distinct`` is allowed (a group aggregation's)."""
        names = {*key_columns(key_name), START, END}
        for name, op, column in self.aggregates:
            if op == DISTINCT and not distinct:
                raise ConfigError(f"ColumnAggregate({name}='{op}({column})'): count_distinct is a group "
                                  f"aggregation's (.key_by(...).aggregate(...)), not a window's nor an OVER's; "
                                  f"count the distinct values of a window with a ProcessWindowFunction")
            if self.output_name(name) in names:
                raise ConfigError(f"ColumnAggregate: the output already has a column {self.output_name(name)!r} "
                                  f"(the key is {key_name!r}, then {START!r} and {END!r}); name the aggregate "
                                  f"otherwise")
            names.add(self.output_name(name))
            if column is not None and column not in fields:
                raise ConfigError(f"ColumnAggregate({name}='{op}({column})'): the stream has no column {column!r} "
                                  f"(columns: {list(fields)})")
            if op in ("sum", "avg") and fields[column].name not in _NUMERIC:
                raise ConfigError(f"ColumnAggregate({name}='{op}({column})'): {column!r} is {fields[column].name}, not "
                                  f"a number; {op} takes a LONG, INT, DOUBLE or FLOAT column")
        self._fields, self._key = dict(fields), (key_name, key_type)
        return self

    def value_type(self, op: str, column: str | None):
        """The type of an aggregate's result (and, but for avg, of its accumulator field)."""
        if op in ("count", DISTINCT):
            return Types.LONG()
        if op == "avg":
            return Types.DOUBLE()
        source = self._fields[column]
        if op == "sum":
            return Types.LONG() if source.name in ("LONG", "INT") else Types.DOUBLE()
        return source

    def accumulator_type(self) -> RowTypeInfo:
        """The accumulator's type, once ``bind`` has run: a row of one field per aggregate, of its result's type
        (``avg``'s: a row of ``count`` and ``sum``)."""
        avg = Types.ROW_NAMED(["count", "sum"], [Types.LONG(), Types.DOUBLE()])
        return Types.ROW_NAMED([n for n, _, _ in self.aggregates],
                               [avg if op == "avg" else self.value_type(op, c) for n, op, c in self.aggregates])

    def output_type(self) -> RowTypeInfo:
        """The row a firing emits, once ``bind`` has run: the key (under the key column's name), ``window_start``,
        ``window_end`` and each aggregate under its name."""
        keys = key_fields(*self._key)
        return Types.ROW_NAMED([*keys, START, END] + [self.output_name(n) for n, _, _ in self.aggregates],
                               [*keys.values(), Types.LONG(), Types.LONG()]
                               + [self.value_type(op, c) for _, op, c in self.aggregates])

    # -- the per-record path -----------------------------------------------------------------------------------
    @override
    def create_accumulator(self) -> dict:
        return {n: ({"count": 0, "sum": 0.0} if op == "avg" else 0 if op == "count" else None)
                for n, op, _ in self.aggregates}

    @override
    def add(self, value: dict, acc: dict) -> dict:
        acc = dict(acc)
        for name, op, column in self.aggregates:
            v = value.get(column) if column is not None else None
            if op == "last":
                acc[name] = v
            elif op == "count":
                acc[name] += column is None or v is not None
            elif v is None:
                continue
            elif op == "avg":
                acc[name] = {"count": acc[name]["count"] + 1, "sum": acc[name]["sum"] + v}
            else:
                old = acc[name]
                acc[name] = (v if old is None else old + v if op == "sum" else min(old, v) if op == "min"
                             else max(old, v))
        return acc

    def add_all(self, values: list[dict], acc: dict) -> dict:
        """``add`` of each of ``values`` in turn, a pass per aggregate over the list (a group aggregate's records
        of a key and microbatch)."""
        acc = dict(acc)
        for name, op, column in self.aggregates:
            if op == "count":
                acc[name] += len(values) if column is None else sum(v.get(column) is not None for v in values)
            elif op == "last":
                if values:
                    acc[name] = values[-1].get(column)
            elif present := [x for v in values if (x := v.get(column)) is not None]:
                old = acc[name]
                if op == "avg":
                    acc[name] = {"count": old["count"] + len(present), "sum": old["sum"] + sum(present)}
                elif op == "sum":
                    acc[name] = sum(present, 0 if old is None else old)
                else:
                    best = min(present) if op == "min" else max(present)
                    acc[name] = best if old is None else min(old, best) if op == "min" else max(old, best)
        return acc

    @override
    def get_result(self, acc: dict) -> dict:
        out = {}
        for name, op, _ in self.aggregates:
            value = acc[name]
            if op == "avg":
                value = value["sum"] / value["count"] if value["count"] else None
            out[self.names.get(name, name)] = value
        return out

    @override
    def merge(self, a: dict, b: dict) -> dict:
        out = {}
        for name, op, _ in self.aggregates:
            x, y = a[name], b[name]
            if op == "avg":
                out[name] = {"count": x["count"] + y["count"], "sum": x["sum"] + y["sum"]}
            elif op == "last":
                out[name] = y
            elif x is None or y is None:
                out[name] = y if x is None else x
            else:
                out[name] = x + y if op in ("sum", "count") else min(x, y) if op == "min" else max(x, y)
        return out


class WindowRow(ProcessWindowFunction):
    """A ColumnAggregate's row on the per-record path: the key, the window's bounds and the results, as the
    output type's columns."""

    def __init__(self, key_name: "str | tuple[str, ...]", columns: list[str]):
        self.key_name, self.columns = key_name, columns

    @override
    def process(self, key, context, elements):
        w = context.window()
        keys = {self.key_name: key} if isinstance(self.key_name, str) else dict(zip(self.key_name, key))
        row = {**keys, START: w.start, END: w.end, **elements[0]}
        yield {c: row[c] for c in self.columns}
