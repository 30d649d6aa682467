"""Operator state of one subtask: ListState, UnionListState and BroadcastState.

Each state is stored as one entry per (state, subtask) holding the whole list
or map. The store lives for a subtask's whole run: values carry over from one
microbatch to the next, and ``flush`` after each snapshot says what changed.
"""
from __future__ import annotations

import copy
from typing import Any, Iterable

from ..errors import ConfigError, stored_value_error
from ..records.layout import OperatorChange
from ..types import Types
from .descriptors import ListStateDescriptor, MapStateDescriptor, StateDescriptor, ValueStateDescriptor, qualified_name

SPLIT_DISTRIBUTE = "split"
UNION = "union"
BROADCAST = "broadcast"
RAW = "raw"
MODES = (SPLIT_DISTRIBUTE, UNION, BROADCAST, RAW)
# The run's own operator state: where each source has read to (not a user's state; no uid owns it).
SOURCE_STATE_PREFIX = "__source__."  # the run's own operator state: the sources' offsets and watermark
SOURCE_OFFSETS_STATE = "__source__.offsets"
RAW_OPERATOR = "__raw__"
_RAW_DESCRIPTOR = ValueStateDescriptor("raw", Types.BYTES())  # only its type is used


class OperatorStateStore:
    """The operator state of one subtask for a whole run, as encoded text decoded on demand.

    ``own`` holds what this subtask stored (qualified name -> (mode, JSON text));
    ``union`` holds, for each union list state, the stored lists of every
    subtask in subtask order: a union list state is given whole to every
    subtask on every restore, at the same parallelism too (Flink's UNION).

    Example::

        def initialize_state(self, ctx):   # before every microbatch: register the operator states
            store = ctx.get_operator_state_store()
            self.buffer = store.get_list_state(ListStateDescriptor("buffer", RECORD))          # split on rescale
            self.seen = store.get_union_list_state(ListStateDescriptor("seen", Types.STRING()))  # all to every subtask
            self.rules = store.get_broadcast_state(MapStateDescriptor("rules", Types.STRING(), Types.DOUBLE()))
    """

    def __init__(self, uid: str, own: dict[str, tuple[str, str]] | None = None,
                 union: dict[str, list[str]] | None = None, read_only_broadcast: bool = False):
        self.uid = uid
        self._own = dict(own or {})
        self._union = {q: list(texts) for q, texts in (union or {}).items()}
        self._values: dict[str, Any] = {}
        self._modes: dict[str, str] = {}
        self._descriptors: dict[str, StateDescriptor] = {}
        self._raw_written = False
        self.read_only_broadcast = read_only_broadcast

    def qualified(self, name: str) -> str:
        """``name`` under this operator's uid, as the state tables keep it (``<uid>.<name>``)."""
        return qualified_name(self.uid, name)

    def _register(self, descriptor: StateDescriptor, mode: str):
        if getattr(descriptor, "ttl_config", None) is not None:
            raise ConfigError(f"operator state {descriptor.name!r} has a TTL: TTL applies to keyed state only, as "
                              f"in Flink; remove enable_time_to_live from its descriptor")
        qname = self.qualified(descriptor.name)
        known = self._modes.get(qname)
        if known and known != mode:
            raise ValueError(f"operator state {descriptor.name!r} is already registered as {known}, not {mode}")
        stored = self._own.get(qname)
        if stored and stored[0] != mode:
            raise ValueError(
                f"operator state {descriptor.name!r} was stored as {stored[0]} state but is now requested as {mode}"
            )
        self._modes[qname] = mode
        self._descriptors[qname] = descriptor
        if qname not in self._values:  # restored once per run; later registrations see the live value
            stored_type = descriptor.stored_type
            try:
                if mode == UNION and qname in self._union:
                    value = [e for text in self._union[qname] for e in stored_type.loads(text) or []]
                else:
                    value = None if stored is None else stored_type.loads(stored[1])
            except (TypeError, ValueError, AttributeError) as e:
                raise stored_value_error(f"operator state {qname!r}", stored_type.name, e) from None
            self._values[qname] = value
        return qname

    def get_list_state(self, descriptor: ListStateDescriptor) -> "OperatorListState":
        """Split-distribute list state: on rescale the elements are split round-robin."""
        return OperatorListState(self, self._register(descriptor, SPLIT_DISTRIBUTE), descriptor)

    def get_union_list_state(self, descriptor: ListStateDescriptor) -> "OperatorListState":
        """Union list state: on restore every subtask gets every subtask's elements."""
        return OperatorListState(self, self._register(descriptor, UNION), descriptor)

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> "BroadcastState":
        """Broadcast state: a map, the same on every subtask."""
        if not isinstance(descriptor, MapStateDescriptor):
            raise TypeError("broadcast state is declared with a MapStateDescriptor")
        return BroadcastState(self, self._register(descriptor, BROADCAST), descriptor)

    def get_registered_state_names(self) -> list[str]:
        """The names of the operator states registered so far."""
        return sorted(n.split(".", 1)[1] for n, mode in self._modes.items() if mode != RAW)

    # Raw operator state: opaque bytes per subtask, exactly what the last snapshot wrote.
    def raw(self) -> bytes | None:
        """This subtask's raw operator state (opaque bytes, restored as written), None when there is none."""
        stored = self._own.get(self.qualified(RAW_OPERATOR))
        return None if stored is None else Types.BYTES().loads(stored[1])

    def set_raw(self, data: bytes | None) -> None:
        """Set this subtask's raw operator state to ``data`` (None: remove it); a checkpoint keeps it as it is."""
        qname = self.qualified(RAW_OPERATOR)
        self._modes[qname] = RAW
        self._descriptors[qname] = _RAW_DESCRIPTOR
        self._values[qname] = data
        self._raw_written = True

    def flush(self) -> list[OperatorChange]:
        """Every state that changed since the last flush (JSON text or None, +1/-1/0 for created/removed/updated);
        the changes become what this subtask has stored. Raw state not written by the snapshot that
        just ran is dropped: raw state is what the latest snapshot wrote, nothing older."""
        raw = self.qualified(RAW_OPERATOR)
        if not self._raw_written and (raw in self._own or raw in self._values):
            self._modes[raw], self._descriptors[raw], self._values[raw] = RAW, _RAW_DESCRIPTOR, None
        self._raw_written = False
        out = []
        for qname in sorted(self._values):
            value = self._values[qname]
            if value in ([], {}):
                value = None
            text = None if value is None else self._descriptors[qname].stored_type.dumps(value)
            stored = self._own.get(qname)
            if text == (stored[1] if stored else None):
                continue
            out.append(OperatorChange(qname, self._modes[qname], text, (text is not None) - (stored is not None)))
            if text is None:
                self._own.pop(qname, None)
            else:
                self._own[qname] = (self._modes[qname], text)
        return out

    def descriptors(self) -> dict[str, tuple[str, StateDescriptor]]:
        """Registered states (not raw state): qualified name -> (mode, descriptor)."""
        return {q: (self._modes[q], d) for q, d in self._descriptors.items() if self._modes[q] != RAW}


