"""``RegularJoin``: Flink SQL's regular equi-join of two streams (inner, left, right or full outer), as a keyed
two-input function (``Dataflow.regular_join``), Flink's ``StreamingJoinOperator`` record by record.

Both sides are kept whole in keyed state (ListState ``left`` and ``right``: the key's rows, a row once for each
time it was added and not retracted), and every record is joined with the other side's rows of its key as it
comes (a key's left records first in a microbatch, then its right ones). Its output is a changelog of the
joined rows, the left's columns then the right's, with Flink's kinds (``JoinHelper.processJoin``):

- an added row (``+I``/``+U``) joined with the other side's rows: ``+I`` each (an inner join forwards the input's
  kind); with no match, an outer side's row padded with nulls, ``+I``; the other side's rows that were padded
  (an outer other side that had no match) are retracted first, ``-D``;
- a retracted row (``-U``/``-D``): the same rows retracted, ``-D`` (an inner side forwards ``-U``/``-D``); an
  outer other side left with no match is padded again, ``+I``.

Over an insert-only input a row is never retracted; the null-padded rows of an outer join are. No Spark here.
"""
from __future__ import annotations

from typing_extensions import override

from ..errors import ConfigError
from ..functions import KeyedCoProcessFunction
from ..state.descriptors import ListStateDescriptor
from ..types import RowTypeInfo, Types
from .changelog import ADDS, KIND, RowKind, changelog_type

HOW = ("inner", "left", "right", "full")
INSERT, DELETE = RowKind.INSERT.value, RowKind.DELETE.value


def joined_type(left: RowTypeInfo, right: RowTypeInfo, right_prefix: str | None) -> tuple[RowTypeInfo, dict]:
    """The joined rows' type (a changelog of the left's columns then the right's, ``right_prefix`` before each of
    the right's names) and the right's names in it; a ConfigError naming the fix when two columns clash."""
    names = {n: (right_prefix or "") + n for n in right.fields if n != KIND}
    fields = {n: t for n, t in left.fields.items() if n != KIND}
    clash = [n for n in names.values() if n in fields]
    if clash:
        raise ConfigError(f"regular_join(...): both streams have a column {clash[0]!r}; give the right stream's "
                          f"columns a prefix (right_prefix='r_') or rename them before the join")
    fields.update({names[n]: t for n, t in right.fields.items() if n != KIND})
    return changelog_type(Types.ROW_NAMED(list(fields), list(fields.values()))), names


class RegularJoin(KeyedCoProcessFunction):
    """Flink's regular join of the two inputs' rows of each key, ``how`` one of ``HOW`` (see the module
    docstring). Made by ``Dataflow.regular_join``."""

    def __init__(self, left: RowTypeInfo, right: RowTypeInfo, how: str, right_prefix: str | None = None,
                 ttl=None):
        if how not in HOW:
            raise ConfigError(f"regular_join(...): how is one of {list(HOW)}, got {how!r}")
        self.how, self.ttl = how, ttl
        self.left_outer, self.right_outer = how in ("left", "full"), how in ("right", "full")
        self.row_type, self._right_names = joined_type(left, right, right_prefix)
        self._left_names = [n for n in left.fields if n != KIND]
        self._types = [Types.ROW_NAMED([n for n in t.fields if n != KIND],
                                       [v for n, v in t.fields.items() if n != KIND]) for t in (left, right)]

    def output_type(self) -> RowTypeInfo:
        """The joined rows' changelog: the left's columns, then the right's (with ``right_prefix``), ``_kind``."""
        return self.row_type

    @override
    def open(self, ctx) -> None:
        self.sides = []
        for name, row_type in zip(("left", "right"), self._types):
            descriptor = ListStateDescriptor(name, row_type)
            if self.ttl is not None:
                descriptor.enable_time_to_live(self.ttl)
            self.sides.append(ctx.get_list_state(descriptor))

    @override
    def process_element1(self, value: dict, ctx) -> list[dict]:
        return self._element(value, 0)

    @override
    def process_element2(self, value: dict, ctx) -> list[dict]:
        return self._element(value, 1)

    def _element(self, value: dict, side: int) -> list[dict]:
        kind = value.get(KIND, INSERT)
        row = {n: value[n] for n in self._types[side].fields}
        theirs = self.sides[1 - side].get()
        outer = self.left_outer if side == 0 else self.right_outer
        other_outer = self.right_outer if side == 0 else self.left_outer
        out = []
        if kind in ADDS:  # this side's rows are read only where an outer join asks whether there were any
            if theirs and other_outer and not self.sides[side].get():  # their rows were padded: no more
                out += [self._row(r, None, 1 - side, DELETE) for r in theirs]
            if theirs:
                forwarded = kind if not outer and not other_outer else INSERT
                out += [self._row(row, r, side, forwarded) for r in theirs]
            elif outer:
                out.append(self._row(row, None, side, INSERT))
            self.sides[side].add(row)  # appended, not the key's rows read, copied and written back
            return out
        mine = self.sides[side].get()
        if row in mine:
            mine.remove(row)
            self.sides[side].update(mine)
        if theirs:
            retracted = DELETE if outer else kind
            out += [self._row(row, r, side, retracted) for r in theirs]
            if other_outer and not mine:  # their rows have no match now: padded again
                out += [self._row(r, None, 1 - side, INSERT) for r in theirs]
        elif outer:
            out.append(self._row(row, None, side, DELETE))
        return out

    def _row(self, row: dict | None, other: dict | None, side: int, kind: str) -> dict:
        """The joined row of ``row`` (of ``side``) and ``other`` (of the other side), either None for nulls."""
        left, right = (row, other) if side == 0 else (other, row)
        out = {n: None if left is None else left[n] for n in self._left_names}
        out.update({shown: None if right is None else right[n] for n, shown in self._right_names.items()})
        out[KIND] = kind
        return out
