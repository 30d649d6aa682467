"""Keyed state handles, scoped to the store's current key and namespace, as in Flink: ValueState, ListState,
MapState, ReducingState, AggregatingState over a subtask's ``state.store.KeyedStateStore``.

The handles below have no TTL code path: the TTL wrappers of ``state.ttl.handles`` stamp and check expiries
around them, as Flink's ``TtlStateFactory`` wraps its backends' states.
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
from .store import _ABSENT, VOID_NAMESPACE, KeyedStateStore, _copy, value_copier


class _KeyedState:
    """A plain handle: the user's verbs over ``_get`` and ``_put`` on the store, scoped to the store's current
    key and this handle's namespace. It has no TTL code path; a TTL wrapper (``ttl.handles``) runs the same
    verbs over its own ``_get`` and ``_put``, which check and stamp expiries."""

    def __init__(self, store: KeyedStateStore, state_name: str, descriptor: StateDescriptor):
        self._store, self._name, self._descriptor = store, state_name, descriptor
        self._namespace = VOID_NAMESPACE
        self._copy_value = value_copier(descriptor.stored_type)  # how the verbs copy what they return

    @property
    def namespace(self) -> str:
        """The namespace the handle is scoped to ('' is the void namespace)."""
        return self._namespace

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
    """One value per key and namespace. Its verbs reach the store without ``_get``'s and ``_put``'s frames
    (once or twice per key of most jobs); the TTL wrapper's go through its own (``ttl.handles``).

    Example::

        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG(), 0))   # in open
        self.count.update(self.count.value() + len(records))                        # in process: 0 when empty
        self.count.clear()                                                          # value() is 0 again
    """

    def value(self) -> Any:
        """The current value, or the descriptor's default value when empty."""
        store, key = self._store, self._store.current_key
        slot = store._values.get((self._name, self._namespace))
        v = _ABSENT if slot is None else slot.decoded.get(key, _ABSENT)
        if v is _ABSENT:  # not read or written in this run yet (or no current key: ``get`` raises)
            v = store.get(self._name, self._namespace, self._descriptor)
        if v is None:
            return _copy(self._descriptor.default_value)
        return self._copy_value(v)

    def update(self, value: Any) -> None:
        """Set the value; ``None`` clears it."""
        self._store.put(self._name, self._namespace, self._descriptor, value)


def _elements(values: Iterable[Any] | None, verb: str) -> list:
    if values is None:
        raise ValueError(f"ListState.{verb}(None) is not allowed (as in Flink); pass a list, or call clear()")
    values = list(values)
    if any(v is None for v in values):
        raise ValueError("you cannot add None to a ListState")
    return values


