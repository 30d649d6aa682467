"""Typed records that cross rooms: what one module hands another, and what the catalog keeps as JSON.

No Spark and no I/O here, so the subtasks, the CLI and the Airflow plugin all read the same records:

- the **state tables' specs** (``SINK``, ``KEYED``, ``OPERATOR``; ``TableSpec``: each state table's columns,
  the columns that name an entry, its partitioning) and the state table **rows** (``KeyedRow``,
  ``OperatorRow``: one row of a table file, in its column order);
- **table versions** (``TableVersion``: what a checkpoint or savepoint pins of a Delta table);
- **state info** (``StateInfo``, with its TTL as ``ttl.config.TtlSpec``): what a checkpoint records of each state, built
  from a descriptor by ``StateInfo.from_descriptor``;
- **microbatch stats** (``MicrobatchStats``): one set of names from a subtask's counters to ``RunResult``
  and the commit file;
- **written files** (``WrittenFile``): a file a run wrote, which turns itself into a Delta ``add`` action;
- the catalog's records: a microbatch's plan, a checkpoint, a savepoint (``MicrobatchPlan``,
  ``CheckpointMetadata``, ``SavepointMetadata``, with the ``AirflowRun`` that made them) and the layout version
  their tables have.

Every record's ``to_dict``/``from_dict`` keeps the JSON that earlier releases wrote (``tests/test_formats.py``).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field, fields
from operator import itemgetter
from typing import Any, NamedTuple

from .sources import SINK_MICROBATCH, position  # noqa: F401 - the sink's batch column, named here too
from .storage import location
from .ttl.config import TtlSpec
from .watermarks import MIN_WATERMARK, EventClock

LAYOUT_VERSION = 2  # the state table layout checkpoints of this release pin (see state_tables)
SAVEPOINT_FORMAT = 1

# -- the state tables' specs -----------------------------------------------------------------------------------
SINK, KEYED, OPERATOR = "sink", "keyed", "operator"
STATE_TABLES = (KEYED, OPERATOR)
KEYED_SCOPE, OPERATOR_SCOPE = KEYED, OPERATOR  # a state's scope is the table that holds it


@dataclass(frozen=True)
class TableSpec:
    """One state table: its columns (DDL), the columns that name an entry, its partition columns."""

    name: str  # KEYED or OPERATOR
    schema: str
    id_columns: tuple[str, ...]
    partition_columns: tuple[str, ...]

    @property
    def columns(self) -> list[str]:
        return [column.split()[0] for column in self.schema.split(", ")]


class KeyedRow(NamedTuple):
    """A keyed state table row as a run writes it: ``value`` None removes the entry; generation 0 is a
    microbatch's write (``state_tables``)."""

    state_name: str
    key_group: int
    key: str
    namespace: str
    user_key: str | None
    value: str | None
    expiry: int | None
    batch_id: int
    generation: int = 0


# The keyed table's Spark type of each KeyedRow field; its columns are KeyedRow's, in KeyedRow's order.
_KEYED_DDL_TYPES = {"state_name": "string", "key_group": "int", "key": "string", "namespace": "string",
                    "user_key": "string", "value": "string", "expiry": "bigint", "batch_id": "bigint",
                    "generation": "bigint"}
# The order a subtask loads a stored keyed entry in (``KeyedStateStore.load``'s arguments): the entry, then its data.
STORED_KEYED_COLUMNS = ("state_name", "key", "namespace", "user_key", "key_group", "value", "expiry")


def keyed_columns(**by_name) -> list:
    """The keyed table's columns (lists or Arrow arrays, each given by its KeyedRow field's name), in table order;
    ``generation`` left out is a microbatch's write (generation 0)."""
    if "generation" not in by_name:
        by_name["generation"] = [0] * len(by_name["state_name"])
    if set(by_name) != set(KeyedRow._fields):
        raise TypeError(f"keyed_columns takes the keyed table's columns {list(KeyedRow._fields)}, got "
                        f"{sorted(by_name)}")
    return [by_name[name] for name in KeyedRow._fields]


KEYED_TABLE = TableSpec(
    KEYED,
    ", ".join(f"{name} {_KEYED_DDL_TYPES[name]}" for name in KeyedRow._fields),
    ("state_name", "key_group", "key", "namespace", "user_key"),
    ("state_name", "key_group"),
)
OPERATOR_TABLE = TableSpec(
    OPERATOR,
    "state_name string, subtask int, mode string, value string, batch_id bigint, generation bigint",
    ("state_name", "subtask"),
    ("state_name",),
)
TABLE_SPECS = {t.name: t for t in (KEYED_TABLE, OPERATOR_TABLE)}



