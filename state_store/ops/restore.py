"""Restore with changes, and rescale: a savepoint or a checkpoint becomes a job's new checkpoint
(docs/operating/savepoints.md).

A restore writes checkpoint ``N`` (the job's next id) at the source's
microbatch; the job's next run continues from it. It may change:

- the **parallelism** (within max parallelism, which never changes). Keyed
  state does not move: a key group's owner is computed from the checkpoint's
  parallelism when a run reads it. Operator state is redistributed as Flink's
  ``RoundRobinOperatorStateRepartitioner`` does (``repartition``), as Spark
  work, one state per task: split lists are concatenated and cut into
  contiguous slices from the subtask Flink's rotation starts each at (from
  every split list's element count, the one thing the driver collects), union
  lists are stored once and given whole to every subtask, broadcast state goes
  to subtask ``i`` from old subtask ``i % p_old``.
  Raw operator state is opaque bytes: subtask ``i`` keeps old subtask ``i``'s;
  a scale-down that would drop some is refused (``allow_non_restored_state``
  drops it).
- the **backend** (``hashmap`` <-> ``delta``);
- the **operator uid**, through an explicit ``uid_map`` (old -> new);
- the **states registered**: state the new definition no longer registers is
  refused, naming it, unless ``allow_non_restored_state`` drops it.

A *rescale* (the job's own latest checkpoint, same backend and uid, nothing
dropped) writes no keyed row: the new checkpoint pins the same keyed table
version (delta) or snapshot (hashmap), so its cost does not grow with keyed
state. Any other restore copies the state into a new generation of the job's
tables (``state/g<N>/`` for delta, ``snapshots/chk-<N>/`` for hashmap), as
Flink's NO_CLAIM mode does: the source (a savepoint may be disposed later) is
never needed again. A rescale to the parallelism the checkpoint already has
writes nothing.

The rows a restore or rescale writes are of its attempt's generation (the
generation of the job's lease it holds), which the new checkpoint lists: a
retry after a kill is never skipped as the killed attempt's write, and the
killed attempt's rows are read by no checkpoint (``state_tables``).

A restore never rewinds a job: restoring a point older than what the job has
already committed is refused (its sink holds the later microbatches); restore
it into a new job id instead.

A restore is a plan, then its application: ``restore_plan`` decides from
metadata alone (no Spark) what is kept, dropped and changed, or refuses; this
module checks what only the state shows (damage, raw state a scale-down would
lose), then writes.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..catalog.job_store import JobStore
from ..catalog.lease import holding
from ..delta.backends import create_keyed_backend, create_operator_backend
from ..delta.log import app_transaction_version, sink_version
from ..delta.points import StatePoint
from ..errors import ConfigError, RestoreError
from ..graph import Job, as_job
from ..job import JobSpec, later_source_name
from ..progress import wing_logger
from ..records.layout import KEYED, KEYED_TABLE, OPERATOR, OPERATOR_TABLE
from ..records.metadata import AirflowRun, CheckpointMetadata, TableVersion
from ..registered_states import discover_descriptors
from ..repartition import broadcast, operator_split_starts, place_source_entries, split_distribute, union_stored
from ..restore_plan import (
    JobFacts,
    RestorePlan,
    RestoreRequest,
    already_at,
    check_restore_backend,
    parse_uid_map,
    plan_restore,
)
from ..settings import Settings
from ..side_outputs import side_app_id, sink_app_id
from ..sinks import sink_name
from ..state.backend import backend_kind
from ..state.descriptors import qualified_name
from ..state.operator import BROADCAST, RAW_OPERATOR, SOURCE_OFFSETS_STATE, SPLIT_DISTRIBUTE, UNION
from .savepoint import RESCALE_PREFIX, savepoint_of_checkpoint

_SAY = wing_logger(__name__).info  # what it says it does, unless given a say of its own (``progress``)


def redistribute(rows: DataFrame, old_parallelism: int, parallelism: int, batch_id: int,
                 generation: int) -> DataFrame:
    """Operator entries (live rows of old subtasks) as the entries of ``parallelism`` new subtasks, one Spark
    task per state: every new subtask's row, and a removal (null value) for each old subtask's row that no
    new subtask has, all written as ``generation`` at ``batch_id``. At the same parallelism every subtask
    keeps its own entries, as in Flink (union state is given whole to every subtask on every restore)."""
    if parallelism == old_parallelism:
        return rows.select(*[F.lit(batch_id).cast("bigint").alias(c) if c == "batch_id"
                             else F.lit(generation).cast("bigint").alias(c) if c == "generation" else F.col(c)
                             for c in OPERATOR_TABLE.columns])
    starts = _split_starts(rows, parallelism)

    def one_state(pdf):
        import pandas as pd

        pdf = pdf.sort_values("subtask")
        name, mode = pdf["state_name"].iloc[0], pdf["mode"].iloc[0]
        old = dict(zip(pdf["subtask"].astype(int), pdf["value"]))
        texts = [old[s] for s in sorted(old)]
        if name == SOURCE_OFFSETS_STATE:  # Kafka's partitions go to their owners (``place_source_entries``)
            new = [json.dumps(part, sort_keys=True) if part else None for part in place_source_entries(
                [e for t in texts for e in json.loads(t)], parallelism)]
        elif mode == SPLIT_DISTRIBUTE:
            new = [json.dumps(part, separators=(",", ":")) if part else None
                   for part in split_distribute([json.loads(t) for t in texts], parallelism, starts.get(name, 0))]
        elif mode == UNION:
            new = [json.dumps(part, separators=(",", ":")) if part else None
                   for part in union_stored([json.loads(t) for t in texts], parallelism)]
        elif mode == BROADCAST:
            new = broadcast(texts, parallelism)
        else:  # raw operator state: subtask i keeps old subtask i's bytes
            new = [old.get(i) for i in range(parallelism)]
        subtasks = list(range(parallelism)) + [s for s in sorted(old) if s >= parallelism]
        values = new + [None] * (len(subtasks) - parallelism)
        return pd.DataFrame({"state_name": name, "subtask": subtasks, "mode": mode, "value": values,
                             "batch_id": batch_id, "generation": generation}).astype(
            {"subtask": "int32", "batch_id": "int64", "generation": "int64"})

    return rows.groupBy("state_name").applyInPandas(one_state, OPERATOR_TABLE.schema)


def _split_starts(rows: DataFrame, parallelism: int) -> dict[str, int]:
    """Where each split state starts on the new subtasks (``operator_split_starts``): it depends on every split
    state's size, so the element counts, and only they, come to the driver before the per-state tasks run."""
    sizes = (rows.filter(F.col("mode") == SPLIT_DISTRIBUTE)
             .groupBy("state_name").agg(F.sum(F.json_array_length("value")).alias("elements")).collect())
    return operator_split_starts({r["state_name"]: r["elements"] or 0 for r in sizes}, parallelism)


