"""The user contract: write a keyed function the way a Flink user writes a KeyedProcessFunction.

    class CountPerKey(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG(), 0))

        def process(self, key, records, ctx):
            self.count.update(self.count.value() + len(records))
            yield {"key": key, "count": self.count.value()}

``process`` is called once per key per microbatch with that key's records
(dicts, in source order unless the job sets ``order_by``) and yields output
rows (dicts matching the job's ``output_type``). State handles registered in
``open`` are scoped to the key being processed.

Lifecycle, per subtask and run: for every microbatch of the run, in order,
``initialize_state`` (operator and raw state as the last snapshot left them;
the first time, followed by ``open``, as in Flink), then
``process_broadcast_element`` for each broadcast record, ``process`` for each
key, and ``snapshot_state``; ``close`` at the end. The
function object lives for the subtask's whole run: its fields persist across
the run's microbatches, not across runs; state persists across runs.
"""
from __future__ import annotations

import abc
from typing import Any, Iterable

from .descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
    qualified_name,
)
from .key_groups import KeyGroupRange
from .keyed_state import (
    AggregatingState,
    KeyedStateStore,
    ListState,
    MapState,
    ReducingState,
    ValueState,
)
from .operator_state import BroadcastState, OperatorStateStore
from .ttl.handles import create_state_and_wrap_with_ttl_if_enabled


class RuntimeContext:
    """Given to ``open``: registers keyed state and tells where this subtask stands."""

    def __init__(self, uid: str, store: KeyedStateStore, subtask: int, parallelism: int, max_parallelism: int):
        self._uid, self._store = uid, store
        self._subtask, self._parallelism, self._max_parallelism = subtask, parallelism, max_parallelism
        self.descriptors: dict[str, StateDescriptor] = {}

    def _register(self, descriptor: StateDescriptor, expected: type):
        if not isinstance(descriptor, expected):
            raise TypeError(f"expected a {expected.__name__}, got {descriptor!r}")
        qname = qualified_name(self._uid, descriptor.name)
        known = self.descriptors.get(qname)
        if known is not None and known.schema() != descriptor.schema():
            raise ValueError(f"state {descriptor.name!r} is registered twice with different kinds or types")
        self.descriptors[qname] = descriptor
        return create_state_and_wrap_with_ttl_if_enabled(self._store, qname, descriptor)

    def get_keyed_state(self, descriptor: StateDescriptor):
        """The handle of any kind of keyed state ``descriptor`` declares (its TTL wrapper when the descriptor has
        TTL), scoped to the key being processed; ``get_state``, ``get_list_state`` ... name the kind."""
        return self._register(descriptor, StateDescriptor)

    def get_state(self, descriptor: ValueStateDescriptor) -> ValueState:
        """A ValueState handle (its TTL wrapper when the descriptor has TTL), scoped to the key
        being processed."""
        return self._register(descriptor, ValueStateDescriptor)

    def get_list_state(self, descriptor: ListStateDescriptor) -> ListState:
        """A ListState handle (its TTL wrapper when the descriptor has TTL), scoped to the key
        being processed."""
        return self._register(descriptor, ListStateDescriptor)

    def get_map_state(self, descriptor: MapStateDescriptor) -> MapState:
        """A MapState handle (its TTL wrapper when the descriptor has TTL), scoped to the key
        being processed."""
        return self._register(descriptor, MapStateDescriptor)

    def get_reducing_state(self, descriptor: ReducingStateDescriptor) -> ReducingState:
        """A ReducingState handle (its TTL wrapper when the descriptor has TTL), scoped to the key
        being processed."""
        return self._register(descriptor, ReducingStateDescriptor)

    def get_aggregating_state(self, descriptor: AggregatingStateDescriptor) -> AggregatingState:
        """An AggregatingState handle (its TTL wrapper when the descriptor has TTL), scoped to the key
        being processed."""
        return self._register(descriptor, AggregatingStateDescriptor)

    def get_index_of_this_subtask(self) -> int:
        """This subtask's index, in [0, parallelism)."""
        return self._subtask

    def get_number_of_parallel_subtasks(self) -> int:
        """The job's parallelism."""
        return self._parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        """The job's max parallelism (its number of key groups)."""
        return self._max_parallelism


class Context:
    """Given to ``process`` with each key: the key, the microbatch (``batch_id``) and its processing time,
    broadcast state (read-only)."""

    def __init__(self, store: KeyedStateStore, operator_store: OperatorStateStore, batch_id: int, timestamp: int):
        self._store, self._operator_store = store, operator_store
        self.batch_id, self._timestamp = batch_id, timestamp
        self.current_key: Any = None

    def timestamp(self) -> int:
        """Processing time of this microbatch, in epoch milliseconds."""
        return self._timestamp

    def current_processing_time(self) -> int:
        """The same as ``timestamp()``: processing time is the microbatch's, fixed in its plan."""
        return self._timestamp

    def get_current_key(self) -> Any:
        """The key being processed, of the job's key type."""
        return self.current_key

    def current_key_group(self) -> int:
        """The key group of the key being processed."""
        return self._store.current_key_group

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> BroadcastState:
        """The broadcast state, read-only here (Flink's ReadOnlyContext)."""
        return self._operator_store.get_broadcast_state(descriptor)


