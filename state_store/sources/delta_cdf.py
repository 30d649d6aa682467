"""``DeltaSource``: an append-only Delta table read through its change data feed, a range of versions per
microbatch."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, InputError
from .base import PINNED, Source, checked_max_event_time


@dataclass
class DeltaSource(Source):
    """An append-only Delta table read through its change data feed, a range of versions per microbatch.

    The table needs ``delta.enableChangeDataFeed = true``.

    Example::

        source = DeltaSource("lake/orders", max_versions_per_batch=10)   # at most 10 versions a microbatch
        spec = JobSpec(job_id="orders", function=PerCustomer(), source=source, key="customer_id",
                       key_type=Types.LONG(), ...)   # the table's columns are known only when it is read

    :param path: the Delta table (local or ``s3a://``), with its change data feed on.
    :param max_versions_per_batch: at most this many table versions a microbatch (None: every new one).
    """

    path: str
    max_versions_per_batch: int | None = None

    def validate(self, what: str) -> None:
        """Raise ConfigError, naming the source as ``what``, when ``max_versions_per_batch`` is not a positive
        integer (the table itself is checked when a microbatch is planned)."""
        if self.max_versions_per_batch is not None and (
            not isinstance(self.max_versions_per_batch, int) or self.max_versions_per_batch <= 0
        ):
            raise ConfigError(f"{what}: max_versions_per_batch must be a positive integer")

    def describe(self) -> dict:
        """What the catalog records of this source: its type (``"delta"``) and resolved path."""
        return {"type": "delta", "path": str(Path(self.path).resolve())}

    def initial_offset(self) -> dict:
        """The offset of nothing read: version -1 (the first microbatch reads from version 0)."""
        return {"version": -1}

    def next_offset(self, spark, start: dict) -> dict | None:
        """The end offset of the microbatch after ``start``: the table's latest version (at most
        ``max_versions_per_batch`` past ``start``'s), its commit file pinned; None when there is no new version.
        Raises InputError when the path is not a Delta table or the table has no change data feed."""
        from delta.tables import DeltaTable

        if not DeltaTable.isDeltaTable(spark, self.path):
            raise InputError(f"source {self.path} is not a Delta table; create it or fix the path")
        table = DeltaTable.forPath(spark, self.path)
        props = table.detail().select("properties").first()[0] or {}
        if props.get("delta.enableChangeDataFeed", "false").lower() != "true":
            raise InputError(
                f"source table {self.path} has no change data feed; run "
                f"ALTER TABLE delta.`{self.path}` SET TBLPROPERTIES (delta.enableChangeDataFeed = true)"
            )
        latest = table.history(1).select("version").first()[0]
        if latest <= start["version"]:
            return None
        end = latest
        if self.max_versions_per_batch:
            end = min(latest, start["version"] + self.max_versions_per_batch)
        return {"version": end, PINNED: self._commit_pin(end)}

    def _commit_pin(self, version: int) -> list[int] | None:
        """``[size, mtime_ns]`` of the version's commit file: a table recreated under the same path since the
        plan has another one. None where the log is not a local path."""
        try:
            st = os.stat(Path(self.path, "_delta_log", f"{version:020d}.json"))
        except OSError:
            return None
        return [st.st_size, st.st_mtime_ns]

    def count_records(self, start: dict, end: dict) -> int | None:
        """None: a range's record count is not known without reading it."""
        return None

    def max_event_time(self, spark, start: dict, end: dict, column: str) -> int | None:
        """The largest ``column`` value inserted by the versions ``(start, end]``: a read of that column only."""
        if end["version"] <= start["version"]:
            return None
        from pyspark.sql import functions as F

        df = (spark.read.format("delta").option("readChangeFeed", "true")
              .option("startingVersion", start["version"] + 1).option("endingVersion", end["version"])
              .load(self.path).filter("_change_type = 'insert'"))
        if column not in df.columns:
            raise InputError(f"source table {self.path} has no column {column!r} (the watermark strategy's "
                             f"timestamp column); fix with_timestamp_column")
        return checked_max_event_time(df, column, F.col("_commit_version"), f"{self.path} at commit version")

    def record_ddl(self, spark) -> str:
        """The record's columns as a Spark DDL type (``struct<...>``): the table's current schema."""
        return spark.read.format("delta").load(self.path).schema.simpleString()

    def read_run(self, spark, ranges: list[tuple[int, dict, dict]]):
        """The inserted rows of every microbatch of a run, in one change-feed read, plus
        ``POSITION_COLUMNS`` (commit version, then the reader's order within it)."""
        from pyspark.sql import functions as F

        ranges = [(b, s, e) for b, s, e in ranges if e["version"] > s["version"]]
        if not ranges:
            return None
        for batch_id, _, end in ranges:
            pinned, now = end.get(PINNED), self._commit_pin(end["version"])
            if pinned is not None and now is not None and now != list(pinned):  # a log file gone: Delta says so
                raise InputError(
                    f"source table {self.path} changed after microbatch {batch_id} was planned: its commit "
                    f"{end['version']} is not the one planned (was the table recreated or its log rewritten?); "
                    f"a planned microbatch must read the same input. Restore the table, or give the job a new "
                    f"source path")
        df = (
            spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", min(s["version"] for _, s, _ in ranges) + 1)
            .option("endingVersion", max(e["version"] for _, _, e in ranges))
            .load(self.path)
        ).filter("_change_type = 'insert'")
        version = F.col("_commit_version")
        batch = None
        for batch_id, start, end in ranges:
            cond = (version > start["version"]) & (version <= end["version"])
            batch = F.when(cond, F.lit(batch_id)) if batch is None else batch.when(cond, F.lit(batch_id))
        columns = [c for c in df.columns if c not in ("_change_type", "_commit_version", "_commit_timestamp")]
        return df.select(*[F.col(f"`{c}`") for c in columns], batch.cast("bigint").alias("batch_id"),
                         version.cast("int").alias("file_idx"), F.lit(0).cast("bigint").alias("block"),
                         F.monotonically_increasing_id().alias("row"))