def _rename(df: DataFrame, kept: dict[str, str]) -> DataFrame:
    df = df.filter(F.col("state_name").isin(list(kept)))
    renamed = {old: new for old, new in kept.items() if old != new}
    if not renamed:
        return df
    column = F.col("state_name")
    for old, new in renamed.items():
        column = F.when(F.col("state_name") == old, F.lit(new)).otherwise(column)
    return df.withColumn("state_name", column)


@dataclass
class _Restore:
    """A restore that passed every rule: the job, its source, what was asked, the plan, and the job's latest
    checkpoint (read once the job is held)."""

    spec: JobSpec
    source: StatePoint
    request: RestoreRequest
    plan: RestorePlan
    latest: CheckpointMetadata | None
    outputs: dict[str, int]  # what the job's output tables committed (``committed_outputs``)


def restore_job(spark: SparkSession, settings: Settings, spec: JobSpec | Job, source: StatePoint | None = None,
                *, parallelism: int | dict | None = None, backend: str | None = None, uid_map=None,
                allow_non_restored_state: bool = False, savepoint_first: bool = False, wait_s: float = 0.0,
                say=_SAY) -> CheckpointMetadata:
    """Write the job's next checkpoint from ``source`` (default: the job's latest checkpoint, read once the
    job is held) with the changes asked for; return it. Everything is checked before anything is written; when
    nothing would change (the job's latest checkpoint at its own parallelism), nothing is written, not even
    the savepoint asked for first, and that checkpoint is returned.

    Example::

        restore_job(spark, settings, spec, StatePoint.of_savepoint(settings, "clicks/before-v2"),
                    parallelism=4, backend="hashmap", uid_map={"count": "counter"})
    """
    job = as_job(spec).validate()
    uid_map = parse_uid_map(uid_map)
    check_restore_backend(backend)
    store = JobStore(settings.job_dir(job.job_id))
    with holding(store.job_dir, job.job_id, "restore", wait_s, say) as lease:
        source = source or StatePoint.of_checkpoint(settings, job.job_id)
        return _restore(spark, settings, job, source, store, lease, parallelism, backend, uid_map,
                        allow_non_restored_state, savepoint_first, say)


