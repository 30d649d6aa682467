"""What each state backend can do, declared once and readable without Spark (a DAG parse, the CLI's checks, a
restore plan): a kind per backend (``delta``, ``hashmap``, ``memory``) and the registry of their names.

The implementations (``delta/backends``: how each reads, writes and snapshots its table with Spark) subclass
their kind, so a backend's capabilities are stated in one place and every room asks them, never its name:

- ``incremental``: checkpoints pin a version of a table that runs append to (a restore appends its rows there,
  compaction rewrites it); otherwise each checkpoint writes a full snapshot of the live entries.
- ``full_snapshot_cleanup``: TTL's full-snapshot cleanup happens while snapshotting (only a full snapshot has it).
- ``in_process``: the snapshots stay in the process that took them, so nothing but that process reads them.
- ``readable_in_process``: this process reads a checkpoint's table with Arrow, no Spark job, when it is small.
- ``allowed_in_pipelines``: a DAG run's state must outlive its process, so a pipeline may choose it.

A new backend subclasses an implementation (or ``delta.backends.StateBackend``) with its own ``name`` and the
capabilities it has; naming it registers it. A built-in implementation registers itself over its kind
(``implemented_by``) when ``delta/backends`` loads.
"""
from __future__ import annotations

from typing import ClassVar

from ..errors import ConfigError

DEFAULT_BACKEND = "delta"  # a job's backend when it names none
BACKENDS: dict[str, type[StateBackendKind]] = {}  # name -> its kind (its implementation once that is loaded)


class StateBackendKind:
    """A state backend's name and capabilities (see the module docstring); every subclass with a ``name`` of its
    own is registered under it."""

    name: ClassVar[str] = ""
    incremental: ClassVar[bool] = False
    full_snapshot_cleanup: ClassVar[bool] = True
    in_process: ClassVar[bool] = False
    readable_in_process: ClassVar[bool] = True
    allowed_in_pipelines: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name"):
            BACKENDS[cls.name] = cls


class DeltaKind(StateBackendKind):
    """``delta`` (the default): each run appends the entries that changed to the job's Delta table; a checkpoint
    pins its version."""

    name = "delta"
    incremental = True
    full_snapshot_cleanup = False


class HashMapKind(StateBackendKind):
    """``hashmap``: a run's changes are staged; each checkpoint writes a full snapshot to a table of its own."""

    name = "hashmap"


class MemoryKind(StateBackendKind):
    """``memory``: as hashmap, but the snapshots stay in this process (tiny in-process tests only)."""

    name = "memory"
    in_process = True
    readable_in_process = False
    allowed_in_pipelines = False


def implemented_by(implementation: type[StateBackendKind]) -> type[StateBackendKind]:
    """Register ``implementation`` (a subclass of a registered kind, e.g. ``delta.backends.DeltaStateBackend``) under
    its kind's name: ``backend_kind`` gives it from then on. A class decorator."""
    kind = BACKENDS.get(implementation.name)
    if kind is None or not issubclass(implementation, kind):
        raise TypeError(f"{implementation.__name__} implements no registered kind (its name: {implementation.name!r})")
    BACKENDS[implementation.name] = implementation
    return implementation


def backend_names() -> tuple[str, ...]:
    """Every registered backend's name, the built-in ones first."""
    return tuple(BACKENDS)


def backend_kind(name: str, what: str = "backend") -> type[StateBackendKind]:
    """The kind (or implementation) registered as ``name``; ConfigError naming the known ones when none is."""
    try:
        return BACKENDS[name]
    except (KeyError, TypeError):
        raise ConfigError(f"{what} {name!r} is unknown; choose one of {backend_names()}") from None
