"""Keyed state handles and the per-subtask store they read and write.

The store holds the encoded entries of the keys a subtask touches in one
microbatch and decodes them lazily; handles are scoped to the current key and
namespace, as in Flink. What changed is emitted as rows (a tombstone when a
state became empty), so writes grow with the entries that changed.
"""
from __future__ import annotations

import copy
from typing import Any, Iterable, Iterator

from .descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from .types import to_text

VOID_NAMESPACE = ""
_ABSENT = object()
_IMMUTABLE = (int, float, str, bool, bytes, type(None))


def _copy(value):
    """A copy the user may mutate without changing state (immutable values need none)."""
    return value if isinstance(value, _IMMUTABLE) else copy.deepcopy(value)


class KeyedStateStore:
    """Entries ``(state_name, key, namespace) -> value`` of one subtask in one microbatch."""

    def __init__(self) -> None:
        self._encoded: dict[tuple[str, str, str], str] = {}
        self._decoded: dict[tuple[str, str, str], Any] = {}
        self._dirty: dict[tuple[str, str, str], str | None] = {}  # entry -> new JSON text (None: cleared)
        self._key_groups: dict[str, int] = {}
        self.current_key: str | None = None
        self.current_key_group: int | None = None

    def load(self, state_name: str, key: str, namespace: str, key_group: int, value: str) -> None:
        self._encoded[(state_name, key, namespace)] = value
        self._key_groups[key] = key_group

    def set_current_key(self, key: str, key_group: int) -> None:
        self.current_key, self.current_key_group = key, key_group
        self._key_groups[key] = key_group

    def get(self, state_name: str, namespace: str, descriptor: StateDescriptor) -> Any:
        """The decoded value, or None when the state is empty for the current key."""
        if self.current_key is None:
            raise RuntimeError("keyed state is only accessible while processing a key (in process())")
        entry = (state_name, self.current_key, namespace)
        value = self._decoded.get(entry, _ABSENT)
        if value is _ABSENT:
            text = self._encoded.get(entry)
            value = None if text is None else descriptor.stored_type.loads(text)
            self._decoded[entry] = value
        return value

    def put(self, state_name: str, namespace: str, descriptor: StateDescriptor, value: Any) -> None:
        """Set the value (None clears it); the type is checked now, not at write time."""
        if self.current_key is None:
            raise RuntimeError("keyed state is only accessible while processing a key (in process())")
        text = None
        if value is not None:
            # Validate now (the error points at the user's call), and keep what a reload would
            # give back, so a value reads the same before and after a microbatch boundary.
            encoded = descriptor.stored_type.encode(value)
            value, text = descriptor.stored_type.decode(encoded), to_text(encoded)
        entry = (state_name, self.current_key, namespace)
        self._decoded[entry] = value
        self._dirty[entry] = text

    def changes(self) -> Iterator[tuple[str, int, str, str, str | None]]:
        """(state_name, key_group, key, namespace, encoded value or None for a tombstone)."""
        for entry in sorted(self._dirty):
            state_name, key, namespace = entry
            text = self._dirty[entry]
            if text is None and entry not in self._encoded:
                continue  # created and cleared within the microbatch: nothing to write
            if text is not None and text == self._encoded.get(entry):
                continue  # written back unchanged
            yield state_name, self._key_groups[key], key, namespace, text


class _KeyedState:
    def __init__(self, store: KeyedStateStore, state_name: str, descriptor: StateDescriptor):
        self._store, self._name, self._descriptor = store, state_name, descriptor
        self._namespace = VOID_NAMESPACE

    def set_current_namespace(self, namespace: str) -> None:
        """Scope the handle to ``namespace`` (e.g. a window); '' is the void namespace."""
        if not isinstance(namespace, str):
            raise TypeError(f"a namespace is a string, got {namespace!r}")
        self._namespace = namespace

    def _get(self) -> Any:
        return self._store.get(self._name, self._namespace, self._descriptor)

    def _put(self, value: Any) -> None:
        self._store.put(self._name, self._namespace, self._descriptor, value)

    def clear(self) -> None:
        """Remove the value of the current key and namespace."""
        self._put(None)


