"""Read a Delta table's version, size and file count from its transaction log, without Spark.

Used for checkpoint rows, the CLI and the Airflow plugin: a classic Parquet
checkpoint (single or multi-part, as named in ``_last_checkpoint``) plus the
JSON commits after it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path


def _commit_versions(log: Path) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(log) if n.endswith(".json") and len(n) == 25 and n[:20].isdigit())


def _checkpoint_files(log: Path, version: int, parts: int | None) -> list[Path]:
    if parts:
        return [log / f"{version:020d}.checkpoint.{i:010d}.{parts:010d}.parquet" for i in range(1, parts + 1)]
    return [log / f"{version:020d}.checkpoint.parquet"]


def table_snapshot(path: str | os.PathLike, version: int | None = None) -> dict:
    """{'path', 'version', 'size_bytes', 'num_files'} of the table at ``version`` (default: latest)."""
    log = Path(path) / "_delta_log"
    if not log.is_dir():
        raise FileNotFoundError(f"{path} is not a Delta table (no _delta_log)")
    versions = _commit_versions(log)
    latest = versions[-1] if versions else None
    target = latest if version is None else version
    files: dict[str, int] = {}
    start = 0
    last = log / "_last_checkpoint"
    if last.exists():
        info = json.loads(last.read_text())
        cp_version = int(info["version"])
        parts = _checkpoint_files(log, cp_version, info.get("parts"))
        if cp_version <= target and all(p.exists() for p in parts):
            import pyarrow.parquet as pq

            for part in parts:
                for add in pq.read_table(part, columns=["add"]).column("add").to_pylist():
                    if add is not None:
                        files[add["path"]] = int(add["size"])
            start = cp_version + 1
    if start == 0 and versions and versions[0] != 0:
        raise FileNotFoundError(f"the log of {path} starts at version {versions[0]} and has no usable checkpoint")
    for v in range(start, target + 1):
        with open(log / f"{v:020d}.json") as f:
            for line in f:
                action = json.loads(line)
                if "add" in action:
                    files[action["add"]["path"]] = int(action["add"]["size"])
                elif "remove" in action:
                    files.pop(action["remove"]["path"], None)
    return {"path": str(path), "version": target, "size_bytes": sum(files.values()), "num_files": len(files)}
