"""A subtask's keyed store: the encoded entries of the keys it touches in a run, decoded lazily.

An entry is ``(state_name, key, namespace, user_key)``: ``user_key`` is None except for MapState, whose every
map entry is an entry of its own (a ``put`` writes one row, as in Flink's RocksDB backend). ``flush`` returns what
changed in a microbatch (None for a removed entry), so writes grow with the entries that changed.

Every entry may carry an expiry (epoch ms, the ``expiry`` column), which the store keeps as data and never
compares with a clock: a list stored with expiries holds ``[[expiry, element], ...]`` and its entry's expiry is
the latest of them. What an expiry means is State TTL's alone (``state.ttl``). The handles users call are
``state.handles``', as Flink's ``heap/StateTable`` is apart from ``HeapValueState``.
"""
from __future__ import annotations

from itertools import compress, repeat
from operator import eq, is_, sub
from typing import Any

import orjson

from ..errors import stored_value_error
from ..records.layout import ChangeColumns, KeyedChange
from ..types import ListTypeInfo, MapTypeInfo, RowTypeInfo, TypeInfo, to_text
from .codecs import decode_stamped_list, encode_stamped_list
from .descriptors import (
    MapStateDescriptor,
    StateDescriptor,
)

VOID_NAMESPACE = ""
_ABSENT = object()
_PENDING = "<the text of a list appended to, written at the flush>"  # a ``_dirty`` text ``append`` leaves


def _same_entry(text: str | None, old: str | None, expiry: int | None, old_expiry: int | None) -> bool:
    return text == old and expiry == old_expiry


