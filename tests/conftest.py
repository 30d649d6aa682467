"""One SparkSession (real Spark, real Delta jars) for the whole test session, and small lakes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from state_store.settings import Settings


@pytest.fixture(scope="session")
def spark():
    from state_store.spark import build_spark

    session = build_spark("lakestate-tests", master="local[2]", extra_conf={
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.ui.enabled": "false",
        "spark.sql.adaptive.coalescePartitions.enabled": "true",
        # One JVM serves the whole session's ~500 tests (Delta logs cached, 200,000-deep values decoded): the
        # default 1 GiB heap ran out near the end of a full run.
        "spark.driver.memory": "4g",
    }, s3=True)  # hadoop-aws on the classpath for tests/test_s3.py, which points s3a:// at its server
    yield session
    session.stop()


class Lake:
    """A root with a warehouse and input folders, as a user would have it."""

    def __init__(self, base: Path):
        self.root = base / "root"
        self.inputs = self.root / "input"
        self.events = self.inputs / "events"
        self.rules = self.inputs / "rules"
        for d in (self.events, self.rules):
            d.mkdir(parents=True, exist_ok=True)
        self.settings = Settings.load(root=self.root)

    def write_events(self, name: str, rows: list[dict]) -> Path:
        path = self.events / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path

    def write_rules(self, name: str, rows: list[dict]) -> Path:
        path = self.rules / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path


@pytest.fixture
def lake(tmp_path) -> Lake:
    return Lake(tmp_path)
