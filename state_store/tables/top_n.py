"""``TopN``: Flink SQL's Top-N (``ROW_NUMBER() OVER (PARTITION BY k ORDER BY c) <= n``) over an insert-only stream
as a keyed function (``Dataflow.top_n``), Flink's ``AppendOnlyTopNFunction`` one microbatch at a time.

Per key, the ``n`` first rows by ``order_by`` (ties in the order the rows came, nulls first ascending and last
descending, as Flink SQL's default). Each microbatch emits what changed of them, once:

- with ``rank_column``, the rows by rank: a rank filled for the first time ``+I``, a rank whose row changed
  ``-U`` (the old row) and ``+U`` (the new one), with its rank number; a result whose upsert key is
  (key, rank);
- without it, the rows themselves: a row that entered the top ``+I``, a row pushed out ``-D`` (Flink's output
  without the row number).

The state is the key's top ``n`` rows, a ListState of them. No Spark here.
"""
from __future__ import annotations

from typing_extensions import override

from ..functions import KeyedProcessFunction
from ..state.descriptors import ListStateDescriptor
from ..types import RowTypeInfo, Types
from ..windows.ranking import ordered
from .changelog import ADDS, KIND, RowKind, changelog_type, changes


class TopN(KeyedProcessFunction):
    """The first ``n`` rows of each key by ``order_by`` (``[(column, ascending), ...]``); see the module
    docstring. Made by ``Dataflow.top_n``."""

    def __init__(self, row_type: RowTypeInfo, n: int, order_by: list[tuple[str, bool]], rank_column: str | None,
                 generate_update_before: bool = True, ttl=None):
        self.row_type, self.n, self.order_by, self.rank_column = row_type, n, order_by, rank_column
        self.generate_update_before, self.ttl = generate_update_before, ttl

    def output_type(self) -> RowTypeInfo:
        """The input's rows (with the rank under ``rank_column``), as a changelog."""
        fields = dict(self.row_type.fields)
        if self.rank_column is not None:
            fields[self.rank_column] = Types.LONG()
        return changelog_type(Types.ROW_NAMED(list(fields), list(fields.values())))

    @override
    def open(self, ctx) -> None:
        descriptor = ListStateDescriptor("top", self.row_type)
        if self.ttl is not None:
            descriptor.enable_time_to_live(self.ttl)
        self.top = ctx.get_list_state(descriptor)

    @override
    def process(self, key, records, ctx):
        old = list(self.top.get() or [])
        new = ordered(old + list(records), self.order_by)[:self.n]  # the stored rows first: they came first
        if all(a is b for a, b in zip(old, new)) and len(old) == len(new):
            return None
        self.top.update(new)
        if self.rank_column is None:
            kept, came = {id(r) for r in new}, {id(r) for r in old}
            return ([{**r, KIND: RowKind.DELETE.value} for r in old if id(r) not in kept]
                    + [{**r, KIND: RowKind.INSERT.value} for r in new if id(r) not in came])
        out, rank = [], self.rank_column
        for i, row in enumerate(new):
            was = old[i] if i < len(old) else None
            if was is not row:
                out += changes(None if was is None else {**was, rank: i + 1}, {**row, rank: i + 1},
                               self.generate_update_before)
        return out


class RetractTopN(TopN):
    """Flink's ``RetractableTopNFunction``: the Top-N of an updating stream (a changelog, a ``GROUP BY``'s
    result). Per key the state is every row that holds (a ListState, ``rows``): ``+I`` and ``+U`` add a row,
    ``-U`` and ``-D`` take out one equal to it (one the state no longer has, after TTL, is ignored, as Flink's
    is). The changes of the top ``n`` are emitted as ``TopN``'s, rows compared by their values."""

    @override
    def open(self, ctx) -> None:
        descriptor = ListStateDescriptor("rows", self.row_type)
        if self.ttl is not None:
            descriptor.enable_time_to_live(self.ttl)
        self.rows = ctx.get_list_state(descriptor)

    @override
    def process(self, key, records, ctx):
        held = list(self.rows.get() or [])
        old = ordered(list(held), self.order_by)[:self.n]
        for record in records:
            row = {c: record[c] for c in self.row_type.fields}
            if record[KIND] in ADDS:
                held.append(row)
            elif row in held:
                held.remove(row)
        self.rows.update(held)
        new = ordered(list(held), self.order_by)[:self.n]
        if old == new:
            return None
        if self.rank_column is None:
            gone, came = list(old), []
            for row in new:
                if row in gone:
                    gone.remove(row)
                else:
                    came.append(row)
            return ([{**r, KIND: RowKind.DELETE.value} for r in gone]
                    + [{**r, KIND: RowKind.INSERT.value} for r in came])
        out, rank = [], self.rank_column
        for i in range(max(len(old), len(new))):
            was, now = (old[i] if i < len(old) else None), (new[i] if i < len(new) else None)
            if was != now:
                out += changes(None if was is None else {**was, rank: i + 1},
                               None if now is None else {**now, rank: i + 1}, self.generate_update_before)
        return out
