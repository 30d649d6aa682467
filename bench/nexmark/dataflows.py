"""Nexmark's q5, q7, q8 and q11 written by hand as Lakestate dataflows (issue 63), beside their SQL twins, and q6
as Nexmark means it (its SQL does not validate in Flink 2.3).

Each reads the generator's nested events as ``tables.nexmark_tables`` does (the same files, a microbatch each) and
ends in a table of the SQL query's columns, so ``engines.differences`` compares it with Flink's. Event time is the
events' ``dateTime`` as epoch milliseconds (``ts``) with Nexmark's watermark, 4 s behind; the generator's events
come in time order, so no record is late and the watermark of a view's records alone (not the whole table's, as
in SQL) fires the same windows.

- q5 (hot items): bids counted per auction in hopping windows (10 s every 2 s, the vectorised window), then per
  window the auctions of the highest count (a tumbling window of 2 s over the counts, keyed by the window's end).
- q7 (highest bid): per tumbling window of 10 s (keyed by its number), the bids of its highest price. Flink's SQL
  joins each bid with every window ending in ``[dateTime, dateTime + 10 s]``: a bid exactly on a window's end with
  the price of the window before would count twice there; nothing here does that (none did in the runs).
- q8 (new users): people and auctions co-grouped per person and tumbling window of 10 s; a person who opened an
  auction in the window of their record, once.
- q11 (user sessions): bids per bidder in event-time sessions with a 10 s gap.
- q6 (average selling price by seller): each auction's winning bid (its highest bid between its open and its
  expiry, as q6's Top-1 means), then per seller the mean of the prices of its last 10 winning auctions (q6's ``ROWS
  BETWEEN 10 PRECEDING AND CURRENT ROW`` is eleven rows: Nexmark's q6 of the Beam suite takes ten), emitted each
  time an auction closes (its expiry passes the watermark; at the end of the input, every auction has).
  ``DUCKDB_Q6`` computes the same from the events' files.
"""
from __future__ import annotations

import datetime
from datetime import timedelta

from bench.nexmark.tables import DATE_TIME, EVENT, VIEWS
from bench.windows import Count
from state_store import (
    AggregateFunction,
    CoGroupFunction,
    ColumnAggregate,
    Dataflow,
    EventTimeSessionWindows,
    FileSource,
    KeyedProcessFunction,
    ListStateDescriptor,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    Types,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from state_store.sources.query import QuerySource
from state_store.sql.definition import row_type

HAND_WRITTEN = (5, 7, 8, 11)
WATERMARK = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=4)).with_timestamp_column("ts")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
TEN_SECONDS = 10_000


def _at(ms: int) -> datetime.datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def view(events: FileSource, name: str, columns: str) -> QuerySource:
    """The view ``name``'s ``columns`` (a schema's text) of ``events``, with ``ts``: its ``dateTime`` in epoch ms."""
    event_type = VIEWS[name][0]
    schema = row_type(f"{columns}, ts BIGINT")
    exprs = tuple((c, DATE_TIME if c == "dateTime" else f"{name}.`{c}`") for c in schema.fields if c != "ts")
    return QuerySource(events, f"event_type = {event_type}", exprs + (("ts", f"unix_millis({DATE_TIME})"),), schema)


def _stream(events_dir: str, job_id: str, name: str, columns: str) -> Dataflow:
    events = FileSource(events_dir, "json", EVENT, max_files_per_batch=1)
    return Dataflow.from_source(view(events, name, columns), job_id=job_id, watermark_strategy=WATERMARK)


# -- q5 ----------------------------------------------------------------------------------------------------------
Q5 = row_type("auction BIGINT, num BIGINT")
COUNTS = row_type("auction BIGINT, window_start BIGINT, window_end BIGINT, num BIGINT")
TOP = Types.ROW_NAMED(["num", "auctions"], [Types.LONG(), Types.LIST(Types.LONG())])


class MostBids(AggregateFunction):
    """The highest count of a window's auctions and the auctions that have it."""

    def create_accumulator(self):
        return {"num": 0, "auctions": []}

    def add(self, value, acc):
        if value["num"] > acc["num"]:
            return {"num": value["num"], "auctions": [value["auction"]]}
        if value["num"] == acc["num"]:
            acc["auctions"].append(value["auction"])
        return acc

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        if a["num"] != b["num"]:
            return a if a["num"] > b["num"] else b
        return {"num": a["num"], "auctions": a["auctions"] + b["auctions"]}


class HotItems(ProcessWindowFunction):
    def process(self, key, context, elements):
        top = elements[0]
        for auction in top["auctions"]:
            yield {"auction": auction, "num": top["num"]}


