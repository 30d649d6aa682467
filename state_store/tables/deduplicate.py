"""``Deduplicate``: Flink SQL's deduplication (``ROW_NUMBER() OVER (PARTITION BY k ORDER BY t) = 1``) as a keyed
function (``Dataflow.deduplicate``).

Per key, one row: its first or its last.

- **In processing time** (no time column): keeping the first row emits it once, insert-only, and drops every
  later one (Flink's ``ProcTimeDeduplicateKeepFirstRowFunction``). Keeping the last emits the key's first row as
  ``+I`` and then, in each microbatch, its last record as ``-U``/``+U``; a last row equal to the one kept emits
  nothing.
- **In event time** (``time_column``): the first row is the one of the least time and the last the one of the
  greatest, ties to the later record for the last and to the earlier for the first (Flink's
  ``shouldKeepCurrentRow``). A microbatch that brings a row to keep emits ``+I``, or ``-U``/``+U`` over the row
  kept before.

One change per key and microbatch, as Flink's mini-batch deduplication. No Spark here.
"""
from __future__ import annotations

from typing_extensions import override

from ..functions import KeyedProcessFunction
from ..state.descriptors import ValueStateDescriptor
from ..types import RowTypeInfo, Types
from .changelog import changelog_type, changes

KEEP = ("first", "last")


class Deduplicate(KeyedProcessFunction):
    """The first or last row of each key (see the module docstring); made by ``Dataflow.deduplicate``."""

    def __init__(self, row_type: RowTypeInfo, keep: str, time_column: str | None,
                 generate_update_before: bool = True, ttl=None):
        self.row_type, self.keep, self.time_column = row_type, keep, time_column
        self.generate_update_before, self.ttl = generate_update_before, ttl

    @property
    def insert_only(self) -> bool:
        """Whether it emits each key's row once, never updated: the first row in processing time."""
        return self.keep == "first" and self.time_column is None

    def output_type(self) -> RowTypeInfo:
        """The input's rows; a changelog of them unless the output is insert-only."""
        return self.row_type if self.insert_only else changelog_type(self.row_type)

    @override
    def open(self, ctx) -> None:
        # The first row in processing time needs only whether the key was seen (Flink keeps a Boolean).
        descriptor = (ValueStateDescriptor("seen", Types.BOOLEAN()) if self.insert_only
                      else ValueStateDescriptor("row", self.row_type))
        if self.ttl is not None:
            descriptor.enable_time_to_live(self.ttl)
        self.state = ctx.get_state(descriptor)

    @override
    def process(self, key, records, ctx):
        if self.insert_only:
            if self.state.value():
                return None
            self.state.update(True)
            return [records[0]]
        before = self.state.value()
        if self.time_column is None:  # the last row in processing time: the microbatch's last
            after = records[-1]
            if after == before and self.ttl is None:
                return None
        else:
            t, kept = self.time_column, before
            for record in records:
                if kept is None or (kept[t] <= record[t] if self.keep == "last" else record[t] < kept[t]):
                    kept = record
            if kept is before:
                return None
            after = kept
        self.state.update(after)
        return changes(before, after, self.generate_update_before)
