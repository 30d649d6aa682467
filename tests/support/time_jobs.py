"""Jobs with time, after the programs a Flink user ports first: Flink's own ``CountWithTimeoutFunction``, a
session-gap job with a side output for late events, and a processing-time heartbeat alert."""
from __future__ import annotations

import json
from datetime import timedelta

from state_store import (
    FileSource,
    JobSpec,
    KeyedProcessFunction,
    OutputTag,
    TimeDomain,
    Types,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from tests.support.lake import Lake

MINUTE = 60_000
TIMED = Types.ROW_NAMED(["k", "ts", "seq"], [Types.STRING(), Types.LONG(), Types.LONG()])
COUNT_WITH_TIMESTAMP = Types.ROW_NAMED(["count", "last_modified"], [Types.LONG(), Types.LONG()])
KEY_COUNT = Types.ROW_NAMED(["k", "count"], [Types.STRING(), Types.LONG()])
SESSION = Types.ROW_NAMED(["k", "start", "end", "events"], [Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG()])
SESSION_STATE = Types.ROW_NAMED(["start", "last", "events"], [Types.LONG(), Types.LONG(), Types.LONG()])
LATE = OutputTag("late", Types.ROW_NAMED(["k", "ts", "watermark"], [Types.STRING(), Types.LONG(), Types.LONG()]))
ALERT = Types.ROW_NAMED(["k", "last_seen", "alerted_at"], [Types.STRING(), Types.LONG(), Types.LONG()])


class CountWithTimeoutFunction(KeyedProcessFunction):
    """Flink's example: count per key, and emit the count once a key has had no event for a minute of event
    time (the timer of its last modification is the one that fires)."""

    def open(self, ctx):
        self.state = ctx.get_state(ValueStateDescriptor("myState", COUNT_WITH_TIMESTAMP))

    def process(self, key, records, ctx):
        current = self.state.value() or {"count": 0, "last_modified": None}
        for r in records:
            current["count"] += 1
            current["last_modified"] = r["ts"]
            self.state.update(current)
            ctx.timer_service().register_event_time_timer(current["last_modified"] + MINUTE)

    def on_timer(self, timestamp, ctx):
        result = self.state.value()
        if timestamp == result["last_modified"] + MINUTE:
            yield {"k": ctx.get_current_key(), "count": result["count"]}


class Sessions(KeyedProcessFunction):
    """Sessions of a key's events: one closes when the watermark passes its last event + ``gap``; its summary
    goes to the sink, events older than the watermark to the ``late`` side output."""

    def __init__(self, gap: int = MINUTE):
        self.gap = gap

    def open(self, ctx):
        self.session = ctx.get_state(ValueStateDescriptor("session", SESSION_STATE))

    def process(self, key, records, ctx):
        timers, watermark = ctx.timer_service(), ctx.current_watermark()
        for r in records:
            ts = r["ts"]
            if ts <= watermark:
                ctx.output(LATE, {"k": key, "ts": ts, "watermark": watermark})
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
        return {"k": key, "start": s["start"], "end": s["last"] + self.gap, "events": s["events"]}

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() == TimeDomain.EVENT_TIME
        s = self.session.value()
        if s is not None and timestamp == s["last"] + self.gap:
            yield self._close(ctx.get_current_key(), s)


class Heartbeats(KeyedProcessFunction):
    """Alert when a key has sent no heartbeat for ``timeout`` of processing time."""

    def __init__(self, timeout: int = 10 * MINUTE):
        self.timeout = timeout

    def open(self, ctx):
        self.last = ctx.get_state(ValueStateDescriptor("last_seen", Types.LONG()))

    def process(self, key, records, ctx):
        timers, now = ctx.timer_service(), ctx.current_processing_time()
        previous = self.last.value()
        if previous is not None:
            timers.delete_processing_time_timer(previous + self.timeout)
        self.last.update(now)
        timers.register_processing_time_timer(now + self.timeout)

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() == TimeDomain.PROCESSING_TIME
        yield {"k": ctx.get_current_key(), "last_seen": self.last.value(), "alerted_at": timestamp}
        self.last.clear()


def _spec(lake, job_id, function, output_type, **overrides) -> JobSpec:
    spec = JobSpec(job_id=job_id, function=function, source=FileSource(str(lake.events), "json", TIMED,
                                                                       max_files_per_batch=1),
                   key="k", key_type=Types.STRING(), output_type=output_type, sink=f"sinks/{job_id}", uid="timed",
                   parallelism=2, max_parallelism=8, checkpoint_interval=1, num_retained=2, order_by=["ts", "seq"])
    return spec.with_overrides(**overrides)


def event_time(bound_ms: int = 0) -> WatermarkStrategy:
    return WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=bound_ms)).with_timestamp_column("ts")


def count_with_timeout_job(lake, job_id="count-timeout", **overrides) -> JobSpec:
    return _spec(lake, job_id, CountWithTimeoutFunction(), KEY_COUNT, **{"watermark_strategy": event_time(),
                                                                         **overrides})


def sessions_job(lake, job_id="sessions", bound_ms: int = 0, **overrides) -> JobSpec:
    return _spec(lake, job_id, Sessions(), SESSION,
                 **{"watermark_strategy": event_time(bound_ms), "side_outputs": [LATE], **overrides})


def heartbeat_job(lake, job_id="heartbeats", **overrides) -> JobSpec:
    return _spec(lake, job_id, Heartbeats(), ALERT, **overrides)


def timed(k: str, ts: int, seq: int = 0) -> dict:
    return {"k": k, "ts": ts, "seq": seq}


def late_window_job():
    """A registry entry (tests/ops/test_budgets.py): per country, clicks per minute of the clicks under
    ``$LAKESTATE_ROOT/input/country-clicks`` (demo.sessions_per_country's, one file a microbatch), with no side
    output for late data: a click behind a closed window is dropped, and counted."""
    from demo.clicks import root
    from demo.clicks_per_minute import ACC, PER_MINUTE, CountClicks, PerMinute
    from demo.sessions_per_country import BOUND_MS, CLICK
    from state_store import Dataflow, TumblingEventTimeWindows

    clicks = FileSource(str(root() / "input" / "country-clicks"), "parquet", CLICK, max_files_per_batch=1)
    return (Dataflow.from_source(clicks, job_id="late-window", watermark_strategy=event_time(BOUND_MS))
            .key_by("country").window(TumblingEventTimeWindows.of(timedelta(minutes=1)))
            .aggregate(CountClicks(), PerMinute(), accumulator_type=ACC, uid="per-minute", output_type=PER_MINUTE)
            .sink_to("sinks/late_window"))


S = 1000


def side_rows(spark, lake, spec, tag="late") -> list[str]:
    path = lake.settings.in_warehouse(spec.side_output_sink(tag), "sink")
    return sorted(json.dumps(r.asDict(), sort_keys=True) for r in spark.read.format("delta").load(str(path)).collect())


def sessions(spark, lake, spec) -> list[tuple]:
    return sorted((r["k"], r["start"], r["end"], r["events"])
                  for r in spark.read.format("delta").load(str(lake.settings.in_warehouse(spec.sink, "sink")))
                  .collect())


def session_input(lake: Lake) -> None:
    lake.write_events("000.json", [timed("a", 0), timed("a", 10 * S, 1), timed("b", 5 * S)])
    lake.write_events("001.json", [timed("a", 20 * S), timed("c", 100 * S)])
    lake.write_events("002.json", [timed("b", 30 * S), timed("c", 200 * S)])
