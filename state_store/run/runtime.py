"""A job run: restore, then a batch of microbatches in one Spark pass, exactly once (docs/concepts.md, "A run").

The protocol of a run, each step durable before the next starts:

1. **plan** (write-ahead): restore the latest checkpoint (microbatch c); the
   run's microbatches are the plans already recorded after c (a crashed run's,
   replayed as they are), then new plans up to the run's bounds, each fixing
   its source range and processing time. Every new plan is written before
   anything is read.
2. **process**, one Spark pass: every subtask gets its operator state, raw keyed state and the keyed state of
   the keys the run touches (read once), then its records microbatch by microbatch (``exchange``,
   ``subtask/reader``). The subtasks write the sink rows and state changes, each row tagged with its microbatch,
   to Parquet files (``run_files``) and return only a row per file and per microbatch; every user or input error
   surfaces here, before anything is committed. Rows of microbatches a table already committed are left out, so
   a replay writes nothing twice however it groups the microbatches.
3. **write**: one Delta commit per table per run adds its files (the sink,
   keyed and operator tables at once), with ``txnAppId``/``txnVersion`` (= the
   run's last microbatch). Files that no commit names are removed.
4. **commit** each microbatch (a marker file), then **checkpoint**: a row every
   ``checkpoint_interval`` microbatches and at the end of the run, each pinning
   table versions and its microbatch, written last; then expire checkpoints
   beyond ``num_retained``.

A crash anywhere and a rerun give the state and output of a run without the
crash: the rerun restores the latest checkpoint and replays the recorded
plans; the tables skip what they already have.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Callable

from pyspark.sql import SparkSession

from ..catalog.job_store import JobStore
from ..catalog.lease import holding
from ..delta.sink import as_sink
from ..errors import InputError
from ..graph import Job, as_job
from ..job import JobSpec
from ..progress import wing_logger
from ..records.metadata import CheckpointMetadata, MicrobatchPlan
from ..records.stats import MicrobatchStats
from ..registered_states import discover_descriptors
from ..restore_plan import continuing_spec
from ..settings import Settings
from ..side_outputs import check_one_writer_per_table
from ..sinks import sink_name
from ..spark.session import wait_for_running_tasks
from ..subtask.run_files import new_token
from . import commit, timing
from .checkpointing import take_checkpoints
from .context import (  # noqa: F401 - the run's fault points are part of its public surface
    CLEANUP_FAULT_POINTS,
    FAULT_POINTS,
    FaultInjector,
    InjectedFault,
    RunContext,
    wall_clock_ms,
)
from .operator_run import OperatorRun, chain_timers_due, check_chain_restorable, close_all, records_from_sources
from .planning import plan_run, restore_point


@dataclass
class RunResult:
    run_id: str
    restored_from: int | None
    batches: list[MicrobatchStats] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)  # taken by the run (some may be expired by its end)
    retained: list[int] = field(default_factory=list)  # the job's checkpoints at the run's end
    skipped: list[int] = field(default_factory=list)  # ids due but not written: num_retained would expire them
    seconds: float = 0.0  # from the first plan to the last commit
    phases: dict[str, float] = field(default_factory=dict)

    sink_batches: list[MicrobatchStats] = field(default_factory=list)  # the operator's that writes the job's sink
    sink_rows: dict[str, dict] = field(default_factory=dict)  # a graph's: each sink's table and rows, by uid
    side_rows: dict[str, int] = field(default_factory=dict)  # rows the run wrote to each side output, by tag
    late_dropped: dict[str, int] = field(default_factory=dict)  # records dropped as late, by operator uid
    sources_in: int | None = None  # records read from every source (a later operator's too): records_in

    @property
    def records_in(self) -> int:
        return sum(b.records_in for b in self.batches) if self.sources_in is None else self.sources_in

    @property
    def records_out(self) -> int:
        """Rows the run wrote to the sink (a dataflow: what its last operator emitted)."""
        return sum(b.records_out for b in self.sink_batches or self.batches)

    def summary(self, job_id: str) -> dict:
        """What a run says to machines (the ``[lakestate] summary:`` line: the Airflow operator's XCom, and its
        Asset events' extra: the sink's, and each side output's with its own ``records_out``)."""
        records, seconds = self.records_in, self.seconds
        return {"job": job_id, "run_id": self.run_id, "microbatches": [b.batch_id for b in self.batches],
                "records_in": records, "records_out": self.records_out, "side_outputs": dict(self.side_rows),
                **({"sinks": dict(self.sink_rows)} if len(self.sink_rows) > 1 else {}),
                "checkpoints": list(self.checkpoints), "retained_checkpoints": list(self.retained),
                "seconds": round(seconds, 2),
                "records_per_s": round(records / seconds, 2) if seconds else None}


class _Phases:
    """Seconds per phase of a run, into ``result.phases``."""

    def __init__(self, result: RunResult):
        self.result, self.started, self.mark = result, time.time(), time.time()

    def __call__(self, name: str) -> None:
        now = time.time()
        self.result.phases[name] = round(now - self.mark, 2)
        self.mark = now


_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception|Fault|Exit)): (.+)$", re.M)