class OperatorRow(NamedTuple):
    """An operator state table row: subtask ``subtask``'s entry of a state (``mode`` as ``operator_state``)."""

    state_name: str
    subtask: int
    mode: str
    value: str | None
    batch_id: int
    generation: int = 0



class KeyedChange(NamedTuple):
    """A keyed entry a subtask changed since its store's last flush: its new stored text (None: removed), how
    the live entries changed (+1 created, -1 removed, 0 updated) and its expiry."""

    state_name: str
    key_group: int
    key: str
    namespace: str
    user_key: str | None
    value: str | None
    delta: int
    expiry: int | None

    def row(self, batch_id: int) -> KeyedRow:
        """The keyed table row microbatch ``batch_id`` writes for it (built as a tuple: once per change)."""
        return tuple.__new__(KeyedRow, _ROW_OF_CHANGE(self) + (batch_id, 0))


# KeyedChange.row's picks: KeyedRow's fields a change has, in KeyedRow's order; the row's last two are its own.
assert KeyedRow._fields[-2:] == ("batch_id", "generation")
_ROW_OF_CHANGE = itemgetter(*(KeyedChange._fields.index(name) for name in KeyedRow._fields[:-2]))



class ChangeColumns:
    """Keyed changes as columns, one list per ``KeyedChange`` field, in no particular order (the writer orders
    them: ``TableFiles.add_columns``): what a flush gives without an object per changed entry."""

    FIELDS = KeyedChange._fields

    def __init__(self, columns: list[list] | None = None):
        self.lists = columns if columns is not None else [[] for _ in self.FIELDS]

    @classmethod
    def of(cls, changes: list[KeyedChange]) -> "ChangeColumns":
        return cls([list(c) for c in zip(*changes)] if changes else None)

    def __len__(self) -> int:
        return len(self.lists[0])

    def extend(self, other: "ChangeColumns") -> "ChangeColumns":
        for mine, theirs in zip(self.lists, other.lists):
            mine.extend(theirs)
        return self

    def changes(self) -> list[KeyedChange]:
        """The changes as records, sorted (state name, key, namespace, user key): for tests and tools."""
        return sorted((KeyedChange(*c) for c in zip(*self.lists)), key=lambda c: (c[0], c[2], c[3], c[4] or ""))

    def table_columns(self, batch_id: int) -> list:
        """The keyed table columns of the rows microbatch ``batch_id`` writes for them, in table order."""
        n = len(self)
        if not n:
            return []
        by_name = dict(zip(self.FIELDS, self.lists))
        del by_name["delta"]
        return keyed_columns(**by_name, batch_id=[batch_id] * n)


class OperatorChange(NamedTuple):
    """An operator state a subtask changed since its store's last flush (``value`` None: removed)."""

    state_name: str
    mode: str
    value: str | None
    delta: int

    def row(self, subtask: int, batch_id: int) -> OperatorRow:
        return OperatorRow(self.state_name, subtask, self.mode, self.value, batch_id)


# -- table versions -------------------------------------------------------------------------------------------
@dataclass
class TableVersion:
    """What a checkpoint, savepoint or sink record pins of a Delta table: where it is, its version, its size;
    for state tables whether it is ``incremental`` (the delta backend's, appended to by runs) and the
    ``generations`` of writes that are not microbatches its rows may be of (None: all, as recorded before
    they were listed). The memory backend records only ``entries``."""

    path: str | None = None
    version: int | None = None
    size_bytes: int = 0
    num_files: int = 0
    incremental: bool | None = None
    generations: list[int] | None = None
    entries: int | None = None

    def to_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if v is not None}
        if self.path is None:  # the memory backend's record: entries only
            out.pop("size_bytes", None)
            out.pop("num_files", None)
        return out

    @classmethod
    def from_dict(cls, data: dict | None) -> "TableVersion | None":
        if data is None:
            return None
        if not isinstance(data, dict):
            raise TypeError(f"a table record must be a JSON object, got {data!r}")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


