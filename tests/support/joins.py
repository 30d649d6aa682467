"""The joined jobs and their rows, which the join tests and the scheduled-runs test share."""
from __future__ import annotations

from state_store import (
    JoinFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    ProcessJoinFunction,
    Types,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from state_store.timers import TimeDomain

BY_TS, BY_AT = (WatermarkStrategy.for_bounded_out_of_orderness(0).with_timestamp_column(c) for c in ("ts", "at"))


LEFT = Types.ROW_NAMED(["k", "ts", "who"], [Types.STRING(), Types.LONG(), Types.STRING()])


RIGHT = Types.ROW_NAMED(["key", "at", "who"], [Types.STRING(), Types.LONG(), Types.STRING()])


PAIR = Types.ROW_NAMED(["left", "right", "ts"], [Types.LONG(), Types.LONG(), Types.LONG()])


class Pairs(ProcessJoinFunction):
    """Flink's ``PassthroughFunction``: the pair's two times, and the pair's time (the larger)."""

    def process_element(self, left, right, ctx):
        assert (ctx.left_timestamp(), ctx.right_timestamp()) == (left["ts"], right["at"])
        yield {"left": left["ts"], "right": right["at"], "ts": ctx.timestamp()}


# -- KeyedCoProcessFunction -----------------------------------------------------------------------------------
OUT_ROW = Types.ROW_NAMED(["k", "what"], [Types.STRING(), Types.STRING()])


class Latest(KeyedCoProcessFunction):
    """After Flink's ``KeyedCoProcessOperatorTest``: both inputs write one keyed state; each input's records say
    what they saw of the other's; a timer of either input fires later for both."""

    def open(self, ctx):
        self.seen = ctx.get_state(ValueStateDescriptor("seen", Types.STRING()))

    def process_element1(self, value, ctx):
        yield {"k": ctx.get_current_key(), "what": f"1:{value['who']}@{value['ts']} saw {self.seen.value()}"}
        self.seen.update(f"1:{value['ts']}")
        ctx.timer_service().register_event_time_timer(value["ts"] + 10)

    def process_element2(self, value, ctx):
        yield {"k": ctx.get_current_key(), "what": f"2:{value['who']}@{value['at']} saw {self.seen.value()}"}
        self.seen.update(f"2:{value['at']}")
        ctx.timer_service().register_event_time_timer(value["at"] + 10)

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() == TimeDomain.EVENT_TIME
        yield {"k": ctx.get_current_key(), "what": f"timer {timestamp} saw {self.seen.value()}"}


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process(self, key, records, ctx):
        count = (self.count.value() or 0) + len(records)
        self.count.update(count)
        yield {"k": key, "what": f"{count} by {max(r['ts'] for r in records)}"}


# -- window join and co-group ------------------------------------------------------------------------------------
class Matched(JoinFunction):
    def join(self, left, right):
        return {"k": left["k"], "what": f"{left['ts']}-{right['at']}"}