class BroadcastContext:
    """Given to ``process_broadcast_element``: broadcast state is writable here."""

    def __init__(self, operator_store: OperatorStateStore, batch_id: int, timestamp: int):
        self._operator_store, self.batch_id, self._timestamp = operator_store, batch_id, timestamp

    def timestamp(self) -> int:
        """Processing time of this microbatch, in epoch milliseconds."""
        return self._timestamp

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> BroadcastState:
        """The broadcast state, writable."""
        return self._operator_store.get_broadcast_state(descriptor)


class FunctionInitializationContext:
    """Given to ``initialize_state``: operator state and the raw state written last time."""

    def __init__(self, operator_store: OperatorStateStore, raw_keyed: dict[int, bytes], key_group_range: KeyGroupRange,
                 restored: bool, subtask: int):
        self._operator_store, self._raw_keyed = operator_store, raw_keyed
        self.key_group_range, self._restored, self.subtask = key_group_range, restored, subtask

    def is_restored(self) -> bool:
        """True when this run continues from a checkpoint or savepoint."""
        return self._restored

    def get_operator_state_store(self) -> OperatorStateStore:
        """Where operator list, union list and broadcast state are registered."""
        return self._operator_store

    def raw_operator_state(self) -> bytes | None:
        """The bytes this subtask wrote with ``write_raw_operator_state``, or None."""
        return self._operator_store.raw()

    def raw_keyed_state(self, key_group: int) -> bytes | None:
        """The bytes written for ``key_group`` with ``write_raw_keyed_state``, or None."""
        if key_group not in self.key_group_range:
            raise ValueError(f"key group {key_group} is not owned by this subtask ({self.key_group_range})")
        return self._raw_keyed.get(key_group)


class FunctionSnapshotContext:
    """Given to ``snapshot_state`` at the end of every microbatch: raw state written here replaces all
    raw state this subtask wrote before (what is not written again is gone)."""

    def __init__(self, operator_store: OperatorStateStore, key_group_range: KeyGroupRange, batch_id: int):
        self._operator_store, self.key_group_range, self.batch_id = operator_store, key_group_range, batch_id
        self.raw_keyed: dict[int, bytes | None] = {}

    def write_raw_operator_state(self, data: bytes | None) -> None:
        """This subtask's raw operator state as of this snapshot."""
        if data is not None and not isinstance(data, (bytes, bytearray)):
            raise TypeError("raw operator state is bytes")
        self._operator_store.set_raw(None if data is None else bytes(data))

    def write_raw_keyed_state(self, key_group: int, data: bytes | None) -> None:
        """The raw keyed state of one of this subtask's key groups as of this snapshot."""
        if key_group not in self.key_group_range:
            raise ValueError(f"key group {key_group} is not owned by this subtask ({self.key_group_range})")
        if data is not None and not isinstance(data, (bytes, bytearray)):
            raise TypeError("raw keyed state is bytes")
        self.raw_keyed[key_group] = None if data is None else bytes(data)


class KeyedProcessFunction(abc.ABC):
    """Subclass and implement ``process``; the other hooks are optional.

    A subclass without ``process`` cannot be instantiated, so the mistake shows
    where the job is defined, not inside an executor.
    """

    def initialize_state(self, ctx: FunctionInitializationContext) -> None:
        """Register operator state and read raw state (Flink's CheckpointedFunction); runs on every
        subtask before every microbatch. Returns nothing."""

    def open(self, ctx: RuntimeContext) -> None:
        """Register keyed state from descriptors; runs once per subtask and run, after the first
        ``initialize_state``. Returns nothing."""

    @abc.abstractmethod
    def process(self, key: Any, records: list[dict], ctx: Context) -> Iterable[dict] | None:
        """Handle one key's records of a microbatch; return (or yield) output rows, or None."""

    def snapshot_state(self, ctx: FunctionSnapshotContext) -> None:
        """Write raw state, or adjust operator state; runs on every subtask after every microbatch,
        with or without records. Returns nothing."""

    def close(self) -> None:
        """Release what open acquired; runs once per subtask at the end of a run. Returns nothing."""


class KeyedBroadcastProcessFunction(KeyedProcessFunction):
    """A keyed function connected to a broadcast stream (e.g. rules)."""

    @abc.abstractmethod
    def process_broadcast_element(self, value: dict, ctx: BroadcastContext) -> Iterable[dict] | None:
        """Handle one broadcast record on every subtask, before the keyed records of the same
        microbatch; broadcast state is writable here. Return (or yield) output rows, or None."""
