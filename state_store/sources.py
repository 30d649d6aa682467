"""Sources: what a microbatch reads, and offsets that say how far a job has read.

An offset is JSON. A microbatch's range ``[start, end)`` is fixed in its plan
before it is processed, so a replay reads exactly the same records.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError, InputError
from .types import RowTypeInfo

_FORMATS = ("json", "parquet")


@dataclass
class FileSource:
    """A directory of JSON-lines or Parquet files; each file is read once, in name order.

    ``schema`` declares the columns (required for JSON; for Parquet it is checked).
    ``max_files_per_batch`` bounds a microbatch (default: all new files).
    """

    path: str
    format: str
    schema: RowTypeInfo
    max_files_per_batch: int | None = None

    def validate(self, what: str) -> None:
        if self.format not in _FORMATS:
            raise ConfigError(f"{what}: format {self.format!r} is not supported; use one of {_FORMATS}")
        if not isinstance(self.schema, RowTypeInfo):
            raise ConfigError(f"{what}: declare the schema with Types.ROW_NAMED([...], [...])")
        if self.max_files_per_batch is not None and (
            not isinstance(self.max_files_per_batch, int) or self.max_files_per_batch <= 0
        ):
            raise ConfigError(f"{what}: max_files_per_batch must be a positive integer, got {self.max_files_per_batch!r}")
        if not Path(self.path).is_dir():
            raise ConfigError(f"{what}: source directory {self.path} does not exist; create it or fix the path")

    def describe(self) -> dict:
        return {"type": "files", "path": str(Path(self.path).resolve()), "format": self.format}

    def initial_offset(self) -> dict:
        return {"files": []}

    def _files(self) -> list[str]:
        suffixes = (".json", ".jsonl") if self.format == "json" else (".parquet",)
        return sorted(f for f in os.listdir(self.path) if not f.startswith((".", "_")) and f.endswith(suffixes))

    def next_offset(self, spark, start: dict) -> dict | None:
        seen = set(start["files"])
        new = [f for f in self._files() if f not in seen]
        if not new:
            return None
        if self.max_files_per_batch:
            new = new[: self.max_files_per_batch]
        return {"files": sorted(seen | set(new))}

    def read(self, spark, start: dict, end: dict):
        files = [str(Path(self.path, f)) for f in sorted(set(end["files"]) - set(start["files"]))]
        missing = [f for f in files if not os.path.exists(f)]
        if missing:
            raise InputError(f"source files planned for this microbatch are gone: {missing}; restore them to replay it")
        if self.format == "json":
            return spark.read.schema(self.schema.spark_schema_ddl()).option("mode", "FAILFAST").json(files)
        df = spark.read.parquet(*files)
        want = set(self.schema.fields)
        have = set(df.columns)
        if not want <= have:
            raise InputError(f"parquet files {files} lack the declared columns {sorted(want - have)}")
        return df.select(*[f"`{c}`" for c in self.schema.fields])


@dataclass
class DeltaSource:
    """An append-only Delta table read through its change data feed, a range of versions per microbatch.

    The table needs ``delta.enableChangeDataFeed = true``.
    """

    path: str
    max_versions_per_batch: int | None = None

    def validate(self, what: str) -> None:
        if self.max_versions_per_batch is not None and (
            not isinstance(self.max_versions_per_batch, int) or self.max_versions_per_batch <= 0
        ):
            raise ConfigError(f"{what}: max_versions_per_batch must be a positive integer")

    def describe(self) -> dict:
        return {"type": "delta", "path": str(Path(self.path).resolve())}

    def initial_offset(self) -> dict:
        return {"version": -1}

    def next_offset(self, spark, start: dict) -> dict | None:
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
        return {"version": end}

    def read(self, spark, start: dict, end: dict):
        df = (
            spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", start["version"] + 1)
            .option("endingVersion", end["version"])
            .load(self.path)
        )
        return df.filter("_change_type = 'insert'").drop("_change_type", "_commit_version", "_commit_timestamp")


Source = FileSource | DeltaSource


def source_split_entries(name: str, source: Any, offset: dict) -> list[dict[str, Any]]:
    """A source's offsets as operator ListState entries: one per split (a whole directory or
    table is one split; its path is in the job's registry record)."""
    return [{"split": name, "offset": offset}]