class _MergingState(_KeyedState):
    """A state whose values of several namespaces fold into one (list, reducing, aggregating), as merging
    windows need (Flink's ``InternalMergingState``)."""

    def _merge(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def merge_namespaces(self, target: str, sources: Iterable[str]) -> None:
        """Flink's ``mergeNamespaces``: the values of the ``sources`` namespaces folded in order into ``target``'s
        (after its own), each source cleared; the handle stays scoped to its own namespace."""
        own, merged = self._namespace, None
        try:
            for source in sources:
                self._namespace = source
                value = self._get()
                if value is not None:
                    merged = value if merged is None else self._merge(merged, value)
                    self._put(None)
            if merged is not None:
                self._namespace = target
                current = self._get()
                self._put(merged if current is None else self._merge(current, merged))
        finally:
            self._namespace = own


class ListState(_MergingState):
    """A list of elements per key and namespace.

    Example::

        self.recent = ctx.get_list_state(ListStateDescriptor("recent", Types.STRING()))   # in open
        self.recent.add(click["page"])
        self.recent.add_all(["home", "cart"])
        self.recent.update(self.recent.get()[-3:])   # get() is a copy, [] when empty: keep the last three
    """

    def _merge(self, a: list, b: list) -> list:
        return a + b

    def get(self) -> list:
        """The elements (a copy), ``[]`` when empty."""
        return self._copy_value(self._get() or [])

    def add(self, value: Any) -> None:
        """Append one element; None is an error."""
        if value is None:
            raise ValueError("you cannot add None to a ListState")
        self._add([value])

    def add_all(self, values: Iterable[Any]) -> None:
        """Append every element of ``values``; None (or a None element) is an error."""
        values = _elements(values, "add_all")
        if values:
            self._add(values)

    def update(self, values: Iterable[Any]) -> None:
        """Replace all elements; an empty list clears the state; None is an error."""
        self._put(_elements(values, "update") or None)

    def _add(self, values: list) -> None:
        self._store.append(self._name, self._namespace, self._descriptor, values)


class MapState(_KeyedState):
    """A map per key and namespace; each map entry is stored (and written) on its own.

    Example::

        self.per_page = ctx.get_map_state(MapStateDescriptor("per_page", Types.STRING(), Types.LONG()))  # in open
        self.per_page.put(page, (self.per_page.get(page) or 0) + 1)   # get(k) is None when k is not mapped
        if self.per_page.contains("checkout"):
            self.per_page.remove("checkout")
        yield {"user": key, "pages": len(self.per_page.keys()), "per_page": dict(self.per_page.items())}
    """

    def _read(self, keys=None) -> dict:
        """What a read of the entries ``keys`` (default: all) returns."""
        return self._store.map_read(self._name, self._namespace, self._descriptor, keys)

    def get(self, key: Any) -> Any:
        """The value mapped to ``key``, or None."""
        return _copy(self._read([key]).get(key))

    def get_all(self, keys) -> dict:
        """The values (copies) of those of ``keys`` that are mapped, in one read (a Lakestate addition: many
        ``get`` s at once)."""
        return _copy(self._read(list(keys)))

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
        return key in self._read([key])

    def keys(self) -> list:
        """The user keys, in insertion order (stored entries first, sorted by their encoded text)."""
        return list(self._read().keys())

    def values(self) -> list:
        """The values (copies)."""
        return _copy(list(self._read().values()))

    def items(self) -> list[tuple]:
        """(key, value) pairs (copies)."""
        return [(k, _copy(v)) for k, v in self._read().items()]

    def is_empty(self) -> bool:
        """True when the map has no entry a read would return."""
        return not self._store.get_map(self._name, self._namespace, self._descriptor)

    def clear(self) -> None:
        """Remove every entry of the current key and namespace."""
        self._store.map_clear(self._name, self._namespace, self._descriptor)


class ReducingState(_MergingState):
    """A value folded from added values with a reduce function.

    Example::

        self.spend = ctx.get_reducing_state(ReducingStateDescriptor("spend", lambda a, b: a + b, Types.DOUBLE()))
        self.spend.add(click["amount"])   # folded in with the descriptor's reduce function
        total = self.spend.get()          # None before the first add
    """

    def _merge(self, a: Any, b: Any) -> Any:
        return self._descriptor.reduce_function(self._copy_value(a), self._copy_value(b))

    def get(self) -> Any:
        """The reduced value, or None when nothing was added."""
        return self._copy_value(self._get())

    def add(self, value: Any) -> None:
        """Fold ``value`` into the state with the descriptor's reduce function; None is an error."""
        if value is None:
            raise ValueError("you cannot add None to a ReducingState")
        current = self._get()
        self._put(value if current is None else self._descriptor.reduce_function(self._copy_value(current), value))


class AggregatingState(_MergingState):
    """An accumulator built from added values with an AggregateFunction.

    Example::

        # Mean: an AggregateFunction whose accumulator is [sum, count] (a LIST of DOUBLE)
        self.mean = ctx.get_aggregating_state(AggregatingStateDescriptor("mean", Mean(), Types.LIST(Types.DOUBLE())))
        self.mean.add(click["amount"])   # Mean.add(value, accumulator)
        mean = self.mean.get()           # Mean.get_result(accumulator); None before the first add
    """

    def _merge(self, a: Any, b: Any) -> Any:
        return self._descriptor.agg_function.merge(self._copy_value(a), self._copy_value(b))

    def get(self) -> Any:
        """The aggregate function's result, or None when nothing was added."""
        acc = self._get()
        return None if acc is None else self._descriptor.agg_function.get_result(self._copy_value(acc))

    def add(self, value: Any) -> None:
        """Add ``value`` to the accumulator; None is an error, as for the other appending states."""
        if value is None:
            raise ValueError("you cannot add None to an AggregatingState")
        fn = self._descriptor.agg_function
        acc = self._get()
        acc = fn.create_accumulator() if acc is None else self._copy_value(acc)
        self._put(fn.add(value, acc))


HANDLES = {
    ValueStateDescriptor: ValueState,
    ListStateDescriptor: ListState,
    MapStateDescriptor: MapState,
    ReducingStateDescriptor: ReducingState,
    AggregatingStateDescriptor: AggregatingState,
}


def create_handle(store: KeyedStateStore, state_name: str, descriptor: StateDescriptor) -> _KeyedState:
    """The plain handle for ``descriptor`` on ``store``, whatever its TTL: user code gets its handles from
    ``ttl.handles.create_state_and_wrap_with_ttl_if_enabled``, which wraps this one when the state has TTL."""
    for descriptor_type, handle_type in HANDLES.items():
        if isinstance(descriptor, descriptor_type):
            return handle_type(store, state_name, descriptor)
    raise TypeError(f"unknown state descriptor {descriptor!r}")
