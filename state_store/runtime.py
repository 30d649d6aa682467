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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .backends import StateBackend, checkpoint_damage, create_keyed_backend, create_operator_backend
from .catalog import CorruptCheckpoint, JobMeta
from .checkpoint import CheckpointMetadata, MicrobatchPlan, check_restorable, continuing_spec, discover_descriptors
from .delta_log import app_transaction_version, table_metadata, table_snapshot
from .descriptors import qualified_name
from .errors import InputError, RestoreError
from .exchange import (
    BROADCAST_RECORD,
    EXCHANGE_COLUMNS,
    KIND_FILE,
    KIND_STAT,
    PHASE_KEYED,
    PHASE_OPERATOR,
    PHASE_RAW_KEYED,
    PHASE_RECORD,
    PHASE_SUBTASK,
    RECORD,
    SIDE_BROADCAST,
    SIDE_KEYED,
    SORT_KEY,
    MAX_RUN_MICROBATCHES,
    partition_keys,
    sort_key_parts,
    RESULT_DDL,
    sort_columns,
)
from .job import KEY_TYPES, JobSpec
from .key_groups import key_group_ranges
from .lease import JobLease, remove_if_only_the_lease
from .operator_state import SOURCE_OFFSETS_STATE, SPLIT_DISTRIBUTE, UNION
from .repartition import split_slices
from .settings import Settings
from .sources import POSITION_COLUMNS, source_split_entries, warn_changed
from .spark import key_group_column, subtask_column
from .run_files import KEYED as KEYED_TABLE
from .run_files import OPERATOR as OPERATOR_TABLE
from .run_files import SINK, SINK_MICROBATCH, OutputTable, RunOutputs, new_token, remove_uncommitted, write_rows
from .state_tables import append_idempotent, commit_files
from .task import RAW_KEYED, RunPlan, run_partition
from .storage import options_of
from .ttl import count_entries, drop_expired, run_incremental_cleanup, ttl_states

FAULT_POINTS = (
    "after_plan",
    "before_sink_write", "after_sink_write",
    "before_state_write", "after_state_write",
    "before_commit", "after_commit",
    "before_checkpoint", "after_checkpoint",
)
# Reached only by a run of a job with TTL's incremental cleanup, once its state is written.
CLEANUP_FAULT_POINTS = ("before_cleanup_write", "after_cleanup_write")
SMALL_RUN_RECORDS = 10_000  # a run of at most this many records reads only the key groups it touches


class InjectedFault(RuntimeError):
    """Raised by a FaultInjector: stands for a crash at one step of the protocol."""


@dataclass
class FaultInjector:
    """Crash (or call ``action``) when the run reaches ``point`` with microbatch ``batch_id`` in hand."""

    point: str
    batch_id: int = 0
    action: Callable[[], None] | None = None

    def __post_init__(self):
        if self.point not in FAULT_POINTS + CLEANUP_FAULT_POINTS:
            raise ValueError(f"unknown fault point {self.point!r}; choose one of {FAULT_POINTS + CLEANUP_FAULT_POINTS}")

    def hit(self, point: str, batch_ids) -> None:
        if point == self.point and self.batch_id in batch_ids:
            if self.action is not None:
                self.action()
            else:
                raise InjectedFault(f"injected crash at {point} of microbatch {self.batch_id}")


