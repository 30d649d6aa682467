"""State TTL around the keyed state handles: Flink's TtlValueState, TtlListState, TtlMapState,
TtlReducingState and TtlAggregatingState, and the one factory that wraps a plain handle in them when its
descriptor has TTL (Flink's ``TtlStateFactory.createStateAndWrapWithTtlIfEnabled``).

The store and the plain handles (``state.store``, ``state.handles``) keep each entry's expiry as data; what it
means is decided by ``ttl.rules`` only (when an entry is expired, what a read removes, returns and restamps, what
a write stamps), which these wrappers apply per entry and a vectorized run per column. ``now`` is the microbatch's
processing time (``KeyedStateStore.set_time``). An expired value a read returns under
ReturnExpiredIfNotCleanedUp is what a reducing or aggregating add folds in (Flink's ``TtlReduceFunction``).
List elements expire one by one, and a list add is no read: it stamps the new elements only, and those stored
before the state had TTL (``TtlListState.add``). A map entry is checked by a read of that entry only
(``TtlMapState``), so every map read works on the one decoded map that puts and removes change.

A wrapper's user verbs are the plain handle's own functions (``get = ListState.get``), run over the
wrapper's checked ``_get`` and stamped ``_put``: a verb is written once, and the plain handles have no TTL
code path. ValueState's two verbs are the exception: the plain ones reach the store directly (a read and a
write per key of most jobs), so ``TtlValueState`` spells out its own over ``_get`` and ``_put``.
"""
from __future__ import annotations

from typing import Any

from ..descriptors import StateDescriptor
from ..handles import AggregatingState, ListState, MapState, ReducingState, ValueState, create_handle
from ..store import KeyedStateStore, _copy, value_copier
from .rules import after_read, is_expired, stamp


class _TtlState:
    """What every TTL wrapper shares: the plain handle it decorates (``original``, which holds the namespace),
    the store, whose ``now`` is TTL's clock, and the state's config."""

    def __init__(self, original, store: KeyedStateStore, state_name: str, descriptor: StateDescriptor):
        self.original, self._store, self._name, self._descriptor = original, store, state_name, descriptor
        self._ttl = descriptor.ttl_config
        self._copy_value = value_copier(descriptor.stored_type)

    def set_current_namespace(self, namespace: str) -> None:
        """Scope the handle to ``namespace`` (e.g. a window); '' is the void namespace."""
        self.original.set_current_namespace(namespace)

    def clear(self) -> None:
        """Remove the value of the current key and namespace, expired or not."""
        self.original.clear()

    def _at(self) -> tuple[str, str]:
        return self._name, self.original.namespace

    def _stamp(self) -> int:
        """The expiry of an entry accessed now."""
        return stamp(self._ttl, self._store.now)


class _TtlSingleValue(_TtlState):
    """A value (value, reducing, aggregating state) checked on read and stamped on write."""

    def _get(self) -> Any:
        name, namespace = self._at()
        value = self._store.get(name, namespace, self._descriptor)
        if value is None:
            return None
        expiry, now = self._store.expiry(name, namespace), self._store.now
        if is_expired(expiry, now):
            self._store.put(name, namespace, self._descriptor, None)  # a read cleans up what it finds expired
            return value if self._ttl.return_expired else None
        restamp = after_read(self._ttl, now, expiry)
        if restamp is not None:
            self._store.restamp(name, namespace, restamp)
        return value

    def _put(self, value: Any) -> None:
        name, namespace = self._at()
        self._store.put(name, namespace, self._descriptor, value, self._stamp())


class TtlValueState(_TtlSingleValue):
    """A ValueState whose value expires ``ttl`` after its last write (or read, under OnReadAndWrite)."""

    def value(self) -> Any:
        """The current value (``None`` once expired, unless ``return_expired``), or the descriptor's default."""
        v = self._get()
        if v is None:
            return _copy(self._descriptor.default_value)
        return self._copy_value(v)

    def update(self, value: Any) -> None:
        """Set the value and stamp its expiry; ``None`` clears it."""
        self._put(value)


class TtlReducingState(_TtlSingleValue):
    """A ReducingState whose reduced value expires as a TtlValueState's does."""

    get, add = ReducingState.get, ReducingState.add


class TtlAggregatingState(_TtlSingleValue):
    """An AggregatingState whose accumulator expires as a TtlValueState's does."""

    get, add = AggregatingState.get, AggregatingState.add


