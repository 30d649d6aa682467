"""Nexmark's events, as Nexmark's own generator makes them (issue 63): a port of ``nexmark-flink``'s
``generator/`` (the nexmark/nexmark repository at commit 6b3646c, Apache License 2.0) and of the random source it
draws from, Java's ``SplittableRandom``, so that for the same settings it gives the same events field for field.

    python bench/nexmark/generate.py OUT --events 2000000 --files 20 --seed 1 --rate 10000 \\
        --base-time 2024-12-31T23:59:50Z [--kafka-topic nexmark --bootstrap-servers localhost:9092]

Its defaults are Nexmark's (``NexmarkConfiguration``): people, auctions and bids in the proportions 1 : 3 : 46,
10,000 events/s, 1,000 active people, 100 auctions in flight, hot auctions 1/2, hot sellers and bidders 3/4, the
average sizes 200 / 500 / 100 bytes, events in order (``outOfOrderGroupSize`` 1), one generator. Nexmark draws
from three random sources created unseeded (so its events differ run to run): the generator's, ``BidGenerator``'s
(its hot URLs and channel cache) and ``StringsGenerator``'s (the 1 MiB string extras are cut from). Here they are
seeded ``seed``, ``seed + 1`` and ``seed + 2``; ``bench/nexmark/java_check.py`` compiles Nexmark's Java generator
with the same three seeds and compares every field. Nexmark's quirks are kept, not fixed: a bid's bidder is a
person id + 1000 (it adds ``FIRST_PERSON_ID`` twice), the extras' characters include the ones below ``a`` that a
negative remainder gives, and ``channel_id`` of channel 1 is negative (``Math.abs(Integer.MIN_VALUE)``).

The output is Nexmark's nested schema (``ddl_gen.sql``: ``event_type`` 0 / 1 / 2 and one of ``person``,
``auction``, ``bid``; timestamps ``yyyy-MM-dd HH:mm:ss.SSS`` UTC) as JSON lines, the format Flink's JSON format
writes to Nexmark's Kafka topic: ``OUT/part-00000.json`` ... (one file per microbatch, the events split evenly in
order) and, given ``--kafka-topic``, the same lines as the records of a topic (its partitions round-robin, as
Nexmark's ``insert_kafka.sql``).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from datetime import datetime
from pathlib import Path

MASK64 = (1 << 64) - 1
GOLDEN_GAMMA = 0x9E3779B97F4A7C15

FIRST_AUCTION_ID = 1000
FIRST_PERSON_ID = 1000
FIRST_CATEGORY_ID = 10
FIRST_EVENT_ID = FIRST_EVENT_NUMBER = 1  # NexmarkTableSourceFactory's GeneratorConfig: the first event is an auction
PERSON_PROPORTION, AUCTION_PROPORTION, BID_PROPORTION = 1, 3, 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
NUM_ACTIVE_PEOPLE = 1000
NUM_IN_FLIGHT_AUCTIONS = 100
HOT_AUCTION_RATIO, HOT_SELLERS_RATIO, HOT_BIDDERS_RATIO = 2, 4, 4  # NexmarkConfiguration's
HOT_RATIO = 100  # the generators' own HOT_AUCTION_RATIO, HOT_SELLER_RATIO and HOT_BIDDER_RATIO
AVG_PERSON_BYTES, AVG_AUCTION_BYTES, AVG_BID_BYTES = 200, 500, 100
ID_LEAD = 10  # PERSON_ID_LEAD and AUCTION_ID_LEAD
NUM_CATEGORIES = 5
CHANNELS_NUMBER = 10_000
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
US_STATES = "AZ,CA,ID,OR,WA,WY".split(",")
US_CITIES = "Phoenix,Los Angeles,San Francisco,Boise,Portland,Bend,Redmond,Seattle,Kent,Cheyenne".split(",")
FIRST_NAMES = "Peter,Paul,Luke,John,Saul,Vicky,Kate,Julie,Sarah,Deiter,Walter".split(",")
LAST_NAMES = "Shultz,Abrams,Spencer,White,Bartels,Walton,Smith,Jones,Noris".split(",")
REUSABLE_EXTRA_LENGTH = 1024 * 1024


class SplittableRandom:
    """Java's ``java.util.SplittableRandom(seed)``: the same values, call for call (JDK 8 to 21)."""

    __slots__ = ("seed",)

    def __init__(self, seed: int):
        self.seed = seed & MASK64

    def _unsigned_int(self) -> int:
        """``mix32(nextSeed())`` as an unsigned 32-bit value."""
        self.seed = z = (self.seed + GOLDEN_GAMMA) & MASK64
        z = ((z ^ (z >> 33)) * 0x62A9D9ED799705F5) & MASK64
        return (((z ^ (z >> 28)) * 0xCB24D0A5C88C35B3) & MASK64) >> 32

    def next_int(self) -> int:
        """``nextInt()``: a signed 32-bit value."""
        r = self._unsigned_int()
        return r - (1 << 32) if r >= 1 << 31 else r

    def next_int_below(self, bound: int) -> int:
        """``nextInt(bound)``: ``[0, bound)``, rejecting the over-represented candidates as Java does."""
        r = self._unsigned_int()
        m = bound - 1
        if bound & m == 0:
            return r & m
        u = r >> 1
        while True:
            r = u % bound
            if u + m - r < 1 << 31:  # Java's int overflow test: u + m - r < 0
                return r
            u = self._unsigned_int() >> 1

    def next_long(self) -> int:
        """``nextLong()``: ``mix64(nextSeed())``, signed."""
        self.seed = z = (self.seed + GOLDEN_GAMMA) & MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        z ^= z >> 31
        return z - (1 << 64) if z >= 1 << 63 else z

    def next_double(self) -> float:
        """``nextDouble()``: 53 random bits in ``[0, 1)``."""
        return ((self.next_long() & MASK64) >> 11) * 2.0 ** -53


