"""Operator state of one subtask: ListState, UnionListState and BroadcastState.

Each state is stored as one entry per (state, subtask) holding the whole list
or map; redistribution on restore with another parallelism follows Flink
(see ``redistribution``).
"""
from __future__ import annotations

import copy
from typing import Any, Iterable

from .descriptors import ListStateDescriptor, MapStateDescriptor, StateDescriptor, ValueStateDescriptor
from .types import Types

SPLIT_DISTRIBUTE = "split"
UNION = "union"
BROADCAST = "broadcast"
RAW = "raw"


class OperatorStateStore:
    """The operator state entries of one subtask, as encoded text, decoded on demand."""

    def __init__(self, uid: str, encoded: dict[str, tuple[str, str]] | None = None, read_only_broadcast: bool = False):
        self.uid = uid
        self._encoded = dict(encoded or {})  # qualified name -> (mode, json text)
        self._values: dict[str, Any] = {}
        self._modes: dict[str, str] = {}
        self._descriptors: dict[str, StateDescriptor] = {}
        self.read_only_broadcast = read_only_broadcast

    def qualified(self, name: str) -> str:
        return f"{self.uid}.{name}"

    def _register(self, descriptor: StateDescriptor, mode: str):
        qname = self.qualified(descriptor.name)
        known = self._modes.get(qname)
        if known and known != mode:
            raise ValueError(f"operator state {descriptor.name!r} is already registered as {known}, not {mode}")
        stored = self._encoded.get(qname)
        if stored and stored[0] != mode:
            raise ValueError(
                f"operator state {descriptor.name!r} was stored as {stored[0]} state but is now requested as {mode}"
            )
        self._modes[qname] = mode
        self._descriptors[qname] = descriptor
        if qname not in self._values:
            self._values[qname] = None if stored is None else descriptor.stored_type.loads(stored[1])
        return qname

    def get_list_state(self, descriptor: ListStateDescriptor) -> "OperatorListState":
        """Split-distribute list state: on rescale the elements are split round-robin."""
        return OperatorListState(self, self._register(descriptor, SPLIT_DISTRIBUTE), descriptor)

    def get_union_list_state(self, descriptor: ListStateDescriptor) -> "OperatorListState":
        """Union list state: on restore every subtask gets every element."""
        return OperatorListState(self, self._register(descriptor, UNION), descriptor)

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> "BroadcastState":
        """Broadcast state: a map, the same on every subtask."""
        if not isinstance(descriptor, MapStateDescriptor):
            raise TypeError("broadcast state is declared with a MapStateDescriptor")
        return BroadcastState(self, self._register(descriptor, BROADCAST), descriptor)

    def get_registered_state_names(self) -> list[str]:
        return sorted(n.split(".", 1)[1] for n in self._modes)

    # Raw operator state: opaque bytes per subtask.
    def raw(self) -> bytes | None:
        stored = self._encoded.get(self.qualified("__raw__"))
        return None if stored is None else Types.BYTES().loads(stored[1])

    def set_raw(self, data: bytes | None) -> None:
        qname = self.qualified("__raw__")
        self._modes[qname] = RAW
        self._descriptors[qname] = ValueStateDescriptor("raw", Types.BYTES())  # only its type is used
        self._values[qname] = data

    def changes(self) -> list[tuple[str, str, str | None]]:
        """(qualified name, mode, encoded value or None) for every state that changed."""
        out = []
        for qname in sorted(self._values):
            value = self._values[qname]
            if value in ([], {}):
                value = None
            text = None if value is None else self._descriptors[qname].stored_type.dumps(value)
            stored = self._encoded.get(qname)
            if text == (stored[1] if stored else None):
                continue
            out.append((qname, self._modes[qname], text))
        return out

    def descriptors(self) -> dict[str, tuple[str, StateDescriptor]]:
        """Registered states (not raw state): qualified name -> (mode, descriptor)."""
        return {q: (self._modes[q], d) for q, d in self._descriptors.items() if self._modes[q] != RAW}


class OperatorListState:
    def __init__(self, store: OperatorStateStore, qname: str, descriptor: ListStateDescriptor):
        self._store, self._qname, self._descriptor = store, qname, descriptor

    def get(self) -> list:
        return copy.deepcopy(self._store._values.get(self._qname) or [])

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError("you cannot add None to a ListState")
        self._descriptor.type_info.encode(value)
        self._store._values[self._qname] = self.get() + [copy.deepcopy(value)]

    def add_all(self, values: Iterable[Any]) -> None:
        for v in values:
            self.add(v)

    def update(self, values: Iterable[Any]) -> None:
        values = list(values or [])
        if any(v is None for v in values):
            raise ValueError("you cannot add None to a ListState")
        for v in values:
            self._descriptor.type_info.encode(v)
        self._store._values[self._qname] = copy.deepcopy(values)

    def clear(self) -> None:
        self._store._values[self._qname] = []


class BroadcastState:
    """A map shared by all subtasks; writable only in process_broadcast_element."""

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
        return copy.deepcopy(self._map().get(key))

    def contains(self, key: Any) -> bool:
        return key in self._map()

    def keys(self) -> list:
        return list(self._map().keys())

    def values(self) -> list:
        return copy.deepcopy(list(self._map().values()))

    def items(self) -> list[tuple]:
        return copy.deepcopy(list(self._map().items()))

    def is_empty(self) -> bool:
        return not self._map()

    def put(self, key: Any, value: Any) -> None:
        m = self._writable()
        m[key] = copy.deepcopy(value)
        self._descriptor.type_info.encode(m)
        self._store._values[self._qname] = m

    def put_all(self, mapping: dict) -> None:
        m = self._writable()
        m.update(copy.deepcopy(mapping))
        self._descriptor.type_info.encode(m)
        self._store._values[self._qname] = m

    def remove(self, key: Any) -> None:
        m = self._writable()
        m.pop(key, None)
        self._store._values[self._qname] = m

    def clear(self) -> None:
        self._writable()
        self._store._values[self._qname] = {}
