"""Flink SQL's processing-time temporal join, a lookup join (``JOIN t FOR SYSTEM_TIME AS OF a.p AS s ON ...``,
Nexmark's q13): each row of the first table joined with the rows of the table looked up as they are when it is
processed. The looked-up table is the operator's broadcast input, whose rows of a microbatch every subtask keeps
(by key, in broadcast state) before it takes the microbatch's rows of the first table; a row of the first table
is not kept, so a looked-up row that comes later joins only the rows after it, as Flink's. No Spark here."""
from __future__ import annotations

from ..functions import BroadcastProcessFunction
from ..state.descriptors import MapStateDescriptor
from ..types import Types


class LookupRows(BroadcastProcessFunction):
    """Each record joined with the looked-up rows of its key (``key``: the record's column; ``looked_up``: the
    looked-up rows'), each looked-up column named with ``prefix``."""

    def __init__(self, name: str, key: str, looked_up: str, key_type, row_type, prefix: str):
        self.descriptor = MapStateDescriptor(name, key_type, Types.LIST(row_type))
        self.key, self.looked_up, self.prefix = key, looked_up, prefix

    def process_broadcast_element(self, value, ctx):
        """Keep a looked-up row under its key."""
        key = value[self.looked_up]
        if key is not None:
            rows = ctx.get_broadcast_state(self.descriptor)
            rows.put(key, [*(rows.get(key) or []), value])

    def process_element(self, value, ctx):
        """The record with each looked-up row of its key (none: no row; an inner join)."""
        for row in ctx.get_broadcast_state(self.descriptor).get(value[self.key]) or []:
            yield {**value, **{self.prefix + c: v for c, v in row.items()}}