def _plan(spec: JobSpec, source: StatePoint, store: JobStore, parallelism: int | None, backend: str | None,
          uid_map: dict[str, str], allow_non_restored_state: bool, outputs: dict[str, int],
          latest: CheckpointMetadata | None) -> _Restore:
    """The restore rules (``restore_plan``) on the source's metadata; no Spark, no state read. ``latest``: the
    job's latest checkpoint of this operator."""
    own_latest = (source.job_dir == store.job_dir and latest is not None
                  and latest.checkpoint_id == getattr(source.meta, "checkpoint_id", None))
    request = RestoreRequest(parallelism, backend, uid_map, allow_non_restored_state, own_latest)

    def descriptors(p: int, maxp: int) -> dict:
        return discover_descriptors(spec.with_overrides(parallelism=p, max_parallelism=maxp))

    plan = plan_restore(JobFacts.of(spec), source.meta, descriptors, request, source.where)
    return _Restore(spec, source, request, plan, latest, outputs)


def committed_outputs(settings: Settings, spec: JobSpec | Job) -> dict[str, int]:
    """The last microbatch each output table of the job (its sink, every side output) has committed, by table
    path; tables never written are left out. A run commits these before its commit marker, so they can be ahead
    of every record of the job's own folder."""
    spec = as_job(spec)
    sinks = spec.all_sinks
    tables = {settings.sink(sink): sink_app_id(spec.job_id) for sink in sinks}
    tables.update({settings.sink(spec.side_output_sink(tag)): side_app_id(spec.job_id, tag.name)
                   for tag in spec.side_outputs})
    done = {str(path): app_transaction_version(path, app_id) for path, app_id in tables.items()}
    return {path: batch for path, batch in done.items() if batch is not None}


def _check_not_rewinding(restore: _Restore, store: JobStore) -> None:
    """A restore never rewinds a job: its sink and side outputs hold the microbatches the job committed (a run
    killed after its sink commit and before its commit marker included: the sink's Delta ``txnVersion`` says
    so where the job's folder does not)."""
    job_id, src, where, latest = restore.spec.job_id, restore.source.meta, restore.source.where, restore.latest
    done = {"its latest checkpoint": latest.batch_id if latest else None, "its commit markers": store.last_commit()}
    done.update({f"its output table {path}": b for path, b in restore.outputs.items()})
    what, last = max(((w, b) for w, b in done.items() if b is not None), key=lambda item: item[1],
                     default=(None, None))
    if last is None or last <= src.batch_id:
        return
    if restore.request.own_latest:
        raise RestoreError(
            f"a run of job {job_id!r} committed microbatch {last} after its latest checkpoint "
            f"{latest.checkpoint_id} (microbatch {src.batch_id}) but stopped before checkpointing it; run the job "
            f"once (it finishes those microbatches), then try again")
    raise RestoreError(
        f"job {job_id!r} has already committed microbatch {last} ({what} is at microbatch {last}), and {where} is at "
        f"microbatch {src.batch_id}: restoring it would rewind the job, whose sink holds the later microbatches' "
        f"rows. Restore it into a new job id (register the job under another id, then lakestate restore <that id> "
        f"...), or rescale the job's latest checkpoint")


