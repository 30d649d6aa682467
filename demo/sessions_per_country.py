"""A job of two stateful operators (a dataflow): per user, sessions of clicks closed by event time; then per
country, the sessions closed so far and their clicks.

    Dataflow.from_source(clicks, job_id="sessions-per-country", watermark_strategy=...)
        .key_by("user_id").process(CountrySessions(), uid="sessions", output_type=SESSION)
        .key_by("country").process(CountSessions(), uid="per-country", output_type=COUNTS)
        .sink_to("sinks/sessions_per_country")

It reads Parquet files of clicks ``{user_id, country, ts, seq}`` (``ts``: event time, epoch ms). The first
operator keeps each user's open session (a ValueState) and an event-time timer at its last click + 30 s: the
session closes when the watermark passes it, or when the user's next click comes after the gap; clicks behind
the watermark go to the side output ``late``. The second keeps per country the sessions and clicks counted so
far, and emits its totals once per microbatch in which they changed. ``expected`` is the same logic in pandas.
"""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from demo.sessions import GAP_MS, UserSessions
from state_store import (
    Dataflow,
    FileSource,
    KafkaSource,
    KeyedProcessFunction,
    OutputTag,
    Types,
    ValueStateDescriptor,
    WatermarkStrategy,
)

BOUND_MS = 5_000
CLICK = Types.ROW_NAMED(["user_id", "country", "ts", "seq"], [Types.LONG(), Types.STRING(), Types.LONG(), Types.LONG()])
SESSION = Types.ROW_NAMED(["user_id", "country", "start", "end", "clicks"],
                          [Types.LONG(), Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG()])
COUNTS = Types.ROW_NAMED(["country", "sessions", "clicks"], [Types.STRING(), Types.LONG(), Types.LONG()])
OPEN = Types.ROW_NAMED(["country", "start", "last", "clicks"],
                       [Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG()])
LATE = OutputTag("late_clicks", Types.ROW_NAMED(["user_id", "ts", "watermark"],
                                                [Types.LONG(), Types.LONG(), Types.LONG()]))
TOTALS = Types.ROW_NAMED(["sessions", "clicks"], [Types.LONG(), Types.LONG()])


class CountrySessions(UserSessions):
    """Per user: ``demo.sessions``' sessions, each with the user's country instead of the spend."""

    OPEN_TYPE, LATE_TAG = OPEN, LATE

    def _start(self, click) -> dict:
        return {"country": click["country"]}

    def _add(self, s, click) -> None:
        pass

    def _close(self, user_id, s):
        self.session.clear()
        return {"user_id": user_id, "country": s["country"], "start": s["start"], "end": s["last"] + GAP_MS,
                "clicks": s["clicks"]}


class CountSessions(KeyedProcessFunction):
    """Per country: sessions and clicks so far; one row of totals per microbatch in which they changed."""

    def open(self, ctx):
        self.totals = ctx.get_state(ValueStateDescriptor("totals", TOTALS))

    def process(self, country, sessions, ctx):
        t = self.totals.value() or {"sessions": 0, "clicks": 0}
        for s in sessions:
            t["sessions"] += 1
            t["clicks"] += s["clicks"]
        self.totals.update(t)
        yield {"country": country, **t}


def _files(clicks_dir, max_files_per_batch: int | None = 1) -> FileSource:
    return FileSource(str(clicks_dir), "parquet", CLICK, max_files_per_batch=max_files_per_batch)


def _sessions(source, job_id: str, parallelism: int, backend: str, sessions: CountrySessions | None = None):
    """The clicks of ``source`` made sessions per user (the first operator: ``sessions``, default a
    ``CountrySessions``), keyed by country."""
    return (Dataflow.from_source(source, job_id=job_id, backend=backend,
                                 watermark_strategy=WatermarkStrategy.for_bounded_out_of_orderness(
                                     timedelta(milliseconds=BOUND_MS)).with_timestamp_column("ts"))
            .key_by("user_id")
            .process(sessions or CountrySessions(), uid="sessions", output_type=SESSION, parallelism=parallelism,
                     order_by=["ts", "seq"], side_outputs=[LATE])
            .key_by("country"))


