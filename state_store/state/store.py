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
from operator import eq, is_, itemgetter, sub
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


class KeyedStateStore:
    """The keyed entries of one subtask: loaded once per run, changed key by key, flushed per microbatch."""

    def __init__(self) -> None:
        self._stored: dict[tuple, str] = {}  # (state, key, ns) -> JSON text
        self._stored_maps: dict[tuple, dict[str, str]] = {}  # (state, key, ns) -> {user key text: value text}
        self._expiry: dict[tuple, int] = {}  # (state, key, ns) or (state, key, ns, user key) -> stored expiry
        # Entries read or written in this run, decoded: kept across microbatches, as Flink's heap backend keeps
        # its objects (what a reload of the flushed text gives back, so they read the same).
        self._decoded: dict[tuple, Any] = {}
        self._list_expiry: dict[tuple, list[int]] = {}  # element expiries of a list beside its _decoded elements
        self._dirty: dict[tuple, str | None] = {}
        # Lists ``append`` changed since the last flush: their text is ``_PENDING`` in ``_dirty`` until the flush
        # writes it (entry -> (its text before the first append, the appended elements encoded)).
        self._pending: dict[tuple, tuple[str | None, list]] = {}
        # The key group of each ``_dirty`` entry, in its insertion order: appended when a write adds an entry
        # (``_stage``), so no per-key dict keeps the key groups of the keys a microbatch touches.
        self._dirty_groups: list[int] = []
        self._map_dirty: dict[tuple, dict[str, str | None]] = {}
        self._dirty_expiry: dict[tuple, int | None] = {}  # expiry of a dirty entry (of a dirty map entry)
        self._writers: dict[StateDescriptor, Any] = {}  # descriptor -> its ``value_writer``
        self.now = 0  # the microbatch's processing time, epoch ms: the clock the TTL wrappers read
        self._key_groups: dict[str, int] = {}  # key -> key group of the stored entries' keys (and map entries')
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

    def load_columns(self, state_names: list, keys: list, namespaces: list, user_keys: list, key_groups: list,
                     values: list, expiries: list) -> None:
        """``load`` of each row of these columns; single-value entries without expiries (most) with two dict
        updates."""
        if user_keys.count(None) == len(user_keys) and expiries.count(None) == len(expiries):
            self._stored.update(zip(zip(state_names, keys, namespaces), values))
            self._key_groups.update(zip(keys, key_groups))
            return
        for row in zip(state_names, keys, namespaces, user_keys, key_groups, values, expiries):
            self.load(*row)

    def set_time(self, now: int) -> None:
        """Processing time from now on (the microbatch's timestamp): what TTL compares expiries with."""
        self.now = now

    def _current_expiry(self, slot: tuple) -> int | None:
        return self._dirty_expiry[slot] if slot in self._dirty_expiry else self._expiry.get(slot)

    def keys_of(self, state_name: str) -> list[tuple[str, int]]:
        """``(key, key group)`` of every key with a live entry of ``state_name`` (stored or written), in key group
        then key order."""
        keys = {e[1] for e, text in self._stored.items() if e[0] == state_name and self._dirty.get(e, text)}
        keys |= {e[1] for e, text in self._dirty.items() if e[0] == state_name and text is not None}
        written = {e[1]: g for e, g in zip(self._dirty, self._dirty_groups)}  # keys written since the last flush
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
        return [(e[1], text, self._expiry.get(e)) for e, text in self._stored.items()
                if e[0] == state_name and e[2] == namespace]

    def stored_map_entries(self, state_name: str, namespace: str = VOID_NAMESPACE) -> list[tuple[str, str, str]]:
        """``(key, user key, text)`` of each stored map entry of ``state_name`` in ``namespace``, as of the last
        flush (what a vectorised run takes over from the entries loaded row by row)."""
        return [(e[1], user_key, text) for e, entries in self._stored_maps.items()
                if e[0] == state_name and e[2] == namespace for user_key, text in entries.items()]

    def stored_namespaced(self, state_name: str) -> list[tuple[str, int, str, str]]:
        """``(key, key group, namespace, text)`` of each stored single-value entry of ``state_name`` in any
        namespace (what a window run on the vectorised path takes over from the entries loaded row by row)."""
        return [(e[1], self._key_groups[e[1]], e[2], text) for e, text in self._stored.items() if e[0] == state_name]

    def set_current_key(self, key: str, key_group: int) -> None:
        self.current_key, self.current_key_group = key, key_group

    def _stage(self, entry: tuple, text: str | None) -> None:
        """``_dirty[entry] = text``, the current key group noted beside a new entry (``_dirty_groups``)."""
        dirty = self._dirty
        n = len(dirty)
        dirty[entry] = text
        if len(dirty) != n:
            self._dirty_groups.append(self.current_key_group)

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
        entry = (state_name, key, namespace)
        value = self._decoded.get(entry, _ABSENT)
        return self._decode(entry, descriptor) if value is _ABSENT else value

    def expiry(self, state_name: str, namespace: str) -> int | None:
        """The expiry of the current key's entry (written in this microbatch or stored), or None."""
        return self._current_expiry(self._entry(state_name, namespace))

    def element_expiries(self, state_name: str, namespace: str, descriptor: StateDescriptor) -> list[int] | None:
        """The expiries of the current list's elements, in order, or None for a list stored without them."""
        self.get(state_name, namespace, descriptor)
        return self._list_expiry.get(self._entry(state_name, namespace))

    def _text(self, entry: tuple) -> str | None:
        return self._dirty[entry] if entry in self._dirty else self._stored.get(entry)

    def _decode(self, entry: tuple, descriptor: StateDescriptor) -> Any:
        """Decode an entry into the microbatch's cache."""
        state_name, _, namespace = entry
        text = self._dirty.get(entry, _ABSENT)
        if text is _ABSENT:
            text = self._stored.get(entry)
        if text is None:
            value = None
        elif descriptor.kind == "list" and self._current_expiry(entry) is not None:
            value = self._load_stamped_list(entry, text, descriptor, state_name, namespace)
        else:
            stored_type = descriptor.stored_type
            try:  # once per key read: the entry named in the error
                value = stored_type.loads(text)
            except (TypeError, ValueError, AttributeError) as e:
                raise stored_value_error(self._where(state_name, namespace), stored_type.name, e) from None
        self._decoded[entry] = value
        return value

    def _load_stamped_list(self, entry: tuple, text: str, descriptor, state_name: str, namespace: str) -> list:
        """A list stored with element expiries: the elements, their expiries kept beside them."""
        try:
            expiries, encoded = decode_stamped_list(text)
            element_type = descriptor.type_info
            values = [element_type.decode(e) for e in encoded]
        except (TypeError, ValueError, AttributeError) as e:
            raise stored_value_error(self._where(state_name, namespace), descriptor.stored_type.name, e) from None
        self._list_expiry[entry] = expiries
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
        entry = (state_name, key, namespace)
        text = None
        if value is not None:  # once per write: ``_normalized`` and ``to_text`` in one function per descriptor
            write = self._writers.get(descriptor)
            if write is None:
                write = self._writers[descriptor] = value_writer(descriptor.stored_type)
            value, text = write(value)
        self._decoded[entry] = value
        if self._pending:
            self._pending.pop(entry, None)
        dirty = self._dirty  # ``_stage``, inlined: once per write
        n = len(dirty)
        dirty[entry] = text
        if len(dirty) != n:
            self._dirty_groups.append(self.current_key_group)
        # Without expiries anywhere (no TTL), an entry's expiry is None without a dirty one.
        if expiry is not None or self._dirty_expiry or self._expiry:
            self._dirty_expiry[entry] = expiry if text is not None else None
        if self._list_expiry:
            self._list_expiry.pop(entry, None)

    def append(self, state_name: str, namespace: str, descriptor: StateDescriptor, values: list) -> None:
        """Append ``values`` to the current key's list (a ListState's ``add``): each element is encoded now (so
        checked where the user's call is), and at the flush the list's text is its text before plus the new
        elements' (``_write_pending``): n adds to a list cost n, not n times its length. A store with expiries
        anywhere goes through ``put`` (a list with element expiries is stored otherwise)."""
        current = self.get(state_name, namespace, descriptor)
        if self._expiry or self._dirty_expiry or self._list_expiry:
            self.put(state_name, namespace, descriptor, (current or []) + values)
            return
        element = descriptor.stored_type.element
        encoded = [element.encode(v) for v in values]
        if None in encoded:
            raise ValueError("you cannot add None to a ListState")
        decoded = encoded if element.encoding_is_value else [element.decode(e) for e in encoded]
        entry = (state_name, self.current_key, namespace)
        pending = self._pending.get(entry)
        if pending is not None:  # the microbatch's own copy of the list
            current.extend(decoded)
            pending[1].extend(encoded)
            return
        self._pending[entry] = (self._text(entry), encoded)
        self._decoded[entry] = (current or []) + decoded  # never ``encoded`` itself, which the flush writes
        self._stage(entry, _PENDING)

    def _write_pending(self) -> None:
        """The text of each list ``append`` changed: the text it had (stored, or put in this microbatch) with the
        appended elements' text after its last element, once a microbatch."""
        dumps, sort_keys, dirty = orjson.dumps, orjson.OPT_SORT_KEYS, self._dirty
        for entry, (before, encoded) in self._pending.items():
            added = dumps(encoded, option=sort_keys).decode()
            head = None if before is None else before.rstrip()[:-1].rstrip()  # without its closing bracket
            dirty[entry] = added if head is None else head + ("" if head.endswith("[") else ",") + added[1:]
        self._pending.clear()

    def put_list(self, state_name: str, namespace: str, descriptor: StateDescriptor, values: list,
                 expiries: list[int]) -> None:
        """Stage a list whose elements carry their own expiries: stored as ``[[expiry, element], ...]``, the
        entry's expiry the latest of them (it is dead once every element is); an empty list clears it."""
        if not values:
            self.put(state_name, namespace, descriptor, None)
            return
        entry = self._entry(state_name, namespace)
        encoded, values = self._normalized(descriptor, values)
        self._decoded[entry], self._list_expiry[entry] = values, list(expiries)
        self._stage(entry, encode_stamped_list(expiries, encoded))
        self._dirty_expiry[entry] = max(expiries)

    def restamp(self, state_name: str, namespace: str, expiry: int) -> None:
        """Give the current entry a new expiry, its value unchanged."""
        entry = self._entry(state_name, namespace)
        self._stage(entry, self._text(entry))
        self._dirty_expiry[entry] = expiry

    # -- map state: one entry per user key -----------------------------------------------------------
    def get_map(self, state_name: str, namespace: str, descriptor: MapStateDescriptor) -> dict:
        """The decoded map of the current key (not a copy, the one every write changes): each entry not removed
        yet, whatever its expiry."""
        entry = self._entry(state_name, namespace)
        value = self._decoded.get(entry, _ABSENT)
        if value is _ABSENT:
            texts = dict(self._stored_maps.get(entry, ()))
            texts.update(self._map_dirty.get(entry, ()))
            texts = {k: v for k, v in texts.items() if v is not None}
            value = self._decoded[entry] = self._decode_map(texts, descriptor, state_name, namespace)
        return value

    def map_read(self, state_name: str, namespace: str, descriptor: MapStateDescriptor, user_keys=None) -> dict:
        """The entries ``user_keys`` (default: every entry) the current map holds, as a new dict."""
        current = self.get_map(state_name, namespace, descriptor)
        keys = list(current) if user_keys is None else [k for k in user_keys if k in current]
        return {k: current[k] for k in keys}

    def map_expiry(self, state_name: str, namespace: str, descriptor: MapStateDescriptor, user_key: Any
                   ) -> int | None:
        """The expiry of the current map's entry ``user_key`` (written in this microbatch or stored), or None."""
        return self._current_expiry(self._entry(state_name, namespace) + (self._key_text(descriptor, user_key),))

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
        state. A microbatch's single-value entries are handled a column at a time (no Python object per
        entry), then its map entries one by one."""
        out = self._flush_values()
        changes = []
        for entry in sorted(self._map_dirty):
            stored_map = self._stored_maps.setdefault(entry, {})
            state_name, key, namespace = entry
            for user_key in sorted(self._map_dirty[entry]):
                text, stored = self._map_dirty[entry][user_key], stored_map.get(user_key)
                slot = entry + (user_key,)
                expiry = self._dirty_expiry.get(slot)
                if text == stored and expiry == self._expiry.get(slot):
                    continue
                changes.append((state_name, self._key_groups[key], key, namespace, user_key, text,
                                (text is not None) - (stored is not None), expiry))
                self._keep(stored_map, user_key, text, slot, expiry)
            if not stored_map:
                del self._stored_maps[entry]
        self._dirty.clear()
        self._dirty_groups = []
        self._map_dirty.clear()
        self._dirty_expiry.clear()
        return out.extend(ChangeColumns.of(changes)) if changes else out

    def _flush_values(self) -> ChangeColumns:
        """The single-value entries' changes, column by column with C-level maps; they become stored."""
        if self._pending:
            self._write_pending()
        dirty, stored_texts, groups = self._dirty, self._stored, self._dirty_groups
        entries, texts = list(dirty), list(dirty.values())
        olds = list(map(stored_texts.get, entries))
        if self._dirty_expiry or self._expiry:
            expiries = list(map(self._dirty_expiry.get, entries))
            unchanged = list(map(_same_entry, texts, olds, expiries, map(self._expiry.get, entries)))
        else:
            expiries, unchanged = [None] * len(entries), list(map(eq, texts, olds))
        if any(unchanged):  # written back unchanged, or created and cleared in the same microbatch
            changed = [not u for u in unchanged]
            entries, texts, olds, expiries, groups = (list(compress(c, changed))
                                                      for c in (entries, texts, olds, expiries, groups))
        removed = list(map(is_, texts, repeat(None)))
        deltas = list(map(sub, map(is_, olds, repeat(None)), removed))  # +1 created, -1 removed, 0 updated
        stored_texts.update(zip(entries, texts))
        keys = list(map(itemgetter(1), entries))
        if 1 in deltas:  # a created entry's key group, kept for the microbatches after (``keys_of``, maps)
            created = [d == 1 for d in deltas]
            self._key_groups.update(zip(compress(keys, created), compress(groups, created)))
        expiry_of = self._expiry
        if any(removed):
            for entry in compress(entries, removed):
                del stored_texts[entry]
        if expiry_of or expiries.count(None) != len(expiries):
            for entry, expiry in zip(entries, expiries):
                if expiry is not None:
                    expiry_of[entry] = expiry
                else:
                    expiry_of.pop(entry, None)
        return ChangeColumns([list(map(itemgetter(0), entries)), groups, keys,
                              list(map(itemgetter(2), entries)), [None] * len(entries), texts, deltas, expiries])

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
