"""``GroupAggregate``: Flink SQL's unbounded ``GROUP BY`` as a keyed function (``Dataflow.aggregate``).

Per key, the aggregates of every record so far (a ``ColumnAggregate``), emitted as an updating row: the first
time a key is seen ``+I``, then, in each microbatch that changes its result, ``-U`` (the row as it was, unless
``generate_update_before`` is off) and ``+U`` (as it is now); a microbatch that leaves it unchanged emits nothing.
This is Flink's mini-batch group aggregation (``MiniBatchGroupAggFunction``): one change per key and microbatch,
whatever the number of its records. Over an updating stream (one with ``_kind``), ``-U`` and ``-D`` records
retract what they once added (``count``, ``sum`` and ``avg``), and a key whose records are all retracted is
deleted (``-D``). A ``count_distinct(c)`` keeps the values of ``c`` it has counted in a map state of its own
(each value's number of records, so that a retraction takes one back), as Flink's distinct aggregation keeps
its ``MapView``. With a state TTL, a key idle for longer loses its state and starts again with ``+I``, as Flink's
``table.exec.state.ttl``; every change is then emitted, even an unchanged result (Flink's rule). No Spark here.
"""
from __future__ import annotations

from typing import Any

from typing_extensions import override

from ..errors import ConfigError
from ..functions import KeyedProcessFunction
from ..keys import key_fields
from ..state.descriptors import MapStateDescriptor, ValueStateDescriptor
from ..types import RowTypeInfo, Types
from ..windows.columns import DISTINCT, ColumnAggregate
from .changelog import KIND, RETRACTS, changelog_type, changes

RETRACTABLE = ("count", "sum", "avg", DISTINCT)  # the aggregates a retraction can take back
COUNTED = "__values_of_"  # an accumulator's count of a sum's values (over an updating stream)
STATE = "group"  # the keyed state: the key's records counted, and its accumulator
FILLER = "__records"  # the accumulator's one aggregate when every aggregate is a count_distinct