def next_long_below(random: SplittableRandom, n: int) -> int:
    """``LongGenerator.nextLong``: ``[0, n)``; past ``Integer.MAX_VALUE`` Nexmark's skewed ``abs(nextLong() % n)``."""
    if n < 2 ** 31 - 1:
        return random.next_int_below(n)
    value = random.next_long()
    return abs(value - n * _java_quotient(value, n))  # Java's % keeps the dividend's sign


def _java_quotient(a: int, b: int) -> int:
    """Java's long division, truncating toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def next_string(random: SplittableRandom, max_length: int, special: str = " ") -> str:
    """``StringsGenerator.nextString``: 3 to ``max_length - 1`` letters, ``special`` at 1 in 13, trimmed."""
    length = 3 + random.next_int_below(max_length - 3)
    chars = []
    for _ in range(length):
        chars.append(special if random.next_int_below(13) == 0 else chr(97 + random.next_int_below(26)))
    return "".join(chars).strip(_JAVA_TRIMMED)


_JAVA_TRIMMED = "".join(chr(c) for c in range(33))  # String.trim() removes every char <= ' '


def reusable_extra(random: SplittableRandom) -> str:
    """``StringsGenerator.REUSABLE_EXTRA_STRING``: ``nextExactString`` of 1 MiB, 6 letters from each ``nextInt()``
    (a negative one giving the characters below ``a``, as Java's remainder does)."""
    chars = []
    rnd, left = 0, 0
    for _ in range(REUSABLE_EXTRA_LENGTH):
        if left == 0:
            rnd, left = random.next_int(), 6
        remainder = abs(rnd) % 26
        chars.append(chr(97 + (remainder if rnd >= 0 else -remainder)))
        rnd = abs(rnd) // 26 * (1 if rnd >= 0 else -1)
        left -= 1
    return "".join(chars)


def base_url(random: SplittableRandom) -> str:
    """``BidGenerator.getBaseUrl``."""
    parts = [next_string(random, 5, "_") for _ in range(3)]
    return f"https://www.nexmark.com/{parts[0]}/{parts[1]}/{parts[2]}/item.htm?query=1"


def _int_reverse(i: int) -> int:
    """Java's ``Integer.reverse``, signed."""
    r = int(f"{i & 0xFFFFFFFF:032b}"[::-1], 2)
    return r - (1 << 32) if r >= 1 << 31 else r


def _java_abs_int(i: int) -> int:
    """Java's ``Math.abs(int)``: ``Integer.MIN_VALUE`` stays negative."""
    return i if i == -(1 << 31) else abs(i)


class NexmarkGenerator:
    """Nexmark's ``NexmarkGenerator`` of one generator as its table source configures it (first event id 1, first
    event number 1): ``next_event()`` gives each as Nexmark's nested row (a dict), its timestamps epoch
    milliseconds."""

    def __init__(self, seed: int, rate: int = 10_000, base_time: int = 0):
        self.random = SplittableRandom(seed)
        bid_random = SplittableRandom(seed + 1)  # BidGenerator's static random
        self.extra_source = reusable_extra(SplittableRandom(seed + 2))  # StringsGenerator's
        self.hot_urls = [base_url(bid_random) for _ in range(len(HOT_CHANNELS))]
        self.channels = []
        for i in range(CHANNELS_NUMBER):
            url = base_url(bid_random)
            if bid_random.next_int_below(10) > 0:
                url = f"{url}&channel_id={_java_abs_int(_int_reverse(i))}"
            self.channels.append((f"channel-{i}", url))
        self.inter_event_delay_us = 1_000_000.0 / rate  # one event generator
        self.base_time = base_time
        self.count = 0

    def timestamp(self, event_number: int) -> int:
        """``GeneratorConfig.timestampForEvent``."""
        return self.base_time + int(event_number * self.inter_event_delay_us) // 1000

    def next_event(self) -> dict:
        """The next event: ``{"event_type": 0, "person": {...}, "auction": None, "bid": None}`` or the like."""
        number = FIRST_EVENT_NUMBER + self.count  # outOfOrderGroupSize 1 leaves it as it is
        event_id = FIRST_EVENT_ID + number
        timestamp = self.timestamp(number)
        rem = event_id % TOTAL_PROPORTION
        if rem < PERSON_PROPORTION:
            event = {"event_type": 0, "person": self._person(event_id, timestamp), "auction": None, "bid": None}
        elif rem < PERSON_PROPORTION + AUCTION_PROPORTION:
            event = {"event_type": 1, "person": None, "auction": self._auction(event_id, number, timestamp),
                     "bid": None}
        else:
            event = {"event_type": 2, "person": None, "auction": None, "bid": self._bid(event_id, timestamp)}
        self.count += 1
        return event

    def _extra(self, current_size: int, desired_average: int) -> str:
        """``StringsGenerator.nextExtra``: a cut of the reusable string, the row's size near ``desired_average``."""
        if current_size > desired_average:
            return ""
        desired_average -= current_size
        delta = math.floor(desired_average * 0.2 + 0.5)
        size = desired_average - delta + (0 if delta == 0 else self.random.next_int_below(2 * delta))
        offset = self.random.next_int_below(REUSABLE_EXTRA_LENGTH - size)
        return self.extra_source[offset:offset + size]

    def _person(self, event_id: int, timestamp: int) -> dict:
        random = self.random
        name = f"{FIRST_NAMES[random.next_int_below(11)]} {LAST_NAMES[random.next_int_below(9)]}"
        email = f"{next_string(random, 7)}@{next_string(random, 5)}.com"
        card = " ".join(f"{random.next_int_below(10000):04d}" for _ in range(4))
        city = US_CITIES[random.next_int_below(10)]
        state = US_STATES[random.next_int_below(6)]
        extra = self._extra(8 + len(name) + len(email) + len(card) + len(city) + len(state), AVG_PERSON_BYTES)
        return {"id": last_person(event_id) + FIRST_PERSON_ID, "name": name, "emailAddress": email,
                "creditCard": card, "city": city, "state": state, "dateTime": timestamp, "extra": extra}

    def _auction(self, event_id: int, number: int, timestamp: int) -> dict:
        random = self.random
        if random.next_int_below(HOT_SELLERS_RATIO) > 0:
            seller = last_person(event_id) // HOT_RATIO * HOT_RATIO
        else:
            seller = self._person_id(event_id)
        category = FIRST_CATEGORY_ID + random.next_int_below(NUM_CATEGORIES)
        initial_bid = next_price(random)
        events_for_auctions = NUM_IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION // AUCTION_PROPORTION
        horizon = self.timestamp(number + events_for_auctions) - timestamp
        expires = timestamp + 1 + next_long_below(random, max(horizon * 2, 1))
        name = next_string(random, 20)
        description = next_string(random, 100)
        reserve = initial_bid + next_price(random)
        extra = self._extra(8 + len(name) + len(description) + 40, AVG_AUCTION_BYTES)
        return {"id": last_auction(event_id) + FIRST_AUCTION_ID, "itemName": name, "description": description,
                "initialBid": initial_bid, "reserve": reserve, "dateTime": timestamp, "expires": expires,
                "seller": seller + FIRST_PERSON_ID, "category": category, "extra": extra}

    def _bid(self, event_id: int, timestamp: int) -> dict:
        random = self.random
        if random.next_int_below(HOT_AUCTION_RATIO) > 0:
            auction = last_auction(event_id) // HOT_RATIO * HOT_RATIO
        else:
            auction = self._auction_id(event_id)
        if random.next_int_below(HOT_BIDDERS_RATIO) > 0:
            bidder = last_person(event_id) // HOT_RATIO * HOT_RATIO + 1
        else:
            bidder = self._person_id(event_id)
        price = next_price(random)
        if random.next_int_below(2) > 0:
            i = random.next_int_below(len(HOT_CHANNELS))
            channel, url = HOT_CHANNELS[i], self.hot_urls[i]
        else:
            channel, url = self.channels[random.next_int_below(CHANNELS_NUMBER)]
        return {"auction": auction + FIRST_AUCTION_ID, "bidder": bidder + 2 * FIRST_PERSON_ID, "price": price,
                "channel": channel, "url": url, "dateTime": timestamp, "extra": self._extra(32, AVG_BID_BYTES)}

    def _person_id(self, event_id: int) -> int:
        """``PersonGenerator.nextBase0PersonId``: one of the active people, or a few ahead."""
        people = last_person(event_id) + 1
        active = min(people, NUM_ACTIVE_PEOPLE)
        return people - active + next_long_below(self.random, active + ID_LEAD)

    def _auction_id(self, event_id: int) -> int:
        """``AuctionGenerator.nextBase0AuctionId``: one of the auctions in flight, or a few ahead."""
        last = last_auction(event_id)
        low = max(last - NUM_IN_FLIGHT_AUCTIONS, 0)
        return low + next_long_below(self.random, last - low + 1 + ID_LEAD)


def next_price(random: SplittableRandom) -> int:
    """``PriceGenerator.nextPrice``: ``Math.round(10^(6 u) * 100)`` cents."""
    return math.floor(math.pow(10.0, random.next_double() * 6.0) * 100.0 + 0.5)


def last_person(event_id: int) -> int:
    """``PersonGenerator.lastBase0PersonId``."""
    epoch, offset = divmod(event_id, TOTAL_PROPORTION)
    return epoch * PERSON_PROPORTION + min(offset, PERSON_PROPORTION - 1)


def last_auction(event_id: int) -> int:
    """``AuctionGenerator.lastBase0AuctionId``."""
    epoch, offset = divmod(event_id, TOTAL_PROPORTION)
    if offset < PERSON_PROPORTION:
        epoch, offset = epoch - 1, AUCTION_PROPORTION - 1
    elif offset >= PERSON_PROPORTION + AUCTION_PROPORTION:
        offset = AUCTION_PROPORTION - 1
    else:
        offset -= PERSON_PROPORTION
    return epoch * AUCTION_PROPORTION + offset


class Formatter:
    """Events as Nexmark's JSON lines: timestamps ``yyyy-MM-dd HH:mm:ss.SSS`` UTC."""

    TIMES = {"person": ("dateTime",), "auction": ("dateTime", "expires"), "bid": ("dateTime",)}

    def __init__(self):
        self.seconds: dict[int, str] = {}

    def timestamp(self, millis: int) -> str:
        """``millis`` since the epoch as Flink's SQL timestamp format."""
        second, ms = divmod(millis, 1000)
        text = self.seconds.get(second)
        if text is None:
            if len(self.seconds) > 100_000:
                self.seconds.clear()
            text = self.seconds[second] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(second))
        return f"{text}.{ms:03d}"

    def line(self, event: dict) -> str:
        """One event as a JSON line (no newline)."""
        for kind, columns in self.TIMES.items():
            row = event[kind]
            if row is not None:
                event[kind] = {**row, **{c: self.timestamp(row[c]) for c in columns}}
        return json.dumps(event, separators=(",", ":"), ensure_ascii=False)


