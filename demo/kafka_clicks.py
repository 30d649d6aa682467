"""The Kafka demo job: per user, clicks and spend, from click events in Kafka topic ``clicks``.

Events ``{user_id, page, amount}`` are JSON messages keyed by user (so a user's clicks stay in one of the topic's
4 partitions, in order) on the broker at ``$LAKESTATE_KAFKA_BOOTSTRAP`` (default ``127.0.0.1:9092``, what
``scripts/kafka.sh start`` serves), in topic ``$LAKESTATE_KAFKA_TOPIC`` (default ``clicks``).
``python -m demo.kafka_clicks --events N --users U`` creates the topic if it is missing and produces N more
events (``scripts/demo-kafka.sh`` does).
"""
from __future__ import annotations

import argparse
import json
import os
import random

from state_store import JobSpec, KafkaSource, KeyedProcessFunction, Types, ValueStateDescriptor

PARTITIONS = 4
EVENT = Types.ROW_NAMED(["user_id", "page", "amount"], [Types.LONG(), Types.STRING(), Types.DOUBLE()])
OUTPUT = Types.ROW_NAMED(["user_id", "clicks", "spend", "partition", "offset"],
                         [Types.LONG(), Types.LONG(), Types.DOUBLE(), Types.INT(), Types.LONG()])


def bootstrap() -> str:
    return os.environ.get("LAKESTATE_KAFKA_BOOTSTRAP", "127.0.0.1:9092")


def topic() -> str:
    return os.environ.get("LAKESTATE_KAFKA_TOPIC", "clicks")


class UserSpend(KeyedProcessFunction):
    """Per user a running (clicks, spend); one row per user per microbatch, with where its last click was read."""

    def open(self, ctx):
        self.totals = ctx.get_state(ValueStateDescriptor("totals", Types.LIST(Types.DOUBLE())))

    def process(self, user_id, clicks, ctx):
        count, spend = self.totals.value() or [0, 0.0]
        count, spend = count + len(clicks), spend + sum(c["amount"] for c in clicks)
        self.totals.update([count, spend])
        last = clicks[-1]
        yield {"user_id": user_id, "clicks": int(count), "spend": round(spend, 2),
               "partition": last["kafka_partition"], "offset": last["kafka_offset"]}


def job() -> JobSpec:
    return JobSpec(job_id="clicks_kafka", function=UserSpend(),
                   source=KafkaSource(bootstrap(), topics=[topic()], schema=EVENT, max_records_per_microbatch=20_000),
                   key="user_id", key_type=Types.LONG(), output_type=OUTPUT, sink="sinks/clicks_kafka",
                   uid="user-spend", parallelism=2, checkpoint_interval=1, num_retained=3, order_by=["kafka_offset"])


def produce(events: int, users: int, seed: int | None = None) -> None:
    """Create the topic (4 partitions) if it is missing, then produce ``events`` clicks of ``users`` users."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap()})
    if topic() not in admin.list_topics(timeout=30).topics:
        for future in admin.create_topics([NewTopic(topic(), PARTITIONS)]).values():
            future.result()
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap(), "linger.ms": 20})
    for _ in range(events):
        user = rng.randrange(users)
        click = {"user_id": user, "page": f"/p/{rng.randrange(50)}", "amount": round(rng.uniform(1, 100), 2)}
        while True:
            try:
                producer.produce(topic(), key=str(user), value=json.dumps(click))
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(60):
        raise SystemExit(f"[demo] the broker at {bootstrap()} did not take every click")
    print(f"[demo] produced {events} clicks of {users} users to Kafka topic {topic()} at {bootstrap()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Produce click events to the Kafka demo's topic.")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--users", type=int, default=2_000)
    parser.add_argument("--seed", type=int)
    args = parser.parse_args()
    produce(args.events, args.users, args.seed)
