"""What every step of a run shares: the job, where it lives, its lease, its clock, its fault points."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pyspark.sql import SparkSession

from ..catalog.job_store import JobStore
from ..catalog.lease import JobLease
from ..job import JobSpec, later_source_name
from ..settings import Settings
from ..side_outputs import side_app_id, sink_app_id
from ..sinks import Sink

FAULT_POINTS = (
    "after_plan",
    "before_sink_write", "after_sink_write",
    "before_state_write", "after_state_write",
    "before_commit", "after_commit",
    "before_checkpoint", "after_checkpoint",
)
# Reached only by a run of a job with TTL's incremental cleanup, once its state is written.
CLEANUP_FAULT_POINTS = ("before_cleanup_write", "after_cleanup_write")


class InjectedFault(RuntimeError):
    """Raised by a FaultInjector: stands for a crash at one step of the protocol."""


@dataclass
class FaultInjector:
    """Crash (or call ``action``) when the run reaches ``point`` with microbatch ``batch_id`` in hand."""

    point: str
    batch_id: int = 0
    action: Callable[[], None] | None = None
    operator: str | None = None  # in a dataflow: only at this operator's step (None: the first to get there)

    def __post_init__(self):
        if self.point not in FAULT_POINTS + CLEANUP_FAULT_POINTS:
            raise ValueError(f"unknown fault point {self.point!r}; choose one of {FAULT_POINTS + CLEANUP_FAULT_POINTS}")

    def hit(self, point: str, batch_ids, operator: str | None = None) -> None:
        if point == self.point and self.batch_id in batch_ids and self.operator in (None, operator):
            if self.action is not None:
                self.action()
            else:
                raise InjectedFault(f"injected crash at {point} of microbatch {self.batch_id}")


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class RunContext:
    """One run of one job: ``spec`` is the definition it runs with, fixed before the run starts (the
    parallelism and backend of the checkpoint it continues from)."""

    spark: SparkSession
    spec: JobSpec
    settings: Settings
    store: JobStore
    lease: JobLease
    sink_path: Path  # the sink's table, resolved (an edge: the staging folder of its rows)
    clock: Callable[[], int]
    faults: FaultInjector | None
    progress: Callable[[str], None]
    # In a dataflow, an operator before the last: its output goes to the next operator (staged at ``sink_path``
    # for the run), not to the sink.
    edge: bool = False
    in_chain: bool = False  # one of a dataflow's operators: what it says of itself names it (``say_of_operator``)
    sink: Sink | None = None  # the ``Sink`` at ``sink_path`` (None for an edge)
    # The side outputs later operators read as streams (``get_side_output``), by tag name: each staged for the run
    # in its folder, as an edge's rows are, not written to a table of its own.
    side_edges: dict[str, Path] = field(default_factory=dict)
    # A ``WatermarkGenerator`` strategy's generator of each input, made when the run plans its first microbatch.
    generators: dict = field(default_factory=dict)
    # The largest event time of ranges the run will plan, read for all of them at once before the first new plan
    # (``planning.prefetch_event_times``), by (source, column, start, end); each taken by the plan of its range.
    event_times: dict = field(default_factory=dict)
    # The first operator's: every input of the job that reads a source (``Job.planned_inputs``: later operators'
    # too, by their qualified names), which its plans fix; empty: its own inputs.
    planned: tuple = ()

    @property
    def p(self) -> int:
        return self.spec.parallelism

    @property
    def maxp(self) -> int:
        return self.spec.effective_max_parallelism

    @property
    def keeps_offsets(self) -> bool:
        """Whether this operator keeps the job's source offsets: the first operator does, for every source of the
        job (those later operators read too: ``planned``); a later operator keeps none."""
        return self.spec.inputs[0].upstream is None

    @property
    def job_dir(self) -> Path:
        return self.store.job_dir

    @property
    def run_id(self) -> str:
        return self.lease.run_id

    @property
    def sink_app_id(self) -> str:
        """The Delta ``txnAppId`` of the job's sink writes."""
        return sink_app_id(self.spec.job_id)

    def side_app_id(self, tag) -> str:
        """The Delta ``txnAppId`` of side output ``tag``'s writes."""
        return side_app_id(self.spec.job_id, tag.name)

    def side_output_path(self, tag):
        """Side output ``tag``'s table, next to the sink."""
        return self.settings.sink(self.spec.side_output_sink(tag))

    @property
    def planned_inputs(self) -> tuple:
        """The inputs this operator's plans fix the ranges of (the first operator's: every source of the job)."""
        return self.planned or self.spec.inputs

    def planned_name(self, input_) -> str:
        """Where the plans name input ``input_``'s ranges: by its name for the first operator's inputs, by
        ``job.later_source_name`` for a source a later operator reads."""
        if self.keeps_offsets or input_.upstream is not None:
            return input_.name
        return later_source_name(self.spec.uid, input_.name)

    def sources(self) -> dict:
        """The sources of the inputs the plans fix, by their names ("main", "second", "broadcast": ``job.Input``;
        "<uid>:second" for a later operator's)."""
        return {i.name: i.source for i in self.planned_inputs}

    def fault(self, point: str, batch_ids) -> None:
        if self.faults is not None:
            self.faults.hit(point, batch_ids, self.spec.uid)

    def say(self, message: str) -> None:
        self.progress(f"[lakestate] job {self.spec.job_id}: {message}")

    def say_of_operator(self, message: str) -> None:
        """A line of this operator's (a dataflow's are named)."""
        self.say(f"operator {self.spec.uid}: {message}" if self.in_chain else message)