def _copy(value: Any) -> Any:
    """A copy the user may mutate without changing state (decoded values are JSON-like)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _same(value: Any) -> Any:
    return value


def _shallow(value: dict | list | None) -> dict | list | None:
    return None if value is None else value.copy()


_NESTED = (RowTypeInfo, ListTypeInfo, MapTypeInfo)


def value_copier(type_info: TypeInfo):
    """``_copy`` for decoded values of ``type_info``, as cheap as the type allows: a scalar is immutable and a
    row, list or map of scalars needs a shallow copy only (a handle's reads copy every value they return)."""
    if not isinstance(type_info, _NESTED):
        return _same
    if isinstance(type_info, RowTypeInfo):
        inner = list(type_info.fields.values())
    else:
        inner = [type_info.element if isinstance(type_info, ListTypeInfo) else type_info.value]
    return _copy if any(isinstance(t, _NESTED) for t in inner) else _shallow


def value_writer(stored_type: TypeInfo):
    """``value -> (decoded, text)`` for values of ``stored_type``: the value encoded (so checked: TypeError or
    ValueError), what a reload of it gives back (``KeyedStateStore._normalized``), and its stored text."""
    encode, dumps, sort_keys = stored_type.encoder(), orjson.dumps, orjson.OPT_SORT_KEYS
    if stored_type.encoding_is_value:
        def write(value: Any) -> tuple[Any, str]:
            encoded = encode(value)
            return encoded, dumps(encoded, option=sort_keys).decode()
        return write
    decode = stored_type.decode

    def write_decoded(value: Any) -> tuple[Any, str]:
        encoded = encode(value)
        return decode(encoded), dumps(encoded, option=sort_keys).decode()
    return write_decoded


class _Entries:
    """The single-value entries of one state in one namespace, by key (a ``str``, whose hash Python keeps): what
    the store holds of them, and what a microbatch changed, so a read, a write and the flush's columns take no
    tuple per entry (``KeyedStateStore._values``)."""

    __slots__ = ("state_name", "namespace", "stored", "expiry", "decoded", "list_expiry", "dirty", "groups",
                 "dirty_expiry", "pending", "undecoded")

    def __init__(self, state_name: str, namespace: str) -> None:
        self.state_name, self.namespace = state_name, namespace
        self.stored: dict[str, str] = {}  # key -> JSON text, as of the last flush
        self.expiry: dict[str, int] = {}  # key -> stored expiry
        # Entries read or written in this run, decoded: kept across microbatches, as Flink's heap backend keeps
        # its objects (what a reload of the flushed text gives back, so they read the same).
        self.decoded: dict[str, Any] = {}
        self.list_expiry: dict[str, list[int]] = {}  # element expiries of a list beside its decoded elements
        self.dirty: dict[str, str | None] = {}  # key -> text written since the last flush (None: removed)
        # The key group of each ``dirty`` entry, in its insertion order: appended when a write adds an entry, so no
        # per-key dict keeps the key groups of the keys a microbatch touches.
        self.groups: list[int] = []
        self.dirty_expiry: dict[str, int | None] = {}  # expiry of a dirty entry
        # Lists ``append`` changed since the last flush: their text is ``_PENDING`` in ``dirty`` until the flush
        # writes it (key -> (its text before the first append, the appended elements encoded)).
        self.pending: dict[str, tuple[str | None, list]] = {}
        self.undecoded = False  # entries loaded that no read has decoded yet (``KeyedStateStore._decode_loaded``)

    def text(self, key: str) -> str | None:
        dirty = self.dirty
        return dirty[key] if key in dirty else self.stored.get(key)

    def current_expiry(self, key: str) -> int | None:
        return self.dirty_expiry[key] if key in self.dirty_expiry else self.expiry.get(key)

    def stage(self, key: str, text: str | None, key_group: int | None) -> None:
        """``dirty[key] = text``, ``key_group`` noted beside a new entry (``groups``)."""
        dirty = self.dirty
        n = len(dirty)
        dirty[key] = text
        if len(dirty) != n:
            self.groups.append(key_group)

    def write_pending(self) -> None:
        """The text of each list ``append`` changed: the text it had (stored, or put in this microbatch) with the
        appended elements' text after its last element, once a microbatch."""
        dumps, sort_keys, dirty = orjson.dumps, orjson.OPT_SORT_KEYS, self.dirty
        for key, (before, encoded) in self.pending.items():
            added = dumps(encoded, option=sort_keys).decode()
            head = None if before is None else before.rstrip()[:-1].rstrip()  # without its closing bracket
            dirty[key] = added if head is None else head + ("" if head.endswith("[") else ",") + added[1:]
        self.pending.clear()

    def flush(self, key_groups: dict[str, int], out: list[list]) -> None:
        """The microbatch's changes appended to ``out`` (``ChangeColumns``' lists), column by column with
        C-level maps; they become the stored state (``key_groups`` gets each created entry's key group)."""
        if self.pending:
            self.write_pending()
        dirty, stored, groups = self.dirty, self.stored, self.groups
        keys, texts = list(dirty), list(dirty.values())
        olds = list(map(stored.get, keys))
        timed = bool(self.dirty_expiry or self.expiry)
        if timed:
            expiries = list(map(self.dirty_expiry.get, keys))
            unchanged = list(map(_same_entry, texts, olds, expiries, map(self.expiry.get, keys)))
        else:
            expiries, unchanged = [None] * len(keys), list(map(eq, texts, olds))
        if any(unchanged):  # written back unchanged, or created and cleared in the same microbatch
            changed = [not u for u in unchanged]
            keys, texts, olds, expiries, groups = (list(compress(c, changed))
                                                   for c in (keys, texts, olds, expiries, groups))
            stored.update(zip(keys, texts))
        else:
            stored.update(dirty)
        removed = list(map(is_, texts, repeat(None)))
        deltas = list(map(sub, map(is_, olds, repeat(None)), removed))  # +1 created, -1 removed, 0 updated
        if 1 in deltas:  # a created entry's key group, kept for the microbatches after (``keys_of``, maps)
            created = [d == 1 for d in deltas]
            key_groups.update(zip(compress(keys, created), compress(groups, created)))
        if any(removed):
            for key in compress(keys, removed):
                del stored[key]
        if timed:
            expiry_of = self.expiry
            for key, expiry in zip(keys, expiries):
                if expiry is not None:
                    expiry_of[key] = expiry
                else:
                    expiry_of.pop(key, None)
        n = len(keys)
        for column, values in zip(out, ([self.state_name] * n, groups, keys, [self.namespace] * n, [None] * n,
                                        texts, deltas, expiries)):
            column.extend(values)
        dirty.clear()
        self.groups = []
        self.dirty_expiry.clear()


class KeyedStateStore:
    """The keyed entries of one subtask: loaded once per run, changed key by key, flushed per microbatch."""

    def __init__(self) -> None:
        self._values: dict[tuple[str, str], _Entries] = {}  # (state, namespace) -> its single-value entries
        self._stored_maps: dict[tuple, dict[str, str]] = {}  # (state, key, ns) -> {user key text: value text}
        self._map_expiry: dict[tuple, int] = {}  # (state, key, ns, user key) -> stored expiry
        self._decoded_maps: dict[tuple, dict] = {}  # (state, key, ns) -> the decoded map (``get_map``)
        self._map_dirty: dict[tuple, dict[str, str | None]] = {}
        self._map_dirty_expiry: dict[tuple, int | None] = {}  # expiry of a dirty map entry
        self._writers: dict[StateDescriptor, Any] = {}  # descriptor -> its ``value_writer``
        self.now = 0  # the microbatch's processing time, epoch ms: the clock the TTL wrappers read
        self._key_groups: dict[str, int] = {}  # key -> key group of the stored entries' keys (and map entries')
        self.current_key: str | None = None
        self.current_key_group: int | None = None

    def entries(self, state_name: str, namespace: str) -> _Entries:
        """The single-value entries of ``state_name`` in ``namespace`` (made when first asked for)."""
        slot = self._values.get((state_name, namespace))
        if slot is None:
            slot = self._values[state_name, namespace] = _Entries(state_name, namespace)
        return slot

    def load(self, state_name: str, key: str, namespace: str, user_key: str | None, key_group: int,
             value: str, expiry: int | None = None) -> None:
        if user_key is None:
            slot = self.entries(state_name, namespace)
            slot.stored[key] = value
            slot.undecoded = True
            if expiry is not None:
                slot.expiry[key] = expiry
        else:
            entry = (state_name, key, namespace)
            self._stored_maps.setdefault(entry, {})[user_key] = value
            if expiry is not None:
                self._map_expiry[entry + (user_key,)] = expiry
        self._key_groups[key] = key_group

    def load_columns(self, state_names: list, keys: list, namespaces: list, user_keys: list, key_groups: list,
                     values: list, expiries: list) -> None:
        """``load`` of each row of these columns; single-value entries of one state and namespace without
        expiries (most) with two dict updates."""
        n = len(keys)
        if n and (user_keys.count(None) == n and expiries.count(None) == n
                  and state_names.count(state_names[0]) == n and namespaces.count(namespaces[0]) == n):
            slot = self.entries(state_names[0], namespaces[0])
            slot.stored.update(zip(keys, values))
            slot.undecoded = True
            self._key_groups.update(zip(keys, key_groups))
            return
        for row in zip(state_names, keys, namespaces, user_keys, key_groups, values, expiries):
            self.load(*row)

    def set_time(self, now: int) -> None:
        """Processing time from now on (the microbatch's timestamp): what TTL compares expiries with."""
        self.now = now

    def _slots_of(self, state_name: str) -> list[_Entries]:
        return [slot for (name, _), slot in self._values.items() if name == state_name]

    def keys_of(self, state_name: str) -> list[tuple[str, int]]:
        """``(key, key group)`` of every key with a live entry of ``state_name`` (stored or written), in key group
        then key order."""
        keys: set[str] = set()
        written: dict[str, int] = {}  # keys written since the last flush -> key group
        for slot in self._slots_of(state_name):
            keys |= {k for k, text in slot.stored.items() if slot.dirty.get(k, text)}
            keys |= {k for k, text in slot.dirty.items() if text is not None}
            written.update(zip(slot.dirty, slot.groups))
        for entry in set(self._stored_maps) | set(self._map_dirty):
            if entry[0] == state_name and any(
                    self._map_text(entry, k) is not None
                    for k in set(self._stored_maps.get(entry, ())) | set(self._map_dirty.get(entry, ()))):
                keys.add(entry[1])
        return sorted(((k, written[k] if k in written else self._key_groups[k]) for k in keys),
                      key=lambda kk: (kk[1], kk[0]))

    def stored_entries(self, state_name: str, namespace: str = VOID_NAMESPACE) -> list[tuple[str, str, int | None]]:
        """``(key, text, expiry)`` of each stored single-value entry of ``state_name`` in ``namespace``, as of the
        last flush (what a vectorised run takes over from the entries loaded row by row)."""
        slot = self._values.get((state_name, namespace))
        if slot is None:
            return []
        return [(k, text, slot.expiry.get(k)) for k, text in slot.stored.items()]

    def stored_map_entries(self, state_name: str, namespace: str = VOID_NAMESPACE) -> list[tuple[str, str, str]]:
        """``(key, user key, text)`` of each stored map entry of ``state_name`` in ``namespace``, as of the last
        flush (what a vectorised run takes over from the entries loaded row by row)."""
        return [(e[1], user_key, text) for e, entries in self._stored_maps.items()
                if e[0] == state_name and e[2] == namespace for user_key, text in entries.items()]

    def stored_namespaced(self, state_name: str) -> list[tuple[str, int, str, str]]:
        """``(key, key group, namespace, text)`` of each stored single-value entry of ``state_name`` in any
        namespace (what a window run on the vectorised path takes over from the entries loaded row by row)."""
        return [(k, self._key_groups[k], slot.namespace, text) for slot in self._slots_of(state_name)
                for k, text in slot.stored.items()]

    def set_current_key(self, key: str, key_group: int) -> None:
        self.current_key, self.current_key_group = key, key_group

    def _entry(self, state_name: str, namespace: str) -> tuple:
        if self.current_key is None:
            raise RuntimeError("keyed state is only accessible while processing a key (in process())")
        return state_name, self.current_key, namespace

    def _where(self, state_name: str, namespace: str) -> str:
        return (f"state {state_name!r} of key {self.current_key!r}"
                + (f" (namespace {namespace!r})" if namespace else ""))

    # -- single-value states (value, list, reducing, aggregating) --------------------------------------
    def get(self, state_name: str, namespace: str, descriptor: StateDescriptor) -> Any:
        """The decoded value (not a copy), or None when the state is empty for the current key, whatever its
        expiry; a list stored with element expiries gives its elements (``element_expiries``, their expiries)."""
        key = self.current_key
        if key is None:
            self._entry(state_name, namespace)  # raises
        slot = self._values.get((state_name, namespace)) or self.entries(state_name, namespace)
        value = slot.decoded.get(key, _ABSENT)
        return self._decode(slot, key, descriptor) if value is _ABSENT else value

    def expiry(self, state_name: str, namespace: str) -> int | None:
        """The expiry of the current key's entry (written in this microbatch or stored), or None."""
        key = self._entry(state_name, namespace)[1]
        return self.entries(state_name, namespace).current_expiry(key)

    def element_expiries(self, state_name: str, namespace: str, descriptor: StateDescriptor) -> list[int] | None:
        """The expiries of the current list's elements, in order, or None for a list stored without them."""
        self.get(state_name, namespace, descriptor)
        return self.entries(state_name, namespace).list_expiry.get(self.current_key)

    def _decode(self, slot: _Entries, key: str, descriptor: StateDescriptor) -> Any:
        """Decode an entry into the run's cache (``decoded``): on the first read after a load, every entry loaded
        (``_decode_loaded``)."""
        if slot.undecoded and not slot.expiry:
            self._decode_loaded(slot, descriptor)
            value = slot.decoded.get(key, _ABSENT)
            if value is not _ABSENT:
                return value
        text = slot.text(key)
        if text is None:
            value = None
        elif descriptor.kind == "list" and slot.current_expiry(key) is not None:
            value = self._load_stamped_list(slot, key, text, descriptor)
        else:
            stored_type = descriptor.stored_type
            try:  # once per key read: the entry named in the error
                value = stored_type.loads(text)
            except (TypeError, ValueError, AttributeError) as e:
                raise stored_value_error(self._where(slot.state_name, slot.namespace), stored_type.name,
                                         e) from None
        slot.decoded[key] = value
        return value

    @staticmethod
    def _decode_loaded(slot: _Entries, descriptor: StateDescriptor) -> None:
        """Decode the slot's loaded entries no read or write has reached yet with one JSON parse (the keys a run
        loads are the keys it touches); where one does not load, each is decoded on its own read, which names it."""
        slot.undecoded = False
        decoded, dirty, stored = slot.decoded, slot.dirty, slot.stored
        keys = [k for k in stored if k not in decoded and k not in dirty]
        values = descriptor.stored_type.loads_many(list(map(stored.__getitem__, keys))) if keys else None
        if values is not None:
            decoded.update(zip(keys, values))

    def _load_stamped_list(self, slot: _Entries, key: str, text: str, descriptor) -> list:
        """A list stored with element expiries: the elements, their expiries kept beside them."""
        try:
            expiries, encoded = decode_stamped_list(text)
            element_type = descriptor.type_info
            values = [element_type.decode(e) for e in encoded]
        except (TypeError, ValueError, AttributeError) as e:
            raise stored_value_error(self._where(slot.state_name, slot.namespace), descriptor.stored_type.name,
                                     e) from None
        slot.list_expiry[key] = expiries
        return values

    def _normalized(self, descriptor: StateDescriptor, value: Any) -> tuple[Any, Any]:
        """(encoded, decoded) ``value``: its type is checked now, where the user's call is, and the decoded value
        is what a reload would give back, so a value reads the same across a microbatch boundary. (A row's
        encoding lists every declared field, so it is what a reload gives when fields decode as is.)"""
        stored_type = descriptor.stored_type
        encoded = stored_type.encode(value)
        return encoded, (encoded if stored_type.encoding_is_value else stored_type.decode(encoded))

    def put(self, state_name: str, namespace: str, descriptor: StateDescriptor, value: Any,
            expiry: int | None = None) -> None:
        """Stage the value (None clears it) with ``expiry`` (None: no expiry, which a clear also leaves)."""
        key = self.current_key
        if key is None:
            self._entry(state_name, namespace)  # raises
        slot = self._values.get((state_name, namespace)) or self.entries(state_name, namespace)
        text = None
        if value is not None:  # once per write: ``_normalized`` and ``to_text`` in one function per descriptor
            write = self._writers.get(descriptor)
            if write is None:
                write = self._writers[descriptor] = value_writer(descriptor.stored_type)
            value, text = write(value)
        slot.decoded[key] = value
        if slot.pending:
            slot.pending.pop(key, None)
        dirty = slot.dirty  # ``stage``, inlined: once per write
        n = len(dirty)
        dirty[key] = text
        if len(dirty) != n:
            slot.groups.append(self.current_key_group)
        # Without expiries in the slot (no TTL), an entry's expiry is None without a dirty one.
        if expiry is not None or slot.dirty_expiry or slot.expiry:
            slot.dirty_expiry[key] = expiry if text is not None else None
        if slot.list_expiry:
            slot.list_expiry.pop(key, None)

    def append(self, state_name: str, namespace: str, descriptor: StateDescriptor, values: list) -> None:
        """Append ``values`` to the current key's list (a ListState's ``add``): each element is encoded now (so
        checked where the user's call is), and at the flush the list's text is its text before plus the new
        elements' (``_Entries.write_pending``): n adds to a list cost n, not n times its length. A state with
        expiries goes through ``put`` (a list with element expiries is stored otherwise)."""
        current = self.get(state_name, namespace, descriptor)
        slot = self._values[state_name, namespace]
        if slot.expiry or slot.dirty_expiry or slot.list_expiry:
            self.put(state_name, namespace, descriptor, (current or []) + values)
            return
        element = descriptor.stored_type.element
        encoded = [element.encode(v) for v in values]
        if None in encoded:
            raise ValueError("you cannot add None to a ListState")
        decoded = encoded if element.encoding_is_value else [element.decode(e) for e in encoded]
        key = self.current_key
        pending = slot.pending.get(key)
        if pending is not None:  # the microbatch's own copy of the list
            current.extend(decoded)
            pending[1].extend(encoded)
            return
        slot.pending[key] = (slot.text(key), encoded)
        slot.decoded[key] = (current or []) + decoded  # never ``encoded`` itself, which the flush writes
        slot.stage(key, _PENDING, self.current_key_group)

    def put_list(self, state_name: str, namespace: str, descriptor: StateDescriptor, values: list,
                 expiries: list[int]) -> None:
        """Stage a list whose elements carry their own expiries: stored as ``[[expiry, element], ...]``, the
        entry's expiry the latest of them (it is dead once every element is); an empty list clears it."""
        if not values:
            self.put(state_name, namespace, descriptor, None)
            return
        key = self._entry(state_name, namespace)[1]
        slot = self.entries(state_name, namespace)
        encoded, values = self._normalized(descriptor, values)
        slot.decoded[key], slot.list_expiry[key] = values, list(expiries)
        slot.pending.pop(key, None)
        slot.stage(key, encode_stamped_list(expiries, encoded), self.current_key_group)
        slot.dirty_expiry[key] = max(expiries)

    def restamp(self, state_name: str, namespace: str, expiry: int) -> None:
        """Give the current entry a new expiry, its value unchanged."""
        key = self._entry(state_name, namespace)[1]
        slot = self.entries(state_name, namespace)
        slot.stage(key, slot.text(key), self.current_key_group)
        slot.dirty_expiry[key] = expiry

    # -- map state: one entry per user key -----------------------------------------------------------
    def get_map(self, state_name: str, namespace: str, descriptor: MapStateDescriptor) -> dict:
        """The decoded map of the current key (not a copy, the one every write changes): each entry not removed
        yet, whatever its expiry."""
        entry = self._entry(state_name, namespace)
        value = self._decoded_maps.get(entry, _ABSENT)
        if value is _ABSENT:
            texts = dict(self._stored_maps.get(entry, ()))
            texts.update(self._map_dirty.get(entry, ()))
            texts = {k: v for k, v in texts.items() if v is not None}
            value = self._decoded_maps[entry] = self._decode_map(texts, descriptor, state_name, namespace)
        return value

    def map_read(self, state_name: str, namespace: str, descriptor: MapStateDescriptor, user_keys=None) -> dict:
        """The entries ``user_keys`` (default: every entry) the current map holds, as a new dict."""
        current = self.get_map(state_name, namespace, descriptor)
        keys = list(current) if user_keys is None else [k for k in user_keys if k in current]
        return {k: current[k] for k in keys}

    def map_expiry(self, state_name: str, namespace: str, descriptor: MapStateDescriptor, user_key: Any
                   ) -> int | None:
        """The expiry of the current map's entry ``user_key`` (written in this microbatch or stored), or None."""
        slot = self._entry(state_name, namespace) + (self._key_text(descriptor, user_key),)
        return self._map_dirty_expiry[slot] if slot in self._map_dirty_expiry else self._map_expiry.get(slot)

    def map_restamp(self, state_name: str, namespace: str, descriptor: MapStateDescriptor, user_key: Any,
                    expiry: int) -> None:
        """Give the current map's entry ``user_key`` a new expiry, its value unchanged."""
        entry, key_text = self._entry(state_name, namespace), self._key_text(descriptor, user_key)
        self._stage_map_entry(entry, key_text, self._map_text(entry, key_text), expiry)

    @staticmethod
    def _key_text(descriptor: MapStateDescriptor, user_key: Any) -> str:
        return to_text(descriptor.key_type.encode(user_key))

    def _stage_map_entry(self, entry: tuple, key_text: str, text: str | None, expiry: int | None) -> None:
        self._map_dirty.setdefault(entry, {})[key_text] = text
        self._key_groups[entry[1]] = self.current_key_group
        self._map_dirty_expiry[entry + (key_text,)] = expiry

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
                value: Any, expiry: int | None = None) -> None:
        """Map ``user_key`` to ``value``, an entry of its own with ``expiry`` (None: no expiry)."""
        current = self.get_map(state_name, namespace, descriptor)
        if value is None:
            raise ValueError("a MapState value cannot be None; use remove(key)")
        encoded_key, encoded = descriptor.key_type.encode(user_key), descriptor.value_type.encode(value)
        if encoded_key is None:
            raise ValueError("a MapState key cannot be None")
        current[descriptor.key_type.decode(encoded_key)] = descriptor.value_type.decode(encoded)
        self._stage_map_entry(self._entry(state_name, namespace), to_text(encoded_key), to_text(encoded), expiry)

    def map_remove(self, state_name: str, namespace: str, descriptor: MapStateDescriptor, user_key: Any) -> None:
        """Remove the entry ``user_key``, whatever its expiry."""
        current = self.get_map(state_name, namespace, descriptor)
        if user_key in current:
            del current[user_key]
            self._stage_map_entry(self._entry(state_name, namespace), self._key_text(descriptor, user_key), None,
                                  None)

    def map_clear(self, state_name: str, namespace: str, descriptor: MapStateDescriptor) -> None:
        for user_key in list(self.get_map(state_name, namespace, descriptor)):
            self.map_remove(state_name, namespace, descriptor, user_key)

    # -- end of a microbatch ---------------------------------------------------------------------------
    def flush(self) -> list[KeyedChange]:
        """What changed since the last flush, sorted (``flush_columns`` as records): for tests and tools."""
        return self.flush_columns().changes()

    def flush_columns(self) -> ChangeColumns:
        """What changed since the last flush, as columns (``ChangeColumns``); the changes become the stored
        state. A microbatch's single-value entries are handled a state and namespace at a time, a column at a
        time (no Python object per entry: ``_Entries.flush``), then its map entries one by one. A state's
        namespace with no entry left is dropped (a run of session windows opens and closes one per session)."""
        out, emptied = ChangeColumns(), []
        for place, slot in self._values.items():
            if slot.dirty:
                slot.flush(self._key_groups, out.lists)
            if not slot.stored:  # nothing left in it (a closed window's namespace): what it decoded is all None
                emptied.append(place)
        for place in emptied:
            del self._values[place]
        changes = []
        for entry in sorted(self._map_dirty):
            stored_map = self._stored_maps.setdefault(entry, {})
            state_name, key, namespace = entry
            for user_key in sorted(self._map_dirty[entry]):
                text, stored = self._map_dirty[entry][user_key], stored_map.get(user_key)
                slot = entry + (user_key,)
                expiry = self._map_dirty_expiry.get(slot)
                if text == stored and expiry == self._map_expiry.get(slot):
                    continue
                changes.append((state_name, self._key_groups[key], key, namespace, user_key, text,
                                (text is not None) - (stored is not None), expiry))
                self._keep(stored_map, user_key, text, slot, expiry)
            if not stored_map:
                del self._stored_maps[entry]
        self._map_dirty.clear()
        self._map_dirty_expiry.clear()
        return out.extend(ChangeColumns.of(changes)) if changes else out

    def _keep(self, stored: dict, name, text: str | None, slot: tuple, expiry: int | None) -> None:
        """Make a flushed map change the stored state."""
        if text is None:
            stored.pop(name, None)
        else:
            stored[name] = text
        if expiry is None:
            self._map_expiry.pop(slot, None)
        else:
            self._map_expiry[slot] = expiry