def q5(events_dir: str, sink: str = "sinks/q5"):
    bids = _stream(events_dir, "nexmark-q5-dataflow", "bid", "auction BIGINT")
    return (bids.key_by("auction")
            .window(SlidingEventTimeWindows.of(timedelta(seconds=10), timedelta(seconds=2)))
            .aggregate(ColumnAggregate(num="count(*)"), uid="bids-per-auction", output_type=COUNTS)
            .key_by("window_end")
            .window(TumblingEventTimeWindows.of(timedelta(seconds=2)), timestamp_column="window_end")
            .aggregate(MostBids(), HotItems(), uid="hot-items", accumulator_type=TOP, output_type=Q5)
            .sink_to(sink))


# -- q7 ----------------------------------------------------------------------------------------------------------
BID_COLUMNS = "auction BIGINT, bidder BIGINT, price BIGINT, `dateTime` TIMESTAMP(3), extra STRING"
Q7 = row_type("auction BIGINT, price BIGINT, bidder BIGINT, `dateTime` TIMESTAMP(3), extra STRING")
HIGHEST = Types.ROW_NAMED(["price", "bids"], [Types.LONG(), Types.LIST(Q7)])


class HighestBids(AggregateFunction):
    """A window's highest price and its bids at that price."""

    def create_accumulator(self):
        return {"price": None, "bids": []}

    def add(self, value, acc):
        bid = {"auction": value["auction"], "price": value["price"], "bidder": value["bidder"],
               "dateTime": value["dateTime"], "extra": value["extra"]}
        if acc["price"] is None or value["price"] > acc["price"]:
            return {"price": value["price"], "bids": [bid]}
        if value["price"] == acc["price"]:
            acc["bids"].append(bid)
        return acc

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        if a["price"] != b["price"]:
            return a if b["price"] is None or (a["price"] is not None and a["price"] > b["price"]) else b
        return {"price": a["price"], "bids": a["bids"] + b["bids"]}