class ValueState(_KeyedState):
    def value(self) -> Any:
        """The current value, or the descriptor's default value when empty."""
        v = self._get()
        if v is None:
            return _copy(self._descriptor.default_value)
        return _copy(v)

    def update(self, value: Any) -> None:
        """Set the value; ``None`` clears it."""
        self._put(_copy(value))


class ListState(_KeyedState):
    def get(self) -> list:
        """The elements (a copy), ``[]`` when empty."""
        return _copy(self._get() or [])

    def add(self, value: Any) -> None:
        """Append one element."""
        if value is None:
            raise ValueError("you cannot add None to a ListState")
        self._put((self._get() or []) + [_copy(value)])

    def add_all(self, values: Iterable[Any]) -> None:
        values = list(values)
        if any(v is None for v in values):
            raise ValueError("you cannot add None to a ListState")
        if values:
            self._put((self._get() or []) + _copy(values))

    def update(self, values: Iterable[Any]) -> None:
        """Replace all elements; an empty list clears the state."""
        values = list(values or [])
        if any(v is None for v in values):
            raise ValueError("you cannot add None to a ListState")
        self._put(_copy(values) or None)


class MapState(_KeyedState):
    def _map(self) -> dict:
        return dict(self._get() or {})

    def get(self, key: Any) -> Any:
        """The value mapped to ``key``, or None."""
        return _copy((self._get() or {}).get(key))

    def put(self, key: Any, value: Any) -> None:
        m = self._map()
        m[key] = _copy(value)
        self._put(m)

    def put_all(self, mapping: dict) -> None:
        if mapping:
            m = self._map()
            m.update(_copy(mapping))
            self._put(m)

    def remove(self, key: Any) -> None:
        m = self._map()
        if key in m:
            del m[key]
            self._put(m or None)

    def contains(self, key: Any) -> bool:
        return key in (self._get() or {})

    def keys(self) -> list:
        return list((self._get() or {}).keys())

    def values(self) -> list:
        return _copy(list((self._get() or {}).values()))

    def items(self) -> list[tuple]:
        return _copy(list((self._get() or {}).items()))

    def is_empty(self) -> bool:
        return not self._get()


class ReducingState(_KeyedState):
    def get(self) -> Any:
        """The reduced value, or None when nothing was added."""
        return _copy(self._get())

    def add(self, value: Any) -> None:
        """Fold ``value`` into the state with the descriptor's reduce function."""
        if value is None:
            raise ValueError("you cannot add None to a ReducingState")
        current = self._get()
        self._put(_copy(value) if current is None else self._descriptor.reduce_function(_copy(current), value))


class AggregatingState(_KeyedState):
    def get(self) -> Any:
        """The aggregate function's result, or None when nothing was added."""
        acc = self._get()
        return None if acc is None else self._descriptor.agg_function.get_result(_copy(acc))

    def add(self, value: Any) -> None:
        fn = self._descriptor.agg_function
        acc = self._get()
        acc = fn.create_accumulator() if acc is None else _copy(acc)
        self._put(fn.add(value, acc))


HANDLES = {
    ValueStateDescriptor: ValueState,
    ListStateDescriptor: ListState,
    MapStateDescriptor: MapState,
    ReducingStateDescriptor: ReducingState,
    AggregatingStateDescriptor: AggregatingState,
}


def create_handle(store: KeyedStateStore, state_name: str, descriptor: StateDescriptor) -> _KeyedState:
    for descriptor_type, handle_type in HANDLES.items():
        if isinstance(descriptor, descriptor_type):
            return handle_type(store, state_name, descriptor)
    raise TypeError(f"unknown state descriptor {descriptor!r}")