class GroupAggregate(KeyedProcessFunction):
    """An unbounded group aggregation of ``aggregate`` per key of ``key_name`` (see the module docstring);
    ``updating``: its input is a changelog. Made by ``Dataflow.aggregate``."""

    def __init__(self, aggregate: ColumnAggregate, fields: dict, key_name: "str | tuple[str, ...]", key_type,
                 generate_update_before: bool = True, ttl=None):
        self.updating = KIND in fields
        if self.updating:
            kept = [f"{n}='{op}(...)'" for n, op, _ in aggregate.aggregates if op not in RETRACTABLE]
            if kept:
                raise ConfigError(f"aggregate(...) over an updating stream (its rows have {KIND!r}) takes back a "
                                  f"retracted row: {', '.join(kept)} cannot (only {', '.join(RETRACTABLE)} can); "
                                  f"aggregate the insert-only stream before it instead")
        columns = {n: t for n, t in fields.items() if n != KIND}
        self.shown = aggregate.bind(columns, key_name, key_type, distinct=True).aggregates  # (name, op, column)
        self.distinct = {n: (c, columns[c]) for n, op, c in self.shown if op == DISTINCT}  # name -> (column, type)
        # Over an updating stream a sum counts its values too: all of them retracted, it is null again (Flink's
        # SumWithRetractAggFunction), not 0.
        self._counts = {n: f"{COUNTED}{n}" for n, op, _ in self.shown if op == "sum" and self.updating}
        specs = {n: f"{op}({c or '*'})" for n, op, c in self.shown if op != DISTINCT}
        specs = specs or {FILLER: "count(*)"}  # distinct counts alone: an accumulator has a field
        specs.update({counted: f"count({c})" for n, op, c in self.shown if (counted := self._counts.get(n))})
        names = {n: o for n, o in aggregate.names.items() if n in specs}
        self.aggregate = ColumnAggregate(**specs).named(**names).bind(columns, key_name, key_type)
        self.names = {n: aggregate.output_name(n) for n, _, _ in self.shown}
        self.key_name, self.key_type = key_name, key_type
        self.generate_update_before, self.ttl = generate_update_before, ttl
        self._composite = not isinstance(key_name, str)

    def output_type(self) -> RowTypeInfo:
        """The changelog's rows: the key's columns, each aggregate under its name, then ``_kind``."""
        keys = key_fields(self.key_name, self.key_type)
        agg = self.aggregate
        return changelog_type(Types.ROW_NAMED([*keys] + [self.names[n] for n, _, _ in self.shown],
                                              [*keys.values()] + [agg.value_type(op, c) for _, op, c in self.shown]))

    def state_type(self) -> RowTypeInfo:
        """The key's state: how many records it holds (added less retracted), the accumulator, and (with
        ``count_distinct``) each one's count."""
        names, types = ["rows", "acc"], [Types.LONG(), self.aggregate.accumulator_type()]
        if self.distinct:
            names.append(DISTINCT)
            types.append(Types.ROW_NAMED(list(self.distinct), [Types.LONG() for _ in self.distinct]))
        return Types.ROW_NAMED(names, types)

    @override
    def open(self, ctx) -> None:
        descriptors = [ValueStateDescriptor(STATE, self.state_type())] + [
            MapStateDescriptor(f"seen_{n}", t, Types.LONG()) for n, (_, t) in self.distinct.items()]
        for descriptor in descriptors:
            if self.ttl is not None:
                descriptor.enable_time_to_live(self.ttl)
        self.state = ctx.get_state(descriptors[0])
        self.seen = {n: ctx.get_map_state(d) for n, d in zip(self.distinct, descriptors[1:])}

    @override
    def process(self, key, records, ctx):
        agg, stored = self.aggregate, self.state.value()
        rows, acc = (stored["rows"], stored["acc"]) if stored is not None else (0, agg.create_accumulator())
        if not self.updating:
            acc, rows = agg.add_all(records, acc), rows + len(records)
        else:
            for record in records:
                if record[KIND] in RETRACTS:
                    acc, rows = retract(agg, record, acc), rows - 1
                else:
                    acc, rows = agg.add(record, acc), rows + 1
        keys = {self.key_name: key} if not self._composite else dict(zip(self.key_name, key))
        before = None if stored is None else {**keys, **self._result(stored)}
        if rows <= 0:  # every record of the key retracted (or a retraction of a key never seen: nothing)
            if stored is not None:
                self.state.clear()
                for seen in self.seen.values():
                    seen.clear()
            return changes(before, None)
        state = {"rows": rows, "acc": acc}
        if self.distinct:
            state[DISTINCT] = self._count_distinct(records, stored[DISTINCT] if stored is not None else None)
        self.state.update(state)
        after = {**keys, **self._result(state)}
        if after == before and self.ttl is None:
            return None
        return changes(before, after, self.generate_update_before)

    def _count_distinct(self, records: list, counts: dict | None) -> dict:
        """Each ``count_distinct``'s count after ``records``: a value's first record adds one, the retraction of
        its last takes one back; its map state keeps each value's number of records (only "seen" when the input
        is insert-only, so that a value seen again writes nothing)."""
        counts = dict(counts) if counts is not None else {n: 0 for n in self.distinct}
        for name, (column, _) in self.distinct.items():
            seen = self.seen[name]
            values = [(v, self.updating and r[KIND] in RETRACTS) for r in records if (v := r.get(column)) is not None]
            known = seen.get_all({v for v, _ in values})
            for value, retracted in values:
                n = known.get(value, 0)
                if retracted:
                    if n == 1:
                        seen.remove(value)
                        counts[name] -= 1
                    elif n > 1:
                        seen.put(value, n - 1)
                    known[value] = max(n - 1, 0)
                elif n == 0 or self.updating:
                    seen.put(value, n + 1)
                    counts[name] += n == 0
                    known[value] = n + 1
        return counts

    def _result(self, state: dict) -> dict:
        result = self.aggregate.get_result(state["acc"])
        for name, counted in self._counts.items():
            if not result.pop(counted):
                result[self.aggregate.output_name(name)] = None
        if self.distinct:
            result.pop(FILLER, None)
            result.update({self.names[n]: c for n, c in state[DISTINCT].items()})
        return result


def retract(agg: ColumnAggregate, value: dict, acc: dict) -> dict:
    """``acc`` without ``value``, which ``add`` once added (the aggregates of ``RETRACTABLE`` only)."""
    acc = dict(acc)
    for name, op, column in agg.aggregates:
        v: Any = value.get(column) if column is not None else None
        if op == "count":
            acc[name] -= column is None or v is not None
        elif v is None:
            continue
        elif op == "avg":
            acc[name] = {"count": acc[name]["count"] - 1, "sum": acc[name]["sum"] - v}
        else:  # sum (null again when its values are all retracted: ``GroupAggregate._result``)
            acc[name] = acc[name] - v
    return acc