def _checked_operator_rows(spark: SparkSession, restore: _Restore, store: JobStore) -> DataFrame:
    """The source's operator entries under the job's names, once the source is known intact and nothing would
    be lost that the user did not allow to drop (what only the state shows, so not in ``restore_plan``)."""
    _check_not_rewinding(restore, store)
    source, src, where, plan = restore.source, restore.source.meta, restore.source.where, restore.plan
    damage = source.damage(spark)
    if damage:
        raise RestoreError(f"{where} cannot be restored: " + "; ".join(damage))
    raw_operator = qualified_name(restore.spec.uid, RAW_OPERATOR)  # raw keyed state moves with its key groups
    rows = _rename(source.rows(spark, OPERATOR), plan.kept)
    p_new = plan.parallelism
    if (p_new < src.parallelism and raw_operator in plan.kept.values()
            and not restore.request.allow_non_restored_state):
        lost = sorted(r[0] for r in rows.filter((F.col("state_name") == raw_operator)
                                                & (F.col("subtask") >= p_new)).select("subtask").collect())
        if lost:
            raise RestoreError(
                f"subtasks {lost} of {where} hold raw operator state, which is opaque bytes that Lakestate cannot "
                f"split or merge; at parallelism {p_new} it would be lost. Keep parallelism >= {max(lost) + 1}, "
                f"move that state to a ListState, or pass --allow-non-restored-state to drop it")
    if plan.rescale and backend_kind(plan.backend).incremental:  # the operator rows go to the table runs append to
        operator = create_operator_backend(plan.backend, spark, store.job_dir, restore.spec.job_id, restore.latest)
        written = app_transaction_version(operator.path, operator.app_id)
        if written is not None and written > src.batch_id:
            raise RestoreError(
                f"a run of job {restore.spec.job_id!r} wrote the state of microbatch {written} but crashed before "
                f"its checkpoint; run the job once (it finishes those microbatches), then rescale")
    return rows


def _operator_takes(spec, source: StatePoint, parallelism, uid_map: dict[str, str],
                    allow_non_restored_state: bool) -> dict[str, str]:
    """Which operator of ``source`` each operator of the job takes (its uid, or the old one ``uid_map`` maps to
    it; the job's first operator, which keeps the source offsets, takes the source's first unless it names
    another of the source's operators, its state then kept only as ``uid_map`` says: ``restore_plan``);
    refuses, naming the fix, a mapping from or to no operator, a first operator that is another of the source's, a
    parallelism for an operator the job does not have, and state of the source no operator takes (unless
    ``allow_non_restored_state``)."""
    unmapped = sorted(set(uid_map) - set(source.uids))
    if unmapped:  # a mapping that maps nothing is a mistake (a typo, the wrong savepoint), not a no-op
        raise ConfigError(f"--uid-map {unmapped[0]}={uid_map[unmapped[0]]} maps nothing: {source.where} has no "
                          f"operator uid {unmapped[0]!r}; the uids it has are {source.uids}")
    ops, old_of = spec.operators, {new: old for old, new in uid_map.items()}
    nowhere = [(old, new) for old, new in uid_map.items() if new not in spec.uids]
    if nowhere:
        raise ConfigError(f"--uid-map {nowhere[0][0]}={nowhere[0][1]} moves state to no operator: job "
                          f"{spec.job_id!r} has no operator {nowhere[0][1]!r}; its operators are {spec.uids}")
    takes = {op.uid: old_of.get(op.uid, op.uid) for op in ops}
    first = ops[0].uid
    if takes[first] not in source.uids:
        takes[first] = source.meta.uid
    if takes[first] != source.meta.uid:
        raise RestoreError(f"{source.where}'s first operator is {source.meta.uid!r} (it keeps the source's offsets) "
                           f"but job {spec.job_id!r} starts with {first!r}: map it with --uid-map "
                           f"{source.meta.uid}={first}")
    offsets = source.meta.source_offsets or {}
    for op in ops[1:]:  # a later operator's sources' offsets are kept by its uid: they cannot follow a new one
        read = [i.name for i in op.inputs if i.upstream is None]
        if takes[op.uid] != op.uid and any(later_source_name(takes[op.uid], n) in offsets for n in read):
            raise RestoreError(f"operator {op.uid!r} reads a source whose offsets {source.where} keeps under its old "
                               f"uid {takes[op.uid]!r}; renamed it would read that source again from its start: "
                               f"keep its uid {takes[op.uid]!r} (drop --uid-map {takes[op.uid]}={op.uid})")
    unknown = sorted(set(parallelism or {}) - set(takes)) if isinstance(parallelism, dict) else []
    if unknown:
        raise ConfigError(f"job {spec.job_id!r} has no operator {unknown[0]!r}; its operators are {list(takes)}")
    left = [u for u in source.uids if u not in takes.values() and source.meta.of_operator(u).entries]
    if left and not allow_non_restored_state:
        raise RestoreError(f"{source.where} holds state of operators {left} that no operator of job "
                           f"{spec.job_id!r} takes; map them with --uid-map OLD=NEW, or pass "
                           f"--allow-non-restored-state to drop their state")
    return takes


