"""Keyed state handles and the per-subtask store they read and write.

The store holds the encoded entries of the keys a subtask touches in a run and
decodes them lazily; handles are scoped to the current key and namespace, as
in Flink. An entry is ``(state_name, key, namespace, user_key)``: ``user_key``
is None except for MapState, whose every map entry is an entry of its own (a
``put`` writes one row, as in Flink's RocksDB backend). ``flush`` returns what
changed in a microbatch (None for a removed entry), so writes grow with the
entries that changed.
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
from .errors import stored_value_error
from .types import to_text

VOID_NAMESPACE = ""
_ABSENT = object()


def _copy(value: Any) -> Any:
    """A copy the user may mutate without changing state (decoded values are JSON-like)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


class KeyedStateStore:
    """The keyed entries of one subtask: loaded once per run, changed key by key, flushed per microbatch."""

    def __init__(self) -> None:
        self._stored: dict[tuple, str] = {}  # (state, key, ns) -> JSON text
        self._stored_maps: dict[tuple, dict[str, str]] = {}  # (state, key, ns) -> {user key text: value text}
        self._decoded: dict[tuple, Any] = {}  # entries read or written in this microbatch
        self._dirty: dict[tuple, str | None] = {}
        self._map_dirty: dict[tuple, dict[str, str | None]] = {}
        self._key_groups: dict[str, int] = {}
        self.current_key: str | None = None
        self.current_key_group: int | None = None

    def load(self, state_name: str, key: str, namespace: str, user_key: str | None, key_group: int,
             value: str) -> None:
        entry = (state_name, key, namespace)
        if user_key is None:
            self._stored[entry] = value
        else:
            self._stored_maps.setdefault(entry, {})[user_key] = value
        self._key_groups[key] = key_group

    def set_current_key(self, key: str, key_group: int) -> None:
        self.current_key, self.current_key_group = key, key_group
        self._key_groups[key] = key_group

    def _entry(self, state_name: str, namespace: str) -> tuple:
        if self.current_key is None:
            raise RuntimeError("keyed state is only accessible while processing a key (in process())")
        return state_name, self.current_key, namespace

    def _where(self, state_name: str, namespace: str) -> str:
        return f"state {state_name!r} of key {self.current_key!r}" + (f" (namespace {namespace!r})" if namespace else "")

    def _load(self, stored_type, text: str, state_name: str, namespace: str) -> Any:
        try:
            return stored_type.loads(text)
        except (TypeError, ValueError, AttributeError) as e:
            raise stored_value_error(self._where(state_name, namespace), stored_type.name, e) from None

    # -- single-value states (value, list, reducing, aggregating) --------------------------------------
    def get(self, state_name: str, namespace: str, descriptor: StateDescriptor) -> Any:
        """The decoded value (not a copy), or None when the state is empty for the current key."""
        entry = self._entry(state_name, namespace)
        value = self._decoded.get(entry, _ABSENT)
        if value is _ABSENT:
            text = self._dirty[entry] if entry in self._dirty else self._stored.get(entry)
            value = None if text is None else self._load(descriptor.stored_type, text, state_name, namespace)
            self._decoded[entry] = value
        return value

    def put(self, state_name: str, namespace: str, descriptor: StateDescriptor, value: Any) -> None:
        """Set the value (None clears it); the type is checked now, where the user's call is."""
        entry = self._entry(state_name, namespace)
        text = None
        if value is not None:
            # Keep what a reload would give back, so a value reads the same across a microbatch boundary.
            # (A row's encoding lists every declared field, so it is what a reload gives when fields decode as is.)
            stored_type = descriptor.stored_type
            encoded = stored_type.encode(value)
            value = encoded if stored_type.encoding_is_value else stored_type.decode(encoded)
            text = to_text(encoded)
        self._decoded[entry] = value
        self._dirty[entry] = text

    # -- map state: one entry per user key -----------------------------------------------------------
    def get_map(self, state_name: str, namespace: str, descriptor: MapStateDescriptor) -> dict:
        """The decoded map of the current key (not a copy)."""
        entry = self._entry(state_name, namespace)
        value = self._decoded.get(entry, _ABSENT)
        if value is _ABSENT:
            texts = dict(self._stored_maps.get(entry, ()))
            texts.update(self._map_dirty.get(entry, ()))
            key_type, value_type = descriptor.key_type, descriptor.value_type
            try:
                value = {key_type.loads(k): value_type.loads(v) for k, v in texts.items() if v is not None}
            except (TypeError, ValueError, AttributeError) as e:
                raise stored_value_error(self._where(state_name, namespace),
                                         f"MAP<{key_type.name}, {value_type.name}>", e) from None
            self._decoded[entry] = value
        return value

    def map_put(self, state_name: str, namespace: str, descriptor: MapStateDescriptor, user_key: Any,
                value: Any) -> None:
        current = self.get_map(state_name, namespace, descriptor)
        if value is None:
            raise ValueError("a MapState value cannot be None; use remove(key)")
        encoded_key, encoded = descriptor.key_type.encode(user_key), descriptor.value_type.encode(value)
        if encoded_key is None:
            raise ValueError("a MapState key cannot be None")
        current[descriptor.key_type.decode(encoded_key)] = descriptor.value_type.decode(encoded)
        self._map_dirty.setdefault(self._entry(state_name, namespace), {})[to_text(encoded_key)] = to_text(encoded)

    def map_remove(self, state_name: str, namespace: str, descriptor: MapStateDescriptor, user_key: Any) -> None:
        current = self.get_map(state_name, namespace, descriptor)
        if user_key in current:
            del current[user_key]
            text = to_text(descriptor.key_type.encode(user_key))
            self._map_dirty.setdefault(self._entry(state_name, namespace), {})[text] = None

    def map_clear(self, state_name: str, namespace: str, descriptor: MapStateDescriptor) -> None:
        for user_key in list(self.get_map(state_name, namespace, descriptor)):
            self.map_remove(state_name, namespace, descriptor, user_key)

    # -- end of a microbatch ---------------------------------------------------------------------------
    def flush(self) -> list[tuple[str, int, str, str, str | None, str | None, int]]:
        """What changed since the last flush, as (state_name, key_group, key, namespace, user_key, text or
        None for a removed entry, +1/-1/0 for an entry created/removed/updated), in a deterministic
        order; the changes become the stored state."""
        out = []
        for entry in sorted(self._dirty):
            text, stored = self._dirty[entry], self._stored.get(entry)
            if text == stored:
                continue  # written back unchanged, or created and cleared in the same microbatch
            state_name, key, namespace = entry
            out.append((state_name, self._key_groups[key], key, namespace, None, text,
                        (text is not None) - (stored is not None)))
            if text is None:
                del self._stored[entry]
            else:
                self._stored[entry] = text
        for entry in sorted(self._map_dirty):
            stored_map = self._stored_maps.setdefault(entry, {})
            state_name, key, namespace = entry
            for user_key in sorted(self._map_dirty[entry]):
                text, stored = self._map_dirty[entry][user_key], stored_map.get(user_key)
                if text == stored:
                    continue
                out.append((state_name, self._key_groups[key], key, namespace, user_key, text,
                            (text is not None) - (stored is not None)))
                if text is None:
                    del stored_map[user_key]
                else:
                    stored_map[user_key] = text
            if not stored_map:
                del self._stored_maps[entry]
        self._dirty.clear()
        self._map_dirty.clear()
        self._decoded.clear()
        return out


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
    """One value per key and namespace."""

    def value(self) -> Any:
        """The current value, or the descriptor's default value when empty."""
        v = self._get()
        if v is None:
            return _copy(self._descriptor.default_value)
        return _copy(v)

    def update(self, value: Any) -> None:
        """Set the value; ``None`` clears it."""
        self._put(value)


