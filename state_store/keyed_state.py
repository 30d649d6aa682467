"""Keyed state handles and the per-subtask store they read and write.

The store holds the encoded entries of the keys a subtask touches in a run and
decodes them lazily; handles are scoped to the current key and namespace, as
in Flink. An entry is ``(state_name, key, namespace, user_key)``: ``user_key``
is None except for MapState, whose every map entry is an entry of its own (a
``put`` writes one row, as in Flink's RocksDB backend). ``flush`` returns what
changed in a microbatch (None for a removed entry), so writes grow with the
entries that changed.

State TTL (``StateTtlConfig``, Flink's semantics): every entry of a state with
TTL carries its expiry, ``last_access + ttl`` in epoch ms, in the ``expiry``
column, so Spark can filter expired rows without decoding values. A list's
elements expire one by one: its value is stored as ``[[expiry, element],
...]`` and the row's ``expiry`` is the latest of them (the row is dead once
every element is). "Now" is the microbatch's processing time
(``set_time``). An entry written before its state had TTL has no expiry
until its first read (or write) with TTL. A map entry is checked on its own by
the read of it (``map_read``), as Flink's ``TtlMapState`` does, so every map
read works on the one decoded map that puts and removes change.
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
from .types import from_text, to_text

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
        self._expiry: dict[tuple, int] = {}  # (state, key, ns) or (state, key, ns, user key) -> stored expiry
        self._decoded: dict[tuple, Any] = {}  # entries read or written in this microbatch
        self._list_expiry: dict[tuple, list[int]] = {}  # a TTL list's element expiries, beside its _decoded
        self._unread: set[tuple] = set()  # TTL lists decoded by an add: their next read still checks expiry
        self._dirty: dict[tuple, str | None] = {}
        self._map_dirty: dict[tuple, dict[str, str | None]] = {}
        self._dirty_expiry: dict[tuple, int | None] = {}  # expiry of a dirty entry (of a dirty map entry)
        self.now = 0  # the microbatch's processing time, epoch ms: TTL's clock
        self._key_groups: dict[str, int] = {}
        self._list_types: dict[str, Any] = {}  # a TTL list state's stored type, to encode its elements
        self.current_key: str | None = None
        self.current_key_group: int | None = None

    def load(self, state_name: str, key: str, namespace: str, user_key: str | None, key_group: int,
             value: str, expiry: int | None = None) -> None:
        entry = (state_name, key, namespace)
        if user_key is None:
            self._stored[entry] = value
        else:
            self._stored_maps.setdefault(entry, {})[user_key] = value
        if expiry is not None:
            self._expiry[entry if user_key is None else entry + (user_key,)] = expiry
        self._key_groups[key] = key_group

    def set_time(self, now: int) -> None:
        """Processing time from now on (the microbatch's timestamp): what TTL compares expiries with."""
        self.now = now

    def _current_expiry(self, slot: tuple) -> int | None:
        return self._dirty_expiry[slot] if slot in self._dirty_expiry else self._expiry.get(slot)

    def _expired(self, expiry: int | None) -> bool:
        return expiry is not None and expiry <= self.now  # no expiry: stored before its state had TTL

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
        """The decoded value (not a copy), or None when the state is empty for the current key. Under TTL, the
        first read in a microbatch removes an expired entry (returning it that once under
        ReturnExpiredIfNotCleanedUp, so a reducing or aggregating add still folds it in, as in Flink) and,
        under OnReadAndWrite, prolongs a live one. An entry stored before its state had TTL counts as
        accessed at its first read with TTL (Flink stamps such entries when it migrates them)."""
        entry = self._entry(state_name, namespace)
        value = self._decoded.get(entry, _ABSENT)
        if value is _ABSENT:
            value = self._decode(entry, descriptor)
        elif entry not in self._unread:
            return value
        self._unread.discard(entry)
        ttl = descriptor.ttl_config
        if value is None or ttl is None:
            return value
        if descriptor.kind == "list":
            return self._list_ttl_check(entry, value, ttl)
        expiry = self._current_expiry(entry)
        if self._expired(expiry):
            self._decoded[entry], self._dirty[entry], self._dirty_expiry[entry] = None, None, None
            return value if ttl.return_expired else None
        if ttl.update_on_read or expiry is None:
            self._dirty[entry], self._dirty_expiry[entry] = self._text(entry), ttl.expiry(self.now)
        return value

    def _text(self, entry: tuple) -> str | None:
        return self._dirty[entry] if entry in self._dirty else self._stored.get(entry)

    def _decode(self, entry: tuple, descriptor: StateDescriptor) -> Any:
        """Decode an entry into the microbatch's cache, checking no TTL (a read checks it; a list add does not)."""
        state_name, _, namespace = entry
        text = self._text(entry)
        if descriptor.ttl_config is not None and descriptor.kind == "list":
            self._list_types[state_name] = descriptor.stored_type
        if text is None:
            value = None
        elif descriptor.kind == "list" and self._current_expiry(entry) is not None:
            value = self._load_ttl_list(entry, text, descriptor, state_name, namespace)
        else:
            value = self._load(descriptor.stored_type, text, state_name, namespace)
        self._decoded[entry] = value
        return value

    def _load_ttl_list(self, entry: tuple, text: str, descriptor, state_name: str, namespace: str) -> list:
        """A list stored with element expiries: the elements, their expiries kept beside them."""
        try:
            pairs = from_text(text)
            element_type = descriptor.type_info
            values = [element_type.decode(e) for _, e in pairs]
        except (TypeError, ValueError, AttributeError) as e:
            raise stored_value_error(self._where(state_name, namespace), descriptor.stored_type.name, e) from None
        self._list_expiry[entry] = [int(x) for x, _ in pairs]
        return values

    def _list_ttl_check(self, entry: tuple, values: list, ttl) -> list:
        """Drop a TTL list's expired elements (returned once under ReturnExpiredIfNotCleanedUp); under
        OnReadAndWrite, the live ones are prolonged."""
        expiries = self._list_expiry.get(entry) or [None] * len(values)
        live = [(v, x) for v, x in zip(values, expiries) if x is None or x > self.now]
        stamped = [(v, ttl.expiry(self.now) if ttl.update_on_read else x) for v, x in self._stamped(live, ttl)]
        if len(stamped) != len(values) or [x for _, x in stamped] != expiries:
            self._write_list(entry, [v for v, _ in stamped], [x for _, x in stamped], ttl)
        return values if ttl.return_expired else self._decoded[entry]

    def _stamped(self, elements: list[tuple], ttl) -> list[tuple]:
        """(element, expiry) pairs where an element stored before its state had TTL lives a full TTL from now,
        its first access with TTL (a list row holds expiries for all its elements or for none)."""
        return [(v, ttl.expiry(self.now) if x is None else x) for v, x in elements]

    def _write_list(self, entry: tuple, values: list, expiries: list, ttl) -> None:
        """Stage a TTL list with its element expiries (an empty list removes the entry)."""
        if not values:
            self._decoded[entry], self._dirty[entry], self._dirty_expiry[entry] = None, None, None
            self._list_expiry.pop(entry, None)
            return
        self._decoded[entry], self._list_expiry[entry] = values, expiries
        self._dirty_expiry[entry] = max(expiries) if all(x is not None for x in expiries) else None
        self._dirty[entry] = self._list_text(entry, values, expiries)

    def _list_text(self, entry: tuple, values: list, expiries: list) -> str:
        encoded = self._list_types[entry[0]].encode(values)
        return to_text([[x, e] for x, e in zip(expiries, encoded)])

    def put(self, state_name: str, namespace: str, descriptor: StateDescriptor, value: Any) -> None:
        """Set the value (None clears it); the type is checked now, where the user's call is. Under TTL the
        entry lives ``ttl`` from now (every element of a list given whole)."""
        entry = self._entry(state_name, namespace)
        self._unread.discard(entry)  # nothing stored before is left to check
        text = None
        if value is not None:
            # Keep what a reload would give back, so a value reads the same across a microbatch boundary.
            # (A row's encoding lists every declared field, so it is what a reload gives when fields decode as is.)
            stored_type = descriptor.stored_type
            encoded = stored_type.encode(value)
            value = encoded if stored_type.encoding_is_value else stored_type.decode(encoded)
            text = to_text(encoded)
        ttl = descriptor.ttl_config
        if ttl is not None and descriptor.kind == "list":
            self._list_types[state_name] = descriptor.stored_type
            self._write_list(entry, value or [], [ttl.expiry(self.now)] * len(value or []), ttl)
            return
        self._decoded[entry] = value
        self._dirty[entry] = text
        self._dirty_expiry[entry] = ttl.expiry(self.now) if ttl is not None and text is not None else None
        self._list_expiry.pop(entry, None)

    def list_add(self, state_name: str, namespace: str, descriptor: StateDescriptor, values: list) -> None:
        """Append ``values`` to the current list. Under TTL only they get an expiry, as Flink's
        ``TtlListState.add``: an add is no read, so it neither prolongs nor drops the elements it finds (the
        next read checks them)."""
        ttl = descriptor.ttl_config
        if ttl is None:
            self.put(state_name, namespace, descriptor, (self.get(state_name, namespace, descriptor) or []) + values)
            return
        entry = self._entry(state_name, namespace)
        if entry not in self._decoded:
            self._decode(entry, descriptor)
            self._unread.add(entry)
        current = self._decoded[entry] or []
        old = self._stamped(list(zip(current, self._list_expiry.get(entry) or [None] * len(current))), ttl)
        encoded = descriptor.stored_type.encode(current + values)  # checks the new elements' type now
        values = encoded[len(current):] if descriptor.stored_type.encoding_is_value \
            else descriptor.stored_type.decode(encoded)[len(current):]
        self._write_list(entry, current + values, [x for _, x in old] + [ttl.expiry(self.now)] * len(values), ttl)

    # -- map state: one entry per user key -----------------------------------------------------------
    def get_map(self, state_name: str, namespace: str, descriptor: MapStateDescriptor) -> dict:
        """The decoded map of the current key (not a copy, the one every write changes): each entry not removed
        yet, expired ones too; reads check TTL entry by entry (``map_read``)."""
        entry = self._entry(state_name, namespace)
        value = self._decoded.get(entry, _ABSENT)
        if value is _ABSENT:
            texts = dict(self._stored_maps.get(entry, ()))
            texts.update(self._map_dirty.get(entry, ()))
            texts = {k: v for k, v in texts.items() if v is not None}
            value = self._decoded[entry] = self._decode_map(texts, descriptor, state_name, namespace)
        return value

    def map_read(self, state_name: str, namespace: str, descriptor: MapStateDescriptor, user_keys=None) -> dict:
        """What a read of the entries ``user_keys`` (default: every entry) returns. Under TTL each entry is
        checked on its own, as Flink's ``TtlMapState`` does: an expired one is removed, and returned by this
        read only under ReturnExpiredIfNotCleanedUp (so once); under OnReadAndWrite a live one is prolonged, as
        is one stored before its state had TTL (its first read with TTL)."""
        current = self.get_map(state_name, namespace, descriptor)
        keys = list(current) if user_keys is None else [k for k in user_keys if k in current]
        ttl, entry, out = descriptor.ttl_config, self._entry(state_name, namespace), {}
        for user_key in keys:
            if ttl is None:
                out[user_key] = current[user_key]
                continue
            key_text = to_text(descriptor.key_type.encode(user_key))
            expiry = self._current_expiry(entry + (key_text,))
            if self._expired(expiry):
                value = current.pop(user_key)
                self._stage_map_entry(entry, key_text, None, None)
                if ttl.return_expired:
                    out[user_key] = value
                continue
            out[user_key] = current[user_key]
            if ttl.update_on_read or expiry is None:
                self._stage_map_entry(entry, key_text, self._map_text(entry, key_text), ttl.expiry(self.now))
        return out

    def map_is_empty(self, state_name: str, namespace: str, descriptor: MapStateDescriptor) -> bool:
        """True when a read of every entry would return nothing; it removes and prolongs nothing itself."""
        current = self.get_map(state_name, namespace, descriptor)
        ttl, entry = descriptor.ttl_config, self._entry(state_name, namespace)
        if ttl is None or ttl.return_expired:
            return not current
        key_type = descriptor.key_type
        return all(self._expired(self._current_expiry(entry + (to_text(key_type.encode(k)),))) for k in current)

    def _stage_map_entry(self, entry: tuple, key_text: str, text: str | None, expiry: int | None) -> None:
        self._map_dirty.setdefault(entry, {})[key_text] = text
        self._dirty_expiry[entry + (key_text,)] = expiry

    def _map_text(self, entry: tuple, key_text: str) -> str | None:
        dirty = self._map_dirty.get(entry, {})
        return dirty[key_text] if key_text in dirty else self._stored_maps.get(entry, {}).get(key_text)

    def _decode_map(self, texts: dict, descriptor: MapStateDescriptor, state_name: str, namespace: str) -> dict:
        key_type, value_type = descriptor.key_type, descriptor.value_type
        try:
            return {key_type.loads(k): value_type.loads(v) for k, v in texts.items()}
        except (TypeError, ValueError, AttributeError) as e:
            raise stored_value_error(self._where(state_name, namespace),
                                     f"MAP<{key_type.name}, {value_type.name}>", e) from None

    def map_put(self, state_name: str, namespace: str, descriptor: MapStateDescriptor, user_key: Any,
                value: Any) -> None:
        """Map ``user_key`` to ``value`` (an entry of its own; under TTL it lives ``ttl`` from now)."""
        current = self.get_map(state_name, namespace, descriptor)
        if value is None:
            raise ValueError("a MapState value cannot be None; use remove(key)")
        encoded_key, encoded = descriptor.key_type.encode(user_key), descriptor.value_type.encode(value)
        if encoded_key is None:
            raise ValueError("a MapState key cannot be None")
        current[descriptor.key_type.decode(encoded_key)] = descriptor.value_type.decode(encoded)
        ttl = descriptor.ttl_config
        self._stage_map_entry(self._entry(state_name, namespace), to_text(encoded_key), to_text(encoded),
                              ttl.expiry(self.now) if ttl is not None else None)

    def map_remove(self, state_name: str, namespace: str, descriptor: MapStateDescriptor, user_key: Any) -> None:
        """Remove the entry ``user_key``, expired or not (no read: it returns nothing)."""
        current = self.get_map(state_name, namespace, descriptor)
        if user_key in current:
            del current[user_key]
            key_text = to_text(descriptor.key_type.encode(user_key))
            self._stage_map_entry(self._entry(state_name, namespace), key_text, None, None)

    def map_clear(self, state_name: str, namespace: str, descriptor: MapStateDescriptor) -> None:
        for user_key in list(self.get_map(state_name, namespace, descriptor)):
            self.map_remove(state_name, namespace, descriptor, user_key)

    # -- end of a microbatch ---------------------------------------------------------------------------
    def flush(self) -> list[tuple[str, int, str, str, str | None, str | None, int, int | None]]:
        """What changed since the last flush, as (state_name, key_group, key, namespace, user_key, text or
        None for a removed entry, +1/-1/0 for an entry created/removed/updated, expiry or None), in a
        deterministic order; the changes become the stored state."""
        out = []
        for entry in sorted(self._dirty):
            text, stored = self._dirty[entry], self._stored.get(entry)
            expiry = self._dirty_expiry.get(entry)
            if text == stored and expiry == self._expiry.get(entry):
                continue  # written back unchanged, or created and cleared in the same microbatch
            state_name, key, namespace = entry
            out.append((state_name, self._key_groups[key], key, namespace, None, text,
                        (text is not None) - (stored is not None), expiry))
            self._keep(self._stored, entry, text, entry, expiry)
        for entry in sorted(self._map_dirty):
            stored_map = self._stored_maps.setdefault(entry, {})
            state_name, key, namespace = entry
            for user_key in sorted(self._map_dirty[entry]):
                text, stored = self._map_dirty[entry][user_key], stored_map.get(user_key)
                slot = entry + (user_key,)
                expiry = self._dirty_expiry.get(slot)
                if text == stored and expiry == self._expiry.get(slot):
                    continue
                out.append((state_name, self._key_groups[key], key, namespace, user_key, text,
                            (text is not None) - (stored is not None), expiry))
                self._keep(stored_map, user_key, text, slot, expiry)
            if not stored_map:
                del self._stored_maps[entry]
        self._dirty.clear()
        self._map_dirty.clear()
        self._dirty_expiry.clear()
        self._decoded.clear()
        self._list_expiry.clear()
        self._unread.clear()
        return out

    def _keep(self, stored: dict, name, text: str | None, slot: tuple, expiry: int | None) -> None:
        """Make a flushed change the stored state."""
        if text is None:
            stored.pop(name, None)
        else:
            stored[name] = text
        if expiry is None:
            self._expiry.pop(slot, None)
        else:
            self._expiry[slot] = expiry


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
        self._store.list_add(self._name, self._namespace, self._descriptor, [value])

    def add_all(self, values: Iterable[Any]) -> None:
        """Append every element of ``values``; None (or a None element) is an error."""
        values = _elements(values, "add_all")
        if values:
            self._store.list_add(self._name, self._namespace, self._descriptor, values)

    def update(self, values: Iterable[Any]) -> None:
        """Replace all elements; an empty list clears the state; None is an error."""
        self._put(_elements(values, "update") or None)


class MapState(_KeyedState):
    """A map per key and namespace; each map entry is stored (and written) on its own."""

    def _read(self, keys=None) -> dict:
        """What a read of the entries ``keys`` (default: all) returns, each checked for TTL on its own."""
        return self._store.map_read(self._name, self._namespace, self._descriptor, keys)

    def get(self, key: Any) -> Any:
        """The value mapped to ``key``, or None."""
        return _copy(self._read([key]).get(key))

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
        return self._store.map_is_empty(self._name, self._namespace, self._descriptor)

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
