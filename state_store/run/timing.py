"""A run's time, on the driver (docs/writing/time.md): where event time stood at the restore point, which stored timers
are due, and the watermark's union list state each microbatch leaves behind."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..delta.backends import StateBackend
from ..functions import uses_timers
from ..records.layout import OperatorRow
from ..records.metadata import CheckpointMetadata, MicrobatchPlan
from ..state.operator import UNION
from ..timers import TimeDomain, timer_state_names
from ..watermarks import WATERMARK_STATE, EventClock
from .context import RunContext


def restored_clock(ctx: RunContext, operator: StateBackend, checkpoint: CheckpointMetadata | None) -> EventClock:
    """Where event time stood at ``checkpoint``: the minimum over every subtask's entry of the watermark's union
    list state (FLINK-5601), whatever parallelism wrote it; no watermark for a job without a strategy."""
    if ctx.spec.watermark_strategy is None or checkpoint is None:
        return EventClock()
    rows = (operator.read(checkpoint).filter(F.col("state_name") == WATERMARK_STATE).select("value")
            .collect())
    return EventClock.restored([r["value"] for r in rows])


def _timers(keyed: StateBackend, checkpoint: CheckpointMetadata | None, uid: str, which=None) -> DataFrame | None:
    """The live timers stored at ``checkpoint`` (rows of the keyed table), or None when there can be none;
    ``which`` (a condition on a timer's rows) narrows them before the latest row of each timer is picked."""
    if checkpoint is None:
        return None
    names = list(timer_state_names(uid).values())
    mine = F.col("state_name").isin(names)
    return keyed.read(checkpoint, lambda df: df.filter(mine if which is None else mine & which))


def timers_due_check(ctx: RunContext, keyed: StateBackend, checkpoint: CheckpointMetadata | None):
    """For a run without new input: ``due(now, watermark)``, whether a stored timer is due (the earliest of
    each domain, read once); None for a function without ``on_timer``."""
    if not uses_timers(ctx.spec.function):
        return None
    earliest: dict[TimeDomain, int] = {}
    read: list[bool] = []

    def due(now: int, watermark: int) -> bool:
        if not read:
            timers = _timers(keyed, checkpoint, ctx.spec.uid)
            rows = timers.groupBy("state_name").agg(F.min("expiry").alias("first")).collect() if timers else []
            by_name = {name: domain for domain, name in timer_state_names(ctx.spec.uid).items()}
            earliest.update({by_name[r["state_name"]]: r["first"] for r in rows if r["first"] is not None})
            read.append(True)
        first_event, first_processing = earliest.get(TimeDomain.EVENT_TIME), earliest.get(TimeDomain.PROCESSING_TIME)
        return (first_processing is not None and first_processing <= now) or (
            first_event is not None and first_event <= watermark)

    return due


def due_timer_keys(ctx: RunContext, keyed: StateBackend, checkpoint: CheckpointMetadata | None,
                   plans: list[MicrobatchPlan]) -> DataFrame | None:
    """``(key_group, key)`` of every stored timer that comes due in the run (at or below its last watermark, or
    its latest processing time): the run brings these keys to their subtasks even without records."""
    if not uses_timers(ctx.spec.function):
        return None
    names = timer_state_names(ctx.spec.uid)
    watermark, now = max(p.watermark for p in plans), max(p.timestamp for p in plans)

    def due(timestamp):
        return (((F.col("state_name") == names[TimeDomain.EVENT_TIME]) & (timestamp <= F.lit(watermark)))
                | ((F.col("state_name") == names[TimeDomain.PROCESSING_TIME]) & (timestamp <= F.lit(now))))

    # A timer's id holds its timestamp (user_key, on its removal row too): the rows of timers that are not due
    # are left out before the latest row of each timer is picked.
    timers = _timers(keyed, checkpoint, ctx.spec.uid, due(F.col("user_key").cast("bigint")))
    if timers is None:
        return None
    return timers.filter(due(F.col("expiry"))).select("key_group", "key")


def watermark_rows(ctx: RunContext, plans: list[MicrobatchPlan]) -> list[OperatorRow]:
    """Each subtask's entry of the watermark's union list state after each microbatch (where its event time
    stands), for a job with a watermark strategy."""
    if ctx.spec.watermark_strategy is None:
        return []
    return [OperatorRow(WATERMARK_STATE, subtask, UNION, p.clock.to_entry(), p.batch_id)
            for p in plans for subtask in range(ctx.p)]