@dataclass
class RunResult:
    run_id: str
    restored_from: int | None
    batches: list[dict] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)
    seconds: float = 0.0  # from the first plan to the last commit
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def records_in(self) -> int:
        return sum(b["records_in"] for b in self.batches)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


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
    """Runs one job: ``JobRunner(spark, spec, settings).run(max_microbatches=5)``."""

    def __init__(self, spark: SparkSession, spec: JobSpec, settings: Settings, *, clock: Callable[[], int] = wall_clock_ms,
                 faults: FaultInjector | None = None, progress: Callable[[str], None] = print,
                 lease_timeout_s: float = 60.0, lease_wait_s: float = 0.0):
        self.spark, self.spec, self.settings = spark, spec.validate(), settings
        self.sink_path = settings.sink(spec.sink)
        self.job_dir = settings.job_dir(spec.job_id)
        self.meta = JobMeta(self.job_dir)
        self.clock, self.faults, self.progress = clock, faults, progress
        self.lease = JobLease(self.meta.dir / "lease", spec.job_id, lease_timeout_s)
        self.lease_wait_s = lease_wait_s
        self.p, self.maxp = spec.parallelism, spec.effective_max_parallelism
        self._registered: dict[str, dict] = {}  # every state the subtasks registered in this run

    @property
    def sink_app_id(self) -> str:
        """The Delta ``txnAppId`` of the job's sink writes."""
        return f"lakestate:{self.spec.job_id}:sink"

    def _fault(self, point: str, batch_ids) -> None:
        if self.faults is not None:
            self.faults.hit(point, batch_ids)

    def _say(self, message: str) -> None:
        self.progress(f"[lakestate] job {self.spec.job_id}: {message}")

    def _sources(self) -> dict:
        sources = {"main": self.spec.source}
        if self.spec.broadcast_source is not None:
            sources["broadcast"] = self.spec.broadcast_source
        return sources

    def _restore_point(self) -> CheckpointMetadata | None:
        """The newest retained checkpoint that can be restored: its file readable, and every log and data file
        it pins there. A damaged one is named in a warning and the one before it is used (its later
        microbatches are replayed from their recorded plans), except where the delta backend's table itself is
        damaged: every run appends to that table, so an older checkpoint cannot stand in for it."""
        problems: list[str] = []
        for cid in reversed(self.meta.checkpoint_ids()):
            try:
                checkpoint = self.meta.checkpoint(cid)
            except CorruptCheckpoint as e:
                problems.append(str(e))
                continue
            damage = checkpoint_damage(self.spark, self.job_dir, checkpoint)
            if damage and checkpoint.state.get("keyed", {}).get("incremental"):
                raise RestoreError("; ".join(damage) + ". The delta backend appends every run to its state "
                                   "tables, so an older checkpoint cannot stand in for a damaged table")
            if damage:
                problems.extend(damage)
                continue
            for problem in problems:
                self._say(f"warning: {problem}")
            if problems:
                self._say(f"warning: falling back to checkpoint {cid} (microbatch {checkpoint.batch_id}); the "
                          f"microbatches after it are replayed from their recorded plans")
            return checkpoint
        if problems:
            raise RestoreError("no retained checkpoint can be restored: " + " | ".join(problems))
        return None

    # -- 1. plan --------------------------------------------------------------------------------------------
    def _plan_one(self, batch_id: int, offsets: dict) -> MicrobatchPlan | None:
        ranges, records, any_new = {}, 0, False
        for name, source in self._sources().items():
            start = offsets.get(name) or source.initial_offset()
            end = source.next_offset(self.spark, start)
            any_new |= end is not None
            ranges[name] = {"start": start, "end": end if end is not None else start}
            if name == "main" and end is not None:
                records = source.count_records(start, end)
        if not any_new:
            return None
        return MicrobatchPlan(batch_id, ranges, int(self.clock()), self.lease.run_id, records)

    def _plan_run(self, checkpoint: CheckpointMetadata | None, max_microbatches: int | None,
                  max_records: int | None) -> tuple[list[MicrobatchPlan], list[MicrobatchPlan]]:
        """The run's microbatches (recorded plans first, then new ones) and which of them are new."""
        batch_id = checkpoint.batch_id + 1 if checkpoint else 0
        offsets = dict(checkpoint.source_offsets) if checkpoint else {}
        warn_changed(self._sources(), offsets, lambda line: self._say(f"warning: {line}"))  # once per run
        plans: list[MicrobatchPlan] = []
        new: list[MicrobatchPlan] = []
        records = 0
        limit = min(max_microbatches or MAX_RUN_MICROBATCHES, MAX_RUN_MICROBATCHES)
        while len(plans) < limit:
            plan = self.meta.read_plan(batch_id)
            if plan is None:
                plan = self._plan_one(batch_id, offsets)
                if plan is None:
                    self._say(f"source drained: no new input after microbatch {batch_id - 1}" if batch_id
                              else "source drained: no input yet")
                    break
                if max_records is not None and plans and records + (plan.records or 0) > max_records:
                    break
                new.append(plan)
            plans.append(plan)
            records += plan.records or 0
            offsets = plan.end_offsets
            batch_id += 1
        for plan in new:  # write-ahead: every range is fixed before anything is read
            self.meta.write_plan(plan)
        return plans, new

    # -- 2. process -----------------------------------------------------------------------------------------
    def _frame(self, df: DataFrame, record_ddl: str, brecord_ddl: str | None, **columns) -> DataFrame:
        """``df`` as exchange rows: the named columns, typed nulls for the rest."""
        cols = []
        for name, ddl in EXCHANGE_COLUMNS:
            value = columns.get(name, F.col(name) if name in df.columns else None)
            cols.append((value if value is not None else F.lit(None)).cast(ddl).alias(name))
        cols.append((columns.get(RECORD) if RECORD in columns else F.lit(None)).cast(record_ddl).alias(RECORD))
        if brecord_ddl is not None:
            value = columns.get(BROADCAST_RECORD) if BROADCAST_RECORD in columns else F.lit(None)
            cols.append(value.cast(brecord_ddl).alias(BROADCAST_RECORD))
        return df.select(*cols)

    def _records(self, plans: list[MicrobatchPlan], record_ddl: str, brecord_ddl: str | None) -> list[DataFrame]:
        spec, parts = self.spec, []
        main = spec.source.read_run(self.spark, [(p.batch_id, p.sources["main"]["start"], p.sources["main"]["end"])
                                                 for p in plans])
        if main is not None:
            key = spec.key
            if key not in main.columns:
                raise InputError(f"the source has no key column {key!r} (columns: {main.columns}); fix the job's key")
            actual, expected = main.schema[key].dataType.simpleString(), KEY_TYPES[spec.key_type.name]
            if actual != expected:
                raise InputError(
                    f"key column {key!r} is {actual} in the source but the job declares key_type "
                    f"{spec.key_type.name} ({expected}); cast it in the source or change key_type"
                )
            data = [c for c in main.columns if c not in POSITION_COLUMNS]
            kg = key_group_column(F.col(f"`{key}`"), self.maxp)
            parts.append(self._frame(
                main, record_ddl, brecord_ddl, subtask=subtask_column(kg, self.p, self.maxp), phase=F.lit(PHASE_RECORD),
                side=F.lit(SIDE_KEYED), key=F.col(f"`{key}`").cast("string"), key_group=kg,
                record=F.struct(*[F.col(f"`{c}`") for c in data])))
        if spec.broadcast_source is not None:
            b = spec.broadcast_source.read_run(self.spark, [
                (p.batch_id, p.sources["broadcast"]["start"], p.sources["broadcast"]["end"]) for p in plans])
            if b is not None:
                data = [c for c in b.columns if c not in POSITION_COLUMNS]
                b = b.select(F.struct(*[F.col(f"`{c}`") for c in data]).alias(BROADCAST_RECORD),
                             *POSITION_COLUMNS).crossJoin(self._subtasks())
                parts.append(self._frame(b, record_ddl, brecord_ddl, phase=F.lit(PHASE_RECORD),
                                         side=F.lit(SIDE_BROADCAST), brecord=F.col(BROADCAST_RECORD)))
        return parts

    def _subtasks(self) -> DataFrame:
        return self.spark.range(self.p).select(F.col("id").cast("int").alias("subtask"))

    def _process(self, plans: list[MicrobatchPlan], checkpoint: CheckpointMetadata | None,
                 keyed_backend: StateBackend, operator_backend: StateBackend, outputs: RunOutputs) -> DataFrame:
        spec, spark = self.spec, self.spark
        record_ddl = spec.source.record_ddl(spark)
        brecord_ddl = spec.broadcast_source.record_ddl(spark) if spec.broadcast_source is not None else None
        records = self._records(plans, record_ddl, brecord_ddl)
        raw_name = qualified_name(spec.uid, RAW_KEYED)

        # The state of the keys the run touches, read once; raw keyed state (key "") of every key group too.
        touched = [r.filter(F.col("side") == SIDE_KEYED).select("key_group", "key") for r in records]
        touched.append(spark.range(self.maxp).select(F.col("id").cast("int").alias("key_group"),
                                                     F.lit("").alias("key")))
        touched_keys = touched[0]
        for t in touched[1:]:
            touched_keys = touched_keys.unionByName(t)
        touched_keys = touched_keys.distinct()

        def restrict(df: DataFrame) -> DataFrame:
            return df.join(touched_keys, ["key_group", "key"], "left_semi")

        known = [p.records for p in plans]
        if checkpoint is not None and len(touched) > 1 and None not in known and sum(known) <= SMALL_RUN_RECORDS:
            # A small run touches few key groups: read only their partitions (and the raw keyed state of
            # all), and broadcast the touched keys rather than shuffle the state to them.
            groups = touched[0]
            for t in touched[1:-1]:
                groups = groups.unionByName(t)
            groups = sorted(r[0] for r in groups.select("key_group").distinct().collect())
            small = F.broadcast(touched_keys)

            def restrict(df: DataFrame) -> DataFrame:  # noqa: F811 - the small run's narrower read
                return (df.filter(F.col("key_group").isin(groups) | (F.col("state_name") == raw_name))
                        .join(small, ["key_group", "key"], "left_semi"))

        keyed = keyed_backend.read(checkpoint, restrict)
        keyed = self._frame(
            keyed, record_ddl, brecord_ddl, subtask=subtask_column(F.col("key_group"), self.p, self.maxp),
            phase=F.when(F.col("state_name") == raw_name, F.lit(PHASE_RAW_KEYED)).otherwise(F.lit(PHASE_KEYED)))

        operator = operator_backend.read(checkpoint).filter(F.col("state_name") != SOURCE_OFFSETS_STATE)
        own = operator.filter(F.col("mode") != UNION)
        union = operator.filter(F.col("mode") == UNION).withColumnRenamed("subtask", "origin").crossJoin(self._subtasks())
        operator = self._frame(own, record_ddl, brecord_ddl, phase=F.lit(PHASE_OPERATOR), origin=F.col("subtask"))
        operator = operator.unionByName(
            self._frame(union, record_ddl, brecord_ddl, phase=F.lit(PHASE_OPERATOR), origin=F.col("origin")))

        markers = self._frame(self._subtasks(), record_ddl, brecord_ddl, phase=F.lit(PHASE_SUBTASK))
        frame = markers.unionByName(operator).unionByName(keyed)
        for part in records:
            frame = frame.unionByName(part)
        # One Spark partition per subtask, sorted in the order the subtask reads (exchange's docstring).
        keys = F.array(*[F.lit(k) for k in partition_keys(self.p)])
        first = plans[0].batch_id
        sort_key = F.lit(0).cast("bigint")
        for name, (shift, _) in sort_key_parts().items():
            value = F.col("batch_id") - F.lit(first) if name == "batch_index" else F.col(name)
            sort_key = sort_key + F.shiftleft(F.coalesce(value.cast("bigint"), F.lit(0).cast("bigint")), shift)
        frame = (frame.repartition(self.p, F.element_at(keys, F.col("subtask") + 1))
                 .withColumn(SORT_KEY, sort_key)
                 .sortWithinPartitions(*[F.col(c).asc_nulls_last() for c in sort_columns(list(spec.order_by))])
                 .drop(SORT_KEY))
        run_plan = RunPlan(spec.uid, spec.function, spec.key_type, spec.output_type, self.p, self.maxp,
                           checkpoint is not None, [(p.batch_id, p.timestamp) for p in plans], outputs)

        def subtasks(batches):
            return run_partition(run_plan, batches)

        return frame.mapInArrow(subtasks, RESULT_DDL)

    # -- the run ------------------------------------------------------------------------------------------------
    def run(self, max_microbatches: int | None = None, max_records: int | None = None) -> RunResult:
        for name, value in (("max_microbatches", max_microbatches), ("max_records", max_records)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.settings.check_writable(self.sink_path)
        descriptors = discover_descriptors(self.spec)
        checkpoint = self.meta.latest_checkpoint()
        if checkpoint is not None:
            check_restorable(self.spec, checkpoint, descriptors)
        existed = self.job_dir.exists()
        try:
            self.lease.acquire_waiting(self.lease_wait_s, self._say)
            try:
                return self._run(max_microbatches, max_records, descriptors)
            finally:
                self.lease.release()
        finally:
            if not existed:
                remove_if_only_the_lease(self.job_dir, self.lease.dir)

    def _continue_as(self, checkpoint: CheckpointMetadata) -> None:
        """A job runs at the parallelism and with the backend of the checkpoint it continues from (a rescale or
        a restore set them); the definition's values only shape its first run."""
        changed = continuing_spec(self.spec, checkpoint)
        for name in ("parallelism", "backend"):
            if getattr(changed, name) != getattr(self.spec, name):
                self._say(f"the job definition says {name} {getattr(self.spec, name)}, its checkpoint "
                          f"{checkpoint.checkpoint_id} has {getattr(changed, name)}: continuing with "
                          f"{getattr(changed, name)} (change it with lakestate "
                          f"{'rescale' if name == 'parallelism' else 'restore'})")
        self.spec, self.p, self.maxp = changed, changed.parallelism, changed.effective_max_parallelism

    def _run(self, max_microbatches: int | None, max_records: int | None, descriptors: dict) -> RunResult:
        spec, meta = self.spec, self.meta
        checkpoint = self._restore_point()  # again, now that we hold the job, and checked to be intact
        if checkpoint is not None:
            check_restorable(spec, checkpoint, descriptors)
            self._continue_as(checkpoint)
            spec = self.spec
        result = RunResult(self.lease.run_id, checkpoint.checkpoint_id if checkpoint else None)
        if checkpoint:
            self._say(f"restored checkpoint {checkpoint.checkpoint_id} (microbatch {checkpoint.batch_id}), "
                      f"run {self.lease.run_id}")
        else:
            self._say(f"no checkpoint, starting from the beginning, run {self.lease.run_id}")
        started = time.time()
        mark = [started]

        def phase(name: str) -> None:
            now = time.time()
            result.phases[name] = round(now - mark[0], 2)
            mark[0] = now

        token = new_token()
        sink = self._sink_output(token)  # a sink that cannot take the job's rows is refused before planning
        plans, new = self._plan_run(checkpoint, max_microbatches, max_records)
        if not plans:
            return result
        batch_ids = [p.batch_id for p in plans]
        replayed = len(plans) - len(new)
        self._say(f"planned microbatches {batch_ids[0]}..{batch_ids[-1]}"
                  + (f" ({replayed} recorded by an earlier run, replayed)" if replayed else ""))
        self._fault("after_plan", batch_ids)
        phase("plan")

        keyed_backend = create_keyed_backend(spec.backend, self.spark, self.job_dir, spec.job_id, checkpoint)
        operator_backend = create_operator_backend(spec.backend, self.spark, self.job_dir, spec.job_id, checkpoint)
        backends = {KEYED_TABLE: keyed_backend, OPERATOR_TABLE: operator_backend}
        outputs = RunOutputs(token, {})
        written: dict[str, set[str]] = {}  # per table, the files its commit added
        try:
            outputs.tables.update({SINK: sink, **{n: b.output(token) for n, b in backends.items()}})
            try:
                # One Spark job: the subtasks write their files and return a row per file and per microbatch;
                # every user or input error surfaces here, before anything is committed.
                rows = self._process(plans, checkpoint, keyed_backend, operator_backend, outputs).collect()
            except Exception as e:
                self._wait_for_running_tasks()
                for plan in new:
                    meta.drop_plan(plan.batch_id)
                which = (f"microbatch {batch_ids[0]}" if len(batch_ids) == 1
                         else f"microbatches {batch_ids[0]}..{batch_ids[-1]}")
                raise InputError(
                    f"{which} of job {spec.job_id!r} failed before anything was written: {_explain(e)} "
                    f"(input: {json.dumps([p.sources for p in plans])[:600]})"
                ) from e
            stats = self._stats(plans, [(r["batch_id"], r["payload"]) for r in rows if r["kind"] == KIND_STAT])
            files = {name: [] for name in outputs.tables}
            for r in rows:
                if r["kind"] == KIND_FILE:
                    info = json.loads(r["payload"])
                    files[info["table"]].append(info)
            phase("process")
            self._write(plans, outputs, files, backends, written)
            self._cleanup = run_incremental_cleanup(keyed_backend, self._registered, checkpoint, plans, stats,
                                                    self.p, self.maxp, self._fault, self._say)
            phase("write")
            self._fault("before_commit", batch_ids)
            committed = wall_clock_ms()
            for s in stats:
                meta.write_commit(s["batch_id"], {**s, "run_id": self.lease.run_id, "committed_ms": committed})
            self._fault("after_commit", batch_ids)
            result.seconds = round(time.time() - started, 2)
            phase("commit")
            for s in stats:
                self._say(f"microbatch {s['batch_id']}: {s['records_in']} records in ({s['broadcast_in']} broadcast), "
                          f"{s['keys']} keys, {s['records_out']} out, {s['state_upserts']} state entries written, "
                          f"{s['state_deletes']} deleted")
            result.batches = stats
            result.checkpoints = self._checkpoints(checkpoint, plans, stats, keyed_backend, operator_backend,
                                                   descriptors)
            phase("checkpoint")
        finally:
            # Files of this run that no commit names: a failed task attempt's, or all of a failed run's.
            for t in outputs.tables.values():
                remove_uncommitted(t.directory, token, written.get(t.name, set()), t.storage, t.partition_columns)
            for backend in backends.values():
                backend.end_run(token)
        records = result.records_in
        rate = records / result.seconds if result.seconds else 0.0
        self._say(f"run {self.lease.run_id}: {len(plans)} microbatches, {records} records in {result.seconds}s "
                  f"({rate:,.0f} records/s; " + ", ".join(f"{k} {v}s" for k, v in result.phases.items()) + ")")
        return result

    def _wait_for_running_tasks(self, seconds: float = 60.0) -> None:
        """After a failed pass, let Spark stop its other tasks first: one still running could write a file after
        the run removed its uncommitted ones. An aborted stage leaves the active list before its other tasks are
        killed, so the executors' running tasks are waited for too, then Spark's grace for a killed task's
        Python worker (``spark.python.task.killTimeout``), which may still be writing."""
        sc, deadline = self.spark.sparkContext, time.time() + seconds
        tracker, executors = sc.statusTracker(), sc._jsc.sc().statusTracker()
        while (tracker.getActiveStageIds() or any(e.numRunningTasks() for e in executors.getExecutorInfos())) \
                and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(min(2.0, max(0.0, deadline - time.time())))

    def _stats(self, plans: list[MicrobatchPlan], rows) -> list[dict]:
        """Per microbatch, the subtasks' counters summed exactly."""
        by_batch = {p.batch_id: {"batch_id": p.batch_id, "records_in": 0, "broadcast_in": 0, "keys": 0,
                                 "records_out": 0, "state_upserts": 0, "state_deletes": 0, "entries_delta": {},
                                 "worker_peak_rss_kb": 0}
                    for p in plans}
        for batch_id, payload in rows:
            s, total = json.loads(payload), by_batch[batch_id]
            total["records_in"] += s["records"]
            total["broadcast_in"] = max(total["broadcast_in"], s["broadcast"])  # every subtask sees every one
            total["keys"] += s["keys"]
            total["records_out"] += s["outputs"]
            total["state_upserts"] += s["upserts"]
            total["state_deletes"] += s["deletes"]
            total["worker_peak_rss_kb"] = max(total["worker_peak_rss_kb"], s.get("peak_rss_kb", 0))
            for name, delta in s["entries"].items():
                total["entries_delta"][name] = total["entries_delta"].get(name, 0) + delta
            self._registered.update(s.get("descriptors", {}))
        return [by_batch[p.batch_id] for p in plans]

    # -- 3. write -----------------------------------------------------------------------------------------------
    def _sink_output(self, token: str) -> OutputTable:
        """Where the subtasks write the sink rows: the sink table itself when Lakestate can add files to it
        directly, else a staging directory whose rows a Spark append then writes (see ``_write``). Refuses,
        before anything is read, a sink whose columns are not the job's output_type."""
        spec, path = self.spec, self.sink_path
        ddl = spec.output_type.spark_schema_ddl() + f", {SINK_MICROBATCH} bigint"
        meta = table_metadata(path)
        if meta is None:  # created by the run's commit
            return OutputTable(SINK, str(path), ddl, (), None, SINK_MICROBATCH, options_of(path))

        def shape(field_type):
            if isinstance(field_type, dict):
                return {k: shape(v) for k, v in field_type.items() if k not in ("nullable", "metadata",
                                                                                  "containsNull",
                                                                                  "valueContainsNull")}
            if isinstance(field_type, list):
                return [shape(v) for v in field_type]
            return field_type

        actual = shape(json.loads(meta["schemaString"]))
        expected = shape(self.spark.createDataFrame([], ddl).schema.jsonValue())
        if actual != expected or meta.get("partitionColumns"):
            names = [f["name"] for f in actual["fields"]]
            raise InputError(
                f"the sink {path} has columns {names}{' partitioned' if meta.get('partitionColumns') else ''} "
                f"that do not match the job's output_type ({ddl}); point the job's sink at a new table, or "
                f"change output_type back")
        committed = app_transaction_version(path, self.sink_app_id)
        text, conf = meta["schemaString"], meta["configuration"]
        plain = (not any(k.startswith("delta.constraints.") for k in conf)
                 and conf.get("delta.columnMapping.mode", "none") == "none"
                 and not any(m in text for m in ("delta.generationExpression", "delta.identity", "delta.invariants")))
        directory = path if plain else self.job_dir / "staging" / token / SINK
        return OutputTable(SINK, str(directory), ddl, (), committed, SINK_MICROBATCH, options_of(directory))

    def _write(self, plans: list[MicrobatchPlan], outputs: RunOutputs, files: dict[str, list[dict]],
               backends: dict[str, StateBackend], written: dict[str, set[str]]) -> None:
        spec, batch_ids, last = self.spec, [p.batch_id for p in plans], plans[-1].batch_id
        self.lease.heartbeat()  # a run that lost its lease must not write
        # The source offsets of each microbatch are operator ListState (one entry per source split), cut
        # across the subtasks as a rescale cuts them (``repartition``), written here.
        offsets, rows = outputs.tables[OPERATOR_TABLE], []
        for p in plans:
            entries = [e for name, source in self._sources().items()
                       for e in source_split_entries(name, source, p.end_offsets[name])]
            for subtask, (start, end) in enumerate(split_slices(len(entries), self.p)):
                rows.append((p.batch_id, (subtask, SPLIT_DISTRIBUTE, json.dumps(entries[start:end], sort_keys=True),
                                          p.batch_id, 0)))
        files[OPERATOR_TABLE] += write_rows(offsets, outputs.token, (SOURCE_OFFSETS_STATE,), rows)

        def sink() -> None:
            self._fault("before_sink_write", batch_ids)
            table, app_id = outputs.tables[SINK], self.sink_app_id
            if table.directory == str(self.sink_path):
                commit_files(self.spark, self.sink_path, app_id, last, files[SINK], table.ddl, (), table.committed,
                             SINK_MICROBATCH)
            else:  # a sink with constraints or generated columns: Delta's own writer checks them
                staged = (self.spark.read.schema(table.ddl).parquet(
                    *[str(table.root / f["path"]) for f in files[SINK]]) if files[SINK]
                    else self.spark.createDataFrame([], table.ddl))
                append_idempotent(staged, self.sink_path, app_id, last, batch_column=SINK_MICROBATCH)
            written[SINK] = {f["path"] for f in files[SINK]}
            self._fault("after_sink_write", batch_ids)

        def state(name: str) -> None:
            self._fault("before_state_write", batch_ids)
            backends[name].write_run(files[name], last)
            written[name] = {f["path"] for f in files[name]}
            self._fault("after_state_write", batch_ids)

        # The three tables commit independently and each commit is idempotent, so they run at once: a commit
        # is mostly driver-side latency.
        with ThreadPoolExecutor(3, thread_name_prefix="lakestate-write") as pool:
            futures = [pool.submit(sink), pool.submit(state, KEYED_TABLE), pool.submit(state, OPERATOR_TABLE)]
            for future in futures:
                future.result()

    # -- 4. checkpoint --------------------------------------------------------------------------------------------
    def _checkpoints(self, checkpoint: CheckpointMetadata | None, plans: list[MicrobatchPlan], stats: list[dict],
                     keyed_backend: StateBackend, operator_backend: StateBackend, descriptors: dict) -> list[int]:
        spec = self.spec
        due = [p for p in plans if (p.batch_id + 1) % spec.checkpoint_interval == 0]
        if not due or due[-1] is not plans[-1]:
            due.append(plans[-1])  # like stop-with-checkpoint: the next run resumes here, not by replaying
        next_id = checkpoint.checkpoint_id + 1 if checkpoint else 1
        numbered = [(next_id + i, plan) for i, plan in enumerate(due)]
        # Checkpoints that the retention would expire at once are not materialised (hashmap snapshots are full).
        kept = numbered[-spec.num_retained:]
        entries = dict(checkpoint.entries) if checkpoint else {}
        deltas = {s["batch_id"]: s["entries_delta"] for s in stats}
        sink = table_snapshot(self.sink_path) if (self.sink_path / "_delta_log").exists() else None
        # States the function registers only while processing: recorded, marked so a restore lets them follow
        # their uid (a dry run of the definition cannot tell whether it still registers them).
        lazy = {n: {**d, "lazy": True} for n, d in self._registered.items() if n not in descriptors}
        cleaned = ttl_states({**lazy, **descriptors}, "full_snapshot")
        taken = []
        sweeps, cursor = getattr(self, "_cleanup", None) or {}, checkpoint.cleanup_cursor if checkpoint else None
        for plan in plans:
            for name, delta in deltas[plan.batch_id].items():
                entries[name] = entries.get(name, 0) + delta
            sweep = sweeps.get(plan.batch_id, {"removed": {}, "cursor": cursor})  # a TTL cleanup after it?
            for name, count in sweep["removed"].items():
                entries[name] = entries.get(name, 0) - count
            cursor = sweep["cursor"]
            entries[SOURCE_OFFSETS_STATE] = 1
            match = [cid for cid, p in kept if p is plan]
            if not match:
                continue
            cid, batch_id = match[0], plan.batch_id
            self._fault("before_checkpoint", [batch_id])
            cleanup = None
            if cleaned and keyed_backend.name != "delta":  # full snapshot cleanup: only a full snapshot has it
                cleanup = lambda rows, now=plan.timestamp: drop_expired(rows, cleaned, now)  # noqa: E731
            state = {"keyed": keyed_backend.snapshot(cid, batch_id, cleanup),
                     "operator": operator_backend.snapshot(cid, batch_id)}
            if cleanup and state["keyed"].get("path"):  # entries of the thinned states: what the snapshot holds
                counts = count_entries(self.spark.read.format("delta").load(state["keyed"]["path"]), cleaned)
                entries.update({n: counts.get(n, 0) for n in cleaned})
            row = CheckpointMetadata(
                job_id=spec.job_id, checkpoint_id=cid, batch_id=batch_id, uid=spec.uid,
                key_type=spec.key_type.to_schema(), backend=spec.backend, parallelism=self.p,
                max_parallelism=self.maxp, key_group_ranges=[r.to_list() for r in key_group_ranges(self.maxp, self.p)],
                source_offsets=plan.end_offsets, state=state,
                descriptors=self._present(checkpoint, {**lazy, **descriptors}, entries),
                entries={k: v for k, v in sorted(entries.items()) if v}, completed_ms=wall_clock_ms(),
                processing_time=plan.timestamp, run_id=self.lease.run_id, sink=sink,
                cleanup_cursor=cursor)
            self.meta.write_checkpoint(row)  # last: the checkpoint exists only once this row does
            self._fault("after_checkpoint", [batch_id])
            taken.append(cid)
            self._say(f"checkpoint {cid} at microbatch {batch_id}, state {sum(row.entries.values())} entries, "
                      f"{row.size_bytes} bytes in {row.num_files} files")
        expired = self.meta.expire_checkpoints(spec.num_retained)
        retained = self.meta.readable_checkpoints() if expired else []
        for old in expired:
            keyed_backend.discard(old, retained)
            operator_backend.discard(old, retained)
        return taken


    @staticmethod
    def _present(checkpoint: CheckpointMetadata | None, descriptors: dict, entries: dict) -> dict:
        """The descriptors of every state still in the tables: this definition's, and those of states it no
        longer registers whose entries are still there, so a later run that registers them again is checked
        against the type their stored values have."""
        kept = {n: d for n, d in (checkpoint.descriptors if checkpoint else {}).items()
                if n not in descriptors and entries.get(n)}
        return {**kept, **descriptors}


def run_job(spark: SparkSession, spec: JobSpec, settings: Settings, max_microbatches: int | None = None,
            max_records: int | None = None, **options) -> RunResult:
    """Run ``spec`` for at most ``max_microbatches`` / about ``max_records`` (or until its sources are drained)."""
    return JobRunner(spark, spec, settings, **options).run(max_microbatches, max_records)
