"""What a job writes its rows to (Flink's ``Sink``): the ``Sink`` base class, the whole contract a run uses, and
``SinkRun``, what a run tells a sink of itself. ``DeltaSink`` (``delta/sink.py``) is the first implementation,
and a plain warehouse path in ``sink=`` or ``sink_to(...)`` means one.

A sink is written exactly once per microbatch across replays: its rows reach the subtasks' files before the
commit, and the commit adds a run's microbatches in one idempotent step, naming the last one, so a replay of a
committed microbatch adds nothing."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

from .errors import ConfigError

SINK_MICROBATCH = "_microbatch"  # a sink's column naming each row's microbatch (a replay leaves committed ones out)


@dataclass(frozen=True)
class SinkRun:
    """What a run tells a sink about one of the tables it writes: ``table`` (``SINK``, or a side output's table),
    the run's Spark session, where the table is (the sink's warehouse path resolved, or an operator's staging
    folder in a dataflow), the transaction id its writes carry (Delta's ``txnAppId``: the job's, one per
    table), the table's columns (DDL, the microbatch column included) and where they were declared (what an
    error names), and ``staging(token)``: a folder of the run for rows a sink cannot take directly."""

    table: str
    spark: Any
    location: Any
    app_id: str
    columns: str
    declared: str
    staging: Callable[[str], Any]


class Sink(ABC):
    """Where an operator's rows go: ``DeltaSink``, or a subclass of this class of your own. The members below are
    everything a job and a run ask of a sink, in the order they ask.

    - **Defining the job**: ``name`` (the warehouse path that names it: one writer per table, side output tables
      beside it, lineage), ``describe`` (what the job's catalog record keeps), ``check_rows`` (refuse rows it
      cannot take).
    - **Before anything is read**: ``check`` (refuse, naming the fix, a table the rows cannot go to), then
      ``output`` (where the subtasks write the rows: an ``OutputTable``).
    - **The commit**: ``commit`` (the files the subtasks wrote, added in one idempotent step: a replay of a
      committed microbatch adds nothing; a sink checks again what may have changed since ``check``).
    - **The checkpoint**: ``version`` (what a checkpoint pins of the table, or None).
    """

    @property
    @abstractmethod
    def name(self) -> str:
        """The warehouse path that names the sink (``sinks/clicks``)."""

    def describe(self) -> dict:
        """What the job's catalog record keeps of the sink."""
        return {"type": type(self).__name__, "name": self.name}

    def check_rows(self, row_type, what: str) -> None:
        """Raise ``ConfigError`` naming the fix, where the job is defined, when rows of ``row_type`` (what
        ``what`` emits) cannot go to the sink (by default: nothing to check)."""
        return None

    def check(self, run: SinkRun) -> None:
        """Raise ``InputError`` naming the fix, before anything is read, when the rows cannot go to the table
        (by default: nothing to check)."""
        return None

    @abstractmethod
    def output(self, run: SinkRun, token: str):
        """Where the subtasks write the table's rows in the run whose files carry ``token``: an ``OutputTable``."""

    @abstractmethod
    def commit(self, run: SinkRun, table, files: list, last_batch: int) -> None:
        """Add ``files`` (``WrittenFile`` s the subtasks wrote to ``table``, the ``OutputTable`` ``output`` gave)
        as the rows of the run's microbatches up to ``last_batch``, in one idempotent step."""

    @abstractmethod
    def version(self, run: SinkRun):
        """What a checkpoint pins of the sink (a ``TableVersion``), or None when there is nothing to pin."""


def sink_name(sink: "str | Sink") -> str:
    """The warehouse path a job's ``sink`` names (a plain path is a Delta table's)."""
    return sink.name if isinstance(sink, Sink) else sink


def check_sink(sink: Any, what: str = "sink") -> None:
    """Refuse a ``sink`` that is neither a warehouse path nor a ``Sink``, naming the fix."""
    if isinstance(sink, Sink):
        return
    if not isinstance(sink, str) or not sink.strip():
        raise ConfigError(f"{what} must be a path inside the warehouse (e.g. 'sinks/clicks') or a "
                          f"state_store.DeltaSink (or a subclass of state_store.sinks.Sink), got {sink!r}")
