"""The catalog's records, kept as JSON: what a checkpoint or savepoint pins of a Delta table (``TableVersion``),
of each state (``StateInfo``, with its TTL as ``ttl.config.TtlSpec``), a microbatch's plan, a checkpoint, a
savepoint (``MicrobatchPlan``, ``CheckpointMetadata``, ``SavepointMetadata``, with the ``AirflowRun`` that made
them and where a restore came from, ``RestoredFrom``). Every record's ``to_dict``/``from_dict`` keeps the JSON
that earlier releases wrote (``tests/ops/test_formats.py``)."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ..sources import position
from ..state.ttl.config import TtlSpec
from ..storage import location
from ..watermarks import MIN_WATERMARK, EventClock
from .layout import CHECKPOINT_LAYOUT, KEYED, LAYOUT_VERSION, SAVEPOINT_FORMAT


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


# A checkpoint's fields that are the job's: layout 3 keeps them once, at the top (``uid``: its first operator,
# which keeps the source's offsets); every other field is an operator's, kept under ``operators`` by uid
# (``sink`` is both: the job's, and each operator's own).
_JOB_FIELDS = ("job_id", "checkpoint_id", "batch_id", "uid", "completed_ms", "processing_time", "run_id", "sink",
               "status", "layout", "restored_from", "airflow_run")


@dataclass
class CheckpointMetadata(_Record):
    """A completed checkpoint: the state after microbatch ``batch_id``, pinned (Flink's ``_metadata``).

    A job's checkpoint holds every operator's part under ``operators``, by uid, the first operator's first (it
    keeps the source offsets); its own operator fields are its first operator's, as a ``Job``'s are. A part
    (``of_state``'s) has ``operators`` None. On disk (layout 3) the job's fields are kept once and each
    operator's part flatly by uid; records of layouts 1 and 2 (the first operator's fields at the top, the
    others nested) are read, and written back as they were read."""

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
    layout: int = CHECKPOINT_LAYOUT
    restored_from: RestoredFrom | None = None  # a restore's or rescale's source
    cleanup_cursor: list | None = None  # where TTL's incremental cleanup goes on (``ttl``)
    airflow_run: AirflowRun | None = None  # the Airflow run that made it (omitted when None: older files)
    operators: dict[str, "CheckpointMetadata"] | None = None  # a job's: every operator's part, by uid, first first

    @classmethod
    def of_state(cls, spec, checkpoint_id: int, batch_id: int, parallelism: int, max_parallelism: int,
                 **recorded) -> "CheckpointMetadata":
        """One operator's part of a checkpoint (a run's checkpointer and a restore's both build them): the job's
        and operator's names and backend from ``spec`` (a ``JobSpec``), the key groups of each subtask at
        ``parallelism``, and what the caller ``recorded`` (state, descriptors, entries, offsets, sink, ...)."""
        from ..key_groups import key_group_ranges

        recorded.setdefault("key_type", spec.key_type.to_schema())
        recorded.setdefault("backend", spec.backend)
        return cls(job_id=spec.job_id, checkpoint_id=checkpoint_id, batch_id=batch_id, uid=spec.uid,
                   parallelism=parallelism, max_parallelism=max_parallelism,
                   key_group_ranges=[r.to_list() for r in key_group_ranges(max_parallelism, parallelism)],
                   **recorded)

    @classmethod
    def of_operators(cls, records: list["CheckpointMetadata"], sink_uid: str | None = None) -> "CheckpointMetadata":
        """The job's checkpoint of its operators' parts of one microbatch (each ``of_state``'s, the first
        operator's first), and the job's sink version from the part of operator ``sink_uid``, which writes that
        sink (default: the first's). The one joiner of a checkpoint's parts: a run's checkpointer, a restore and
        a compaction call it."""
        first = records[0]
        sink = next((r.sink for r in records if r.uid == sink_uid), first.sink)
        return replace(first, operators={r.uid: replace(r, operators=None) for r in records}, sink=sink)

    @property
    def parts(self) -> list["CheckpointMetadata"]:
        """Every operator's part, the first operator's first (a part: itself)."""
        return list(self.operators.values()) if self.operators else [self]

    @property
    def uids(self) -> list[str]:
        """The operators it holds state of: its first, then the others in the order of their uids."""
        return [self.uid, *sorted(u for u in (self.operators or {}) if u != self.uid)]

    def of_operator(self, uid: str) -> "CheckpointMetadata | None":
        """This checkpoint's part of operator ``uid`` (None for one it has no state of)."""
        return next((p for p in self.parts if p.uid == uid), None)

    def table(self, name: str) -> TableVersion:
        """What this checkpoint pins of state table ``name`` (an empty record when it pins nothing)."""
        return self.state.get(name) or TableVersion()

    def _fields(self) -> dict:
        """Every field but ``operators``, as JSON."""
        data = asdict(replace(self, operators=None))
        del data["operators"]
        data["state"] = {name: t.to_dict() for name, t in self.state.items()}
        data["descriptors"] = states_to_dict(self.descriptors)
        data["sink"] = self.sink.to_dict() if self.sink is not None else None
        data["restored_from"] = self.restored_from.to_dict() if self.restored_from is not None else None
        if self.airflow_run is None:
            del data["airflow_run"]
        else:
            data["airflow_run"] = self.airflow_run.to_dict()
        return data

    def to_dict(self) -> dict:
        data = self._fields()
        if self.layout < 3:  # as layouts 1 and 2 wrote it: the first operator at the top, the others nested
            if len(self.parts) > 1:
                data["operators"] = {p.uid: p._fields() for p in self.parts[1:]}
            return data
        job = {k: data[k] for k in _JOB_FIELDS if k in data}
        job["operators"] = {p.uid: {k: v for k, v in p._fields().items() if k == "sink" or k not in _JOB_FIELDS}
                            for p in self.parts}
        return job

    @classmethod
    def _read(cls, data: dict) -> "CheckpointMetadata":
        """One record's fields (not its ``operators``)."""
        if not isinstance(data.get("state"), dict) or not isinstance(data.get("descriptors"), dict):
            raise TypeError("a checkpoint needs a 'state' and a 'descriptors' object")
        data = {k: v for k, v in data.items() if k != "operators"}
        data["state"] = {name: TableVersion.from_dict(t) for name, t in data["state"].items()}
        data["descriptors"] = states_from_dict(data["descriptors"])
        data["sink"] = TableVersion.from_dict(data.get("sink"))
        data["restored_from"] = RestoredFrom.from_dict(data.get("restored_from"))
        data["airflow_run"] = AirflowRun.from_dict(data.get("airflow_run"))
        return super().from_dict(data)

    @classmethod
    def from_dict(cls, data: dict) -> "CheckpointMetadata":
        data = {"layout": 1, **data}  # rows without a layout predate layout 2
        nested = data.get("operators")
        if nested is not None and not isinstance(nested, dict):
            raise TypeError(f"a checkpoint's 'operators' must be an object, got {nested!r}")
        if data["layout"] < 3:
            first = cls._read(data)
            return replace(first, operators={first.uid: first,
                                             **{uid: cls._read(c) for uid, c in (nested or {}).items()}})
        if not nested:
            raise TypeError(f"a checkpoint of layout {data['layout']} needs its operators' parts in 'operators'")
        job = {k: data[k] for k in _JOB_FIELDS if k in data}
        if job.get("uid") not in nested:
            raise TypeError(f"a checkpoint of layout {data['layout']} names its first operator in 'uid', one of "
                            f"its 'operators' {sorted(nested)}; got {job.get('uid')!r}")
        # The first operator's part first (a JSON object's order need not hold: JobStore sorts its keys).
        parts = sorted((cls._read({**job, **part, "uid": uid}) for uid, part in nested.items()),
                       key=lambda p: p.uid != job["uid"])
        return replace(cls.of_operators(parts), sink=TableVersion.from_dict(data.get("sink")))

    @property
    def total_entries(self) -> int:
        """Live entries it holds, every operator's."""
        return sum(sum(p.entries.values()) for p in self.parts)

    @property
    def size_bytes(self) -> int:
        """Bytes of state it pins, every operator's."""
        return sum(t.size_bytes for p in self.parts for t in p.state.values() if t is not None)

    @property
    def num_files(self) -> int:
        return sum(t.num_files for p in self.parts for t in p.state.values() if t is not None)


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

    @classmethod
    def of_operators(cls, parts: list["SavepointMetadata"]) -> "SavepointMetadata":
        """The savepoint of its operators' parts (the first operator's first), as its format keeps them: the
        first's fields at the top, every other's by uid under ``operators`` (None for a job of one operator).
        The twin of ``CheckpointMetadata.of_operators``: a savepoint's writer calls it."""
        first, *rest = parts
        return replace(first, operators={p.uid: p for p in rest} or None)

    @property
    def uids(self) -> list[str]:
        """The operators it holds state of: its first, then the others in the order of their uids."""
        return [self.uid, *sorted(self.operators or {})]

    @property
    def parts(self) -> list["SavepointMetadata"]:
        """Every operator's part, the first operator's first."""
        return [self.of_operator(uid) for uid in self.uids]

    def of_operator(self, uid: str) -> "SavepointMetadata | None":
        """This savepoint's part of operator ``uid`` (itself for its first operator, whose fields its format keeps
        at the top; None for one it has no state of), found where this one was."""
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