# -- state info ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StateInfo:
    """What a checkpoint records of one state: its scope (``KEYED`` or ``OPERATOR``), kind, stored type
    (``TypeInfo.to_schema()``), operator distribution ``mode``, TTL, and whether the function registers it
    only while processing (``lazy``: a dry run of its hooks cannot tell whether it still does)."""

    scope: str
    kind: str
    type: Any
    mode: str | None = None
    ttl: TtlSpec | None = None
    lazy: bool = False

    @classmethod
    def from_descriptor(cls, descriptor, scope: str = KEYED, mode: str | None = None) -> "StateInfo":
        """The record of ``descriptor`` (a ``StateDescriptor``) registered as ``scope`` state (in ``mode``)."""
        ttl = descriptor.ttl_config
        return cls(scope, descriptor.kind, descriptor.type_info.to_schema(), mode,
                   ttl.to_spec() if ttl is not None else None)

    def with_lazy(self) -> "StateInfo":
        return StateInfo(self.scope, self.kind, self.type, self.mode, self.ttl, True)

    @property
    def label(self) -> str:
        """E.g. "keyed value": what an error message calls it."""
        return f"{self.scope} {self.kind}"

    def to_dict(self) -> dict:
        out = {"scope": self.scope, "kind": self.kind, "type": self.type}
        if self.mode is not None:
            out["mode"] = self.mode
        if self.ttl is not None:
            out["ttl"] = self.ttl.to_dict()
        if self.lazy:
            out["lazy"] = True
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "StateInfo":
        if not isinstance(data, dict) or "kind" not in data or "type" not in data:
            raise TypeError(f"a state record needs a kind and a type, got {data!r}")
        return cls(data.get("scope", KEYED), data["kind"], data["type"], data.get("mode"),
                   TtlSpec.from_dict(data.get("ttl")), bool(data.get("lazy")))


def utc_iso(ms: int | None) -> str | None:
    """Epoch milliseconds as an ISO 8601 UTC time (``2026-11-27T06:21:39.123+00:00``): what a record people read
    (an XCom, a report) gives beside the number, which machines read."""
    if ms is None:
        return None
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")


def states_to_dict(states: dict[str, StateInfo]) -> dict[str, dict]:
    return {name: info.to_dict() for name, info in states.items()}


def states_from_dict(data: dict[str, dict]) -> dict[str, StateInfo]:
    return {name: StateInfo.from_dict(d) for name, d in data.items()}


def with_ttl(states: dict[str, StateInfo], strategy: str | None = None) -> dict[str, StateInfo]:
    """Keyed states with TTL; with ``strategy`` ("full_snapshot", "incremental", "compaction") those using it."""
    return {name: s for name, s in states.items()
            if s.scope == KEYED and s.ttl is not None and (strategy is None or s.ttl.uses(strategy))}


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


@dataclass(frozen=True)
class RestoredFrom:
    """Where a restore's or rescale's checkpoint came from: a checkpoint of a job, or a savepoint (``path``)
    taken from one."""

    job: str
    checkpoint: int
    savepoint: str | None = None

    @property
    def label(self) -> str:
        """E.g. "savepoint before-v2" or "checkpoint 7 of clicks": what the Lakestate page shows."""
        if self.savepoint is not None:
            return f"savepoint {self.savepoint.rstrip('/').rsplit('/', 1)[-1]}"
        return f"checkpoint {self.checkpoint} of {self.job}"

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict | None) -> "RestoredFrom | None":
        return None if data is None else cls(data.get("job"), data.get("checkpoint"), data.get("savepoint"))


@dataclass(frozen=True)
class AirflowRun:
    """The Airflow DAG run whose task made a checkpoint or savepoint (the Lakestate page links it)."""

    dag_id: str
    run_id: str

    @classmethod
    def of_environment(cls, environ=None) -> "AirflowRun | None":
        """The run Airflow's task runner exported (``AIRFLOW_CTX_DAG_ID``, ``AIRFLOW_CTX_DAG_RUN_ID``, which
        spark-submit's driver inherits); None outside Airflow."""
        env = os.environ if environ is None else environ
        dag_id, run_id = env.get("AIRFLOW_CTX_DAG_ID"), env.get("AIRFLOW_CTX_DAG_RUN_ID")
        return cls(dag_id, run_id) if dag_id and run_id else None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> "AirflowRun | None":
        return None if data is None else cls(data["dag_id"], data["run_id"])