def _restore(spark: SparkSession, settings: Settings, spec: Job, source: StatePoint, store: JobStore, lease,
             parallelism, backend: str | None, uid_map: dict[str, str], allow_non_restored_state: bool,
             savepoint_first: bool, say) -> CheckpointMetadata:
    """A restore or rescale of a job, of one operator or several: each operator of the job restores the part
    of the source its uid (through ``uid_map``) names, by the same rules as a job of one operator, at its own
    ``parallelism`` (an int for every operator, or ``{uid: parallelism}``); an operator the source has no state
    of starts empty; an operator of the source no operator takes is refused unless ``allow_non_restored_state``.
    One checkpoint, the job's next, pins them all."""
    ops, takes = spec.operators, _operator_takes(spec, source, parallelism, uid_map, allow_non_restored_state)
    first, latest, outputs = ops[0].uid, store.latest_checkpoint(), committed_outputs(settings, spec)
    restores = []
    for op in ops:
        part = source.operator(takes[op.uid])
        if part is None:
            say(f"[lakestate] job {spec.job_id}: operator {op.uid} is new: it starts with empty state")
            continue
        op_store = _operator_store(store, first, op.uid)
        p = parallelism.get(op.uid) if isinstance(parallelism, dict) else parallelism
        moved = {takes[op.uid]: op.uid} if uid_map.get(takes[op.uid]) == op.uid else {}
        own = latest.of_operator(op.uid) if latest is not None else None
        restores.append((_plan(op, part, op_store, p, backend, moved, allow_non_restored_state, outputs, own),
                         op_store))
    if all(r.plan.nothing_to_do for r, _ in restores) and len(restores) == len(source.uids) == len(ops):
        say(already_at(spec.job_id, latest))
        return latest
    rows = [_checked_operator_rows(spark, r, m) for r, m in restores]
    if savepoint_first and not source.is_savepoint:
        savepoint_of_checkpoint(spark, settings, source.meta, source.job_dir, say=say,
                                prefix=RESCALE_PREFIX if all(r.plan.rescale for r, _ in restores) else "savepoint")
    started, checkpoint_id = time.time(), store.next_checkpoint_id()
    records = [_checkpoint(settings, r, checkpoint_id, _write_state(spark, r, m, lease, o, checkpoint_id, say),
                           lease.run_id) for (r, m), o in zip(restores, rows)]
    checkpoint = CheckpointMetadata.of_operators(records)
    lease.heartbeat()  # a restore that lost the job must not publish its checkpoint
    store.publish(checkpoint)  # last: the restore exists only once this row does
    store.expire(ops[0].num_retained, lambda uid, part, kept: _discard(spark, _operator_store(store, first, uid),
                                                                        part, kept))
    changes = "; ".join(r.plan.changes() if len(ops) == 1 else f"{r.spec.uid}: {r.plan.changes()}"
                        for r, _ in restores)
    say(f"[lakestate] job {spec.job_id}: checkpoint {checkpoint_id} restored from {source.where} at microbatch "
        f"{checkpoint.batch_id} ({changes}) in {time.time() - started:.1f}s; the job's next run continues from it")
    return checkpoint


def _operator_store(store: JobStore, first: str, uid: str) -> JobStore:
    """Where operator ``uid``'s tables are: the job's folder for its first operator ``first``, else its own."""
    return store if uid == first else JobStore(store.operator_dir(uid))