def dataflow(clicks_dir, *, job_id: str = "sessions-per-country", sink: str = "sinks/sessions_per_country",
             parallelism: tuple[int, int] = (2, 3), backend: str = "delta", max_files_per_batch: int | None = 1):
    """The two-operator job over the clicks in ``clicks_dir`` (a ``Job``)."""
    return (_sessions(_files(clicks_dir, max_files_per_batch), job_id, parallelism[0], backend)
            .process(CountSessions(), uid="per-country", output_type=COUNTS, parallelism=parallelism[1])
            .sink_to(sink))


LONGEST = Types.ROW_NAMED(["country", "longest"], [Types.STRING(), Types.LONG()])


class LongestSession(KeyedProcessFunction):
    """Per country: the most clicks of one session so far; a row when a microbatch raised it."""

    def open(self, ctx):
        self.longest = ctx.get_state(ValueStateDescriptor("longest", Types.LONG()))

    def process(self, country, sessions, ctx):
        before = self.longest.value() or 0
        most = max([before, *(s["clicks"] for s in sessions)])
        if most > before:
            self.longest.update(most)
            yield {"country": country, "longest": most}


def graph(clicks_dir, *, job_id: str = "sessions-graph", sink: str = "sinks/sessions_graph",
          parallelism: tuple[int, int, int] = (2, 3, 2), backend: str = "delta", longest_uid: str = "longest"):
    """The sessions fanned out to two branches (``Dataflow.graph``): ``dataflow``'s per-country totals (into
    ``sink``, the job's own) and per country the longest session (into ``<sink>-longest``)."""
    sessions = _sessions(_files(clicks_dir), job_id, parallelism[0], backend)
    return Dataflow.graph(
        sessions.process(CountSessions(), uid="per-country", output_type=COUNTS, parallelism=parallelism[1])
        .sink_to(sink),
        sessions.process(LongestSession(), uid=longest_uid, output_type=LONGEST, parallelism=parallelism[2])
        .sink_to(f"{sink}-longest"))


def expected_longest(clicks):
    """``LongestSession``'s latest rows in pandas: per country, the most clicks of a closed session."""
    import pandas as pd

    closed = _closed_sessions(clicks)
    out = closed.groupby("country").agg(longest=("clicks", "max")).reset_index()
    return pd.DataFrame(out).sort_values("country").reset_index(drop=True)


def on_kafka(bootstrap: str, topic: str, *, job_id: str = "sessions-kafka", sink: str = "sinks/sessions_kafka",
             parallelism: tuple[int, int] = (2, 3), max_records_per_microbatch: int = 1_000,
             sessions: CountrySessions | None = None):
    """``dataflow``'s two operators over the clicks of Kafka topic ``topic`` (JSON values, ``produce_clicks``),
    at most ``max_records_per_microbatch`` a microbatch; the first is ``sessions`` (default a ``CountrySessions``)."""
    source = KafkaSource(bootstrap, topics=[topic], schema=CLICK, max_records_per_microbatch=max_records_per_microbatch)
    return (_sessions(source, job_id, parallelism[0], "delta", sessions)
            .process(CountSessions(), uid="per-country", output_type=COUNTS, parallelism=parallelism[1])
            .sink_to(sink))