class OperatorListState:
    """An operator list state of one subtask, split-distribute (``get_list_state``) or union
    (``get_union_list_state``), with the verbs of the keyed ``ListState``: ``get``, ``add``, ``add_all``,
    ``update``, ``clear``.

    Example::

        self.checkpointed = ctx.get_operator_state_store().get_list_state(ListStateDescriptor("buffered", RECORD))
        self.buffered = self.checkpointed.get()   # in open: the restored elements (a copy), [] on a fresh start
        self.checkpointed.update(self.buffered)   # in snapshot_state: what a restore gives back
        self.checkpointed.add(record)             # or one element at a time; clear() empties it
    """

    def __init__(self, store: OperatorStateStore, qname: str, descriptor: ListStateDescriptor):
        self._store, self._qname, self._descriptor = store, qname, descriptor

    def get(self) -> list:
        """The elements (a copy: changing it changes no state), [] when there are none."""
        return copy.deepcopy(self._store._values.get(self._qname) or [])

    def _canonical(self, value: Any) -> Any:
        """Validated, and as a restore would read it back."""
        t = self._descriptor.type_info
        return t.decode(t.encode(value))

    def add(self, value: Any) -> None:
        """Append ``value`` (of the descriptor's type; None is an error, as in Flink)."""
        if value is None:
            raise ValueError("you cannot add None to a ListState")
        self._store._values[self._qname] = self.get() + [self._canonical(value)]

    def add_all(self, values: Iterable[Any]) -> None:
        """Append each of ``values`` (None, or a None element, is an error, as in Flink)."""
        if values is None:
            raise ValueError("ListState.add_all(None) is not allowed (as in Flink); pass a list")
        for v in values:
            self.add(v)

    def update(self, values: Iterable[Any]) -> None:
        """Replace all elements; None (or a None element) is an error, as in Flink."""
        if values is None:
            raise ValueError("ListState.update(None) is not allowed (as in Flink); pass a list, or call clear()")
        values = list(values)
        if any(v is None for v in values):
            raise ValueError("you cannot add None to a ListState")
        self._store._values[self._qname] = [self._canonical(v) for v in values]

    def clear(self) -> None:
        """Remove every element."""
        self._store._values[self._qname] = []