def _explain(error: Exception) -> str:
    """The useful line of a Spark or Python worker error: the outermost error the Python worker raised (ours
    carry where it happened and the fix), else Spark's own first line; the full trace stays chained."""
    text = str(error)
    found = [(name, line) for name, line in _ERROR_LINE.findall(text)
             if name not in ("PythonException", "SparkException", "Py4JJavaError")]
    if found:
        name, line = found[-1]
        return f"{name}: {line}"
    lines = [line for line in text.splitlines() if line.strip()]
    return " | ".join(lines[:3])[:1200]


class JobRunner:
    """Runs a job (an operator or a dataflow's chain): ``JobRunner(spark, spec, settings).run(max_microbatches=5)``."""

    def __init__(self, spark: SparkSession, spec: JobSpec | Job, settings: Settings, *,
                 clock: Callable[[], int] = wall_clock_ms, faults: FaultInjector | None = None,
                 progress: Callable[[str], None] = wing_logger(__name__).info, lease_timeout_s: float = 60.0,
                 lease_wait_s: float = 0.0, end_of_input: bool = False):
        self.spark, self.spec, self.settings = spark, as_job(spec).validate(), settings
        self.store = JobStore(settings.job_dir(spec.job_id))
        self.clock, self.faults, self.progress = clock, faults, progress
        self.lease_timeout_s, self.lease_wait_s, self.end_of_input = lease_timeout_s, lease_wait_s, end_of_input

    def _say(self, message: str) -> None:
        self.progress(f"[lakestate] job {self.spec.job_id}: {message}")

    def run(self, max_microbatches: int | None = None, max_records: int | None = None) -> RunResult:
        for name, value in (("max_microbatches", max_microbatches), ("max_records", max_records)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        check_one_writer_per_table(self.spec.tables(), self.settings.sink)  # also for a job never registered
        for path, _ in (sinks := self._sinks()).values():
            self.settings.check_writable(path)
        specs = self.spec.operators
        descriptors = [discover_descriptors(op) for op in specs]
        checkpoint = self.store.latest_checkpoint()
        if checkpoint is not None:
            check_chain_restorable(specs, checkpoint, descriptors)
        with holding(self.store.job_dir, self.spec.job_id, "run", self.lease_wait_s, self.progress,
                     timeout_s=self.lease_timeout_s) as lease:
            checkpoint = restore_point(self.spark, self.store, self._say)  # again, now held, checked intact
            if checkpoint is not None:
                check_chain_restorable(specs, checkpoint, descriptors)
                specs = [self._continuing(op, checkpoint.of_operator(op.uid)) for op in specs]
            operators = []
            for i, op in enumerate(specs):
                store = self.store if i == 0 else JobStore(self.store.operator_dir(op.uid))
                path, sink = sinks.get(op.uid, (None, None))
                ctx = RunContext(self.spark, op, self.settings, store, lease,
                                 path or store.staging_dir / f"edge-{lease.run_id}", self.clock, self.faults,
                                 self.progress, edge=sink is None, in_chain=len(specs) > 1, sink=sink,
                                 side_edges={tag: store.staging_dir / f"edge-{lease.run_id}-side-{tag}"
                                             for tag in self.spec.streamed_side_outputs(op.uid)},
                                 planned=self.spec.planned_inputs() if i == 0 else ())
                operators.append(OperatorRun(ctx, checkpoint.of_operator(op.uid) if checkpoint else None,
                                             descriptors[i]))
            return _Run(operators, checkpoint, self.end_of_input).run(max_microbatches, max_records)

    def _sinks(self) -> dict:
        """The table each operator that writes a sink writes, resolved, and its ``Sink``, by uid (a chain's last
        operator; each branch's end in a graph)."""
        return {uid: (self.settings.sink(sink_name(sink)), as_sink(sink)) for uid in self.spec.uids
                if (sink := self.spec.sink_of(uid)) is not None}

    def _continuing(self, spec: JobSpec, checkpoint: CheckpointMetadata | None) -> JobSpec:
        """A job runs at the parallelism and with the backend of the checkpoint it continues from (a rescale or
        a restore set them); the definition's values only shape its first run."""
        if checkpoint is None:  # an operator new to the dataflow: it starts empty
            return spec
        changed = continuing_spec(spec, checkpoint)
        which = "" if self.spec.single else f" operator {spec.uid}"
        for name in ("parallelism", "backend"):
            if getattr(changed, name) != getattr(spec, name):
                self._say(f"the job definition says{which} {name} {getattr(spec, name)}, its checkpoint "
                          f"{checkpoint.checkpoint_id} has {getattr(changed, name)}: continuing with "
                          f"{getattr(changed, name)} (change it with lakestate "
                          f"{'rescale' if name == 'parallelism' else 'restore'})")
        return changed


class _Run:
    """One run, from its restore point (``checkpoint``): the protocol's steps in order, through each operator
    in turn (one for most jobs; a dataflow's chain, ``operators[0]`` reading the source)."""

    def __init__(self, operators: list[OperatorRun], checkpoint: CheckpointMetadata | None, end_of_input: bool):
        self.operators, self.head, self.checkpoint, self.ends = operators, operators[0], checkpoint, end_of_input
        # the operator that writes the job's own sink (a chain's last; in a graph, the first branch's end)
        own = self.head.ctx.settings.sink(sink_name(self.head.ctx.spec.sink))
        self.sinking = next(op for op in operators if not op.ctx.edge and op.ctx.sink_path == own)
        self.ctx = self.head.ctx
        self.result = RunResult(self.ctx.run_id, checkpoint.checkpoint_id if checkpoint else None)

    def run(self, max_microbatches: int | None, max_records: int | None) -> RunResult:
        ctx, checkpoint, result, head = self.ctx, self.checkpoint, self.result, self.head
        ctx.say(f"restored checkpoint {checkpoint.checkpoint_id} (microbatch {checkpoint.batch_id}), run {ctx.run_id}"
                if checkpoint else f"no checkpoint, starting from the beginning, run {ctx.run_id}")
        phase = _Phases(result)
        token = new_token()
        for op in self.operators:  # sinks refused before planning when unfit
            op.open(token)
        self.clock = timing.restored_clock(ctx, head.operator, head.checkpoint)
        plans, new = plan_run(ctx, head.checkpoint, max_microbatches, max_records, self.clock,
                              chain_timers_due(self.operators), self.ends)
        if not plans:
            return result
        batch_ids = [p.batch_id for p in plans]
        replayed = len(plans) - len(new)
        ctx.say(f"planned microbatches {batch_ids[0]}..{batch_ids[-1]}"
                + (f" ({replayed} recorded by an earlier run, replayed)" if replayed else ""))
        ctx.fault("after_plan", batch_ids)
        phase("plan")
        try:
            self._process(plans, new, phase)
            self._commit(plans, phase)
        finally:
            close_all(self.operators)
        rate = result.records_in / result.seconds if result.seconds else 0.0
        ctx.say(f"run {ctx.run_id}: {len(plans)} microbatches, {result.records_in} records in {result.seconds}s "
                f"({rate:,.0f} records/s; " + ", ".join(f"{k} {v}s" for k, v in result.phases.items()) + ")")
        return result

    def _process(self, plans: list[MicrobatchPlan], new: list[MicrobatchPlan], phase) -> None:
        """The Spark pass of each operator in turn, each fed what the one before emitted (its phase "process",
        a dataflow's "process <uid>" each); every user or input error surfaces here, before anything is committed
        (the new plans are dropped)."""
        ctx, emitted = self.ctx, {}
        try:
            for op in self.operators:
                emitted.update(op.process(plans, self.clock, emitted))
                phase(f"process {op.ctx.spec.uid}" if len(self.operators) > 1 else "process")
        except Exception as e:
            wait_for_running_tasks(ctx.spark)
            for plan in new:
                ctx.store.drop_plan(plan.batch_id)
            first, last = plans[0].batch_id, plans[-1].batch_id
            which = f"microbatch {first}" if first == last else f"microbatches {first}..{last}"
            raise InputError(
                f"{which} of job {ctx.spec.job_id!r} failed before anything was written: {_explain(e)} "
                f"(input: {json.dumps([p.sources for p in plans])[:600]})"
            ) from e

    def _commit(self, plans, phase) -> None:
        """Write, clean up expired state, commit each microbatch, then checkpoint."""
        ctx, result = self.ctx, self.result
        for op in self.operators:
            op.write(plans)
        sweeps = [op.cleanup(plans) for op in self.operators]
        phase("write")
        for op in self.operators:
            commit.mark_committed(op.ctx, plans, op.stats, record=op is self.head)
        result.seconds = round(time.time() - phase.started, 2)
        phase("commit")
        result.batches, result.sink_batches = self.head.stats, self.sinking.stats
        result.sources_in = records_from_sources(self.operators)
        result.sink_rows = {op.ctx.spec.uid: {"table": str(op.ctx.sink_path),
                                              "records_out": sum(b.records_out for b in op.stats)}
                            for op in self.operators if not op.ctx.edge}
        result.side_rows = {}
        for op in self.operators:  # a dataflow's side outputs (and late records) may be any operator's
            for stats in op.stats:
                for tag, rows in stats.side_rows.items():
                    result.side_rows[tag] = result.side_rows.get(tag, 0) + rows
            if late := sum(s.late_dropped for s in op.stats):
                result.late_dropped[op.ctx.spec.uid] = late
        first = ctx.store.next_checkpoint_id()
        result.checkpoints = take_checkpoints([op.checkpointer(w) for op, w in zip(self.operators, sweeps)], plans,
                                              self.sinking.ctx.spec.uid)
        result.retained = ctx.store.checkpoint_ids()
        result.skipped = list(range(first, result.checkpoints[0])) if result.checkpoints else []
        phase("checkpoint")


def run_job(spark: SparkSession, spec: JobSpec | Job, settings: Settings, max_microbatches: int | None = None,
            max_records: int | None = None, **options) -> RunResult:
    """Run ``spec`` for at most ``max_microbatches`` / about ``max_records`` (or until its sources are drained);
    ``end_of_input=True``: its inputs are bounded and end here (``planning.plan_run``)."""
    return JobRunner(spark, spec, settings, **options).run(max_microbatches, max_records)
