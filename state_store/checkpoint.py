"""Typed records of the catalog: a microbatch's plan and a completed checkpoint, and what may restore one.

Both are kept as JSON files (see ``catalog``) so the CLI and the Airflow
plugin read them without Spark; here they are dataclasses with ``to_dict`` /
``from_dict``; ``check_restorable`` asks ``restore_plan`` whether a job
definition can continue from a checkpoint.
"""
from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, fields
from typing import Any

from .functions import FunctionInitializationContext, RuntimeContext
from .key_groups import compute_key_group_range_for_operator_index
from .keyed_state import KeyedStateStore
from .operator_state import OperatorStateStore
from .restore_plan import LAYOUT_VERSION, JobFacts, plan_restore
from .sources import position
from .storage import location

SAVEPOINT_FORMAT = 1


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

    @property
    def end_offsets(self) -> dict[str, Any]:
        return {name: position(rng["end"]) for name, rng in self.sources.items()}


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
    state: dict[str, dict]  # table name -> what the backend recorded (version, path, size_bytes, num_files)
    descriptors: dict[str, dict]
    entries: dict[str, int]  # live entries per state name
    completed_ms: int
    processing_time: int | None = None
    run_id: str | None = None
    sink: dict | None = None
    status: str = "COMPLETED"
    layout: int = LAYOUT_VERSION
    restored_from: dict | None = None  # a restore's or rescale's source: {"savepoint": path} or {"job", "checkpoint"}
    cleanup_cursor: list | None = None  # where TTL's incremental cleanup goes on (``ttl.cleanup``)

    @classmethod
    def from_dict(cls, data: dict) -> "CheckpointMetadata":
        return super().from_dict({"layout": 1, **data})  # rows without a layout predate layout 2

    @property
    def size_bytes(self) -> int:
        return sum(t.get("size_bytes", 0) for t in self.state.values() if isinstance(t, dict))

    @property
    def num_files(self) -> int:
        return sum(t.get("num_files", 0) for t in self.state.values() if isinstance(t, dict))


@dataclass
class SavepointMetadata(_Record):
    """A savepoint: a self-contained, canonical copy of a checkpoint's state (its ``_metadata.json``).

    ``tables`` holds, per state table ("keyed", "operator"), the savepoint's own Delta table of live entries
    (same columns and partitioning as the job's tables, whatever backend took the checkpoint), relative to
    the savepoint's folder so the folder can be moved.
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
    descriptors: dict[str, dict]
    entries: dict[str, int]
    tables: dict[str, dict]
    created_ms: int
    processing_time: int | None = None
    label: str | None = None
    format: int = SAVEPOINT_FORMAT
    layout: int = LAYOUT_VERSION
    path: str = ""  # where it was found (not stored)

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "path"}

    @property
    def size_bytes(self) -> int:
        return sum(t.get("size_bytes", 0) for t in self.tables.values())

    @property
    def num_files(self) -> int:
        return sum(t.get("num_files", 0) for t in self.tables.values())

    def table_path(self, table: str) -> str:
        return str(location(self.path) / self.tables[table]["path"])


def discover_descriptors(spec) -> dict[str, dict]:
    """The schemas of every state the function registers (a dry run of its hooks on the driver)."""
    p, maxp = spec.parallelism, spec.effective_max_parallelism
    function = copy.deepcopy(spec.function)
    operator_store = OperatorStateStore(spec.uid)
    kg_range = compute_key_group_range_for_operator_index(maxp, p, 0)
    function.initialize_state(FunctionInitializationContext(operator_store, {}, kg_range, False, 0))
    runtime_ctx = RuntimeContext(spec.uid, KeyedStateStore(), 0, p, maxp)
    function.open(runtime_ctx)
    schemas = {name: {"scope": "keyed", **d.schema()} for name, d in runtime_ctx.descriptors.items()}
    for name, (mode, d) in operator_store.descriptors().items():
        schemas[name] = {"scope": "operator", "mode": mode, **d.schema()}
    return schemas


def check_restorable(spec, checkpoint: CheckpointMetadata, descriptors: dict[str, dict]) -> None:
    """Refuse, with the fix, a checkpoint this definition cannot continue from (``restore_plan``'s rules for
    the start of a run)."""
    plan_restore(JobFacts.of(spec), checkpoint, descriptors)


def continuing_spec(spec, checkpoint: CheckpointMetadata):
    """The definition a run continuing from ``checkpoint`` runs with: that checkpoint's parallelism, backend
    and max_parallelism (a rescale or restore set them; the definition's values shape a job's first run)."""
    return spec.with_overrides(parallelism=checkpoint.parallelism, backend=checkpoint.backend,
                               max_parallelism=checkpoint.max_parallelism)
