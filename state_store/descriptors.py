"""State descriptors: a state's name, kind and declared type (Flink's StateDescriptor)."""
from __future__ import annotations

import re
from typing import Any, Callable

from .ttl.config import MAX_TIMESTAMP, StateTtlConfig  # noqa: F401 (MAX_TIMESTAMP: re-exported)
from .types import TypeInfo, Types

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,127}")  # fullmatch: "$" would let a trailing newline in


def qualified_name(uid: str, name: str) -> str:
    """A state's name in the tables: qualified by its operator's uid, so two operators may both own a ``count``."""
    return f"{uid}.{name}"


def check_state_name(name: str, what: str = "state name") -> str:
    if isinstance(name, str) and name.startswith("__"):
        raise ValueError(f"{what} {name!r} is reserved: names starting with '__' are Lakestate's own")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"{what} {name!r} is not valid: use 1-128 letters, digits, '_' or '-', starting with a letter or '_'"
        )
    return name


class AggregateFunction:
    """Flink's AggregateFunction: an accumulator built from added values."""

    def create_accumulator(self) -> Any:
        raise NotImplementedError

    def add(self, value: Any, accumulator: Any) -> Any:
        raise NotImplementedError

    def get_result(self, accumulator: Any) -> Any:
        raise NotImplementedError

    def merge(self, a: Any, b: Any) -> Any:
        raise NotImplementedError


class StateDescriptor:
    kind = ""

    def __init__(self, name: str, type_info: TypeInfo):
        self.name = check_state_name(name)
        if not isinstance(type_info, TypeInfo):
            raise TypeError(f"state {name!r}: declare its type with state_store.Types, got {type_info!r}")
        self.type_info = type_info
        self.ttl_config: StateTtlConfig | None = None

    def enable_time_to_live(self, ttl_config: StateTtlConfig) -> "StateDescriptor":
        """Let entries of this state expire (keyed state only), as Flink's ``enableTimeToLive``; returns this
        descriptor."""
        if not isinstance(ttl_config, StateTtlConfig):
            raise TypeError(f"state {self.name!r}: enable_time_to_live takes a StateTtlConfig "
                            f"(StateTtlConfig.new_builder(ttl)...build()), got {ttl_config!r}")
        self.ttl_config = ttl_config
        return self

    @property
    def stored_type(self) -> TypeInfo:
        """The type of what one entry stores (a list state stores the whole list)."""
        return self.type_info

    def schema(self) -> dict:
        """What a checkpoint records of this state, to check a later restore against."""
        out = {"kind": self.kind, "type": self.type_info.to_schema()}
        if self.ttl_config is not None:
            out["ttl"] = self.ttl_config.to_dict()
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.type_info!r})"


class ValueStateDescriptor(StateDescriptor):
    kind = "value"

    def __init__(self, name: str, value_type: TypeInfo, default_value: Any = None):
        super().__init__(name, value_type)
        self.default_value = default_value


class ListStateDescriptor(StateDescriptor):
    kind = "list"

    def __init__(self, name: str, element_type: TypeInfo):
        super().__init__(name, element_type)

    @property
    def stored_type(self) -> TypeInfo:
        stored = self.__dict__.get("_stored_type")
        if stored is None or stored.element is not self.type_info:  # made once (its compiled encoders with it)
            stored = self.__dict__["_stored_type"] = Types.LIST(self.type_info)
        return stored


class MapStateDescriptor(StateDescriptor):
    kind = "map"

    def __init__(self, name: str, key_type: TypeInfo, value_type: TypeInfo):
        if not isinstance(key_type, TypeInfo) or not isinstance(value_type, TypeInfo):
            raise TypeError(f"state {name!r}: declare key and value types with state_store.Types")
        super().__init__(name, Types.MAP(key_type, value_type))
        self.key_type, self.value_type = key_type, value_type


class ReducingStateDescriptor(StateDescriptor):
    kind = "reducing"

    def __init__(self, name: str, reduce_function: Callable[[Any, Any], Any], type_info: TypeInfo):
        super().__init__(name, type_info)
        if not callable(reduce_function):
            raise TypeError(f"state {name!r}: reduce_function must be callable (a, b) -> value")
        self.reduce_function = reduce_function


class AggregatingStateDescriptor(StateDescriptor):
    kind = "aggregating"

    def __init__(self, name: str, agg_function: AggregateFunction, accumulator_type: TypeInfo):
        super().__init__(name, accumulator_type)
        if not isinstance(agg_function, AggregateFunction):
            raise TypeError(f"state {name!r}: agg_function must be a state_store.AggregateFunction")
        self.agg_function = agg_function