def _write_state(spark: SparkSession, restore: _Restore, store: JobStore, lease, operator_rows: DataFrame,
                 checkpoint_id: int, say) -> dict[str, TableVersion]:
    """Write the keyed and operator rows the new checkpoint pins; return its ``state`` record. The rows are
    written as the generation of this attempt's hold of the job (``lease.generation``, or past the last one
    its tables hold where an older release wrote a higher one): unique to the attempt, so a retry after a kill
    is never skipped as already written, and rows of a killed attempt stay out of every checkpoint
    (``state_tables.visible``). A rescale leaves keyed rows where they are."""
    job_id, src, plan = restore.spec.job_id, restore.source.meta, restore.plan
    bound = restore.latest if plan.rescale else None
    keyed_backend = create_keyed_backend(plan.backend, spark, store.job_dir, job_id, bound, src.key_type)
    operator_backend = create_operator_backend(plan.backend, spark, store.job_dir, job_id, bound)
    generation = max(b.fresh_generation(lease.generation, checkpoint_id) for b in (keyed_backend, operator_backend))
    new_operator = redistribute(operator_rows, src.parallelism, plan.parallelism, src.batch_id, generation)
    if plan.rescale:
        operator_record = (operator_backend.append_changes(new_operator, generation) if operator_backend.incremental
                           else operator_backend.write_full(new_operator, checkpoint_id, generation))
        say(f"[lakestate] job {job_id}: rescaling checkpoint {src.checkpoint_id} from parallelism "
            f"{src.parallelism} to {plan.parallelism}: keyed state stays where it is, operator state is "
            f"redistributed")
        return {KEYED: replace(src.table(KEYED)),  # keyed: the same rows, pinned again
                OPERATOR: operator_record}
    keyed_rows = _keyed_rows_in_process(restore, keyed_backend, generation)
    if keyed_rows is None:
        keyed_rows = _rename(restore.source.rows(spark, KEYED), plan.kept).withColumn(
            "generation", F.lit(generation).cast("bigint")).select(*KEYED_TABLE.columns)
    return {KEYED: keyed_backend.write_full(keyed_rows, checkpoint_id, generation),
            OPERATOR: operator_backend.write_full(new_operator, checkpoint_id, generation)}


def _keyed_rows_in_process(restore: _Restore, backend, generation: int):
    """The source's keyed rows as ``_write_state`` writes them (kept states, renamed; of ``generation``), read by
    this process with Arrow where the source's table is local and the backend's full write takes Arrow (an
    incremental one: a new generation of its table); None where Spark reads them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = restore.source.rows_in_process(KEYED) if backend.incremental else None
    if rows is None:
        return None
    kept = restore.plan.kept
    names, renamed = pa.array(list(kept)), pa.array(list(kept.values()))

    def restored(part):
        part = part.filter(pc.is_in(part["state_name"], value_set=names))
        part = part.set_column(part.schema.get_field_index("state_name"), "state_name",
                               pc.take(renamed, pc.index_in(part["state_name"], value_set=names)))
        return part.set_column(part.schema.get_field_index("generation"), "generation",
                               pa.repeat(pa.scalar(generation, pa.int64()), part.num_rows))
    return map(restored, [rows] if isinstance(rows, pa.Table) else rows)


def _checkpoint(settings: Settings, restore: _Restore, checkpoint_id: int, state: dict[str, TableVersion],
                run_id: str) -> CheckpointMetadata:
    src, spec, plan, kept = restore.source.meta, restore.spec, restore.plan, restore.plan.kept
    sink_path = settings.in_warehouse(sink_name(spec.sink), "sink")
    return CheckpointMetadata.of_state(
        spec, checkpoint_id, src.batch_id, plan.parallelism, src.max_parallelism, key_type=src.key_type,
        backend=plan.backend, source_offsets=src.source_offsets, state=state,
        descriptors={kept[n]: d for n, d in src.descriptors.items() if n in kept},
        entries={kept[n]: c for n, c in src.entries.items() if n in kept}, completed_ms=int(time.time() * 1000),
        processing_time=src.processing_time, run_id=run_id, sink=sink_version(sink_path),
        restored_from=restore.source.describe(), airflow_run=AirflowRun.of_environment())


def _discard(spark: SparkSession, store: JobStore, old: CheckpointMetadata, retained: list[CheckpointMetadata]) -> None:
    """Release what expired checkpoint ``old`` alone held."""
    for create in (create_keyed_backend, create_operator_backend):
        create(old.backend, spark, store.job_dir, old.job_id, old).discard(old, retained)


def rescale_job(spark: SparkSession, settings: Settings, spec: JobSpec | Job, parallelism: int | dict, *,
                allow_non_restored_state: bool = False, savepoint_first: bool = False, wait_s: float = 0.0,
                say=_SAY) -> CheckpointMetadata:
    """Rescale the job's latest checkpoint to ``parallelism`` (a dataflow: every operator, or ``{uid: parallelism}``
    for some): keyed state stays, operator state moves; with ``savepoint_first``, a savepoint of that checkpoint
    is taken first, while the job is held for both.

    Example::

        rescale_job(spark, settings, JobCatalog(settings).load("clicks"), 4)
    """
    return restore_job(spark, settings, spec, None, parallelism=parallelism,
                       allow_non_restored_state=allow_non_restored_state, savepoint_first=savepoint_first,
                       wait_s=wait_s, say=say)
