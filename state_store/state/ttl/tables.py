"""State TTL on the tables (docs/writing/ttl.md): which states have TTL, and which keyed rows are expired, in Spark.

A checkpoint records each state's TTL configuration with its descriptor
(``StateDescriptor.schema()``); every keyed row of a state with TTL carries its
expiry (epoch ms) in the ``expiry`` column, so filtering expired rows needs no
Python. A list stores its elements as ``[[expiry, element], ...]`` and its
row's ``expiry`` is the latest element's: a row is dropped once all of its
elements have expired, and the expired elements of a live list are cut out of
its JSON text (by an Arrow UDF on those rows only; values are never decoded).

Full snapshot cleanup (``cleanup_full_snapshot()``) applies this to savepoints
and ``hashmap`` checkpoints, at the processing time of the microbatch they
capture; the working state of a run is untouched, as in Flink. The compaction
filter (``cleanup_in_compaction()``) applies it when a job's tables are compacted.
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ...records.metadata import StateInfo, with_ttl


def ttl_states(descriptors: dict[str, StateInfo], strategy: str | None = None) -> dict[str, StateInfo]:
    """Keyed states with TTL; with ``strategy`` ("full_snapshot", "incremental", "compaction"), only those
    that use it."""
    return with_ttl(descriptors, strategy)


def expired(now: int):
    """The rows whose expiry has come at ``now``: ``ttl.rules.is_expired``, the rule's definition, as a Spark
    column (an entry without expiry never expires)."""
    return F.coalesce(F.col("expiry") <= F.lit(now), F.lit(False))


def drop_expired(df: DataFrame, states: dict[str, StateInfo], now: int) -> DataFrame:
    """``df`` (keyed rows) without the entries of ``states`` that are expired at ``now``; a live list keeps only
    its live elements."""
    if not states:
        return df
    mine = F.col("state_name").isin(sorted(states))
    df = df.filter(~(mine & expired(now)))
    lists = sorted(n for n, d in states.items() if d.kind == "list")
    if not lists:
        return df
    is_list = F.col("state_name").isin(lists) & F.col("expiry").isNotNull() & F.col("value").isNotNull()
    rest = df.filter(~is_list)
    pruned = df.filter(is_list).mapInArrow(_prune_lists(now), df.schema)
    return rest.unionByName(pruned)


def _prune_lists(now: int):
    def prune(batches):
        import pyarrow as pa

        from ..codecs import prune_stamped_list

        for batch in batches:
            kept = [prune_stamped_list(text, now) for text in batch.column("value").to_pylist()]
            index = batch.schema.get_field_index("value")
            yield batch.set_column(index, "value", pa.array(kept, pa.string()))

    return prune


def count_entries(df: DataFrame, states) -> dict[str, int]:
    """Rows per state of ``states`` in ``df`` (state name -> count): the entries a snapshot with cleanup holds."""
    if not states:
        return {}
    rows = df.filter(F.col("state_name").isin(sorted(states))).groupBy("state_name").count().collect()
    return {r["state_name"]: r["count"] for r in rows}
