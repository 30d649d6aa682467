"""Read a Delta table's version, size, file count and app transactions from its log, without Spark.

Used for checkpoint rows, idempotent appends, the CLI and the Airflow plugin:
the newest complete classic Parquet checkpoint (single or multi-part) at or
before the version read, found by listing the log, plus the JSON commits after
it. ``expire_log`` deletes what no version from a given one on needs.
"""
from __future__ import annotations

import json
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path

from ..errors import LakestateError
from ..storage import ObjectPath, listdir, location, read_parquet

_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet")


def _commit_versions(log, names: list[str] | None = None) -> list[int]:
    names = listdir(log) if names is None else names
    return sorted(int(n[:20]) for n in names if n.endswith(".json") and len(n) == 25 and n[:20].isdigit())


def _checkpoints(names: list[str]) -> dict[int, list[str]]:
    """The log's complete classic checkpoints (single or every part of a multi-part one): version -> file names."""
    parts: dict[int, dict[int, list[str]]] = {}
    for name in names:
        if m := _CHECKPOINT.fullmatch(name):
            parts.setdefault(int(m[1]), {}).setdefault(int(m[3] or 1), []).append(name)
    return {v: sorted(files) for v, by_count in parts.items() for count, files in by_count.items()
            if len(files) == count}


def _checkpoint_at_or_before(names: list[str], version: int) -> tuple[int, list[str]] | None:
    found = _checkpoints(names)
    usable = [v for v in found if v <= version]
    return (max(usable), found[max(usable)]) if usable else None


def _replay(log: Path, target: int | None, column: str, on_action) -> int | None:
    """Feed the log's ``column`` actions ("add"/"remove" or "txn") up to version ``target`` (default:
    latest) to ``on_action``: the newest complete checkpoint at or before ``target`` first (found by listing
    the log, as Delta does: a compaction deletes the log before the one its oldest retained checkpoint needs),
    then the JSON commits after it. Returns the version reached (None for a table without commits)."""
    if not log.is_dir():
        raise FileNotFoundError(f"{log.parent} is not a Delta table (no _delta_log)")
    names = listdir(log)
    versions = _commit_versions(log, names)
    target = (versions[-1] if versions else None) if target is None else target
    if target is None:
        return None
    start = 0
    checkpoint = _checkpoint_at_or_before(names, target)
    if checkpoint is not None:
        for part in checkpoint[1]:
            for value in read_parquet(log / part, columns=[column]).column(column).to_pylist():
                if value is not None:
                    on_action({column: value})
        start = checkpoint[0] + 1
    if start == 0 and versions and versions[0] != 0:
        raise FileNotFoundError(f"the log of {log.parent} starts at version {versions[0]} and has no usable checkpoint")
    for v in range(start, target + 1):
        commit = log / f"{v:020d}.json"
        try:
            with commit.open() as f:
                for number, line in enumerate(f, 1):
                    try:
                        action = json.loads(line)
                    except ValueError as e:
                        raise CorruptLogError(f"{commit} is corrupt (line {number}: {e})", commit) from None
                    on_action(action)
        except FileNotFoundError:
            raise CorruptLogError(f"{commit} is missing from the table's log", commit) from None
    return target


class CorruptLogError(LakestateError):
    """A Delta log file that a read needs is missing or cannot be parsed."""

    def __init__(self, message: str, path: Path):
        super().__init__(f"{message}: Delta cannot read the table at or past this version. Restore the file from "
                         f"a backup (or a copy of the table), or restore the job from an older checkpoint or a "
                         f"savepoint")
        self.path = path


def live_adds(path: str | os.PathLike, version: int | None = None) -> dict[str, dict]:
    """The ``add`` actions of the files live in the table at ``version`` (default: latest), by relative path."""
    adds: dict[str, dict] = {}

    def on_action(action: dict) -> None:
        if "add" in action:
            adds[action["add"]["path"]] = action["add"]
        elif "remove" in action:
            adds.pop(action["remove"]["path"], None)

    _replay(location(path) / "_delta_log", version, "add", on_action)
    return adds


def table_files(path: str | os.PathLike, version: int | None = None) -> dict[str, int]:
    """The data files of the table at ``version`` (default: latest): relative path -> size."""
    return {p: int(add["size"]) for p, add in live_adds(path, version).items()}


