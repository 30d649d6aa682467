"""The driver half of the exchange (``exchange`` states the contract, ``subtask/reader`` is the executor half): the one
Spark frame a run's subtasks read, built from its records and the state they need, and the pass over it.

Every subtask gets its operator state, raw keyed state and the keyed state of the keys the run touches (read
once), then its records microbatch by microbatch, in one Spark partition of its own, sorted as it reads them.
The records are the operator's inputs' (``JobSpec.inputs``), each read by ``Frame._records`` as its role
says and carried in its own struct column (``record_column``).
"""
from __future__ import annotations

from dataclasses import replace

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..delta.backends import StateBackend
from ..errors import InputError
from ..functions import applies_to_keyed_state
from ..job import SHARE_KEY, Input, InputRole
from ..key_groups import first_key_group_column, key_group_column, subtask_column
from ..keys import (
    key_columns,
    key_expression,
    key_text,
    key_text_of,
    mistyped_key,
    record_key_columns,
    spark_key_type,
)
from ..records.metadata import CheckpointMetadata, MicrobatchPlan
from ..sources import POSITION_COLUMNS
from ..state.descriptors import qualified_name
from ..state.operator import SOURCE_STATE_PREFIX, UNION
from ..subtask.exchange import (
    BROADCAST_RECORD,
    EXCHANGE_COLUMNS,
    PHASE_KEYED,
    PHASE_OPERATOR,
    PHASE_RAW_KEYED,
    PHASE_RECORD,
    PHASE_SUBTASK,
    RECORD,
    RECORD2,
    RESULT_DDL,
    SIDE_BROADCAST,
    SIDE_KEYED,
    SORT_KEY,
    SORT_ONLY_COLUMNS,
    partition_keys,
    sort_columns,
    sort_key_parts,
)
from ..subtask.reader import run_partition
from ..subtask.run_files import RunOutputs
from ..subtask.runner import RAW_KEYED, RunPlan
from ..vectorized import VectorizedKeyedFunction
from ..watermarks import NO_EVENT_TIME, EventClock
from .context import RunContext

SMALL_RUN_RECORDS = 10_000  # a run of at most this many records reads only the key groups it touches
RECORD_COLUMNS = (RECORD, BROADCAST_RECORD, RECORD2)  # the inputs' struct columns, in their order in the frame


def record_column(input_: Input) -> str:
    """The exchange column of an input's records: ``record`` (a first input's, and a union's further stream's, of
    the same columns), ``record2`` (a two-input operator's second) or ``brecord`` (a broadcast input's)."""
    if input_.role is InputRole.BROADCAST:
        return BROADCAST_RECORD
    return RECORD2 if input_.role is InputRole.KEYED and input_.index == 2 else RECORD


def _record_columns_order(item: tuple[str, str]) -> int:
    return RECORD_COLUMNS.index(item[0])


