"""Sessionization (issue 20, "Time"): event-time timers in Lakestate against R's job without them and against
Spark's transformWithStateInPandas, side by side on the same files, in one run.

    source scripts/env.sh
    python bench/sessions.py                                  # R's shape at 1/5: 5 files x 20,000 events (~5 min)
    python bench/sessions.py --workload R                     # R's own sizes (~14 min, 11 of them Spark's)
    python bench/sessions.py --workload R --peers none        # R's own sizes, Lakestate only (~3 min)
    python bench/sessions.py --files 2 --events 1000 --keys 500   # a tiny run

The data is workload R's (``bench/workload.py``: key, amount, ts; ts strictly increasing), read with ``ts`` as
event time in milliseconds. R's files span 100,000 ms of event time each (one ms per event), so a key's events
are about 100 s apart and a session gap of 30 s closes most sessions after one event (a few get two). A
workload of fewer events per file keeps that shape: its ts are spaced ``file span / events`` ms apart
(``--file-span-ms``, default 100,000). Every ts is moved by 2026-01-01 in epoch ms (``--epoch-ms``; see
``EPOCH_MS``): otherwise R's own files.

1. ``lakestate R``: R's job (``bench/jobs.py``: a running count and sum per key, no timers).
1b. ``lakestate sessions vectorised``: ``SessionsVectorized`` below, the same sessions on the vectorised path
   (numpy over a microbatch's columns, timers registered a column at a time, closed in ``on_timer_batch``); its
   sessions are checked equal to ``Sessions``' (every one either emitted).
2. ``lakestate sessions``: ``Sessions`` below (the session-gap job of ``tests/support/time_jobs.py``): key = key, event
   time = ts (``for_bounded_out_of_orderness(--bound-ms)``), gap 30,000 ms; one row (key, start, end, events) per
   closed session, late events to a side output. An event-time timer per session, moved as it grows.
3. ``spark transformWithStateInPandas``: the same sessions with a ``StatefulProcessor`` in ``timeMode="EventTime"``
   (``withWatermark`` of ``--bound-ms`` on ``timestamp_millis(ts)``, ``registerTimer`` / ``deleteTimer``, the
   session closed in ``handleExpiredTimer``), RocksDB state store, one file per trigger, ``availableNow``.

All three run in the same SparkSession, each on its own copy of the same files, every engine warmed up first on 2
small files (``--no-warmup`` to skip), timed as ``bench/throughput.py`` times them (Lakestate: its run from first
plan to last commit; Spark: query start to end). Outputs: Lakestate's watermark after microbatch m is
``max ts - bound - 1`` and its timers fire at ``<= W``; Spark's is ``max ts - delay`` (of the batches before) and
its timers fire at ``< W``: with the same bound the two close the same sessions once Spark has run its no-data
batch. The check compares every session both closed with ``end`` at or below the lower of the two final
watermarks (minus 1 ms for Spark's strict ``<``), as multisets.

4. The 1% case: after the main runs, one more small file (fresh keys, no stored timers) whose event time moves
Lakestate's watermark past about 1% of the stored timers (the open sessions' ends); one run; it prints the
timers stored before it, the timers the run loaded into Python (sum of ``timers_in``) and the timers fired.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.streaming import StatefulProcessor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.jobs import EVENT
from bench.peers import _stream, dir_size, outputs_equal
from bench.throughput import run_lakestate
from bench.workload import SCHEMA, WORKLOADS, write_workload
from state_store import (
    FileSource,
    JobSpec,
    KeyedProcessFunction,
    OutputTag,
    TimeDomain,
    Types,
    ValueStateDescriptor,
    VectorizedKeyedFunction,
    WatermarkStrategy,
)

GAP_MS = 30_000  # session gap, event time
# R's ts start at 0; event time starts here instead: Spark's watermark starts at 0 (the epoch) and drops events at
# or before it as late, Lakestate's at Long.MIN_VALUE, so R's first event (ts 0) would be in one output only.
EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SESSION = Types.ROW_NAMED(["key", "start", "end", "events"],
                          [Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG()])
SESSION_STATE = Types.ROW_NAMED(["start", "last", "events"], [Types.LONG(), Types.LONG(), Types.LONG()])
LATE = OutputTag("late", Types.ROW_NAMED(["key", "ts", "watermark"], [Types.STRING(), Types.LONG(), Types.LONG()]))
UID = "sessions"


# -- Lakestate's side ---------------------------------------------------------------------------------------------
class Sessions(KeyedProcessFunction):
    """``tests/support/time_jobs.py``'s ``Sessions``: a session closes when the watermark passes its last event
    + ``gap`` (its event-time timer) or when the key's next event comes later than that; events at or below the
    watermark go to the ``late`` side output."""

    def __init__(self, gap: int = GAP_MS):
        self.gap = gap

    def open(self, ctx):
        self.session = ctx.get_state(ValueStateDescriptor("session", SESSION_STATE))

    def process(self, key, records, ctx):
        timers, watermark = ctx.timer_service(), ctx.current_watermark()
        for r in records:
            ts = r["ts"]
            if ts <= watermark:
                ctx.output(LATE, {"key": key, "ts": ts, "watermark": watermark})
                continue
            s = self.session.value()
            if s is not None and ts > s["last"] + self.gap:  # the open session ended before this event
                yield self._close(key, s)
                s = None
            if s is None:
                s = {"start": ts, "last": ts, "events": 0}
            else:
                timers.delete_event_time_timer(s["last"] + self.gap)
            s["events"] += 1
            s["start"], s["last"] = min(s["start"], ts), max(s["last"], ts)
            self.session.update(s)
            timers.register_event_time_timer(s["last"] + self.gap)

    def _close(self, key, s):
        self.session.clear()
        return {"key": key, "start": s["start"], "end": s["last"] + self.gap, "events": s["events"]}

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() == TimeDomain.EVENT_TIME
        s = self.session.value()
        if s is not None and timestamp == s["last"] + self.gap:
            yield self._close(ctx.get_current_key(), s)


# --8<-- [start:vectorised] (docs/writing/vectorised.md shows from here to the end marker)
class SessionsVectorized(VectorizedKeyedFunction):
    """``Sessions`` on the vectorised path (issue 61, item 6): the same sessions, late events, state and stored
    timers, with no Python call per record or key. A microbatch's on-time events (sorted by key, then ts: the job
    orders by ts) split into segments where a key's next event is more than ``gap`` after its last; the first
    continues the stored session when within its gap (its timer deleted, as each event moves it), every segment
    but a key's last is closed, and each segment's end gets an event-time timer (a closed one's stays, stale, as
    the per-record path leaves it); ``on_timer_batch`` closes a session whose timer is its end."""

    def __init__(self, gap: int = GAP_MS):
        self.gap = gap

    def open(self, ctx):
        ctx.get_state(ValueStateDescriptor("session", SESSION_STATE))

    def process_batch(self, records, state, ctx):
        gap, watermark, offsets = self.gap, ctx.current_watermark(), ctx.key_offsets
        ts = records.column("ts").to_numpy()
        owner = np.repeat(np.arange(state.num_rows), np.diff(offsets))  # each record's row of ``state``
        late = ts <= watermark
        if late.any():
            ctx.output(LATE, pa.table({"key": records.column("key").filter(pa.array(late)), "ts": ts[late],
                                       "watermark": np.full(late.sum(), watermark, dtype=np.int64)}))
        ts, owner = ts[~late], owner[~late]
        session = state.column("session").combine_chunks()
        had = session.is_valid().to_numpy(zero_copy_only=False)
        s_start, s_last, s_events = (pc.fill_null(pc.struct_field(session, f), 0).to_numpy() for f in
                                     ("start", "last", "events"))
        first = np.ones(len(ts), dtype=bool)
        first[1:] = owner[1:] != owner[:-1]
        new = first.copy()
        new[1:] |= ts[1:] - ts[:-1] > gap
        continues = first & had[owner] & (ts - s_last[owner] <= gap)  # joins the stored session
        seg = np.cumsum(new) - 1  # each event's segment
        n_seg = seg[-1] + 1 if len(seg) else 0
        seg_owner = np.zeros(n_seg, dtype=np.int64)
        seg_owner[seg] = owner
        seg_start = np.full(n_seg, np.iinfo(np.int64).max)
        np.minimum.at(seg_start, seg, ts)
        seg_last = np.zeros(n_seg, dtype=np.int64)
        np.maximum.at(seg_last, seg, ts)
        seg_events = np.bincount(seg, minlength=n_seg).astype(np.int64)
        joined = np.zeros(n_seg, dtype=bool)
        joined[seg[continues]] = True
        seg_start[joined] = np.minimum(seg_start[joined], s_start[seg_owner[joined]])
        seg_events[joined] += s_events[seg_owner[joined]]
        last_of_key = np.ones(n_seg, dtype=bool)
        last_of_key[:-1] = seg_owner[1:] != seg_owner[:-1]
        touched = np.zeros(state.num_rows, dtype=bool)
        touched[owner] = True
        continued = np.zeros(state.num_rows, dtype=bool)
        continued[seg_owner[joined]] = True
        ended = had & touched & ~continued  # a stored session a later event closed
        keys = state.column("key")
        closed = [pa.table({"key": keys.filter(pa.array(ended)), "start": s_start[ended],
                            "end": s_last[ended] + gap, "events": s_events[ended]}),
                  pa.table({"key": keys.take(pa.array(seg_owner[~last_of_key])), "start": seg_start[~last_of_key],
                            "end": seg_last[~last_of_key] + gap, "events": seg_events[~last_of_key]})]
        ctx.delete_event_time_timers(keys.filter(pa.array(continued)), s_last[continued] + gap)
        ctx.register_event_time_timers(keys.take(pa.array(seg_owner)), seg_last + gap)
        open_ = last_of_key
        new_state = pa.table({"key": keys.take(pa.array(seg_owner[open_])), "session": pa.StructArray.from_arrays(
            [pa.array(seg_start[open_]), pa.array(seg_last[open_]), pa.array(seg_events[open_])],
            names=["start", "last", "events"])})
        return pa.concat_tables(closed), new_state

    def on_timer_batch(self, timers, state, ctx):
        session = state.column("session").combine_chunks()
        s_last = pc.fill_null(pc.struct_field(session, "last"), np.iinfo(np.int64).min // 2).to_numpy()
        owner = np.repeat(np.arange(state.num_rows), np.diff(ctx.key_offsets))
        hit = timers.column("timestamp").to_numpy() == s_last[owner] + self.gap
        close = np.zeros(state.num_rows, dtype=bool)
        close[owner[hit]] = True
        close &= session.is_valid().to_numpy(zero_copy_only=False)
        mask = pa.array(close)
        done = session.filter(mask)
        output = pa.table({"key": state.column("key").filter(mask), "start": pc.struct_field(done, "start"),
                           "end": pc.add(pc.struct_field(done, "last"), self.gap),
                           "events": pc.struct_field(done, "events")})
        return output, pa.table({"key": state.column("key").filter(mask),
                                 "session": pa.nulls(int(close.sum()), SESSION_STATE.arrow_type())})
# --8<-- [end:vectorised]


def sessions_job(input_dir: str, job_id: str = "bench-sessions", bound_ms: int = 0, parallelism: int = 2,
                 vectorized: bool = False) -> JobSpec:
    """R's job's settings (``bench/jobs.py``), with event time and the sessions function (``SessionsVectorized``
    with ``vectorized``)."""
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=bound_ms)) \
        .with_timestamp_column("ts")
    function = SessionsVectorized() if vectorized else Sessions()
    return JobSpec(job_id=job_id, function=function, source=FileSource(input_dir, "parquet", EVENT,
                                                                       max_files_per_batch=1),
                   key="key", key_type=Types.STRING(), output_type=SESSION, sink=f"sinks/{job_id}", uid=UID,
                   parallelism=parallelism, backend="delta", checkpoint_interval=1, num_retained=3,
                   order_by=["ts"], watermark_strategy=strategy, side_outputs=[LATE])


def run_lakestate_sessions(spark, input_dir: Path, root: Path, bound_ms: int, quiet: bool = False,
                           vectorized: bool = False) -> dict:
    from state_store.catalog.job_store import JobStore
    from state_store.run.runtime import run_job
    from state_store.settings import Settings

    settings = Settings.load(root=root)
    spec = sessions_job(str(input_dir), bound_ms=bound_ms, vectorized=vectorized)
    started = time.time()
    result = run_job(spark, spec, settings,
                     progress=(lambda line: None) if quiet else (lambda line: print("   ", line, flush=True)))
    total = time.time() - started
    last = JobStore(settings.job_dir(spec.job_id)).read_plan(result.batches[-1].batch_id)
    return {"engine": "lakestate sessions" + (" vectorised" if vectorized else ""), "events": result.records_in,
            "seconds": result.seconds,
            "events_per_s": round(result.records_in / result.seconds), "with_checkpoints_s": round(total, 1),
            "microbatches": len(result.batches), "phases": result.phases, "watermark": last.watermark,
            "sessions_out": sum(b.records_out for b in result.batches),
            "late": sum(b.side_out for b in result.batches),
            "timers_in": sum(b.timers_in for b in result.batches),
            "timers_fired": sum(b.timers_fired for b in result.batches),
            "timers_stored_delta": timer_entries_delta(result),
            "sink": str(settings.in_warehouse(spec.sink, "sink")), "settings": settings, "spec": spec}


def timer_entries_delta(result) -> int:
    """Live event-time timers gained over a run's microbatches (the keyed table's timer entries)."""
    from state_store.timers import timer_state_names

    name = timer_state_names(UID)[TimeDomain.EVENT_TIME]
    return sum(b.entries_delta.get(name, 0) for b in result.batches)


def stored_timers(spark, settings, job_id: str) -> list[int]:
    """The event-time timers stored at the job's latest checkpoint, read from its keyed table (their timestamps)."""
    from pyspark.sql import functions as F

    from state_store.catalog.job_store import JobStore
    from state_store.delta.backends import create_keyed_backend
    from state_store.timers import timer_state_names

    job_dir = settings.job_dir(job_id)
    checkpoint = JobStore(job_dir).latest_checkpoint()
    keyed = create_keyed_backend("delta", spark, job_dir, job_id, checkpoint)
    name = timer_state_names(UID)[TimeDomain.EVENT_TIME]
    rows = keyed.read(checkpoint, lambda df: df.filter(F.col("state_name") == name)).select("expiry").collect()
    return sorted(r["expiry"] for r in rows)