class BroadcastState:
    """A map shared by all subtasks; writable only in process_broadcast_element.

    Example::

        LIMITS = MapStateDescriptor("limits", Types.STRING(), Types.DOUBLE())
        ctx.get_broadcast_state(LIMITS).put(limit["country"], limit["limit"])   # in process_broadcast_element
        limit = ctx.get_broadcast_state(LIMITS).get(purchase["country"])        # in process: read-only, None if absent
        countries = ctx.get_broadcast_state(LIMITS).keys()                      # items(), contains(k) ... too
    """

    def __init__(self, store: OperatorStateStore, qname: str, descriptor: MapStateDescriptor):
        self._store, self._qname, self._descriptor = store, qname, descriptor

    def _map(self) -> dict:
        return self._store._values.get(self._qname) or {}

    def _writable(self) -> dict:
        if self._store.read_only_broadcast:
            raise PermissionError("broadcast state is read-only in process(); change it in process_broadcast_element()")
        m = dict(self._map())
        return m

    def get(self, key: Any) -> Any:
        """The value of ``key`` (a copy), None when absent."""
        return copy.deepcopy(self._map().get(key))

    def contains(self, key: Any) -> bool:
        """Whether ``key`` has a value."""
        return key in self._map()

    def keys(self) -> list:
        """The keys, in insertion order."""
        return list(self._map().keys())

    def values(self) -> list:
        """The values (copies), in the keys' order."""
        return copy.deepcopy(list(self._map().values()))

    def items(self) -> list[tuple]:
        """The (key, value) pairs (copies), in insertion order."""
        return copy.deepcopy(list(self._map().items()))

    def is_empty(self) -> bool:
        """Whether it holds no key."""
        return not self._map()

    def put(self, key: Any, value: Any) -> None:
        """Map ``key`` to ``value``; only in ``process_broadcast_element`` (PermissionError elsewhere)."""
        self.put_all({key: value})

    def put_all(self, mapping: dict) -> None:
        """Put each pair of ``mapping``; only in ``process_broadcast_element``."""
        m = self._writable()
        t = self._descriptor.type_info
        m.update(t.decode(t.encode(dict(mapping))))  # validated, and as a restore would read it back
        self._store._values[self._qname] = m

    def remove(self, key: Any) -> None:
        """Remove ``key`` (nothing when absent); only in ``process_broadcast_element``."""
        m = self._writable()
        m.pop(key, None)
        self._store._values[self._qname] = m

    def clear(self) -> None:
        """Remove every key; only in ``process_broadcast_element``."""
        self._writable()
        self._store._values[self._qname] = {}