class Frame:
    """Builds one run's exchange frame: ``Frame(ctx, plans).process(checkpoint, keyed, operator, outputs)``."""

    def __init__(self, ctx: RunContext, plans: list[MicrobatchPlan], start: EventClock = NO_EVENT_TIME,
                 due_timers: DataFrame | None = None, emitted: dict[str, list[str]] | None = None):
        spec, spark = ctx.spec, ctx.spark
        self.ctx, self.plans, self.start, self.due_timers = ctx, plans, start, due_timers
        self.emitted = emitted or {}  # in a dataflow: the files each upstream operator emitted in this run, by uid
        self._nulls: dict = {}  # exchange column -> its typed null (``_frame``)
        self.all_keyed_state = applies_to_keyed_state(spec.function) and any(
            self._has_records(i) for i in spec.inputs if i.role is InputRole.BROADCAST)
        # Each input's records in a struct column of its own (``record_column``): a union's further stream has the
        # first's columns, so its records go to ``record`` as the first's do.
        self.record_ddls = {record_column(i): i.source.record_ddl(spark) for i in reversed(spec.inputs)}

    def _frame(self, df: DataFrame, **columns) -> DataFrame:
        """``df`` as exchange rows: the named columns, typed nulls for the rest."""
        # A column is made by one JVM call where it can be (a SQL expression), and the typed nulls once a run:
        # a run's frame has some 25 columns in each of its five or more parts.
        cols, present = [], set(df.columns)  # ``df.columns`` asks the JVM for the schema each time: once
        for name, ddl in EXCHANGE_COLUMNS + sorted(self.record_ddls.items(), key=_record_columns_order):
            value = columns.get(name)
            if value is not None:
                cols.append(value.cast(ddl).alias(name))
            elif name in present and name not in self.record_ddls:
                cols.append(F.expr(f"CAST(`{name}` AS {ddl}) AS `{name}`"))
            else:
                null = self._nulls.get(name)
                if null is None:
                    null = self._nulls[name] = F.expr(f"CAST(NULL AS {ddl}) AS `{name}`")
                cols.append(null)
        return df.select(*cols)

    def _has_records(self, input_: Input) -> bool:
        """Whether ``input_`` may bring records to the run: a source with a range of any of the plans, an upstream
        operator's output with any file."""
        if input_.upstream is not None:
            return bool(self.emitted.get(input_.source.edge))
        name = self.ctx.planned_name(input_)
        return any(p.sources[name]["start"] != p.sources[name]["end"] for p in self.plans if name in p.sources)

    def _ranges(self, name: str) -> list[tuple]:
        """Source ``name``'s range in each planned microbatch; a later operator's inputs that read what operators
        before it emitted, which the plans do not name, get none."""
        return [p.range_of(name) if name in p.sources else (p.batch_id, None, None) for p in self.plans]

    def _subtasks(self) -> DataFrame:
        return self.ctx.spark.range(self.ctx.p).select(F.col("id").cast("int").alias("subtask"))

    def _records(self, input_: Input) -> DataFrame | None:
        """One input's records of the run as exchange rows (None when it has none): a source's ranges of the
        plans, or (in a dataflow) what the upstream operator emitted in this run."""
        source = input_.source
        if input_.upstream is not None:
            source = replace(source, files=tuple(self.emitted[source.edge]))
        ranges = self._ranges(self.ctx.planned_name(input_))
        if input_.role is InputRole.BROADCAST:
            return self._broadcast_records(source.read_run(self.ctx.spark, ranges))
        records = source.read_run(self.ctx.spark, ranges)
        if records is None:
            return None
        if input_.key == SHARE_KEY:  # a non-keyed operator's (a CoMapFunction's or CoFlatMapFunction's too)
            return self._shared_records(records, record_column(input_), input_.index)
        return self._keyed_records(input_, records)

    def _keyed_records(self, input_: Input, records: DataFrame) -> DataFrame:
        ctx, spec = self.ctx, self.ctx.spec
        key, what, column = input_.key, input_.what, record_column(input_)
        missing = [c for c in key_columns(key) if c not in records.columns]
        if missing:
            raise InputError(f"{what} has no key column {missing[0]!r} (columns: {records.columns}); fix the job's "
                             f"key")
        actual = mistyped_key(records, key, spec.key_type)
        if actual is not None:
            raise InputError(
                f"{actual} in {what} but the job declares key_type "
                f"{spec.key_type.name} ({spark_key_type(spec.key_type)}); cast it in the source or change key_type"
            )
        data = [c for c in records.columns if c not in POSITION_COLUMNS]
        kg = key_group_column(key_expression(key), ctx.maxp)
        return self._frame(
            records, subtask=subtask_column(kg, ctx.p, ctx.maxp), phase=F.lit(PHASE_RECORD), side=F.lit(SIDE_KEYED),
            key=key_text_of(key, spec.key_type), key_group=kg,
            input=None if input_.index is None else F.lit(input_.index),
            **{column: F.struct(*[F.col(f"`{c}`") for c in data])})

    def _shared_records(self, records: DataFrame, column: str = RECORD, input_: int | None = None) -> DataFrame:
        """A non-keyed operator's records (``dataflow``): each to the subtask its content hashes to, whatever runs
        the microbatches are grouped in (the same record always to the same subtask); the subtask's number is its
        key, in the first of its key groups (one ``process`` call a subtask and microbatch). ``column`` and
        ``input_``: where a two-input operator's records go."""
        p, maxp = self.ctx.p, self.ctx.maxp
        data = [c for c in records.columns if c not in POSITION_COLUMNS]
        share = F.pmod(F.xxhash64(*[F.col(f"`{c}`") for c in data]), F.lit(p)).cast("int")
        return self._frame(
            records, subtask=share, phase=F.lit(PHASE_RECORD), side=F.lit(SIDE_KEYED), key=key_text(share),
            key_group=first_key_group_column(share, p, maxp),
            input=None if input_ is None else F.lit(input_), **{column: F.struct(*[F.col(f"`{c}`") for c in data])})

    def _broadcast_records(self, b: DataFrame | None) -> DataFrame | None:
        """A broadcast input's records, each to every subtask."""
        if b is None:
            return None
        data = [c for c in b.columns if c not in POSITION_COLUMNS]
        b = b.select(F.struct(*[F.col(f"`{c}`") for c in data]).alias(BROADCAST_RECORD),
                     *POSITION_COLUMNS).crossJoin(self._subtasks())
        return self._frame(b, phase=F.lit(PHASE_RECORD), side=F.lit(SIDE_BROADCAST), brecord=F.col(BROADCAST_RECORD))

    def _keyed_restrict(self, records: list[DataFrame], checkpoint: CheckpointMetadata | None, raw_name: str):
        """What narrows the keyed state read to the keys the run touches (and raw keyed state of every key
        group), and the partitions it reads: a semi-join of every partition, or for a small run a read of only
        the key groups touched and a broadcast join."""
        touched = [r.filter(F.col("side") == SIDE_KEYED).select("key_group", "key") for r in records]
        if self.due_timers is not None:  # keys without records whose timers fire in the run
            touched.append(self.due_timers)
        touched.append(self.ctx.spark.range(self.ctx.maxp).select(F.col("id").cast("int").alias("key_group"),
                                                                  F.lit("").alias("key")))
        touched_keys = touched[0]
        for t in touched[1:]:
            touched_keys = touched_keys.unionByName(t)
        touched_keys = touched_keys.distinct()
        if self.all_keyed_state:
            return None, None  # apply_to_keyed_state reaches every key
        known = [p.records for p in self.plans]
        if checkpoint is None or len(touched) == 1 or None in known or sum(known) > SMALL_RUN_RECORDS:
            return (lambda df: df.join(touched_keys, ["key_group", "key"], "left_semi")), None
        pairs = touched[0]
        for t in touched[1:-1]:
            pairs = pairs.unionByName(t)
        # At most SMALL_RUN_RECORDS keys have records (brought here as they are, without a shuffle); due timers
        # may add any number. When the keys are few they are brought here in one job (the timers read once) and
        # the pass joins them as a local table; else the pass reads the due timers again, and only their key
        # groups are brought here.
        found = (pairs if self.due_timers is None else pairs.distinct().limit(SMALL_RUN_RECORDS + 1)).collect()
        if len(found) <= SMALL_RUN_RECORDS:
            keys = sorted({(r[0], r[1]) for r in found})
            groups = sorted({g for g, _ in keys})
            touched_keys = self.ctx.spark.createDataFrame(keys + [(g, "") for g in range(self.ctx.maxp)],
                                                          "key_group int, key string")
        else:
            groups = sorted(r[0] for r in pairs.select("key_group").distinct().collect())
        small = F.broadcast(touched_keys)
        partitions = [[("state_name", "=", raw_name)]] + ([[("key_group", "in", groups)]] if groups else [])
        return (lambda df: (df.filter(F.col("key_group").isin(groups) | (F.col("state_name") == raw_name))
                            .join(small, ["key_group", "key"], "left_semi"))), partitions

    def _state(self, records: list[DataFrame], checkpoint: CheckpointMetadata | None, keyed_backend: StateBackend,
               operator_backend: StateBackend) -> DataFrame:
        """The subtask markers, then the operator and keyed state each subtask restores (none before a first
        checkpoint: the markers alone, no plan of empty reads)."""
        ctx = self.ctx
        markers = self._frame(self._subtasks(), phase=F.lit(PHASE_SUBTASK))
        if checkpoint is None:
            return markers
        raw_name = qualified_name(ctx.spec.uid, RAW_KEYED)
        keyed = keyed_backend.read(checkpoint, *self._keyed_restrict(records, checkpoint, raw_name))
        keyed = self._frame(keyed, subtask=subtask_column(F.col("key_group"), ctx.p, ctx.maxp),
                            phase=F.when(F.col("state_name") == raw_name, F.lit(PHASE_RAW_KEYED))
                            .otherwise(F.lit(PHASE_KEYED)))
        operator = operator_backend.read(checkpoint).filter(~F.col("state_name").startswith(SOURCE_STATE_PREFIX))
        own = operator.filter(F.col("mode") != UNION)
        union = (operator.filter(F.col("mode") == UNION).withColumnRenamed("subtask", "origin")
                 .crossJoin(self._subtasks()))
        operator = self._frame(own, phase=F.lit(PHASE_OPERATOR), origin=F.col("subtask")).unionByName(
            self._frame(union, phase=F.lit(PHASE_OPERATOR), origin=F.col("origin")))
        return markers.unionByName(operator).unionByName(keyed)

    def _sorted(self, frame: DataFrame) -> DataFrame:
        """One Spark partition per subtask, sorted in the order the subtask reads (``exchange``'s docstring)."""
        keys = F.array(*[F.lit(k) for k in partition_keys(self.ctx.p)])
        first = self.plans[0].batch_id
        sort_key = F.lit(0).cast("bigint")
        for name, (shift, _) in sort_key_parts().items():
            value = F.col("batch_id") - F.lit(first) if name == "batch_index" else F.col(name)
            sort_key = sort_key + F.shiftleft(F.coalesce(value.cast("bigint"), F.lit(0).cast("bigint")), shift)
        vectorized = isinstance(self.ctx.spec.function, VectorizedKeyedFunction)
        order = sort_columns(list(self.ctx.spec.order_by), vectorized)
        return (frame.repartition(self.ctx.p, F.element_at(keys, F.col("subtask") + 1))
                .withColumn(SORT_KEY, sort_key)
                .sortWithinPartitions(*[F.col(c).asc_nulls_last() for c in order])
                .drop(SORT_KEY, *(() if vectorized else SORT_ONLY_COLUMNS)))

    def _record_key_columns(self) -> tuple:
        """``keys.record_key_columns`` when every keyed record is keyed by the operator's own columns (one input,
        or a union of streams of its columns); () else."""
        spec = self.ctx.spec
        if any(i.role is not InputRole.UNION or i.key != spec.key for i in spec.further_inputs):
            return ()
        return record_key_columns(spec.key, spec.key_type)

    def process(self, checkpoint: CheckpointMetadata | None, keyed_backend: StateBackend,
                operator_backend: StateBackend, outputs: RunOutputs) -> DataFrame:
        """The run's one Spark pass: the subtasks' result rows (a row per file written, a stat row per subtask
        and microbatch), lazily."""
        ctx, spec = self.ctx, self.ctx.spec
        records = [r for r in map(self._records, spec.inputs) if r is not None]
        frame = self._state(records, checkpoint, keyed_backend, operator_backend)
        for part in records:
            frame = frame.unionByName(part)
        run_plan = RunPlan(spec.uid, spec.function, spec.key_type, spec.output_type, ctx.p, ctx.maxp,
                           checkpoint is not None, [(p.batch_id, p.timestamp, p.watermark) for p in self.plans],
                           outputs, self.start.watermark, {t.name: t.type_info for t in spec.side_outputs},
                           self.all_keyed_state, tuple(spec.order_by), self._record_key_columns())

        def subtasks(batches):
            return run_partition(run_plan, batches)

        return self._sorted(frame).mapInArrow(subtasks, RESULT_DDL)