# -- Spark's side ---------------------------------------------------------------------------------------------------
SPARK_STATE_SCHEMA = "start long, last long, events long"


def spark_output_schema():
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    return StructType([StructField("key", StringType()), StructField("start", LongType()),
                       StructField("end", LongType()), StructField("events", LongType())])


class SessionProcessor(StatefulProcessor):
    """The same sessions in Spark's StatefulProcessor API: a ValueState (start, last, events) per key and one
    event-time timer at last + gap, moved as the session grows (one state read and write and at most one timer
    delete and register per key per microbatch: the cheapest use of the API)."""

    gap = GAP_MS

    def init(self, handle) -> None:
        self.handle = handle
        self.session = handle.getValueState("session", SPARK_STATE_SCHEMA)

    def handleInputRows(self, key, rows, timerValues):
        watermark = timerValues.getCurrentWatermarkInMs()
        stamps = np.sort(np.concatenate([pdf["ts"].to_numpy() for pdf in rows])).tolist()
        stored = self.session.get()
        s = list(stored) if stored is not None else None
        closed = []
        for ts in stamps:
            if ts <= watermark:  # late: Spark's own filter drops these before they get here
                continue
            if s is not None and ts > s[1] + self.gap:
                closed.append((key[0], s[0], s[1] + self.gap, s[2]))
                s = None
            if s is None:
                s = [ts, ts, 0]
            s[2] += 1
            s[0], s[1] = min(s[0], ts), max(s[1], ts)
        if stored is not None and (s is None or s[1] != stored[1]):
            self.handle.deleteTimer(stored[1] + self.gap)
        if s is not None and (stored is None or s[1] != stored[1]):
            self.handle.registerTimer(s[1] + self.gap)
        if s is not None and s != list(stored or ()):
            self.session.update(tuple(s))
        if closed:
            yield pd.DataFrame(closed, columns=["key", "start", "end", "events"])

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        s = self.session.get()
        if s is not None and expiredTimerInfo.getExpiryTimeInMs() == s[1] + self.gap:
            self.session.clear()
            yield pd.DataFrame([(key[0], s[0], s[1] + self.gap, s[2])], columns=["key", "start", "end", "events"])

    def close(self) -> None:
        pass


