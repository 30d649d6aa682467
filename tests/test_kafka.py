"""Kafka on this machine: scripts/kafka.sh's broker (KRaft, from Maven Central's jars) and Spark's batch Kafka
reader with pinned offset ranges, the read a Kafka source's plan will pin for each microbatch (issue 23)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "kafka.sh"

def _free_port_pair() -> int:
    """A port whose next one is free too (the broker's and its controller's)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two free ports in a row on 127.0.0.1")


def _script(command: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), command], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_a_broker_from_maven_jars_serves_spark_exactly_the_pinned_offset_ranges(spark, tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    port = _free_port_pair()
    env = {**os.environ, "LAKESTATE_KAFKA_DIR": str(tmp_path / "kafka"), "LAKESTATE_KAFKA_PORT": str(port)}
    started = _script("start", env)
    assert started.returncode == 0, started.stdout + started.stderr
    pid = (tmp_path / "kafka" / "broker.pid").read_text().strip()
    try:
        again = _script("start", env)
        assert again.returncode == 0 and f"already running (pid {pid})" in again.stdout
        assert _script("status", env).returncode == 0

        bootstrap = f"127.0.0.1:{port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic("clicks", 4)]).values():
            future.result()
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(40):
            producer.produce("clicks", key=f"user-{i}", value=json.dumps({"n": i}), partition=i % 4)
        assert producer.flush(30) == 0

        # [start, end) per partition, as a plan pins them: 10 records each, these ranges 2+0+10+5 of them.
        ranges = {0: (3, 5), 1: (4, 4), 2: (0, 10), 3: (5, 10)}
        start = json.dumps({"clicks": {str(p): s for p, (s, _) in ranges.items()}})
        end = json.dumps({"clicks": {str(p): e for p, (_, e) in ranges.items()}})
        rows = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", "clicks")
                .option("startingOffsets", start).option("endingOffsets", end).load()
                .selectExpr("partition", "offset", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")
                .collect())
        got = sorted((r["partition"], r["offset"]) for r in rows)
        assert got == sorted((p, o) for p, (s, e) in ranges.items() for o in range(s, e))
        for r in rows:  # partition p's offset o is the message i = 4 o + p
            i = 4 * r["offset"] + r["partition"]
            assert (r["key"], json.loads(r["value"])) == (f"user-{i}", {"n": i})
    finally:
        stopped = _script("stop", env)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert subprocess.run(["kill", "-0", pid], capture_output=True).returncode != 0, "the broker outlived stop"
    assert _script("status", env).returncode == 1
    assert _script("stop", env).returncode == 0  # idempotent


def test_the_broker_script_says_what_is_missing_without_its_jars(tmp_path):
    """A checkout whose set-up had no Maven: start names the folder and the fix, and starts nothing."""
    fake = tmp_path / "checkout"
    (fake / "scripts").mkdir(parents=True)
    (fake / "scripts" / "kafka.sh").write_text(SCRIPT.read_text())
    env = {**os.environ, "LAKESTATE_KAFKA_DIR": str(tmp_path / "kafka"), "LAKESTATE_KAFKA_PORT": str(_free_port_pair())}
    result = subprocess.run(["bash", str(fake / "scripts" / "kafka.sh"), "start"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert "no broker jars in" in result.stderr and "scripts/setup.sh" in result.stderr
    assert not (tmp_path / "kafka" / "broker.pid").exists()