class EachHighest(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield from elements[0]["bids"]


def q7(events_dir: str, sink: str = "sinks/q7"):
    bids = _stream(events_dir, "nexmark-q7-dataflow", "bid", BID_COLUMNS)
    return (bids.select_expr({c: f"`{c}`" for c in (*row_type(BID_COLUMNS).fields, "ts")} | {"w": "ts DIV 10000"},
                             output_type=row_type(f"{BID_COLUMNS}, ts BIGINT, w BIGINT"))
            .key_by("w")
            .window(TumblingEventTimeWindows.of(timedelta(seconds=10)))
            .aggregate(HighestBids(), EachHighest(), uid="highest-bids", accumulator_type=HIGHEST, output_type=Q7)
            .sink_to(sink))


# -- q8 ----------------------------------------------------------------------------------------------------------
Q8 = row_type("id BIGINT, name STRING, stime TIMESTAMP(3)")


class NewUsers(CoGroupFunction):
    """A person with an auction of theirs in the same window, once per name (q8 groups by id and name)."""

    def co_group(self, lefts, rights):
        if not rights:
            return
        seen = set()
        for person in lefts:
            if person["name"] not in seen:
                seen.add(person["name"])
                yield {"id": person["id"], "name": person["name"],
                       "stime": _at(person["ts"] - person["ts"] % TEN_SECONDS)}


def q8(events_dir: str, sink: str = "sinks/q8"):
    people = _stream(events_dir, "nexmark-q8-dataflow", "person", "id BIGINT, name STRING")
    auctions = _stream(events_dir, "nexmark-q8-dataflow", "auction", "seller BIGINT")
    return (people.co_group(auctions).where("id").equal_to("seller")
            .window(TumblingEventTimeWindows.of(timedelta(seconds=10)))
            .apply(NewUsers(), uid="new-users", output_type=Q8)
            .sink_to(sink))


# -- q11 ---------------------------------------------------------------------------------------------------------
Q11 = row_type("bidder BIGINT, bid_count BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3)")


class Session(ProcessWindowFunction):
    def process(self, key, context, elements):
        w = context.window()
        yield {"bidder": key, "bid_count": elements[0], "starttime": _at(w.start), "endtime": _at(w.end)}


def q11(events_dir: str, sink: str = "sinks/q11"):
    bids = _stream(events_dir, "nexmark-q11-dataflow", "bid", "bidder BIGINT")
    return (bids.key_by("bidder")
            .window(EventTimeSessionWindows.with_gap(timedelta(seconds=10)))
            .aggregate(Count(), Session(), uid="sessions", accumulator_type=Types.LONG(), output_type=Q11)
            .sink_to(sink))


# -- q6 ----------------------------------------------------------------------------------------------------------
Q6 = row_type("seller BIGINT, avg_price BIGINT")
LAST = 10  # the winning prices a seller's mean is of


class AuctionsClosing(KeyedProcessFunction):
    """Per auction (the key): its open, expiry and seller from its record, its highest bid within them; a timer
    at its expiry emits the winning price (an auction without a bid in time emits nothing)."""

    def open(self, ctx):
        self.auction = ctx.get_state(ValueStateDescriptor("auction", row_type(
            "seller BIGINT, opened BIGINT, expires BIGINT")))
        self.early = ctx.get_list_state(ListStateDescriptor("early-bids", row_type("price BIGINT, ts BIGINT")))
        self.best = ctx.get_state(ValueStateDescriptor("best", Types.LONG()))

    def process(self, key, records, ctx):
        for r in records:
            if r["kind"] == 1:
                self.auction.update({"seller": r["seller"], "opened": r["ts"], "expires": r["expires"]})
                ctx.timer_service().register_event_time_timer(r["expires"])
                for early in self.early.get():
                    self._bid(early["price"], early["ts"])
                self.early.clear()
            elif self.auction.value() is None:  # a bid before its auction's record (across splits)
                self.early.add({"price": r["price"], "ts": r["ts"]})
            else:
                self._bid(r["price"], r["ts"])
        return []

    def _bid(self, price, ts):
        a = self.auction.value()
        if a["opened"] <= ts <= a["expires"] and (self.best.value() is None or price > self.best.value()):
            self.best.update(price)

    def on_timer(self, timestamp, ctx):
        a, best = self.auction.value(), self.best.value()
        self.auction.clear()
        self.best.clear()
        self.early.clear()
        if a is not None and best is not None:
            yield {"id": ctx.get_current_key(), "seller": a["seller"], "price": best, "ts": timestamp}


class SellerMean(KeyedProcessFunction):
    """Per seller (the key): the mean of its last ``LAST`` winning prices, truncated as Flink's AVG of a BIGINT,
    emitted for each auction it closes, in closing order (by expiry, then auction id: the auctions closing at one
    time close in one microbatch)."""

    def open(self, ctx):
        self.prices = ctx.get_list_state(ListStateDescriptor("prices", Types.LONG()))

    def process(self, key, records, ctx):
        prices, out = self.prices.get(), []
        for r in sorted(records, key=lambda r: (r["ts"], r["id"])):
            prices = (prices + [r["price"]])[-LAST:]
            out.append({"seller": key, "avg_price": sum(prices) // len(prices)})  # prices are positive
        self.prices.update(prices)
        return out


def q6(events_dir: str, sink: str = "sinks/q6"):
    events = FileSource(events_dir, "json", EVENT, max_files_per_batch=1)
    columns = "kind INT, id BIGINT, seller BIGINT, expires BIGINT, price BIGINT, ts BIGINT"
    source = QuerySource(events, "event_type IN (1, 2)", (
        ("kind", "event_type"), ("id", "CASE WHEN event_type = 1 THEN auction.id ELSE bid.auction END"),
        ("seller", "auction.seller"), ("expires", "unix_millis(auction.expires)"), ("price", "bid.price"),
        ("ts", f"unix_millis({DATE_TIME})")), row_type(columns))
    closed = row_type("id BIGINT, seller BIGINT, price BIGINT, ts BIGINT")
    return (Dataflow.from_source(source, job_id="nexmark-q6-dataflow", watermark_strategy=WATERMARK)
            .key_by("id").process(AuctionsClosing(), uid="auctions-closing", output_type=closed)
            .key_by("seller").process(SellerMean(), uid="seller-mean", output_type=Q6)
            .sink_to(sink))


DUCKDB_Q6 = f"""
WITH events AS (SELECT * FROM read_json_auto('{{files}}', format = 'newline_delimited')),
auctions AS (SELECT auction.id AS id, auction.seller AS seller, auction.dateTime::TIMESTAMP AS opened,
                    auction.expires::TIMESTAMP AS expires FROM events WHERE event_type = 1),
bids AS (SELECT bid.auction AS auction, bid.price AS price, bid.dateTime::TIMESTAMP AS at
         FROM events WHERE event_type = 2),
winners AS (SELECT a.id, a.seller, a.expires, max(b.price) AS price FROM auctions a JOIN bids b
            ON a.id = b.auction AND b.at BETWEEN a.opened AND a.expires GROUP BY a.id, a.seller, a.expires)
SELECT seller, trunc(avg(price) OVER (PARTITION BY seller ORDER BY expires, id
                                      ROWS BETWEEN {LAST - 1} PRECEDING AND CURRENT ROW))::BIGINT AS avg_price
FROM winners
"""
