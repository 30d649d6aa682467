"""Operator state redistribution on rescale: Flink's ``RoundRobinOperatorStateRepartitioner``, as pure functions.

No Spark here: ``restore`` applies these per state name inside Spark tasks.
Each function takes the old subtasks' values in subtask order and returns the
new subtasks' values in subtask order.

- **split** (ListState, SPLIT_DISTRIBUTE): the old lists are concatenated and
  cut into contiguous slices; ``base = total // p``, the first ``total % p``
  subtasks from the state's start get one element more. An operator's split
  states start at rotating subtasks (``split_starts``): Flink takes them in
  the iteration order of a ``java.util.HashMap`` of their names
  (``java_hash_map_order``), the first starting at subtask 0 and each next one
  at the first subtask the previous gave no extra element to, so the extras
  spread over the subtasks instead of piling on the first ones.
- **union** (UnionListState, UNION): every new subtask gets every element.
- **broadcast** (BroadcastState, BROADCAST): new subtask ``i`` gets a copy of
  old subtask ``i % p_old``'s map.

The sources' offsets (``__source__.offsets``) are split state with one
exception (``place_source_entries``): an entry of a Kafka topic partition goes
to the subtask Flink's Kafka source assigns that partition to
(``kafka_partition_owner``), so 4 partitions of a topic whose start index is 0
are ``[p0, p2], [p1, p3]`` on 2 subtasks and ``[p0, p3], [p1], [p2]`` on 3, the
seeds' table, whatever the old layout was.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

_JAVA_HASH_MAP_CAPACITY, _JAVA_LOAD_FACTOR = 16, 0.75  # java.util.HashMap's defaults


def split_distribute(old: Sequence[Sequence[Any]], new_parallelism: int, start: int = 0) -> list[list[Any]]:
    """Round-robin split: ``[[a, b, c], [d, e]]`` to 3 subtasks is ``[[a, b], [c, d], [e]]``; from ``start``
    (``split_starts``) it is ``[[e], [a, b], [c, d]]`` for start 1: new subtask ``(start + i) % p`` gets
    slice ``i``."""
    elements = [e for part in old for e in part]
    parts = [elements[a:b] for a, b in split_slices(len(elements), new_parallelism)]
    return [parts[(subtask - start) % new_parallelism] for subtask in range(new_parallelism)]


def kafka_partition_owner(topic: str, partition: int, parallelism: int) -> int:
    """The subtask that reads a topic partition, as Flink's Kafka sources assign it (``KafkaTopicPartitionAssigner``,
    ``KafkaSourceEnumerator.getSplitOwner``): ``(start + partition) % p`` where a topic's partitions start at
    ``start = ((topic.hashCode() * 31) & 0x7FFFFFFF) % p``, so the topics of a job begin at different subtasks.
    Example: ``kafka_partition_owner("rescale", 3, 3) == 0`` (start index 0)."""
    _check(parallelism)
    start = ((java_string_hash(topic) * 31) & 0x7FFFFFFF) % parallelism
    return (start + partition) % parallelism


def place_source_entries(entries: Sequence[dict], parallelism: int) -> list[list[dict]]:
    """The sources' offset entries (``__source__.offsets``, in any old layout, concatenated) on ``parallelism``
    subtasks: an entry with a ``topic`` and a ``partition`` (a Kafka source's) goes to
    ``kafka_partition_owner``, after the other entries, in (split) order; the others (a file or Delta source's
    one entry) are cut into contiguous slices from subtask 0 (``split_distribute``). A run writes its entries
    with this, and a rescale redistributes them with it, so both give the same layout."""
    def of_kafka(e: dict) -> bool:
        return "topic" in e and "partition" in e

    parts = split_distribute([[e for e in entries if not of_kafka(e)]], parallelism)
    for e in sorted(filter(of_kafka, entries), key=lambda e: (e["topic"], e["partition"], e.get("split", ""))):
        parts[kafka_partition_owner(e["topic"], e["partition"], parallelism)].append(e)
    return parts


def split_starts(sizes: Mapping[str, int], new_parallelism: int) -> dict[str, int]:
    """The new subtask each split state of one operator starts at, from its element count (``sizes``: state
    name -> elements), as Flink's ``repartitionSplitState``: the states in ``java_hash_map_order``, the first at
    subtask 0, each next one at ``(start + total % p) % p`` of the previous, the first subtask it gave no extra
    element to. Example: ``{"b": 7, "a": 5}`` to 3 subtasks is ``{"a": 0, "b": 2}``."""
    _check(new_parallelism)
    starts, start = {}, 0
    for name in java_hash_map_order(sizes):
        starts[name] = start
        start = (start + sizes[name] % new_parallelism) % new_parallelism
    return starts


def operator_split_starts(sizes: Mapping[str, int], new_parallelism: int) -> dict[str, int]:
    """``split_starts`` of every operator's split states at once: ``sizes`` maps qualified names (``uid.name``)
    to element counts. Flink repartitions each operator on its own, so each operator's states rotate among
    themselves, by their names without the uid (the names Flink's map holds). The source offsets
    (``__source__.offsets``) are the state of an operator of their own, as a Flink source's are: they start at
    subtask 0 whatever the job's states are. Example: ``{"op.b": 7, "op.a": 5, "__source__.offsets": 2}`` to 3
    subtasks is ``{"op.a": 0, "op.b": 2, "__source__.offsets": 0}``."""
    by_operator: dict[str, dict[str, int]] = {}
    for qualified, size in sizes.items():
        uid, _, name = qualified.partition(".")
        by_operator.setdefault(uid, {})[name] = size
    return {f"{uid}.{name}": start for uid, states in by_operator.items()
            for name, start in split_starts(states, new_parallelism).items()}


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, in signed
    32-bit arithmetic. Example: ``java_string_hash("a") == 97``."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def java_hash_map_order(names: Iterable[str]) -> list[str]:
    """The order a default ``java.util.HashMap<String, ?>`` holding ``names`` iterates them: by bucket,
    ``(h ^ (h >>> 16)) & (capacity - 1)`` of ``h = String.hashCode()``, where the capacity is the smallest
    power of two from 16 that holds the names under the load factor 0.75. Names sharing a bucket are in name
    order here; in Java their order depends on how the map was filled (``put`` appends to the bucket, the
    ``computeIfAbsent`` Flink fills it with prepends, in the order of the snapshot's own maps), which a name
    alone does not tell. Example: ``java_hash_map_order(["b", "a"]) == ["a", "b"]`` (buckets 1 and 2)."""
    names = sorted(set(names))
    capacity = _JAVA_HASH_MAP_CAPACITY
    while len(names) > capacity * _JAVA_LOAD_FACTOR:
        capacity *= 2

    def bucket(name: str) -> int:
        h = java_string_hash(name) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(names, key=bucket)  # stable: name order within a bucket


def union(old: Sequence[Sequence[Any]], new_parallelism: int) -> list[list[Any]]:
    """Every new subtask gets every element, in old subtask order."""
    _check(new_parallelism)
    elements = [e for part in old for e in part]
    return [list(elements) for _ in range(new_parallelism)]


def union_stored(old: Sequence[Sequence[Any]], new_parallelism: int) -> list[list[Any]]:
    """How union state is kept once a rescale or the State Processor writes it: once, as new subtask 0's (every
    element, in old subtask order), the other subtasks' empty; a run gives every subtask all of it (``union``)."""
    _check(new_parallelism)
    return [[e for part in old for e in part]] + [[] for _ in range(new_parallelism - 1)]


def broadcast(old: Sequence[Any], new_parallelism: int) -> list[Any]:
    """New subtask ``i`` gets old subtask ``i % p_old``'s value."""
    _check(new_parallelism)
    if not old:
        return [None] * new_parallelism
    return [old[i % len(old)] for i in range(new_parallelism)]


def split_slices(total: int, new_parallelism: int) -> list[tuple[int, int]]:
    """The ``[start, end)`` element positions each new subtask gets from a concatenated list of ``total``."""
    _check(new_parallelism)
    base, remainder = divmod(total, new_parallelism)
    out, start = [], 0
    for i in range(new_parallelism):
        end = start + base + (1 if i < remainder else 0)
        out.append((start, end))
        start = end
    return out


def _check(new_parallelism: int) -> None:
    if not isinstance(new_parallelism, int) or isinstance(new_parallelism, bool) or new_parallelism <= 0:
        raise ValueError(f"new parallelism must be a positive integer, got {new_parallelism!r}")
