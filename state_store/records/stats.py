"""What a run counts and writes: one microbatch's counters (``MicrobatchStats``: one set of names from a subtask's
counters to ``RunResult`` and the commit file), what a TTL incremental cleanup did (``CleanupNote``) and a file a
run wrote (``WrittenFile``), which turns itself into a Delta ``add`` action."""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from .layout import ChangeColumns
from .metadata import StateInfo, states_from_dict, states_to_dict


# -- microbatch stats -------------------------------------------------------------------------------------------
@dataclass
class MicrobatchStats:
    """One microbatch's counters: a subtask's, or all subtasks' summed (``add``); the commit file and
    ``RunResult.batches`` keep them under these names."""

    batch_id: int
    records_in: int = 0
    broadcast_in: int = 0  # every subtask sees every broadcast record: the total is the largest
    keys: int = 0
    records_out: int = 0
    side_out: int = 0  # rows to side outputs
    side_rows: dict[str, int] = field(default_factory=dict)  # of those, per side output (its tag's name)
    late_dropped: int = 0  # elements a window operator dropped as too late (Flink's numLateRecordsDropped)
    timers_in: int = 0  # stored timers the run gave the subtasks (counted on a run's first microbatch)
    timers_fired: int = 0
    state_upserts: int = 0
    state_deletes: int = 0
    entries_delta: dict[str, int] = field(default_factory=dict)  # live entries gained per state
    worker_peak_rss_kb: int = 0
    descriptors: dict[str, StateInfo] = field(default_factory=dict)  # states registered since the last report

    def count_writes(self, changes: "ChangeColumns") -> None:
        """``count_write`` of each of ``changes``, a column at a time."""
        state_names, values, deltas = changes.lists[0], changes.lists[5], changes.lists[6]
        deletes = values.count(None)
        self.state_deletes += deletes
        self.state_upserts += len(values) - deletes
        if not any(deltas):
            return
        entries = self.entries_delta
        if state_names.count(state_names[0]) == len(state_names):  # one state (most microbatches): one sum
            entries[state_names[0]] = entries.get(state_names[0], 0) + sum(deltas)
            return
        for state_name, delta in zip(state_names, deltas):
            if delta:
                entries[state_name] = entries.get(state_name, 0) + delta

    def count_write(self, state_name: str, value: str | None, delta: int) -> None:
        """One state row written (``value`` None: a removal) that changed the live entries by ``delta``."""
        if value is None:
            self.state_deletes += 1
        else:
            self.state_upserts += 1
        if delta:
            self.entries_delta[state_name] = self.entries_delta.get(state_name, 0) + delta

    def add(self, other: "MicrobatchStats") -> None:
        """Sum another subtask's counters of the same microbatch into these."""
        self.records_in += other.records_in
        self.broadcast_in = max(self.broadcast_in, other.broadcast_in)
        self.keys += other.keys
        self.records_out += other.records_out
        self.side_out += other.side_out
        for tag, rows in other.side_rows.items():
            self.side_rows[tag] = self.side_rows.get(tag, 0) + rows
        self.late_dropped += other.late_dropped
        self.timers_in += other.timers_in
        self.timers_fired += other.timers_fired
        self.state_upserts += other.state_upserts
        self.state_deletes += other.state_deletes
        self.worker_peak_rss_kb = max(self.worker_peak_rss_kb, other.worker_peak_rss_kb)
        for name, delta in other.entries_delta.items():
            self.entries_delta[name] = self.entries_delta.get(name, 0) + delta
        self.descriptors.update(other.descriptors)

    def to_json(self) -> str:
        data = asdict(self)
        data["descriptors"] = states_to_dict(self.descriptors)
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> "MicrobatchStats":
        data = json.loads(text)
        data["descriptors"] = states_from_dict(data.get("descriptors") or {})
        return cls(**data)

    def commit_record(self, run_id: str, committed_ms: int) -> dict:
        """What the commit file of this microbatch holds."""
        data = {k: v for k, v in asdict(self).items() if k != "descriptors"}
        return {**data, "run_id": run_id, "committed_ms": committed_ms}


@dataclass
class CleanupNote:
    """What one TTL incremental cleanup did after a microbatch: the expired entries it removed per state, and
    where its cursor stands after it. Kept as the cleanup commit's Delta ``userMetadata`` (JSON)."""

    removed: dict[str, int] = field(default_factory=dict)
    cursor: list | None = None

    def to_json(self) -> str:
        return json.dumps({"removed": self.removed, "cursor": self.cursor})

    @classmethod
    def from_json(cls, text: str) -> "CleanupNote":
        data = json.loads(text)
        return cls(dict(data.get("removed") or {}), data.get("cursor"))


# -- written files ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WrittenFile:
    """A Parquet file a run wrote into a table (just closed: its modification time is now): what its commit
    needs to know."""

    table: str
    path: str  # relative to the table's directory
    partition: dict[str, str]
    size: int
    rows: int
    min_batch: int | None  # the microbatches its rows are of
    max_batch: int | None
    mtime: int = field(default_factory=lambda: int(time.time() * 1000))

    def to_add_action(self, batch_column: str) -> dict:
        """The Delta ``add`` action of the file, with exact statistics (row count, microbatch range)."""
        stats: dict[str, Any] = {"numRecords": self.rows}
        if self.min_batch is not None:
            stats.update(minValues={batch_column: self.min_batch}, maxValues={batch_column: self.max_batch},
                         nullCount={batch_column: 0})
        return {"add": {"path": self.path, "partitionValues": self.partition, "size": self.size,
                        "modificationTime": self.mtime, "dataChange": True, "stats": json.dumps(stats)}}

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "WrittenFile":
        return cls(**json.loads(text))