def kafka_job():
    """A registry entry of ``on_kafka``: topic ``$LAKESTATE_KAFKA_TOPIC`` (default ``country-clicks``) of the
    broker at ``$LAKESTATE_KAFKA_BOOTSTRAP`` (default ``127.0.0.1:9092``, what ``scripts/kafka.sh start`` serves)."""
    import os

    return on_kafka(os.environ.get("LAKESTATE_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
                    os.environ.get("LAKESTATE_KAFKA_TOPIC", "country-clicks"))


def job():
    """The demo's registry entry (``lakestate.toml``): the clicks the demo writes, as ``demo.sessions`` reads."""
    from demo.clicks import root

    clicks = root() / "input" / "country-clicks"
    clicks.mkdir(parents=True, exist_ok=True)
    return dataflow(clicks)


def write_clicks(directory: Path, files: int, events: int, users: int, countries: int = 7, seed: int = 11,
                 first_minute: int | None = None) -> list[Path]:
    """``files`` Parquet files of clicks, numbered after those already there; file n holds minute n of event
    time (a user's country is fixed: ``user_id % countries``)."""
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    first = len(list(directory.glob("clicks-*.parquet"))) if first_minute is None else first_minute
    written = []
    for n in range(first, first + files):
        path = directory / f"clicks-{n:05d}.parquet"
        pq.write_table(minute_of_clicks(n, events, users, countries, seed), path)
        written.append(path)
    return written


def minute_of_clicks(n: int, events: int, users: int, countries: int = 7, seed: int = 11):
    """``write_clicks``' file ``n`` as a pyarrow Table: ``events`` clicks in minute ``n`` of event time."""
    import random

    import pyarrow as pa

    rng = random.Random(seed + n)
    user = [rng.randrange(users) for _ in range(events)]
    return pa.table({
        "user_id": pa.array(user, pa.int64()),
        "country": pa.array([f"c{u % countries}" for u in user], pa.string()),
        "ts": pa.array([n * 60_000 + rng.randrange(60_000) for _ in user], pa.int64()),
        "seq": pa.array(range(n * events, (n + 1) * events), pa.int64()),
    })


def produce_clicks(bootstrap: str, topic: str, clicks, partitions: int = 4) -> None:
    """Clicks (rows of CLICK: a pyarrow Table or a list of dicts) as JSON messages keyed by user, in order, to
    Kafka topic ``topic`` at ``bootstrap``; the topic is created with ``partitions`` when it is missing."""
    import json

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic not in admin.list_topics(timeout=30).topics:
        for future in admin.create_topics([NewTopic(topic, partitions)]).values():
            future.result()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for click in clicks if isinstance(clicks, list) else clicks.to_pylist():
        while True:
            try:
                producer.produce(topic, key=str(click["user_id"]), value=json.dumps(click))
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(60):
        raise RuntimeError(f"the broker at {bootstrap} did not take every click")


def read_clicks(directory):
    """Every file ``write_clicks`` wrote in ``directory``, in order, as one pandas DataFrame (``expected``'s input)."""
    import pandas as pd
    import pyarrow.parquet as pq

    return pd.concat([pq.read_table(f).to_pandas() for f in sorted(Path(directory).glob("clicks-*.parquet"))],
                     ignore_index=True)


def latest_totals(rows):
    """From the sink's rows (a pandas DataFrame with ``_microbatch``), per country the totals of the latest
    microbatch that changed them: what ``expected`` computes, in its shape."""
    last = rows.sort_values("_microbatch").groupby("country").tail(1)
    return last[["country", "sessions", "clicks"]].sort_values("country").reset_index(drop=True)


def _closed_sessions(clicks):
    """The sessions of ``clicks`` (CLICK rows, read in microbatches of event time in order, none late) closed
    once every click is read: a user's next session started, or the watermark passed the last click + the gap."""
    watermark = int(clicks["ts"].max()) - BOUND_MS - 1
    df = clicks.sort_values(["user_id", "ts", "seq"])
    new = df.groupby("user_id")["ts"].diff().fillna(GAP_MS + 1) > GAP_MS
    df = df.assign(session=new.astype(int).groupby(df["user_id"]).cumsum())
    sessions = df.groupby(["user_id", "session"]).agg(country=("country", "first"), last=("ts", "max"),
                                                      clicks=("ts", "size")).reset_index()
    later = sessions.groupby("user_id")["session"].transform("max") > sessions["session"]
    return sessions[later | (sessions["last"] + GAP_MS <= watermark)]


def expected(clicks):
    """The same logic in pandas over all of ``clicks`` (a DataFrame of CLICK rows read in microbatches of event
    time in order, none late): per country, the sessions closed once every click is read, and their clicks."""
    import pandas as pd

    closed = _closed_sessions(clicks)
    out = closed.groupby("country").agg(sessions=("clicks", "size"), clicks=("clicks", "sum")).reset_index()
    return pd.DataFrame(out).sort_values("country").reset_index(drop=True)


if __name__ == "__main__":  # python -m demo.sessions_per_country --files 3: the demo's input, under $LAKESTATE_ROOT
    import argparse

    from demo.clicks import root

    parser = argparse.ArgumentParser(description="Write clicks for the sessions-per-country dataflow demo.")
    parser.add_argument("--files", type=int, default=3)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--users", type=int, default=5_000)
    args = parser.parse_args()
    for path in write_clicks(root() / "input" / "country-clicks", args.files, args.events, args.users):
        print(f"[demo] wrote {path}")
