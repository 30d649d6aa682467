"""A job run: restore, then microbatches, exactly once (DESIGN §2).

For microbatch m the driver (1) records the source range in a plan before
anything is read, (2) has every subtask run the user function over its
records and the state of the keys they touch (a co-grouped Arrow UDF in the
executors), (3) appends the sink output and the changed state entries with
Delta's idempotent ``txnAppId``/``txnVersion`` keyed by m, (4) writes the
commit of m and, every ``checkpoint_interval`` microbatches, a checkpoint row,
last. A crash anywhere and a rerun give the state and output of a run without
the crash: the rerun restores the latest checkpoint and replays the recorded
plans, and Delta skips the writes it already has.
"""
from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass, field
from typing import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .backends import KEYED_ID, OPERATOR_ID, OPERATOR_SCHEMA, create_backend
from .catalog import JobMeta
from .delta_log import table_snapshot
from .errors import InputError, RestoreError
from .functions import FunctionInitializationContext, RuntimeContext
from .job import KEY_TYPES, JobSpec
from .key_groups import compute_key_group_range_for_operator_index, key_group_ranges
from .keyed_state import KeyedStateStore
from .lease import JobLease
from .operator_state import SPLIT_DISTRIBUTE, OperatorStateStore
from .settings import Settings
from .sources import source_split_entries
from .spark import key_group_column, subtask_column
from .task import INPUT_SCHEMA, RAW_KEYED, RESULT_SCHEMA, SubtaskPlan, run_subtask
from .types import StateMigrationError, check_compatibility

FAULT_POINTS = (
    "before_sink_write", "after_sink_write",
    "before_state_write", "after_state_write",
    "before_commit", "after_commit",
    "before_checkpoint", "after_checkpoint",
)
SOURCE_OFFSETS_STATE = "__source__.offsets"


class InjectedFault(RuntimeError):
    """Raised by a FaultInjector: stands for a crash at one step of the protocol."""


@dataclass
class FaultInjector:
    """Crash (or call ``action``) when the run reaches ``point`` of microbatch ``batch_id``."""

    point: str
    batch_id: int = 0
    action: Callable[[], None] | None = None

    def __post_init__(self):
        if self.point not in FAULT_POINTS:
            raise ValueError(f"unknown fault point {self.point!r}; choose one of {FAULT_POINTS}")

    def hit(self, point: str, batch_id: int) -> None:
        if point == self.point and batch_id == self.batch_id:
            if self.action is not None:
                self.action()
            else:
                raise InjectedFault(f"injected crash at {point} of microbatch {batch_id}")


@dataclass
class RunResult:
    run_id: str
    restored_from: int | None
    batches: list[dict] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def discover_descriptors(spec: JobSpec) -> dict[str, dict]:
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


def check_restorable(spec: JobSpec, checkpoint: dict, descriptors: dict[str, dict]) -> None:
    """Refuse, with the fix, a checkpoint this definition cannot continue from."""
    cid = checkpoint["checkpoint_id"]
    if checkpoint["max_parallelism"] != spec.effective_max_parallelism:
        raise RestoreError(
            f"checkpoint {cid} has max_parallelism {checkpoint['max_parallelism']} but the job now has "
            f"{spec.effective_max_parallelism}; max_parallelism is fixed for a job's life: set it back to "
            f"{checkpoint['max_parallelism']}"
        )
    if checkpoint["parallelism"] != spec.parallelism:
        raise RestoreError(
            f"checkpoint {cid} was taken at parallelism {checkpoint['parallelism']}, the job now asks for "
            f"{spec.parallelism}; run at {checkpoint['parallelism']} (changing parallelism is a rescale)"
        )
    if checkpoint.get("key_type", spec.key_type.to_schema()) != spec.key_type.to_schema():
        raise RestoreError(
            f"checkpoint {cid} keys records by {checkpoint['key_type']} but the job now declares key_type "
            f"{spec.key_type.to_schema()}; a key's hash, and so its key group, depends on its type: keep "
            f"{checkpoint['key_type']}"
        )
    if checkpoint.get("uid", spec.uid) != spec.uid:
        raise RestoreError(
            f"checkpoint {cid} holds the state of operator uid {checkpoint['uid']!r} but the job's operator is now "
            f"{spec.uid!r}; its state would not be restored: set uid={checkpoint['uid']!r}"
        )
    if checkpoint["backend"] != spec.backend:
        raise RestoreError(
            f"checkpoint {cid} was taken by the {checkpoint['backend']} backend, the job now uses {spec.backend}; "
            f"switch backends through a savepoint, or set backend={checkpoint['backend']!r}"
        )
    for name, old in checkpoint.get("descriptors", {}).items():
        new = descriptors.get(name)
        if new is None:
            continue
        if (old["kind"], old.get("mode")) != (new["kind"], new.get("mode")):
            raise RestoreError(
                f"state {name!r} was {old['kind']} state in checkpoint {cid} and is now {new['kind']} state; "
                f"give the new state another name"
            )
        try:
            check_compatibility(old["type"], new["type"], where=f"state {name!r}")
        except StateMigrationError as e:
            raise RestoreError(
                f"{e} (since checkpoint {cid}); keep the old type, make a compatible change "
                f"(widen a number, add a row field), or give the new state another name"
            ) from None