def run_transform_with_state_sessions(spark, input_dir: Path, work_dir: Path, bound_ms: int) -> dict:
    """Spark's transformWithStateInPandas, event time, to a Delta sink, availableNow (bench/peers.py's set-up)."""
    from pyspark.sql import functions as F

    events = (_stream(spark, input_dir).withColumn("event_time", F.timestamp_millis("ts"))
              .withWatermark("event_time", f"{bound_ms} milliseconds"))
    out = events.groupBy("key").transformWithStateInPandas(
        statefulProcessor=SessionProcessor(), outputStructType=spark_output_schema(), outputMode="Append",
        timeMode="EventTime")
    sink, checkpoint = work_dir / "sink", work_dir / "checkpoint"
    writer = (out.writeStream.format("delta").outputMode("append")
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    started = time.time()
    query = writer.start(str(sink))
    query.awaitTermination()
    seconds = time.time() - started
    progress = query.recentProgress
    n = sum(p["numInputRows"] for p in progress)
    watermarks = [p.get("eventTime", {}).get("watermark") for p in progress]
    state_bytes, state_files = dir_size(checkpoint / "state")
    return {"engine": "spark transformWithStateInPandas", "events": n, "seconds": round(seconds, 1),
            "events_per_s": round(n / seconds), "microbatches": len(progress),
            "per_microbatch_s": [round(p["durationMs"].get("triggerExecution", 0) / 1000, 2) for p in progress],
            "watermark": _epoch_ms(watermarks[-1]) if watermarks and watermarks[-1] else None,
            "rows_in": [p["numInputRows"] for p in progress],
            "sink": str(sink), "state_bytes": state_bytes, "state_files": state_files}


def _epoch_ms(iso: str) -> int:
    """Spark's progress watermark ("1970-01-01T00:08:20.000Z") as epoch milliseconds."""
    return int(pd.Timestamp(iso).value // 1_000_000)


# -- data ------------------------------------------------------------------------------------------------------------
def write_sessions_workload(directory: Path, files: int, events: int, keys: int, file_span_ms: int,
                            epoch_ms: int) -> int:
    """R's files (``write_workload``) with ts = ``epoch_ms`` + R's ts x ``file_span_ms / events`` (R's own
    spacing: 1 ms). Returns the spacing."""
    paths = write_workload(directory, files, events, keys)
    step = max(1, file_span_ms // events)
    for path in paths:
        table = pq.read_table(path)
        ts = pc.add(pc.multiply(table["ts"], step), epoch_ms)
        pq.write_table(table.set_column(table.schema.get_field_index("ts"), "ts", ts), path)
    return step


def last_event_per_key(directory: Path) -> tuple[dict, int]:
    """Per key the largest ts over every file of ``directory``, and the largest ts overall."""
    table = pa.concat_tables([pq.read_table(p, columns=["key", "ts"]) for p in sorted(directory.glob("*.parquet"))])
    last = table.group_by("key").aggregate([("ts", "max")])
    return dict(zip(last["key"].to_pylist(), last["ts_max"].to_pylist())), pc.max(table["ts"]).as_py()


def write_one_percent_file(directory: Path, stored: list[int], bound_ms: int, share: float, events: int) -> dict:
    """One more file of ``events`` events on fresh keys (no stored timers) whose largest ts moves the watermark to
    the stored timer at rank ``share`` (so that share of them comes due); returns what to expect."""
    existing = sorted(directory.glob("part-*.parquet"))
    _, max_ts = last_event_per_key(directory)
    due = max(1, math.ceil(len(stored) * share))
    watermark = stored[due - 1]  # W' = max ts' - bound - 1: the due timers are those <= W'
    due = sum(1 for t in stored if t <= watermark)  # ties
    top = watermark + bound_ms + 1
    ts = np.linspace(max_ts + 1, top, num=events).astype(np.int64)
    ts[-1] = top
    key = pa.array([f"fresh-{len(existing)}-{i}" for i in range(events)], pa.string())
    table = pa.table({"key": key, "amount": pa.array(np.ones(events, dtype=np.int64)), "ts": pa.array(ts)},
                     schema=SCHEMA)
    pq.write_table(table, directory / f"part-{len(existing):05d}.parquet")
    return {"watermark": watermark, "due": due, "events": events}


# -- the bench --------------------------------------------------------------------------------------------------------
def closed_sessions(spark, sink: str, cutoff: int):
    """The sessions a sink holds that ended at or before ``cutoff``: key, start, end, events."""
    from pyspark.sql import functions as F

    return (spark.read.format("delta").load(sink).select("key", "start", "end", "events")
            .filter(F.col("end") <= F.lit(cutoff)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), help="R's or L's own sizes (default: R at 1/5)")
    parser.add_argument("--files", type=int, help="files (default 5)")
    parser.add_argument("--events", type=int, help="events per file (default 20,000)")
    parser.add_argument("--keys", type=int, help="distinct keys (default 20,000)")
    parser.add_argument("--file-span-ms", type=int, default=100_000, help="event time one file spans (R: 100,000)")
    parser.add_argument("--epoch-ms", type=int, default=EPOCH_MS, help="added to R's ts (default 2026-01-01)")
    parser.add_argument("--bound-ms", type=int, default=0, help="out-of-orderness bound = Spark's watermark delay")
    parser.add_argument("--peers", default="transform", help="transform, or none")
    parser.add_argument("--share", type=float, default=0.01, help="the share of stored timers the last file makes due")
    parser.add_argument("--no-warmup", action="store_true", help="time each engine in the JVM as it finds it")
    args = parser.parse_args()
    files, events, keys = WORKLOADS[args.workload] if args.workload else (5, 20_000, 20_000)
    files, events, keys = args.files or files, args.events or events, args.keys or keys
    peers = args.peers != "none"

    os.environ["PYTHONWARNINGS"] = "ignore::FutureWarning"  # the peer's pandas deprecation noise
    from state_store.spark.session import build_spark

    base = Path(tempfile.mkdtemp(prefix="lakestate-sessions-"))
    try:
        step = write_sessions_workload(base / "input", files, events, keys, args.file_span_ms,
                                       args.epoch_ms)
        last_ts, _ = last_event_per_key(base / "input")
        spark = build_spark("lakestate-sessions", extra_conf={"spark.driver.memory": "6g"})
        print(f"data: {files} files x {events} events over {keys} keys, ts {step} ms apart from {args.epoch_ms} "
              f"(each file spans {events * step:,} ms of event time), session gap {GAP_MS:,} ms, "
              f"bound {args.bound_ms} ms; spark {spark.version}, {os.cpu_count()} cores", flush=True)
        if not args.no_warmup:
            warm = base / "warmup"
            write_sessions_workload(warm / "input", 2, 2_000, 2_000, args.file_span_ms, args.epoch_ms)
            started = time.time()
            for name in ("r", "sessions", "vectorised") + (("transform",) if peers else ()):
                shutil.copytree(warm / "input", warm / name / "input")
            run_lakestate(spark, warm / "r" / "input", warm / "r" / "root", "delta", quiet=True)
            run_lakestate_sessions(spark, warm / "sessions" / "input", warm / "sessions" / "root", args.bound_ms,
                                   quiet=True)
            run_lakestate_sessions(spark, warm / "vectorised" / "input", warm / "vectorised" / "root",
                                   args.bound_ms, quiet=True, vectorized=True)
            if peers:
                run_transform_with_state_sessions(spark, warm / "transform" / "input", warm / "transform",
                                                  args.bound_ms)
            print(f"warm-up: every engine ran 2 x 2,000 events first ({time.time() - started:.0f}s)", flush=True)

        for name in ("r", "sessions", "vectorised") + (("transform",) if peers else ()):
            shutil.copytree(base / "input", base / name / "input")
        print("lakestate R (no timers)", flush=True)
        r = run_lakestate(spark, base / "r" / "input", base / "r" / "root", "delta")
        r["engine"] = "lakestate R (no timers)"
        print("lakestate sessions vectorised", flush=True)
        v = run_lakestate_sessions(spark, base / "vectorised" / "input", base / "vectorised" / "root",
                                   args.bound_ms, vectorized=True)
        print("lakestate sessions", flush=True)
        s = run_lakestate_sessions(spark, base / "sessions" / "input", base / "sessions" / "root", args.bound_ms)
        v_equal = outputs_equal(spark, closed_sessions(spark, v["sink"], 2**62),
                                closed_sessions(spark, s["sink"], 2**62))
        t = None
        if peers:
            print("spark transformWithStateInPandas", flush=True)
            t = run_transform_with_state_sessions(spark, base / "transform" / "input", base / "transform",
                                                  args.bound_ms)

        # What both closed under the same final watermark.
        cutoff = s["watermark"] if t is None else min(s["watermark"], t["watermark"] - 1)
        expected_open = sum(1 for v in last_ts.values() if v + GAP_MS > s["watermark"])
        ours = closed_sessions(spark, s["sink"], cutoff)
        equal = None
        if t is not None:
            theirs = closed_sessions(spark, t["sink"], cutoff)
            n_ours, n_theirs = ours.count(), theirs.count()
            equal = outputs_equal(spark, ours, theirs)

        # The 1% case: a run whose due timers are ~1% of the stored ones.
        settings, spec = s["settings"], s["spec"]
        stored = stored_timers(spark, settings, spec.job_id)
        one = p = None
        if stored:
            one = write_one_percent_file(base / "sessions" / "input", stored, args.bound_ms, args.share, 100)
            print("lakestate sessions, one more file (the 1% case)", flush=True)
            p = run_lakestate_sessions(spark, base / "sessions" / "input", base / "sessions" / "root",
                                       args.bound_ms)

        print()
        rows = [r, s, v] + ([t] if t else [])
        for e in rows:
            print(f"{e['engine']:34s} {e['events']:>9d} events {e['seconds']:>7.1f}s {e['events_per_s']:>8d} ev/s",
                  flush=True)
        print(f"lakestate R run phases: {r['phases']}; with checkpoints {r['with_checkpoints_s']}s")
        print(f"lakestate sessions run phases: {s['phases']}; with checkpoints {s['with_checkpoints_s']}s; "
              f"{s['sessions_out']} sessions out, {s['timers_fired']} timers fired, {s['late']} late events; "
              f"watermark after the last microbatch {s['watermark']}")
        if t:
            print(f"spark transformWithStateInPandas: {t['microbatches']} microbatches (input rows "
                  f"{t['rows_in']}), per microbatch {t['per_microbatch_s']} s; watermark of the last "
                  f"{t['watermark']}; state {t['state_bytes']} bytes in {t['state_files']} files")
        ratio = s["events_per_s"] / r["events_per_s"]
        print(f"sessions / R without timers: {ratio:.2f}x (target >= 0.7x)")
        print(f"sessions vectorised / per record: {v['events_per_s'] / s['events_per_s']:.2f}x (target >= 2x); "
              f"the same sessions: {v_equal} ({v['sessions_out']} and {s['sessions_out']} emitted, "
              f"{v['late']} and {s['late']} late); vectorised phases {v['phases']}")
        if t:
            print(f"lakestate sessions / transformWithStateInPandas: {s['events_per_s'] / t['events_per_s']:.1f}x "
                  f"(target >= 20x)")
            print(f"outputs equal: {equal} ({n_ours} vs {n_theirs} sessions with end <= {cutoff}; lakestate "
                  f"emitted {s['sessions_out']} in all)")
        if p is None:
            print("1% case: no stored timers after the main run (every session closed): nothing to show")
        else:
            print(f"1% case: timers stored {len(stored)} (open sessions by the data: {expected_open}; timer entries "
                  f"the run added: {s['timers_stored_delta']}), the new file moves the watermark to "
                  f"{one['watermark']}: {one['due']} due ({one['due'] / len(stored):.2%}); the run loaded "
                  f"{p['timers_in']} timers into Python (sum of timers_in), fired {p['timers_fired']}; "
                  f"{p['events']} records in {p['seconds']}s {p['phases']}")
        print(json.dumps([{k: v for k, v in e.items() if k not in ("settings", "spec")}
                          for e in rows + ([p] if p else [])]))
        spark.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
