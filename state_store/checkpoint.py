"""Typed records of the catalog: a microbatch's plan and a completed checkpoint, and what may restore one.

Both are kept as JSON files (see ``catalog``) so the CLI and the Airflow
plugin read them without Spark; here they are dataclasses with ``to_dict`` /
``from_dict``, and ``check_restorable`` says, with the fix, when a job
definition cannot continue from a checkpoint.
"""
from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, fields
from typing import Any

from .errors import RestoreError
from .functions import FunctionInitializationContext, RuntimeContext
from .key_groups import compute_key_group_range_for_operator_index
from .keyed_state import KeyedStateStore
from .operator_state import OperatorStateStore
from .types import StateMigrationError, check_compatibility
from .sources import position
from .storage import location

LAYOUT_VERSION = 2  # the state table layout checkpoints of this release pin (see state_tables)
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
    """Refuse, with the fix, a checkpoint this definition cannot continue from."""
    cid = checkpoint.checkpoint_id
    if checkpoint.layout != LAYOUT_VERSION:
        raise RestoreError(
            f"checkpoint {cid} was written with state layout {checkpoint.layout}; this release reads layout "
            f"{LAYOUT_VERSION}: run the job with a new job id (or a fresh warehouse)"
        )
    check_max_parallelism(spec, checkpoint.max_parallelism, f"checkpoint {cid}")
    if checkpoint.key_type != spec.key_type.to_schema():
        raise RestoreError(
            f"checkpoint {cid} keys records by {checkpoint.key_type} but the job now declares key_type "
            f"{spec.key_type.to_schema()}; a key's hash, and so its key group, depends on its type: keep "
            f"{checkpoint.key_type}"
        )
    if checkpoint.uid != spec.uid:
        raise RestoreError(
            f"checkpoint {cid} holds the state of operator uid {checkpoint.uid!r} but the job's operator is now "
            f"{spec.uid!r}; its state would not be restored: set uid={checkpoint.uid!r}, or move the state to "
            f"the new uid with: lakestate restore {spec.job_id} --checkpoint {cid} --uid-map "
            f"{checkpoint.uid}={spec.uid}"
        )
    check_descriptors(checkpoint.descriptors, descriptors, f"checkpoint {cid}")


def check_max_parallelism(spec, max_parallelism: int, where: str) -> None:
    """max_parallelism is fixed for a job's life (it is the number of key groups)."""
    if spec.max_parallelism is not None and spec.max_parallelism != max_parallelism:
        raise RestoreError(
            f"{where} has max_parallelism {max_parallelism} but the job now sets {spec.max_parallelism}; "
            f"max_parallelism is the number of key groups and is fixed for a job's life: set it back to "
            f"{max_parallelism} (or leave it unset to take the restored one)"
        )


def continuing_spec(spec, checkpoint: CheckpointMetadata):
    """The definition a run continuing from ``checkpoint`` runs with: that checkpoint's parallelism, backend
    and max_parallelism (a rescale or restore set them; the definition's values shape a job's first run)."""
    return spec.with_overrides(parallelism=checkpoint.parallelism, backend=checkpoint.backend,
                               max_parallelism=checkpoint.max_parallelism)


def check_descriptors(stored: dict[str, dict], descriptors: dict[str, dict], where: str) -> None:
    """Refuse, with the fix, a state whose kind or type the new definition changed incompatibly."""
    for name, old in stored.items():
        new = descriptors.get(name)
        if new is None:
            continue
        if (old["kind"], old.get("mode")) != (new["kind"], new.get("mode")):
            raise RestoreError(
                f"state {name!r} was {old['kind']} state in {where} and is now {new['kind']} state; "
                f"give the new state another name"
            )
        try:
            check_compatibility(old["type"], new["type"], where=f"state {name!r}")
        except StateMigrationError as e:
            raise RestoreError(
                f"{e} (since {where}); keep the old type, make a compatible change "
                f"(widen a number, add a row field), or give the new state another name"
            ) from None
