"""The demo's job with time: each user's sessions of clicks, closed by event time.

It reads the same Parquet files as ``demo.clicks`` (``ts`` is each click's event time, epoch ms). A session
closes when the watermark passes its last click + 30 s (an event-time timer); its summary goes to the sink
``sinks/sessions``, and clicks older than the watermark to the side output ``sinks/sessions_late``. Each
microbatch's line in the Airflow log says how many sessions it closed ("N out") and how many timers fired.
"""
from __future__ import annotations

from datetime import timedelta

from demo.clicks import EVENT as CLICK
from demo.clicks import root
from state_store import (
    FileSource,
    JobSpec,
    KeyedProcessFunction,
    OutputTag,
    Types,
    ValueStateDescriptor,
    WatermarkStrategy,
)

GAP_MS = 30_000
EVENT = Types.ROW_NAMED(list(CLICK.fields) + ["ts"], list(CLICK.fields.values()) + [Types.LONG()])
SESSION = Types.ROW_NAMED(["user_id", "start", "end", "clicks", "spend"],
                          [Types.LONG(), Types.LONG(), Types.LONG(), Types.LONG(), Types.DOUBLE()])
OPEN = Types.ROW_NAMED(["start", "last", "clicks", "spend"], [Types.LONG(), Types.LONG(), Types.LONG(), Types.DOUBLE()])
LATE = OutputTag("late", Types.ROW_NAMED(["user_id", "ts", "watermark"], [Types.LONG(), Types.LONG(), Types.LONG()]))


class UserSessions(KeyedProcessFunction):
    """Per user, the open session (a ValueState of ``OPEN_TYPE``), closed by an event-time timer at its last
    click + ``GAP_MS``; clicks behind the watermark go to the side output ``LATE_TAG``. A subclass says what a
    session holds (``_start``, ``_add``, ``_close``)."""

    OPEN_TYPE, LATE_TAG = OPEN, LATE

    def open(self, ctx):
        self.session = ctx.get_state(ValueStateDescriptor("session", self.OPEN_TYPE))

    def process(self, user_id, clicks, ctx):
        timers, watermark = ctx.timer_service(), ctx.current_watermark()
        for click in clicks:  # in event time order (order_by)
            ts = click["ts"]
            if ts <= watermark:
                ctx.output(self.LATE_TAG, {"user_id": user_id, "ts": ts, "watermark": watermark})
                continue
            s = self.session.value()
            if s is not None and ts > s["last"] + GAP_MS:  # the open session ended before this click
                yield self._close(user_id, s)
                s = None
            if s is None:
                s = {**self._start(click), "start": ts, "last": ts, "clicks": 0}
            else:
                timers.delete_event_time_timer(s["last"] + GAP_MS)
            s["clicks"] += 1
            self._add(s, click)
            s["last"] = max(s["last"], ts)
            self.session.update(s)
            timers.register_event_time_timer(s["last"] + GAP_MS)

    def on_timer(self, timestamp, ctx):
        s = self.session.value()
        if s is not None and timestamp == s["last"] + GAP_MS:
            yield self._close(ctx.get_current_key(), s)

    def _start(self, click) -> dict:
        """What a new session holds beside its start, last click and count."""
        return {"spend": 0.0}

    def _add(self, s, click) -> None:
        s["spend"] = round(s["spend"] + click["amount"], 2)

    def _close(self, user_id, s):
        self.session.clear()
        return {"user_id": user_id, "start": s["start"], "end": s["last"] + GAP_MS, "clicks": s["clicks"],
                "spend": s["spend"]}


def job() -> JobSpec:
    clicks = root() / "input" / "clicks"
    clicks.mkdir(parents=True, exist_ok=True)
    return JobSpec(
        job_id="sessions", function=UserSessions(),
        source=FileSource(str(clicks), "parquet", EVENT, max_files_per_batch=1),
        key="user_id", key_type=Types.LONG(), output_type=SESSION, sink="sinks/sessions", uid="user-sessions",
        parallelism=2, checkpoint_interval=1, num_retained=3, order_by=["ts", "seq"],
        watermark_strategy=WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=5))
        .with_timestamp_column("ts"),
        side_outputs=[LATE])