def _explain(error: Exception) -> str:
    """The useful line of a Spark or Python worker error."""
    text = str(error)
    for marker in ("ValueError: ", "TypeError: ", "KeyError: ", "InputError: ", "PermissionError: ",
                   "RuntimeError: ", "NotImplementedError: "):
        if marker in text:
            line = text.rsplit(marker, 1)[1].splitlines()[0]
            return marker + line
    lines = [l for l in text.splitlines() if l.strip()]
    return " | ".join(lines[:3])[:1200]


class JobRunner:
    """Runs one job: ``JobRunner(spark, spec, settings).run(max_microbatches=5)``."""

    def __init__(self, spark: SparkSession, spec: JobSpec, settings: Settings, *, clock: Callable[[], int] = wall_clock_ms,
                 faults: FaultInjector | None = None, progress: Callable[[str], None] = print,
                 lease_timeout_s: float = 60.0):
        self.spark, self.spec, self.settings = spark, spec.validate(), settings
        self.sink_path = settings.in_warehouse(spec.sink, "sink")
        self.job_dir = settings.job_dir(spec.job_id)
        self.meta = JobMeta(self.job_dir)
        self.clock, self.faults, self.progress = clock, faults, progress
        self.lease = JobLease(self.meta.dir / "lease.json", spec.job_id, lease_timeout_s)
        self.p, self.maxp = spec.parallelism, spec.effective_max_parallelism

    # -- protocol steps ---------------------------------------------------------------------------
    def _fault(self, point: str, batch_id: int) -> None:
        if self.faults is not None:
            self.faults.hit(point, batch_id)

    def _sources(self) -> dict:
        sources = {"main": self.spec.source}
        if self.spec.broadcast_source is not None:
            sources["broadcast"] = self.spec.broadcast_source
        return sources

    def _plan(self, batch_id: int, offsets: dict) -> dict | None:
        ranges, any_new = {}, False
        for name, source in self._sources().items():
            start = offsets.get(name) or source.initial_offset()
            end = source.next_offset(self.spark, start)
            any_new |= end is not None
            ranges[name] = {"start": start, "end": end if end is not None else start}
        if not any_new:
            return None
        return {"batch_id": batch_id, "sources": ranges, "timestamp": int(self.clock()), "planned_by": self.lease.run_id}

    def _read_inputs(self, plan: dict) -> DataFrame:
        parts = []
        for name, source in self._sources().items():
            rng = plan["sources"][name]
            if rng["start"] == rng["end"]:
                continue
            df = source.read(self.spark, rng["start"], rng["end"])
            record = F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns]), {"ignoreNullFields": "false"})
            if name == "main":
                parts.append(self._keyed_records(df, record))
            else:
                subtasks = self.spark.range(self.p).select(F.col("id").cast("int").alias("subtask"))
                parts.append(
                    df.select(record.alias("record")).crossJoin(subtasks).select(
                        "subtask", F.lit("b").alias("side"), F.lit(None).cast("int").alias("key_group"),
                        F.lit(None).cast("string").alias("key"), "record")
                )
        if not parts:
            return self.spark.createDataFrame([], INPUT_SCHEMA)
        out = parts[0]
        for part in parts[1:]:
            out = out.unionByName(part)
        return out

    def _keyed_records(self, df: DataFrame, record) -> DataFrame:
        key = self.spec.key
        if key not in df.columns:
            raise InputError(f"the source has no key column {key!r} (columns: {df.columns}); fix the job's key")
        actual = df.schema[key].dataType.simpleString()
        expected = KEY_TYPES[self.spec.key_type.name]
        if actual != expected:
            raise InputError(
                f"key column {key!r} is {actual} in the source but the job declares key_type "
                f"{self.spec.key_type.name} ({expected}); cast it in the source or change key_type"
            )
        kg = key_group_column(F.col(f"`{key}`"), self.maxp)
        return df.select(
            subtask_column(kg, self.p, self.maxp).alias("subtask"), F.lit("k").alias("side"), kg.alias("key_group"),
            F.col(f"`{key}`").cast("string").alias("key"), record.alias("record"),
        )

    def _state_for(self, keyed: DataFrame, operator: DataFrame, inputs: DataFrame) -> DataFrame:
        """Keyed entries of the keys this microbatch touches, raw keyed state, and all operator state."""
        raw_name = f"{self.spec.uid}.{RAW_KEYED}"
        touched = inputs.filter("side = 'k'").select("key_group", "key").distinct()
        touched_entries = keyed.filter(F.col("state_name") != raw_name).join(touched, ["key_group", "key"], "left_semi")
        keyed_part = touched_entries.unionByName(keyed.filter(F.col("state_name") == raw_name))
        keyed_part = keyed_part.select(
            F.lit("k").alias("scope"), "state_name", "key_group",
            subtask_column(F.col("key_group"), self.p, self.maxp).alias("subtask"), "key", "namespace",
            F.lit(None).cast("string").alias("mode"), "value")
        operator_part = operator.select(
            F.lit("o").alias("scope"), "state_name", F.lit(None).cast("int").alias("key_group"), "subtask",
            F.lit(None).cast("string").alias("key"), F.lit(None).cast("string").alias("namespace"), "mode", "value")
        return keyed_part.unionByName(operator_part)

    @staticmethod
    def _merge(current: DataFrame, changes: DataFrame, ids: list[str]) -> DataFrame:
        merged = current.join(changes.select(*ids), ids, "left_anti").unionByName(changes.filter("value IS NOT NULL"))
        return merged.localCheckpoint(eager=True)

    # -- the run ------------------------------------------------------------------------------------
    def run(self, max_microbatches: int | None = None) -> RunResult:
        if max_microbatches is not None and (not isinstance(max_microbatches, int) or max_microbatches <= 0):
            raise ValueError(f"max_microbatches must be a positive integer, got {max_microbatches!r}")
        descriptors = discover_descriptors(self.spec)
        checkpoint = self.meta.latest_checkpoint()
        if checkpoint is not None:
            check_restorable(self.spec, checkpoint, descriptors)
        with self.lease:
            return self._run(max_microbatches, descriptors)

    def _run(self, max_microbatches: int | None, descriptors: dict) -> RunResult:
        spec, meta = self.spec, self.meta
        checkpoint = meta.latest_checkpoint()  # again, now that we hold the job
        if checkpoint is not None:
            check_restorable(spec, checkpoint, descriptors)
        backend = create_backend(spec.backend, self.spark, self.job_dir, spec.job_id)
        keyed, operator = backend.restore(checkpoint)
        keyed = keyed.localCheckpoint(eager=True)  # the run reads state once, then keeps it in the executors
        operator = operator.localCheckpoint(eager=True)
        result = RunResult(self.lease.run_id, checkpoint["checkpoint_id"] if checkpoint else None)
        batch_id = checkpoint["batch_id"] + 1 if checkpoint else 0
        offsets = checkpoint["source_offsets"] if checkpoint else {}
        checkpoint_id = checkpoint["checkpoint_id"] + 1 if checkpoint else 1
        if checkpoint:
            self.progress(f"[lakestate] job {spec.job_id}: restored checkpoint {checkpoint['checkpoint_id']} "
                          f"(microbatch {checkpoint['batch_id']}), run {self.lease.run_id}")
        else:
            self.progress(f"[lakestate] job {spec.job_id}: no checkpoint, starting from the beginning, run {self.lease.run_id}")
        last_checkpointed = checkpoint["batch_id"] if checkpoint else -1
        done = 0
        while max_microbatches is None or done < max_microbatches:
            self.lease.heartbeat()
            plan = meta.read_plan(batch_id)
            planned_here = False
            if plan is None:
                plan = self._plan(batch_id, offsets)
                if plan is None:
                    self.progress(f"[lakestate] job {spec.job_id}: source drained, no new input after microbatch "
                                  f"{batch_id - 1}" if batch_id else f"[lakestate] job {spec.job_id}: source drained, no input yet")
                    break
                meta.write_plan(batch_id, plan)  # write-ahead: the range is fixed before it is read
                planned_here = True
            started = time.time()
            keyed, operator, stats = self._microbatch(plan, keyed, operator, backend, planned_here, bool(checkpoint) or batch_id > 0)
            stats["seconds"] = round(time.time() - started, 2)
            result.batches.append(stats)
            self.progress(
                f"[lakestate] job {spec.job_id} microbatch {batch_id}: {stats['records_in']} records in"
                f" ({stats['broadcast_in']} broadcast), {stats['keys']} keys, {stats['records_out']} out, "
                f"{stats['state_upserts']} state entries written, {stats['state_deletes']} deleted, {stats['seconds']}s"
            )
            offsets = {name: rng["end"] for name, rng in plan["sources"].items()}
            done += 1
            if (batch_id + 1) % spec.checkpoint_interval == 0:
                self._checkpoint(backend, keyed, operator, checkpoint_id, batch_id, plan, offsets, descriptors)
                result.checkpoints.append(checkpoint_id)
                checkpoint_id += 1
                last_checkpointed = batch_id
            batch_id += 1
        if last_checkpointed < batch_id - 1:
            # Like Flink's stop-with-checkpoint: the next run resumes here instead of replaying.
            self._checkpoint(backend, keyed, operator, checkpoint_id, batch_id - 1, plan, offsets, descriptors)
            result.checkpoints.append(checkpoint_id)
        return result

    def _microbatch(self, plan: dict, keyed: DataFrame, operator: DataFrame, backend, planned_here: bool,
                    restored: bool) -> tuple[DataFrame, DataFrame, dict]:
        spec, m, ts = self.spec, plan["batch_id"], plan["timestamp"]
        phases: dict[str, float] = {}
        mark = [time.time()]

        def phase(name: str) -> None:
            now = time.time()
            phases[name] = round(now - mark[0], 2)
            mark[0] = now

        try:
            inputs = self._read_inputs(plan)
            state_in = self._state_for(keyed, operator, inputs)
            subtask_plan = SubtaskPlan(spec.uid, spec.function, spec.key_type, spec.output_type, self.p, self.maxp,
                                       m, ts, restored, list(spec.order_by))

            def apply(state, records):
                return run_subtask(subtask_plan, state, records)

            results = state_in.groupBy("subtask").cogroup(inputs.groupBy("subtask")).applyInPandas(apply, RESULT_SCHEMA)
            results = results.persist()
            results.count()  # every user and input error surfaces here, before anything is written
            phase("compute")
        except Exception as e:
            if planned_here:
                self.meta.drop_plan(m)
            files = {n: r for n, r in plan["sources"].items()}
            raise InputError(
                f"microbatch {m} of job {spec.job_id!r} failed before anything was written: {_explain(e)} "
                f"(input: {json.dumps(files)[:600]})"
            ) from e

        stats = {"batch_id": m, "records_in": 0, "broadcast_in": 0, "keys": 0, "records_out": 0,
                 "state_upserts": 0, "state_deletes": 0}
        # One small job: the subtasks' counters and the number of changed and deleted entries.
        summary = (results.filter("kind IN ('stat', 'k', 'o')")
                   .groupBy(F.when(F.col("kind") == "stat", F.col("payload")).alias("stat"),
                            F.col("value").isNull().alias("deleted"))
                   .count().collect())
        for stat, deleted, n in summary:
            if stat is not None:
                s = json.loads(stat)
                stats["records_in"] += s["records"]
                stats["keys"] += s["keys"]
                stats["records_out"] += s["outputs"]
                stats["broadcast_in"] = max(stats["broadcast_in"], s["broadcast"])
            else:
                stats["state_deletes" if deleted else "state_upserts"] += n
        phase("stats")

        self._fault("before_sink_write", m)
        output = results.filter("kind = 'out'").select(
            F.from_json("payload", spec.output_type.spark_schema_ddl()).alias("r")).select("r.*")
        (output.write.format("delta").option("txnAppId", f"lakestate:{spec.job_id}:sink").option("txnVersion", m)
         .mode("append").save(str(self.sink_path)))
        self._fault("after_sink_write", m)
        phase("sink_write")

        keyed_changes = results.filter("kind = 'k'").select(
            "state_name", "key_group", "key", "namespace", "value",
            F.lit(m).cast("long").alias("batch_id"), F.lit(ts).cast("long").alias("ts"))
        end_offsets = {name: rng["end"] for name, rng in plan["sources"].items()}
        entries = [e for name, source in self._sources().items()
                   for e in source_split_entries(name, source, end_offsets[name])]
        source_state = self.spark.createDataFrame(
            [(SOURCE_OFFSETS_STATE, 0, SPLIT_DISTRIBUTE, json.dumps(entries, sort_keys=True), m, ts)], OPERATOR_SCHEMA)
        operator_changes = results.filter("kind = 'o'").select(
            "state_name", "subtask", "mode", "value",
            F.lit(m).cast("long").alias("batch_id"), F.lit(ts).cast("long").alias("ts")).unionByName(source_state)
        self._fault("before_state_write", m)
        backend.write_changes(keyed_changes, operator_changes, m)
        self._fault("after_state_write", m)
        phase("state_write")

        self._fault("before_commit", m)
        self.meta.write_commit(m, {**stats, "run_id": self.lease.run_id, "committed_ms": wall_clock_ms()})
        self._fault("after_commit", m)

        new_keyed = self._merge(keyed, keyed_changes, KEYED_ID)
        new_operator = self._merge(operator, operator_changes, OPERATOR_ID)
        results.unpersist()
        phase("merge")
        stats["phases"] = phases
        return new_keyed, new_operator, stats

    def _checkpoint(self, backend, keyed: DataFrame, operator: DataFrame, checkpoint_id: int, batch_id: int,
                    plan: dict, offsets: dict, descriptors: dict) -> None:
        spec = self.spec
        self._fault("before_checkpoint", batch_id)
        state = backend.snapshot(keyed, operator, checkpoint_id, batch_id)
        entries = {name: n for name, n in keyed.select("state_name").unionByName(operator.select("state_name"))
                   .groupBy("state_name").count().collect()}
        sink = table_snapshot(self.sink_path) if (self.sink_path / "_delta_log").exists() else None
        row = {
            "job_id": spec.job_id, "checkpoint_id": checkpoint_id, "batch_id": batch_id, "status": "COMPLETED",
            "completed_ms": wall_clock_ms(), "processing_time": plan["timestamp"] if plan else None,
            "run_id": self.lease.run_id, "uid": spec.uid, "key_type": spec.key_type.to_schema(), "backend": spec.backend,
            "parallelism": self.p, "max_parallelism": self.maxp,
            "key_group_ranges": [r.to_list() for r in key_group_ranges(self.maxp, self.p)],
            "source_offsets": offsets, "state": state, "sink": sink, "descriptors": descriptors, "entries": entries,
        }
        self.meta.write_checkpoint(row)  # last: the checkpoint exists only once this row does
        self._fault("after_checkpoint", batch_id)
        for expired in self.meta.expire_checkpoints(spec.num_retained):
            backend.discard(expired)
        size = sum(t.get("size_bytes", 0) for t in state.values() if isinstance(t, dict))
        self.progress(f"[lakestate] job {spec.job_id}: checkpoint {checkpoint_id} at microbatch {batch_id}, "
                      f"state {sum(entries.values())} entries, {size} bytes")


def run_job(spark: SparkSession, spec: JobSpec, settings: Settings, max_microbatches: int | None = None,
            **options) -> RunResult:
    """Run ``spec`` for at most ``max_microbatches`` (or until its sources are drained)."""
    return JobRunner(spark, spec, settings, **options).run(max_microbatches)
