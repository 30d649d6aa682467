"""The demo job: per user, counts and spend, recent pages, pages visited, with a broadcast rules stream.

Events {user_id, page, amount, seq} arrive as Parquet files in
``$LAKESTATE_ROOT/input/clicks``; rules {page, multiplier} as JSON files in
``$LAKESTATE_ROOT/input/rules`` (a rule scales the spend of a page).
"""
from __future__ import annotations

import os
from pathlib import Path

from state_store import (
    AggregateFunction,
    AggregatingStateDescriptor,
    FileSource,
    JobSpec,
    KeyedBroadcastProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    Types,
    ValueStateDescriptor,
)

EVENT = Types.ROW_NAMED(["user_id", "page", "amount", "seq"],
                        [Types.LONG(), Types.STRING(), Types.DOUBLE(), Types.LONG()])
RULE = Types.ROW_NAMED(["page", "multiplier"], [Types.STRING(), Types.DOUBLE()])
OUTPUT = Types.ROW_NAMED(
    ["user_id", "batch_id", "events", "spend", "avg_amount", "distinct_pages", "last_pages"],
    [Types.LONG(), Types.LONG(), Types.LONG(), Types.DOUBLE(), Types.DOUBLE(), Types.INT(), Types.LIST(Types.STRING())],
)
RULES = MapStateDescriptor("rules", Types.STRING(), Types.DOUBLE())


class Average(AggregateFunction):
    def create_accumulator(self):
        return [0.0, 0]

    def add(self, value, acc):
        return [acc[0] + value, acc[1] + 1]

    def get_result(self, acc):
        return acc[0] / acc[1] if acc[1] else None

    def merge(self, a, b):
        return [a[0] + b[0], a[1] + b[1]]


class UserActivity(KeyedBroadcastProcessFunction):
    def open(self, ctx):
        self.events = ctx.get_state(ValueStateDescriptor("events", Types.LONG(), 0))
        self.spend = ctx.get_reducing_state(ReducingStateDescriptor("spend", lambda a, b: a + b, Types.DOUBLE()))
        self.average = ctx.get_aggregating_state(
            AggregatingStateDescriptor("avg_amount", Average(), Types.LIST(Types.DOUBLE())))
        self.recent = ctx.get_list_state(ListStateDescriptor("recent_pages", Types.STRING()))
        self.pages = ctx.get_map_state(MapStateDescriptor("pages", Types.STRING(), Types.LONG()))

    def process_broadcast_element(self, rule, ctx):
        ctx.get_broadcast_state(RULES).put(rule["page"], rule["multiplier"])

    def process(self, user_id, events, ctx):
        rules = ctx.get_broadcast_state(RULES)
        for e in events:
            self.events.update(self.events.value() + 1)
            self.spend.add(e["amount"] * (rules.get(e["page"]) or 1.0))
            self.average.add(e["amount"])
            self.pages.put(e["page"], (self.pages.get(e["page"]) or 0) + 1)
        self.recent.update((self.recent.get() + [e["page"] for e in events])[-3:])
        yield {
            "user_id": user_id, "batch_id": ctx.batch_id, "events": self.events.value(),
            "spend": round(self.spend.get(), 6), "avg_amount": self.average.get(),
            "distinct_pages": len(self.pages.keys()), "last_pages": self.recent.get(),
        }


def root() -> Path:
    return Path(os.environ.get("LAKESTATE_ROOT", "lakestate-data")).resolve()


def job() -> JobSpec:
    inputs = root() / "input"
    (inputs / "clicks").mkdir(parents=True, exist_ok=True)
    (inputs / "rules").mkdir(parents=True, exist_ok=True)
    return JobSpec(
        job_id="clicks",
        function=UserActivity(),
        source=FileSource(str(inputs / "clicks"), "parquet", EVENT, max_files_per_batch=1),
        broadcast_source=FileSource(str(inputs / "rules"), "json", RULE),
        key="user_id",
        key_type=Types.LONG(),
        output_type=OUTPUT,
        sink="sinks/clicks",
        uid="user-activity",
        parallelism=2,
        backend=os.environ.get("LAKESTATE_BACKEND", "delta"),
        checkpoint_interval=1,
        num_retained=3,
        order_by=["seq"],
    )
