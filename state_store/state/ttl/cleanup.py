"""State TTL's incremental cleanup (``cleanup_incrementally(size, every_record)``, on by default with 5
entries), run in Spark after a run's state is written (docs/writing/ttl.md).

A cursor over ``(key_group, state_name, key, namespace, user_key)`` is kept in
the checkpoint. The next ``size`` entries per subtask per microbatch after the
cursor (per record too with ``every_record``) are visited, and those expired
at the run's last microbatch time are removed (``cleanup`` returns them as
tombstones of that microbatch; the ``delta`` backend deletes their rows
instead, see ``StateBackend.remove_entries``). Only the key groups the cursor
is about to visit are read. A replay takes the cleanups a killed attempt of its
microbatches committed as they were (``run_incremental_cleanup``).
"""
from __future__ import annotations

import math

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ...records.metadata import StateInfo
from ...records.stats import CleanupNote
from .tables import expired, ttl_states

CURSOR_ORDER = ("key_group", "state_name", "key", "namespace", "_user_key")


def cleanup_width(states: dict[str, StateInfo], parallelism: int, records: list[int]) -> int:
    """How many entries a run's incremental cleanup visits: per subtask, ``size`` per microbatch, and with
    ``every_record`` also ``size`` per record each microbatch processed (``records``, in all subtasks), as
    Flink's ``runCleanupForEveryRecord`` visits ``size`` entries per record."""
    size = max(d.ttl.incremental[0] for d in states.values())
    every_record = any(d.ttl.incremental[1] for d in states.values())
    return size * (parallelism * len(records) + (sum(records) if every_record else 0))


def cleanup(live: DataFrame, states: dict[str, StateInfo], cursor: list | None, max_parallelism: int,
            stored_entries: int, width: int, now: int, batch_id: int):
    """Visit ``width`` entries of ``states`` after ``cursor`` in ``live`` (the live keyed entries after the run)
    and make tombstones of the expired ones. Returns (tombstones DataFrame, removed per state, visited, new
    cursor). Only key groups from the cursor's on are read: about as many as ``width`` entries need, from the
    entries per key group the checkpoint counts (``stored_entries``)."""
    start = int(cursor[0]) if cursor else 0
    per_group = max(stored_entries, 1) / max_parallelism
    end = min(max_parallelism, start + math.ceil(width / per_group) + 1)
    df = (live.filter(F.col("state_name").isin(sorted(states)) & (F.col("key_group") >= start)
                      & (F.col("key_group") < end))
          .withColumn("_user_key", F.coalesce(F.col("user_key"), F.lit(""))))
    if cursor and len(cursor) == len(CURSOR_ORDER):  # resume after the last entry visited
        position = F.struct(*[F.col(c) for c in CURSOR_ORDER])
        df = df.filter(position > F.struct(*[F.lit(v) for v in cursor]))
    window = df.orderBy(*CURSOR_ORDER).limit(width).cache()
    try:
        summary = window.agg(F.count(F.lit(1)).alias("visited"),
                             F.max(F.struct(*[F.col(c) for c in CURSOR_ORDER])).alias("last")).first()
        dead = window.filter(expired(now))
        removed = {r["state_name"]: r["count"] for r in dead.groupBy("state_name").count().collect()}
        tombstones = (dead.drop("_user_key").withColumn("value", F.lit(None).cast("string"))
                      .withColumn("expiry", F.lit(None).cast("bigint"))
                      .withColumn("batch_id", F.lit(batch_id).cast("bigint"))
                      .withColumn("generation", F.lit(1).cast("bigint")))
        if removed:
            tombstones = tombstones.localCheckpoint()  # before the window's cache goes
        visited = summary["visited"]
    finally:
        window.unpersist()
    if visited == width and summary["last"] is not None:
        new_cursor = list(summary["last"])
    else:  # the key groups up to ``end`` are done: the next run starts after them (from 0 after the last)
        new_cursor = [end % max_parallelism]
    return (tombstones if removed else None), removed, visited, new_cursor


def run_incremental_cleanup(backend, registered: dict[str, StateInfo], checkpoint, plans: list, stats: list,
                            parallelism: int, max_parallelism: int, fault, say) -> dict[int, CleanupNote]:
    """TTL's incremental cleanup of a run, once the run's state is written, for the states with it (those of
    ``checkpoint`` and those the run ``registered``): per microbatch after which a cleanup ran, what it removed
    and the cursor after it (``{batch_id: CleanupNote}``), for the run's checkpoints to count and
    record. A cleanup that an earlier attempt of these microbatches committed (this
    run is a replay) is taken as it was, whatever the run's grouping of microbatches, so counts and cursor
    follow what the table holds; the run's own one starts after the last of them, as a run that began there
    would (``fault(point, batch_ids)`` crashes it at its commit, ``say`` reports)."""
    states = ttl_states({**(checkpoint.descriptors if checkpoint else {}), **registered}, "incremental")
    if not states or backend.in_process:
        return {}
    last = plans[-1]
    committed, done = backend.cleanups_done([p.batch_id for p in plans])
    if committed is not None and committed >= last.batch_id:
        if committed > last.batch_id:
            say(f"TTL incremental cleanup: none; an earlier attempt already cleaned up at microbatch {committed}, "
                f"which a later run replays")
            return done
        done.setdefault(last.batch_id, CleanupNote())  # a note the log no longer keeps
        say(f"TTL incremental cleanup: committed by an earlier attempt, removed "
            f"{sum(done[last.batch_id].removed.values())} expired")
        return done
    after = max(done, default=None)  # the run's own cleanup covers the microbatches after it
    entries = dict(checkpoint.entries) if checkpoint else {}
    for s in stats:
        for name, delta in (s.entries_delta.items() if after is not None and s.batch_id <= after else ()):
            entries[name] = entries.get(name, 0) + delta
    for note in done.values():
        for name, count in note.removed.items():
            entries[name] = entries.get(name, 0) - count
    cursor = done[after].cursor if after is not None else (checkpoint.cleanup_cursor if checkpoint else None)
    width = cleanup_width(states, parallelism,
                          [s.records_in for s in stats if after is None or s.batch_id > after])
    tombstones, removed, visited, cursor = cleanup(
        backend.live_after(last.batch_id), states, cursor, max_parallelism, sum(entries.get(n, 0) for n in states),
        width, last.timestamp, last.batch_id)
    if tombstones is not None:
        fault("before_cleanup_write", [last.batch_id])
        backend.remove_entries(tombstones, last.batch_id, CleanupNote(removed, cursor))
        fault("after_cleanup_write", [last.batch_id])
    say(f"TTL incremental cleanup: visited {visited} entries, removed {sum(removed.values())} expired")
    return {**done, last.batch_id: CleanupNote(removed, cursor)}