# -- the catalog's records ----------------------------------------------------------------------------------------
class _Record:
    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict):
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class MicrobatchPlan(_Record):
    """Microbatch ``batch_id`` reads ``[start, end)`` of each source, at processing time ``timestamp``.

    Written before anything is read (write-ahead), so a replay reads exactly the same records.
    """

    batch_id: int
    sources: dict[str, dict]  # source name -> {"start": offset, "end": offset}
    timestamp: int
    planned_by: str
    records: int | None = None  # the planner's count of input records, when the source tells it
    event_time: dict | None = None  # the EventClock after it (``watermarks``), for a job with a watermark strategy

    def to_dict(self) -> dict:
        data = asdict(self)
        if self.event_time is None:  # as written before event time
            del data["event_time"]
        return data

    @property
    def timer_only(self) -> bool:
        """A microbatch planned without new input, for timers due (no source offset moves)."""
        return all(rng["start"] == rng["end"] for rng in self.sources.values())

    @property
    def clock(self) -> EventClock:
        """Where event time stands after this microbatch (no watermark for a job without a strategy)."""
        return EventClock.from_dict(self.event_time)

    @property
    def watermark(self) -> int:
        """W(m): the watermark after this microbatch."""
        return self.event_time["watermark"] if self.event_time else MIN_WATERMARK

    @property
    def end_offsets(self) -> dict[str, Any]:
        return {name: position(rng["end"]) for name, rng in self.sources.items()}

    def range_of(self, source: str) -> tuple[int, Any, Any]:
        """``(batch_id, start, end)`` of source ``source`` in this microbatch."""
        return self.batch_id, self.sources[source]["start"], self.sources[source]["end"]


@dataclass
class CheckpointMetadata(_Record):
    """A completed checkpoint: the state after microbatch ``batch_id``, pinned (Flink's ``_metadata``)."""

    job_id: str
    checkpoint_id: int
    batch_id: int
    uid: str
    key_type: Any
    backend: str
    parallelism: int
    max_parallelism: int
    key_group_ranges: list[list[int]]
    source_offsets: dict[str, Any]
    state: dict[str, TableVersion]  # per state table, what the backend recorded
    descriptors: dict[str, StateInfo]
    entries: dict[str, int]  # live entries per state name
    completed_ms: int
    processing_time: int | None = None
    run_id: str | None = None
    sink: TableVersion | None = None
    status: str = "COMPLETED"
    layout: int = LAYOUT_VERSION
    restored_from: RestoredFrom | None = None  # a restore's or rescale's source
    cleanup_cursor: list | None = None  # where TTL's incremental cleanup goes on (``ttl``)
    airflow_run: AirflowRun | None = None  # the Airflow run that made it (omitted when None: older files)
    # A dataflow's (``dataflow``): the same checkpoint of each operator after the first, by uid (omitted when None)
    operators: dict[str, "CheckpointMetadata"] | None = None

    def table(self, name: str) -> TableVersion:
        """What this checkpoint pins of state table ``name`` (an empty record when it pins nothing)."""
        return self.state.get(name) or TableVersion()

    def to_dict(self) -> dict:
        data = asdict(self)
        data["state"] = {name: t.to_dict() for name, t in self.state.items()}
        data["descriptors"] = states_to_dict(self.descriptors)
        data["sink"] = self.sink.to_dict() if self.sink is not None else None
        data["restored_from"] = self.restored_from.to_dict() if self.restored_from is not None else None
        if self.airflow_run is None:
            del data["airflow_run"]
        else:
            data["airflow_run"] = self.airflow_run.to_dict()
        if self.operators is None:
            del data["operators"]
        else:
            data["operators"] = {uid: c.to_dict() for uid, c in self.operators.items()}
        return data

    def of_operator(self, uid: str) -> "CheckpointMetadata | None":
        """This checkpoint of operator ``uid`` (itself for its first operator; None for one it has no state of)."""
        if uid == self.uid:
            return self
        return (self.operators or {}).get(uid)

    @classmethod
    def from_dict(cls, data: dict) -> "CheckpointMetadata":
        data = {"layout": 1, **data}  # rows without a layout predate layout 2
        if not isinstance(data.get("state"), dict) or not isinstance(data.get("descriptors"), dict):
            raise TypeError("a checkpoint needs a 'state' and a 'descriptors' object")
        data["state"] = {name: TableVersion.from_dict(t) for name, t in data["state"].items()}
        data["descriptors"] = states_from_dict(data["descriptors"])
        data["sink"] = TableVersion.from_dict(data.get("sink"))
        data["restored_from"] = RestoredFrom.from_dict(data.get("restored_from"))
        data["airflow_run"] = AirflowRun.from_dict(data.get("airflow_run"))
        if data.get("operators") is not None:
            data["operators"] = {uid: cls.from_dict(c) for uid, c in data["operators"].items()}
        return super().from_dict(data)

    @property
    def total_entries(self) -> int:
        """Live entries it holds, every operator's."""
        return sum(self.entries.values()) + sum(c.total_entries for c in (self.operators or {}).values())

    @property
    def size_bytes(self) -> int:
        """Bytes of state it pins, every operator's."""
        return (sum(t.size_bytes for t in self.state.values() if t is not None)
                + sum(c.size_bytes for c in (self.operators or {}).values()))

    @property
    def num_files(self) -> int:
        return (sum(t.num_files for t in self.state.values() if t is not None)
                + sum(c.num_files for c in (self.operators or {}).values()))


