"""A job run: restore, then a batch of microbatches in one Spark pass, exactly once (DESIGN §2).

The protocol of a run, each step durable before the next starts:

1. **plan** (write-ahead): restore the latest checkpoint (microbatch c); the
   run's microbatches are the plans already recorded after c (a crashed run's,
   replayed as they are), then new plans up to the run's bounds, each fixing
   its source range and processing time. Every new plan is written before
   anything is read.
2. **process**, one Spark pass: every subtask gets its operator state, raw
   keyed state and the keyed state of the keys the run touches (read once),
   then its records microbatch by microbatch (``exchange``, ``task``). The
   subtasks write the sink rows and state changes, each row tagged with its
   microbatch, to Parquet files (``run_files``) and return only a row per file
   and per microbatch; every user or input error surfaces here, before
   anything is committed. Rows of microbatches a table already committed are
   left out, so a replay writes nothing twice however it groups the
   microbatches.
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

from .backends import StateBackend, create_keyed_backend, create_operator_backend
from .checkpoint import check_restorable, continuing_spec, discover_descriptors
from .errors import InputError
from .exchange import KIND_FILE, KIND_STAT
from .frame import Frame
from .job import JobSpec
from .job_store import JobStore
from .lease import holding
from .records import KEYED, OPERATOR, SINK, CheckpointMetadata, MicrobatchPlan, MicrobatchStats, StateInfo, WrittenFile
from .run import commit, timing
from .run.checkpointing import Checkpointer
from .run.context import (  # noqa: F401 - the run's fault points are part of its public surface
    CLEANUP_FAULT_POINTS,
    FAULT_POINTS,
    FaultInjector,
    InjectedFault,
    RunContext,
    wall_clock_ms,
)
from .run.planning import plan_run, restore_point
from .run_files import RunOutputs, new_token, remove_uncommitted
from .settings import Settings
from .spark import wait_for_running_tasks


@dataclass
class RunResult:
    run_id: str
    restored_from: int | None
    batches: list[MicrobatchStats] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)
    seconds: float = 0.0  # from the first plan to the last commit
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def records_in(self) -> int:
        return sum(b.records_in for b in self.batches)


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


def _stats_and_files(plans: list[MicrobatchPlan], rows, tables) -> tuple[list[MicrobatchStats],
                                                                          dict[str, list[WrittenFile]]]:
    """Per microbatch, the subtasks' counters summed exactly; per table (of ``tables``), the files the subtasks
    wrote."""
    by_batch = {p.batch_id: MicrobatchStats(p.batch_id) for p in plans}
    files: dict[str, list[WrittenFile]] = {name: [] for name in tables}
    for r in rows:
        if r["kind"] == KIND_STAT:
            by_batch[r["batch_id"]].add(MicrobatchStats.from_json(r["payload"]))
        elif r["kind"] == KIND_FILE:
            info = WrittenFile.from_json(r["payload"])
            files[info.table].append(info)
    return [by_batch[p.batch_id] for p in plans], files


class JobRunner:
    """Runs one job: ``JobRunner(spark, spec, settings).run(max_microbatches=5)``."""

    def __init__(self, spark: SparkSession, spec: JobSpec, settings: Settings, *, clock: Callable[[], int] = wall_clock_ms,
                 faults: FaultInjector | None = None, progress: Callable[[str], None] = print,
                 lease_timeout_s: float = 60.0, lease_wait_s: float = 0.0):
        self.spark, self.spec, self.settings = spark, spec.validate(), settings
        self.sink_path = settings.sink(spec.sink)
        self.store = JobStore(settings.job_dir(spec.job_id))
        self.clock, self.faults, self.progress = clock, faults, progress
        self.lease_timeout_s, self.lease_wait_s = lease_timeout_s, lease_wait_s

    def _say(self, message: str) -> None:
        self.progress(f"[lakestate] job {self.spec.job_id}: {message}")

    def run(self, max_microbatches: int | None = None, max_records: int | None = None) -> RunResult:
        for name, value in (("max_microbatches", max_microbatches), ("max_records", max_records)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.settings.check_writable(self.sink_path)
        descriptors = discover_descriptors(self.spec)
        checkpoint = self.store.latest_checkpoint()
        if checkpoint is not None:
            check_restorable(self.spec, checkpoint, descriptors)
        with holding(self.store.job_dir, self.spec.job_id, "run", self.lease_wait_s, self.progress,
                     timeout_s=self.lease_timeout_s) as lease:
            checkpoint = restore_point(self.spark, self.store, self._say)  # again, now held, checked intact
            spec = self.spec
            if checkpoint is not None:
                check_restorable(spec, checkpoint, descriptors)
                spec = self._continuing(checkpoint)
            ctx = RunContext(self.spark, spec, self.settings, self.store, lease, self.sink_path, self.clock,
                             self.faults, self.progress)
            return _Run(ctx, checkpoint, descriptors).run(max_microbatches, max_records)

    def _continuing(self, checkpoint: CheckpointMetadata) -> JobSpec:
        """A job runs at the parallelism and with the backend of the checkpoint it continues from (a rescale or
        a restore set them); the definition's values only shape its first run."""
        changed = continuing_spec(self.spec, checkpoint)
        for name in ("parallelism", "backend"):
            if getattr(changed, name) != getattr(self.spec, name):
                self._say(f"the job definition says {name} {getattr(self.spec, name)}, its checkpoint "
                          f"{checkpoint.checkpoint_id} has {getattr(changed, name)}: continuing with "
                          f"{getattr(changed, name)} (change it with lakestate "
                          f"{'rescale' if name == 'parallelism' else 'restore'})")
        return changed