def _elements(values: Iterable[Any] | None, verb: str) -> list:
    if values is None:
        raise ValueError(f"ListState.{verb}(None) is not allowed (as in Flink); pass a list, or call clear()")
    values = list(values)
    if any(v is None for v in values):
        raise ValueError("you cannot add None to a ListState")
    return values


class ListState(_KeyedState):
    """A list of elements per key and namespace."""

    def get(self) -> list:
        """The elements (a copy), ``[]`` when empty."""
        return _copy(self._get() or [])

    def add(self, value: Any) -> None:
        """Append one element; None is an error."""
        if value is None:
            raise ValueError("you cannot add None to a ListState")
        self._put((self._get() or []) + [value])

    def add_all(self, values: Iterable[Any]) -> None:
        """Append every element of ``values``; None (or a None element) is an error."""
        values = _elements(values, "add_all")
        if values:
            self._put((self._get() or []) + values)

    def update(self, values: Iterable[Any]) -> None:
        """Replace all elements; an empty list clears the state; None is an error."""
        self._put(_elements(values, "update") or None)


class MapState(_KeyedState):
    """A map per key and namespace; each map entry is stored (and written) on its own."""

    def _map(self) -> dict:
        return self._store.get_map(self._name, self._namespace, self._descriptor)

    def get(self, key: Any) -> Any:
        """The value mapped to ``key``, or None."""
        return _copy(self._map().get(key))

    def put(self, key: Any, value: Any) -> None:
        """Map ``key`` to ``value`` (writes one entry)."""
        self._store.map_put(self._name, self._namespace, self._descriptor, key, value)

    def put_all(self, mapping: dict) -> None:
        """Put every item of ``mapping``."""
        for key, value in dict(mapping).items():
            self.put(key, value)

    def remove(self, key: Any) -> None:
        """Remove ``key`` (writes one tombstone if it was there)."""
        self._store.map_remove(self._name, self._namespace, self._descriptor, key)

    def contains(self, key: Any) -> bool:
        """True when ``key`` is mapped."""
        return key in self._map()

    def keys(self) -> list:
        """The user keys, in insertion order (stored entries first, sorted by their encoded text)."""
        return list(self._map().keys())

    def values(self) -> list:
        """The values (copies)."""
        return _copy(list(self._map().values()))

    def items(self) -> list[tuple]:
        """(key, value) pairs (copies)."""
        return [(k, _copy(v)) for k, v in self._map().items()]

    def is_empty(self) -> bool:
        """True when the map has no entry."""
        return not self._map()

    def clear(self) -> None:
        """Remove every entry of the current key and namespace."""
        self._store.map_clear(self._name, self._namespace, self._descriptor)


class ReducingState(_KeyedState):
    """A value folded from added values with a reduce function."""

    def get(self) -> Any:
        """The reduced value, or None when nothing was added."""
        return _copy(self._get())

    def add(self, value: Any) -> None:
        """Fold ``value`` into the state with the descriptor's reduce function; None is an error."""
        if value is None:
            raise ValueError("you cannot add None to a ReducingState")
        current = self._get()
        self._put(value if current is None else self._descriptor.reduce_function(_copy(current), value))


class AggregatingState(_KeyedState):
    """An accumulator built from added values with an AggregateFunction."""

    def get(self) -> Any:
        """The aggregate function's result, or None when nothing was added."""
        acc = self._get()
        return None if acc is None else self._descriptor.agg_function.get_result(_copy(acc))

    def add(self, value: Any) -> None:
        """Add ``value`` to the accumulator; None is an error, as for the other appending states."""
        if value is None:
            raise ValueError("you cannot add None to an AggregatingState")
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