@dataclass
class SavepointMetadata(_Record):
    """A savepoint: a self-contained, canonical copy of a checkpoint's state (its ``_metadata.json``).

    ``tables`` holds, per state table, the savepoint's own Delta table of live entries (same columns and
    partitioning as the job's tables, whatever backend took the checkpoint), relative to the savepoint's
    folder so the folder can be moved.
    """

    job_id: str
    name: str
    checkpoint_id: int
    batch_id: int
    uid: str
    key_type: Any
    backend: str  # of the checkpoint it was taken from
    parallelism: int
    max_parallelism: int
    key_group_ranges: list[list[int]]
    source_offsets: dict[str, Any]
    descriptors: dict[str, StateInfo]
    entries: dict[str, int]
    tables: dict[str, TableVersion]
    created_ms: int
    processing_time: int | None = None
    label: str | None = None
    format: int = SAVEPOINT_FORMAT
    layout: int = LAYOUT_VERSION
    airflow_run: AirflowRun | None = None  # the Airflow run that took it (omitted when None: older files)
    # A dataflow's: each later operator's part, by uid, its tables under ``operators/<uid>/`` (omitted when None)
    operators: dict[str, "SavepointMetadata"] | None = None
    seconds: float | None = None  # how long writing it took (omitted when None: older files, an operator's part)
    path: str = ""  # where it was found (not stored)

    def to_dict(self) -> dict:
        data = {k: v for k, v in asdict(self).items() if k != "path"}
        data["tables"] = {name: t.to_dict() for name, t in self.tables.items()}
        data["descriptors"] = states_to_dict(self.descriptors)
        if self.seconds is None:
            del data["seconds"]
        if self.airflow_run is None:
            del data["airflow_run"]
        else:
            data["airflow_run"] = self.airflow_run.to_dict()
        if self.operators is None:
            del data["operators"]
        else:
            data["operators"] = {uid: o.to_dict() for uid, o in self.operators.items()}
        return data

    def of_operator(self, uid: str) -> "SavepointMetadata | None":
        """This savepoint's part of operator ``uid`` (itself for its first operator; None for one it has no state
        of), found where this one was."""
        if uid == self.uid:
            return self
        found = (self.operators or {}).get(uid)
        if found is not None:
            found.path = self.path
        return found

    @classmethod
    def from_dict(cls, data: dict) -> "SavepointMetadata":
        data = dict(data)
        if not isinstance(data.get("tables"), dict) or not isinstance(data.get("descriptors"), dict):
            raise TypeError("a savepoint needs a 'tables' and a 'descriptors' object")
        data["tables"] = {name: TableVersion.from_dict(t) for name, t in data["tables"].items()}
        data["descriptors"] = states_from_dict(data["descriptors"])
        data["airflow_run"] = AirflowRun.from_dict(data.get("airflow_run"))
        if data.get("operators") is not None:
            data["operators"] = {uid: cls.from_dict(o) for uid, o in data["operators"].items()}
        return super().from_dict(data)

    @property
    def total_entries(self) -> int:
        """Live entries it holds, every operator's."""
        return sum(self.entries.values()) + sum(o.total_entries for o in (self.operators or {}).values())

    @property
    def size_bytes(self) -> int:
        return (sum(t.size_bytes for t in self.tables.values())
                + sum(o.size_bytes for o in (self.operators or {}).values()))

    @property
    def num_files(self) -> int:
        return (sum(t.num_files for t in self.tables.values())
                + sum(o.num_files for o in (self.operators or {}).values()))

    def table_path(self, table: str) -> str:
        """Where state table ``table`` of the savepoint is (its record is relative to the savepoint's folder)."""
        return str(location(self.path) / self.tables[table].path)
