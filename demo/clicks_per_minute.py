"""A windowed job (README "Windows"): per country, clicks per minute of event time, as a Flink user writes it.

    Dataflow.from_source(clicks, job_id="clicks-per-minute", watermark_strategy=...)
        .key_by("country").window(TumblingEventTimeWindows.of(timedelta(minutes=1)))
        .allowed_lateness(timedelta(seconds=30)).side_output_late_data(LATE)
        .aggregate(CountClicks(), PerMinute(), accumulator_type=..., uid="per-minute", output_type=PER_MINUTE)
        .sink_to("sinks/clicks_per_minute")

It reads the clicks ``demo.sessions_per_country`` writes (``{user_id, country, ts, seq}``). A minute's count is
emitted once the watermark passes the minute's end; a click up to 30 s later than that fires the minute again with
its new count; a later one goes to the side output ``late_clicks_per_minute``. ``expected`` is the same count in
pandas.
"""
from __future__ import annotations

from datetime import timedelta

from demo.sessions_per_country import BOUND_MS, CLICK
from state_store import (
    AggregateFunction,
    Dataflow,
    FileSource,
    OutputTag,
    ProcessWindowFunction,
    TumblingEventTimeWindows,
    Types,
    WatermarkStrategy,
)

MINUTE_MS = 60_000
PER_MINUTE = Types.ROW_NAMED(["country", "minute", "clicks", "users"],
                             [Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG()])
ACC = Types.ROW_NAMED(["clicks", "users"], [Types.LONG(), Types.LIST(Types.LONG())])
LATE = OutputTag("late_clicks_per_minute", CLICK)


class CountClicks(AggregateFunction):
    """A minute's clicks and distinct users, kept as one accumulator per window (not its clicks)."""

    def create_accumulator(self):
        return {"clicks": 0, "users": []}

    def add(self, click, acc):
        users = acc["users"] if click["user_id"] in acc["users"] else sorted(acc["users"] + [click["user_id"]])
        return {"clicks": acc["clicks"] + 1, "users": users}

    def get_result(self, acc):
        return {"clicks": acc["clicks"], "users": len(acc["users"])}

    def merge(self, a, b):
        return {"clicks": a["clicks"] + b["clicks"], "users": sorted(set(a["users"]) | set(b["users"]))}


class PerMinute(ProcessWindowFunction):
    """The minute's count with its country and start."""

    def process(self, country, context, elements):
        (result,) = elements
        yield {"country": country, "minute": context.window().start // MINUTE_MS, **result}


def dataflow(clicks_dir, *, job_id: str = "clicks-per-minute", sink: str = "sinks/clicks_per_minute",
             parallelism: int = 2, max_files_per_batch: int | None = 1):
    """The windowed job over the clicks in ``clicks_dir`` (a ``JobSpec``: one operator)."""
    return (Dataflow.from_source(FileSource(str(clicks_dir), "parquet", CLICK, max_files_per_batch=max_files_per_batch),
                                 job_id=job_id,
                                 watermark_strategy=WatermarkStrategy.for_bounded_out_of_orderness(
                                     timedelta(milliseconds=BOUND_MS)).with_timestamp_column("ts"))
            .key_by("country")
            .window(TumblingEventTimeWindows.of(timedelta(minutes=1)))
            .allowed_lateness(timedelta(seconds=30))
            .side_output_late_data(LATE)
            .aggregate(CountClicks(), PerMinute(), accumulator_type=ACC, uid="per-minute", output_type=PER_MINUTE,
                       parallelism=parallelism)
            .sink_to(sink))


def job():
    """The demo's registry entry (``lakestate.toml``): the clicks ``demo.sessions_per_country`` writes."""
    from demo.clicks import root

    clicks = root() / "input" / "country-clicks"
    clicks.mkdir(parents=True, exist_ok=True)
    return dataflow(clicks)


def expected(clicks, watermark: int):
    """Per country and minute closed by ``watermark`` (its end - 1 at or below it): clicks and distinct users, in
    pandas, from every click (none of the demo's clicks is late)."""
    closed = clicks[(clicks["ts"] // MINUTE_MS + 1) * MINUTE_MS - 1 <= watermark]
    grouped = closed.assign(minute=closed["ts"] // MINUTE_MS).groupby(["country", "minute"])
    return sorted((c, int(m), int(n), int(u)) for (c, m), n, u in zip(
        grouped.groups, grouped["seq"].count(), grouped["user_id"].nunique()))