class _Run:
    """One run, from its restore point (``checkpoint``): the protocol's steps in order."""

    def __init__(self, ctx: RunContext, checkpoint: CheckpointMetadata | None, descriptors: dict[str, StateInfo]):
        self.ctx, self.checkpoint, self.descriptors = ctx, checkpoint, descriptors
        self.result = RunResult(ctx.run_id, checkpoint.checkpoint_id if checkpoint else None)
        spec = ctx.spec
        self.keyed = create_keyed_backend(spec.backend, ctx.spark, ctx.job_dir, spec.job_id, checkpoint)
        self.operator = create_operator_backend(spec.backend, ctx.spark, ctx.job_dir, spec.job_id, checkpoint)
        self.backends: dict[str, StateBackend] = {KEYED: self.keyed, OPERATOR: self.operator}

    def run(self, max_microbatches: int | None, max_records: int | None) -> RunResult:
        ctx, checkpoint, result = self.ctx, self.checkpoint, self.result
        ctx.say(f"restored checkpoint {checkpoint.checkpoint_id} (microbatch {checkpoint.batch_id}), run {ctx.run_id}"
                if checkpoint else f"no checkpoint, starting from the beginning, run {ctx.run_id}")
        phase = _Phases(result)
        outputs = RunOutputs(new_token(), {})
        outputs.tables[SINK] = commit.sink_output(ctx, outputs.token)  # refused before planning when unfit
        outputs.tables.update(commit.side_outputs(ctx, outputs.token))
        self.clock = timing.restored_clock(ctx, self.operator, checkpoint)
        plans, new = plan_run(ctx, checkpoint, max_microbatches, max_records, self.clock,
                              timing.timers_due_check(ctx, self.keyed, checkpoint))
        if not plans:
            return result
        batch_ids = [p.batch_id for p in plans]
        replayed = len(plans) - len(new)
        ctx.say(f"planned microbatches {batch_ids[0]}..{batch_ids[-1]}"
                + (f" ({replayed} recorded by an earlier run, replayed)" if replayed else ""))
        ctx.fault("after_plan", batch_ids)
        phase("plan")
        written: dict[str, set[str]] = {}  # per table, the files its commit added
        try:
            outputs.tables.update({n: b.output(outputs.token) for n, b in self.backends.items()})
            stats, files = self._process(plans, new, outputs)
            phase("process")
            self._commit(plans, stats, files, outputs, written, phase)
        finally:
            # Files of this run that no commit names: a failed task attempt's, or all of a failed run's.
            for t in outputs.tables.values():
                remove_uncommitted(t.directory, outputs.token, written.get(t.name, set()), t.storage,
                                   t.partition_columns)
            for backend in self.backends.values():
                backend.end_run(outputs.token)
        rate = result.records_in / result.seconds if result.seconds else 0.0
        ctx.say(f"run {ctx.run_id}: {len(plans)} microbatches, {result.records_in} records in {result.seconds}s "
                f"({rate:,.0f} records/s; " + ", ".join(f"{k} {v}s" for k, v in result.phases.items()) + ")")
        return result

    def _process(self, plans: list[MicrobatchPlan], new: list[MicrobatchPlan], outputs: RunOutputs):
        """The one Spark pass: the subtasks write their files and return a row per file and per microbatch;
        every user or input error surfaces here, before anything is committed (the new plans are dropped)."""
        ctx = self.ctx
        try:
            due = timing.due_timer_keys(ctx, self.keyed, self.checkpoint, plans)
            rows = Frame(ctx, plans, self.clock, due).process(self.checkpoint, self.keyed, self.operator,
                                                              outputs).collect()
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
        return _stats_and_files(plans, rows, outputs.tables)

    def _commit(self, plans, stats, files, outputs, written, phase) -> None:
        """Write, clean up expired state, commit each microbatch, then checkpoint."""
        ctx, result = self.ctx, self.result
        commit.write(ctx, plans, outputs, files, self.backends, written)
        registered: dict[str, StateInfo] = {}  # every state the subtasks registered in this run
        for s in stats:
            registered.update(s.descriptors)
        sweeps = commit.cleanup(ctx, self.keyed, registered, self.checkpoint, plans, stats)
        phase("write")
        commit.mark_committed(ctx, plans, stats)
        result.seconds = round(time.time() - phase.started, 2)
        phase("commit")
        result.batches = stats
        # States the function registers only while processing: recorded, marked so a restore lets them follow
        # their uid (a dry run of the definition cannot tell whether it still registers them).
        states = {**{n: d.with_lazy() for n, d in registered.items() if n not in self.descriptors},
                  **self.descriptors}
        result.checkpoints = Checkpointer(ctx, self.keyed, self.operator, states).take(
            self.checkpoint, plans, stats, sweeps)
        phase("checkpoint")


def run_job(spark: SparkSession, spec: JobSpec, settings: Settings, max_microbatches: int | None = None,
            max_records: int | None = None, **options) -> RunResult:
    """Run ``spec`` for at most ``max_microbatches`` / about ``max_records`` (or until its sources are drained)."""
    return JobRunner(spark, spec, settings, **options).run(max_microbatches, max_records)