_SIZES: OrderedDict[tuple, dict[tuple, list[int]]] = OrderedDict()  # partition_sizes of local table versions
_SIZES_KEPT = 512
_SIZES_LOCK = threading.Lock()


def partition_sizes(path: str | os.PathLike, version: int | None = None) -> dict[tuple, list[int]]:
    """Bytes and files per partition of the table at ``version`` (default: latest): a tuple of its partition
    values (in the table's partition column order) -> [bytes, files]. Reads only the log.

    A version of a table is read once per process (the Lakestate page asks for the same checkpoint's tables on
    every load): a commit file never changes once written, so its path, size and modification time name the
    version's content, even after a table was deleted and made again at the same path. On object storage that
    is one HEAD request instead of a listing and the log's reads."""
    root = location(path)
    if version is None:
        return _partition_sizes(path, version)
    try:
        stat = (root / "_delta_log" / f"{version:020d}.json").stat()
    except OSError:
        return _partition_sizes(path, version)
    key = (str(root), version, stat.st_size, getattr(stat, "st_mtime_ns", stat.st_mtime))
    with _SIZES_LOCK:  # the page's requests run in threads
        sizes = _SIZES.get(key)
        if sizes is not None:
            _SIZES.move_to_end(key)
    if sizes is None:
        sizes = _partition_sizes(path, version)
        with _SIZES_LOCK:
            _SIZES[key] = sizes
            if len(_SIZES) > _SIZES_KEPT:
                _SIZES.popitem(last=False)
    return {values: list(cell) for values, cell in sizes.items()}  # a caller may add to its cells


def _partition_sizes(path: str | os.PathLike, version: int | None) -> dict[tuple, list[int]]:
    meta = table_metadata(path)
    columns = list(meta.get("partitionColumns") or []) if meta else []
    out: dict[tuple, list[int]] = {}
    for add in live_adds(path, version).values():
        values = partition_values(add)
        cell = out.setdefault(tuple(values.get(c) for c in columns), [0, 0])
        cell[0] += int(add["size"])
        cell[1] += 1
    return out


def partition_values(add: dict) -> dict:
    """A file's ``add`` action's partition values, by column."""
    values = add.get("partitionValues") or {}
    return dict(values) if isinstance(values, list) else values  # a Parquet checkpoint's map reads as pairs


def missing_files(path: str | os.PathLike, version: int) -> list[str]:
    """The data files the table at ``version`` needs that are gone (raises CorruptLogError for its log)."""
    from urllib.parse import unquote

    root = location(path)
    needed = [unquote(f) for f in table_files(path, version)]
    if isinstance(root, ObjectPath):  # one listing, not a request per file
        present = {f.relative_to(root).as_posix() for f in root.files()}
        return sorted(str(root / f) for f in needed if f not in present)
    return sorted(str(root / f) for f in needed if not (root / f).exists())


def expire_log(path: str | os.PathLike, oldest_needed: int) -> tuple[int, int]:
    """Delete the log files (commits, checkpoints, checksums) of the versions before the newest complete
    checkpoint at or before version ``oldest_needed``, as Delta's own log cleanup does: every version from
    ``oldest_needed`` on still reads. Oldest first, so a reader never finds a gap. Returns (files, bytes)."""
    log = location(path) / "_delta_log"
    names = listdir(log)
    checkpoint = _checkpoint_at_or_before(names, oldest_needed)
    if checkpoint is None:
        return 0, 0
    doomed = sorted(n for n in names if n[:20].isdigit() and int(n[:20]) < checkpoint[0]
                    and (n.endswith((".json", ".crc")) or _CHECKPOINT.fullmatch(n)))
    deleted = reclaimed = 0
    for name in doomed:
        size = (log / name).stat().st_size
        (log / name).unlink(missing_ok=True)
        deleted, reclaimed = deleted + 1, reclaimed + size
    return deleted, reclaimed


def table_snapshot(path: str | os.PathLike, version: int | None = None) -> dict:
    """{'path', 'version', 'size_bytes', 'num_files'} of the table at ``version`` (default: latest)."""
    target = version if version is not None else latest_version(path)
    files = table_files(path, target) if target is not None else {}
    return {"path": str(path), "version": target, "size_bytes": sum(files.values()), "num_files": len(files)}


