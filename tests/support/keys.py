"""Jobs keyed by keys of every kind (issue 61, item 1), which the key tests and the CLI's share: a composite key
(user, device) with value, list and map state and event-time timers, and a row of the typed kinds on both paths."""
from __future__ import annotations

import datetime
import decimal
from pathlib import Path

from state_store import (
    FileSource,
    JobSpec,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    Types,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from state_store.vectorized import VectorizedKeyedFunction

CLICK = Types.ROW_NAMED(["user", "device", "ts", "page"], [Types.STRING(), Types.INT(), Types.LONG(), Types.STRING()])
PER_DEVICE = Types.ROW_NAMED(["user", "device", "what"], [Types.STRING(), Types.INT(), Types.STRING()])
CLICKS = [  # a file a microbatch: (user, device, ts, page)
    [("alice", 1, 1, "home"), ("alice", 2, 2, "cart"), ("bob", 1, 3, "home"), ("alice", 1, 4, "cart")],
    [("bob", 1, 12, "pay"), ("alice", 2, 15, "home"), ("carol", 7, 16, "home")],
    [("alice", 1, 30, "pay"), ("carol", 7, 31, "cart"), ("bob", 2, 40, "home")],
]


def write_clicks(folder: Path, files=CLICKS) -> Path:
    import json

    folder.mkdir(parents=True, exist_ok=True)
    for i, rows in enumerate(files):
        (folder / f"{i:03}.json").write_text("".join(
            json.dumps({"user": u, "device": d, "ts": ts, "page": p}) + "\n" for u, d, ts, p in rows))
    return folder


class PerDevice(KeyedProcessFunction):
    """After Flink's KeyedStateBackend tests of a tuple key: per (user, device), a count (value), the pages
    (list) and the last time per page (map), and an event-time timer 10 after each record that reports them; the
    key is the tuple of the two columns everywhere the function sees it."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.pages = ctx.get_list_state(ListStateDescriptor("pages", Types.STRING()))
        self.last = ctx.get_map_state(MapStateDescriptor("last", Types.STRING(), Types.LONG()))

    def process(self, key, records, ctx):
        user, device = key
        assert ctx.get_current_key() == key and isinstance(device, int)
        self.count.update((self.count.value() or 0) + len(records))
        for r in records:
            self.pages.add(r["page"])
            self.last.put(r["page"], r["ts"])
            ctx.timer_service().register_event_time_timer(r["ts"] + 10)
        yield {"user": user, "device": device, "what": f"{self.count.value()} clicks"}

    def on_timer(self, timestamp, ctx):
        user, device = ctx.get_current_key()
        last = ",".join(f"{p}@{t}" for p, t in sorted(self.last.items()))
        yield {"user": user, "device": device, "what": f"timer {timestamp}: {list(self.pages.get())} {last}"}


def device_job(folder, job_id: str = "per-device", **overrides) -> JobSpec:
    return JobSpec(job_id=job_id, function=PerDevice(), source=FileSource(str(folder), "json", CLICK,
                                                                          max_files_per_batch=1),
                   key=["user", "device"], key_type=[Types.STRING(), Types.INT()], output_type=PER_DEVICE,
                   sink=f"sinks/{job_id}", uid="per-device",
                   watermark_strategy=WatermarkStrategy.for_bounded_out_of_orderness(0).with_timestamp_column("ts"),
                   ).with_overrides(**overrides)


# -- a key of every typed kind --------------------------------------------------------------------------------
UTC = datetime.timezone.utc
TYPED_KEY = {"flag": Types.BOOLEAN(), "day": Types.DATE(), "at": Types.TIMESTAMP(), "amount": Types.DECIMAL(10, 2),
             "blob": Types.BYTES(), "tag": Types.ROW_NAMED(["n", "s"], [Types.LONG(), Types.STRING()])}
TYPED = Types.ROW_NAMED([*TYPED_KEY, "v"], [*TYPED_KEY.values(), Types.LONG()])
TYPED_OUT = Types.ROW_NAMED([*TYPED_KEY, "total"], [*TYPED_KEY.values(), Types.LONG()])
KEYS = [  # five keys that differ in one column each
    (True, datetime.date(2024, 2, 29), datetime.datetime(2024, 1, 1, 12, 0, 0, 123456, UTC), decimal.Decimal("12.50"),
     b"\x00\xff", {"n": 1, "s": "x"}),
    (False, datetime.date(2024, 2, 29), datetime.datetime(2024, 1, 1, 12, 0, 0, 123456, UTC),
     decimal.Decimal("12.50"), b"\x00\xff", {"n": 1, "s": "x"}),
    (True, datetime.date(1969, 12, 31), datetime.datetime(2024, 1, 1, 12, 0, 0, 123456, UTC),
     decimal.Decimal("12.50"), b"\x00\xff", {"n": 1, "s": "x"}),
    (True, datetime.date(2024, 2, 29), datetime.datetime(1960, 6, 1, 0, 0, 0, 1, UTC), decimal.Decimal("-0.01"),
     b"", {"n": None, "s": "x"}),
    (True, datetime.date(2024, 2, 29), datetime.datetime(2024, 1, 1, 12, 0, 0, 123456, UTC),
     decimal.Decimal("12.50"), b"\x00\xfe", {"n": 1, "s": "\u00fc\"\n"}),
]


def write_typed(folder: Path, files: int = 3) -> list[dict]:
    """``files`` Parquet files of records of the five keys, each with its value ``v``; the records."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([(n, t.arrow_type()) for n, t in TYPED.fields.items()])
    records = []
    for f in range(files):
        rows = [dict(zip(TYPED_KEY, key), v=10 * f + i) for i, key in enumerate(KEYS) if (i + f) % 3]
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / f"{f:03}.parquet")
        records.append(rows)
    return records


class Total(KeyedProcessFunction):
    """The running total of ``v`` per key, with the key's columns."""

    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", Types.LONG()))

    def process(self, key, records, ctx):
        assert isinstance(key, tuple) and ctx.get_current_key() == key
        self.total.update((self.total.value() or 0) + sum(r["v"] for r in records))
        yield {**dict(zip(TYPED_KEY, key)), "total": self.total.value()}


class VectorizedTotal(VectorizedKeyedFunction):
    """``Total`` on the vectorised path: the state table's ``key`` is the struct of the key's columns."""

    def open(self, ctx):
        ctx.get_state(ValueStateDescriptor("total", Types.LONG()))

    def process_batch(self, records, state, ctx):
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        sums = np.add.reduceat(records.column("v").to_numpy(), ctx.key_offsets[:-1])
        total = pc.add(pc.fill_null(state.column("total"), 0), pa.array(sums))
        keys = state.column("key").combine_chunks()
        out = pa.table({**{n: keys.field(n) for n in TYPED_KEY}, "total": total})
        return out, pa.table({"key": keys, "total": total})


def typed_job(folder, function, job_id: str, **overrides) -> JobSpec:
    return JobSpec(job_id=job_id, function=function, source=FileSource(str(folder), "parquet", TYPED,
                                                                       max_files_per_batch=1),
                   key=list(TYPED_KEY), key_type=list(TYPED_KEY.values()), output_type=TYPED_OUT,
                   sink=f"sinks/{job_id}", uid="total").with_overrides(**overrides)