def parse_base_time(text: str) -> int:
    """``2024-12-31T23:59:50Z`` as epoch milliseconds."""
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def event_lines(events: int, seed: int, rate: int, base_time: int):
    """The first ``events`` events as JSON lines."""
    generator, formatter = NexmarkGenerator(seed, rate, base_time), Formatter()
    for _ in range(events):
        yield formatter.line(generator.next_event())


def write_files(out: Path, events: int, files: int, seed: int, rate: int, base_time: int,
                progress=None) -> list[Path]:
    """The events as ``files`` JSON-lines files in ``out``, split evenly in order; their paths."""
    out.mkdir(parents=True, exist_ok=True)
    lines = event_lines(events, seed, rate, base_time)
    paths = []
    for i in range(files):
        path = out / f"part-{i:05d}.json"
        with open(path, "w", encoding="utf-8") as f:
            for _ in range((i + 1) * events // files - i * events // files):
                f.write(next(lines))
                f.write("\n")
        paths.append(path)
        if progress is not None:
            progress(f"{path.name}: {(i + 1) * events // files:,d} of {events:,d} events")
    return paths


def write_topic(paths: list[Path], topic: str, servers: str, partitions: int) -> int:
    """The files' lines as the records of ``topic`` (created with ``partitions`` if new), round-robin; how many."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": servers})
    if topic not in admin.list_topics(timeout=30).topics:
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 50, "enable.idempotence": True})
    sent = 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                while True:
                    try:
                        producer.produce(topic, line.rstrip("\n").encode(), partition=sent % partitions)
                        break
                    except BufferError:
                        producer.poll(0.1)
                sent += 1
        producer.flush(120)
    return sent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="a directory for the JSON-lines files")
    parser.add_argument("--events", type=int, default=100_000, help="how many events (default 100,000)")
    parser.add_argument("--files", type=int, default=10, help="how many files, one per microbatch (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="the three random sources' seeds: S, S+1, S+2")
    parser.add_argument("--rate", type=int, default=10_000, help="events per second of event time (Nexmark's "
                                                                 "default 10,000)")
    parser.add_argument("--base-time", default="2024-12-31T23:59:50Z", help="the first event's time, UTC")
    parser.add_argument("--kafka-topic", help="also write the events to this Kafka topic")
    parser.add_argument("--bootstrap-servers", default="localhost:9092")
    parser.add_argument("--partitions", type=int, default=2, help="the topic's partitions, if it is new")
    args = parser.parse_args(argv)
    if args.events < 1 or args.files < 1 or args.rate < 1:
        parser.error("--events, --files and --rate must be positive")
    started = time.perf_counter()
    paths = write_files(args.out, args.events, args.files, args.seed, args.rate, parse_base_time(args.base_time),
                        progress=lambda line: print(line, flush=True))
    print(f"{args.events:,d} events in {len(paths)} files in {time.perf_counter() - started:.1f}s", flush=True)
    if args.kafka_topic:
        sent = write_topic(paths, args.kafka_topic, args.bootstrap_servers, args.partitions)
        print(f"{sent:,d} records written to topic {args.kafka_topic}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