def latest_version(path: str | os.PathLike) -> int | None:
    log = location(path) / "_delta_log"
    if not log.is_dir():
        raise FileNotFoundError(f"{path} is not a Delta table (no _delta_log)")
    versions = _commit_versions(log)
    return versions[-1] if versions else None


def app_transaction_version(path: str | os.PathLike, app_id: str) -> int | None:
    """The last ``txnVersion`` the table committed for ``app_id`` (Delta's SetTransaction), or None (also
    when there is no table yet)."""
    found: list[int] = []
    if not (location(path) / "_delta_log").is_dir():
        return None

    def on_action(action: dict) -> None:
        txn = action.get("txn")
        if txn and txn.get("appId") == app_id:
            found.append(int(txn["version"]))

    _replay(location(path) / "_delta_log", None, "txn", on_action)
    return max(found) if found else None


def first_version_past(path: str | os.PathLike, app_id: str, txn_version: int) -> int | None:
    """The table version of the first commit that recorded ``app_id`` past ``txn_version``, or None when none
    did. App transaction versions only grow, so the JSON commits are read from the newest back only until one
    at or below ``txn_version``."""
    committed = app_transaction_version(path, app_id)
    if committed is None or committed <= txn_version:
        return None
    log, first = location(path) / "_delta_log", None
    for v in reversed(_commit_versions(log)):
        with (log / f"{v:020d}.json").open() as f:
            recorded = [int(a["txn"]["version"]) for a in map(json.loads, filter(str.strip, f))
                        if (a.get("txn") or {}).get("appId") == app_id]
        if recorded and recorded[0] <= txn_version:
            break
        if recorded:
            first = v
    return first


def transaction_metadata(path: str | os.PathLike, app_id: str, version: int) -> str | None:
    """The ``userMetadata`` of the commit that recorded ``app_id`` at ``version`` (newest JSON commit first),
    or None when no JSON commit the log still keeps has it."""
    log = location(path) / "_delta_log"
    for v in reversed(_commit_versions(log)):
        with (log / f"{v:020d}.json").open() as f:
            actions = [json.loads(line) for line in f if line.strip()]
        if any((a.get("txn") or {}).get("appId") == app_id and int(a["txn"]["version"]) == version for a in actions):
            return next(((a["commitInfo"] or {}).get("userMetadata") for a in actions if "commitInfo" in a), None)
    return None


def table_metadata(path: str | os.PathLike) -> dict | None:
    """The table's latest ``metaData`` action (schemaString, partitionColumns, configuration, ...), or None
    when there is no table yet: no log, or a log without commits (a first commit that never completed)."""
    found: list[dict] = []

    def on_action(action: dict) -> None:
        if action.get("metaData"):
            found.append(action["metaData"])

    log = location(path) / "_delta_log"
    if not log.is_dir() or _replay(log, None, "metaData", on_action) is None:
        return None
    if not found:
        raise FileNotFoundError(f"{path} has no metadata in its Delta log")
    meta = dict(found[-1])
    if isinstance(meta.get("configuration"), list):  # a Parquet checkpoint's map reads as pairs
        meta["configuration"] = dict(meta["configuration"])
    meta["configuration"] = meta.get("configuration") or {}
    return meta


def committed_before(current: int | None, version: int, expected: int | None, path, app_id: str) -> bool:
    """The one expected-version check of both commit paths (delta-rs and Delta's own transaction): whether the
    table already holds commit ``version`` of ``app_id`` (its latest, ``current``: None or -1 when never), so a
    replay commits nothing. RuntimeError when another writer took a commit of it since this run read ``expected``
    (None: none): the run held the job, so nothing is committed and the job is to be run again."""
    current = -1 if current is None else current
    if current >= version:
        return True
    if current != (-1 if expected is None else expected):
        raise RuntimeError(f"{path} took a commit of {app_id} (version {current}) while this run held the job "
                           f"(it read version {expected}); nothing was committed, rerun the job")
    return False


def sink_version(path):
    """What a checkpoint records of the sink at ``path``: its latest version, a ``TableVersion`` (None before its
    first commit)."""
    from ..records.metadata import TableVersion

    return TableVersion(**table_snapshot(path)) if (location(path) / "_delta_log").exists() else None