class TtlListState(_TtlState):
    """A ListState whose elements expire one by one, each ``ttl`` after it was added (or read, under
    OnReadAndWrite)."""

    get, add, add_all, update = ListState.get, ListState.add, ListState.add_all, ListState.update

    def _elements(self) -> tuple[list, list]:
        """The stored elements and their expiries (None for elements stored before the state had TTL)."""
        name, namespace = self._at()
        values = self._store.get(name, namespace, self._descriptor) or []
        expiries = self._store.element_expiries(name, namespace, self._descriptor)
        return values, expiries or [None] * len(values)

    def _get(self) -> list | None:
        """The live elements (the expired ones too, this once, under ReturnExpiredIfNotCleanedUp); the expired
        ones are removed and, under OnReadAndWrite, the live ones prolonged."""
        values, expiries = self._elements()
        now, ttl = self._store.now, self._ttl
        live = [(v, x) for v, x in zip(values, expiries) if not is_expired(x, now)]
        kept = [(v, x if (restamp := after_read(ttl, now, x)) is None else restamp) for v, x in live]
        if [x for _, x in kept] != expiries:
            self._write([v for v, _ in kept], [x for _, x in kept])
        if self._ttl.return_expired:
            return values or None
        return self._store.get(*self._at(), self._descriptor)

    def _put(self, values: list | None) -> None:
        values = values or []
        self._write(values, [self._stamp()] * len(values))

    def _add(self, values: list) -> None:
        """Append ``values`` stamped now, as Flink's ``TtlListState.add``: an add is no read, so it neither
        drops nor prolongs the elements it finds (the next read checks them), but stamps those stored before
        the state had TTL, whose first access with TTL it is (a row holds expiries for all or none)."""
        current, expiries = self._elements()
        stamp = self._stamp()
        self._write(current + values, [stamp if x is None else x for x in expiries] + [stamp] * len(values))

    def _write(self, values: list, expiries: list) -> None:
        self._store.put_list(*self._at(), self._descriptor, values, expiries)


class TtlMapState(_TtlState):
    """A MapState whose entries expire one by one, each ``ttl`` after its last put (or read, under
    OnReadAndWrite)."""

    get, contains, keys, values, items, put_all = (MapState.get, MapState.contains, MapState.keys, MapState.values,
                                                   MapState.items, MapState.put_all)

    def _read(self, keys=None) -> dict:
        """What a read of the entries ``keys`` (default: every entry) returns, each entry checked on its own."""
        name, namespace = self._at()
        current = self._store.get_map(name, namespace, self._descriptor)
        now, out = self._store.now, {}
        for user_key in list(current) if keys is None else [k for k in keys if k in current]:
            expiry = self._store.map_expiry(name, namespace, self._descriptor, user_key)
            if is_expired(expiry, now):
                value = current[user_key]
                self._store.map_remove(name, namespace, self._descriptor, user_key)
                if self._ttl.return_expired:
                    out[user_key] = value
                continue
            out[user_key] = current[user_key]
            restamp = after_read(self._ttl, now, expiry)
            if restamp is not None:
                self._store.map_restamp(name, namespace, self._descriptor, user_key, restamp)
        return out

    def put(self, key: Any, value: Any) -> None:
        """Map ``key`` to ``value`` (writes one entry, which lives ``ttl`` from now)."""
        self._store.map_put(*self._at(), self._descriptor, key, value, self._stamp())

    def remove(self, key: Any) -> None:
        """Remove ``key``, expired or not (writes one tombstone if it was there)."""
        self.original.remove(key)

    def is_empty(self) -> bool:
        """True when the map has no entry a read would return; it removes and prolongs nothing itself."""
        name, namespace = self._at()
        current = self._store.get_map(name, namespace, self._descriptor)
        if self._ttl.return_expired:
            return not current
        now = self._store.now
        return all(is_expired(self._store.map_expiry(name, namespace, self._descriptor, k), now) for k in current)


TTL_WRAPPERS = {
    ValueState: TtlValueState,
    ListState: TtlListState,
    MapState: TtlMapState,
    ReducingState: TtlReducingState,
    AggregatingState: TtlAggregatingState,
}


def create_state_and_wrap_with_ttl_if_enabled(store: KeyedStateStore, state_name: str,
                                              descriptor: StateDescriptor):
    """The handle user code gets for ``descriptor`` on ``store``: the plain one, wrapped in its TTL wrapper
    when the descriptor has TTL (Flink's ``TtlStateFactory``), so nothing else ever checks an expiry."""
    original = create_handle(store, state_name, descriptor)
    if descriptor.ttl_config is None:
        return original
    return TTL_WRAPPERS[type(original)](original, store, state_name, descriptor)
