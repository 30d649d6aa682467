"""The user contract: write a keyed function the way a Flink user writes a KeyedProcessFunction.

    class CountPerKey(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG(), 0))

        def process(self, key, records, ctx):
            self.count.update(self.count.value() + len(records))
            yield {"key": key, "count": self.count.value()}

``process`` is called once per key per microbatch with that key's records
(dicts, in a deterministic order) and yields output rows (dicts matching the
job's ``output_type``). State handles registered in ``open`` are scoped to the
key being processed. The CheckpointedFunction hooks ``initialize_state`` and
``snapshot_state`` give operator state and raw state.
"""
from __future__ import annotations

from typing import Any, Iterable

from .descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from .key_groups import KeyGroupRange
from .keyed_state import (
    AggregatingState,
    KeyedStateStore,
    ListState,
    MapState,
    ReducingState,
    ValueState,
    create_handle,
)
from .operator_state import BroadcastState, OperatorStateStore


class RuntimeContext:
    """Given to ``open``: registers keyed state and tells where this subtask stands."""

    def __init__(self, uid: str, store: KeyedStateStore, subtask: int, parallelism: int, max_parallelism: int):
        self._uid, self._store = uid, store
        self._subtask, self._parallelism, self._max_parallelism = subtask, parallelism, max_parallelism
        self.descriptors: dict[str, StateDescriptor] = {}

    def _register(self, descriptor: StateDescriptor, expected: type):
        if not isinstance(descriptor, expected):
            raise TypeError(f"expected a {expected.__name__}, got {descriptor!r}")
        qname = f"{self._uid}.{descriptor.name}"
        known = self.descriptors.get(qname)
        if known is not None and known.schema() != descriptor.schema():
            raise ValueError(f"state {descriptor.name!r} is registered twice with different kinds or types")
        self.descriptors[qname] = descriptor
        return create_handle(self._store, qname, descriptor)

    def get_state(self, descriptor: ValueStateDescriptor) -> ValueState:
        return self._register(descriptor, ValueStateDescriptor)

    def get_list_state(self, descriptor: ListStateDescriptor) -> ListState:
        return self._register(descriptor, ListStateDescriptor)

    def get_map_state(self, descriptor: MapStateDescriptor) -> MapState:
        return self._register(descriptor, MapStateDescriptor)

    def get_reducing_state(self, descriptor: ReducingStateDescriptor) -> ReducingState:
        return self._register(descriptor, ReducingStateDescriptor)

    def get_aggregating_state(self, descriptor: AggregatingStateDescriptor) -> AggregatingState:
        return self._register(descriptor, AggregatingStateDescriptor)

    def get_index_of_this_subtask(self) -> int:
        return self._subtask

    def get_number_of_parallel_subtasks(self) -> int:
        return self._parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self._max_parallelism


class Context:
    """Given to ``process`` with each key: the key, the microbatch's time, broadcast state (read-only)."""

    def __init__(self, store: KeyedStateStore, operator_store: OperatorStateStore, batch_id: int, timestamp: int):
        self._store, self._operator_store = store, operator_store
        self.batch_id, self._timestamp = batch_id, timestamp
        self.current_key: Any = None

    def timestamp(self) -> int:
        """Processing time of this microbatch, in epoch milliseconds."""
        return self._timestamp

    def current_processing_time(self) -> int:
        return self._timestamp

    def get_current_key(self) -> Any:
        return self.current_key

    def current_key_group(self) -> int:
        return self._store.current_key_group

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> BroadcastState:
        """The broadcast state, read-only here (Flink's ReadOnlyContext)."""
        return self._operator_store.get_broadcast_state(descriptor)


class BroadcastContext:
    """Given to ``process_broadcast_element``: broadcast state is writable here."""

    def __init__(self, operator_store: OperatorStateStore, batch_id: int, timestamp: int):
        self._operator_store, self.batch_id, self._timestamp = operator_store, batch_id, timestamp

    def timestamp(self) -> int:
        return self._timestamp

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> BroadcastState:
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
    """Given to ``snapshot_state`` at the end of every microbatch."""

    def __init__(self, operator_store: OperatorStateStore, key_group_range: KeyGroupRange, batch_id: int):
        self._operator_store, self.key_group_range, self.batch_id = operator_store, key_group_range, batch_id
        self.raw_keyed: dict[int, bytes | None] = {}

    def write_raw_operator_state(self, data: bytes | None) -> None:
        if data is not None and not isinstance(data, (bytes, bytearray)):
            raise TypeError("raw operator state is bytes")
        self._operator_store.set_raw(None if data is None else bytes(data))

    def write_raw_keyed_state(self, key_group: int, data: bytes | None) -> None:
        if key_group not in self.key_group_range:
            raise ValueError(f"key group {key_group} is not owned by this subtask ({self.key_group_range})")
        if data is not None and not isinstance(data, (bytes, bytearray)):
            raise TypeError("raw keyed state is bytes")
        self.raw_keyed[key_group] = None if data is None else bytes(data)


class KeyedProcessFunction:
    """Subclass and implement ``process``; the other hooks are optional."""

    def initialize_state(self, ctx: FunctionInitializationContext) -> None:
        """Register operator state and read raw state (Flink's CheckpointedFunction)."""

    def open(self, ctx: RuntimeContext) -> None:
        """Register keyed state from descriptors."""

    def process(self, key: Any, records: list[dict], ctx: Context) -> Iterable[dict] | None:
        """Handle one key's records of a microbatch; yield output rows."""
        raise NotImplementedError("a KeyedProcessFunction must implement process(key, records, ctx)")

    def snapshot_state(self, ctx: FunctionSnapshotContext) -> None:
        """Write raw state, or adjust operator state, at the end of each microbatch."""

    def close(self) -> None:
        """Release what open acquired."""


class KeyedBroadcastProcessFunction(KeyedProcessFunction):
    """A keyed function connected to a broadcast stream (e.g. rules)."""

    def process_broadcast_element(self, value: dict, ctx: BroadcastContext) -> Iterable[dict] | None:
        """Handle one broadcast record on every subtask; broadcast state is writable here."""
        raise NotImplementedError("implement process_broadcast_element(value, ctx)")
