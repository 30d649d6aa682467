"""A composite key and a side output re-aggregated in the same job (docs/writing/keyed-functions.md, "Keys";
docs/writing/dataflows.md, side outputs as streams):

    per = (Dataflow.from_source(clicks, job_id="busy-users", watermark_strategy=...)
           .key_by(["country", "user_id"]).window(TumblingEventTimeWindows.of(timedelta(minutes=1)))
           .process(UserMinute(), uid="per-user-minute", output_type=USER_MINUTE, side_outputs=[BUSY]))
    busy = per.get_side_output(BUSY).key_by("country").process(BusyPerCountry(), uid="busy-per-country", ...)
    Dataflow.graph(per.sink_to("sinks/user_minutes"), busy.sink_to("sinks/busy_per_country"))

It reads the clicks ``demo.sessions_per_country`` writes (``{user_id, country, ts, seq}``). Per (country, user)
and minute of event time, the clicks (the key is the pair, a tuple in the function); a user-minute of at least
``BUSY_CLICKS`` clicks also goes to the side output ``busy``, which the job reads further: per country, a running
count of its busy user-minutes. ``expected`` computes both in pandas.
"""
from __future__ import annotations

from datetime import timedelta

from demo.sessions_per_country import BOUND_MS, CLICK
from state_store import (
    Dataflow,
    FileSource,
    KeyedProcessFunction,
    OutputTag,
    ProcessWindowFunction,
    TumblingEventTimeWindows,
    Types,
    ValueStateDescriptor,
    WatermarkStrategy,
)

MINUTE_MS = 60_000
BUSY_CLICKS = 6
USER_MINUTE = Types.ROW_NAMED(["country", "user_id", "minute", "clicks"],
                              [Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG()])
BUSY = OutputTag("busy", USER_MINUTE)
BUSY_COUNT = Types.ROW_NAMED(["country", "busy_user_minutes"], [Types.STRING(), Types.LONG()])


class UserMinute(ProcessWindowFunction):
    """A (country, user)'s clicks in one minute; a busy one to the side output too."""

    def process(self, key, context, elements):
        country, user_id = key
        row = {"country": country, "user_id": user_id, "minute": context.window().start // MINUTE_MS,
               "clicks": len(elements)}
        if row["clicks"] >= BUSY_CLICKS:
            context.output(BUSY, row)
        yield row


class BusyPerCountry(KeyedProcessFunction):
    """Per country, how many busy user-minutes the side output has brought so far."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("busy", Types.LONG()))

    def process(self, country, minutes, ctx):
        self.count.update((self.count.value() or 0) + len(minutes))
        yield {"country": country, "busy_user_minutes": self.count.value()}


def dataflow(clicks_dir, *, job_id: str = "busy-users", max_files_per_batch: int | None = 1):
    """The job over the clicks in ``clicks_dir``: a ``Job`` of two operators and two sinks."""
    per = (Dataflow.from_source(FileSource(str(clicks_dir), "parquet", CLICK, max_files_per_batch=max_files_per_batch),
                                job_id=job_id,
                                watermark_strategy=WatermarkStrategy.for_bounded_out_of_orderness(
                                    timedelta(milliseconds=BOUND_MS)).with_timestamp_column("ts"))
           .key_by(["country", "user_id"])
           .window(TumblingEventTimeWindows.of(timedelta(minutes=1)))
           .process(UserMinute(), uid="per-user-minute", output_type=USER_MINUTE, side_outputs=[BUSY]))
    busy = per.get_side_output(BUSY).key_by("country").process(BusyPerCountry(), uid="busy-per-country",
                                                               output_type=BUSY_COUNT)
    return Dataflow.graph(per.sink_to("sinks/user_minutes"), busy.sink_to("sinks/busy_per_country"))


def job():
    """The demo's registry entry (``lakestate.toml``): the clicks ``demo.sessions_per_country`` writes."""
    from demo.clicks import root

    clicks = root() / "input" / "country-clicks"
    clicks.mkdir(parents=True, exist_ok=True)
    return dataflow(clicks)


def expected(clicks, watermark: int) -> tuple[list, dict]:
    """The user-minutes closed by ``watermark`` (their end - 1 at or below it) as (country, user_id, minute,
    clicks), and per country the number of busy ones, in pandas."""
    closed = clicks[(clicks["ts"] // MINUTE_MS + 1) * MINUTE_MS - 1 <= watermark]
    per = closed.assign(minute=closed["ts"] // MINUTE_MS).groupby(["country", "user_id", "minute"]).size()
    minutes = sorted((c, int(u), int(m), int(n)) for (c, u, m), n in per.items())
    busy: dict = {}
    for c, _, _, n in minutes:
        if n >= BUSY_CLICKS:
            busy[c] = busy.get(c, 0) + 1
    return minutes, busy
