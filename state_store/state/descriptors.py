"""State descriptors: a state's name, kind and declared type (Flink's StateDescriptor)."""
from __future__ import annotations

import re
from typing import Any, Callable

from typing_extensions import override

from ..types import TypeInfo, Types
from .ttl.config import MAX_TIMESTAMP, StateTtlConfig  # noqa: F401 (MAX_TIMESTAMP: re-exported)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,127}")  # fullmatch: "$" would let a trailing newline in


def qualified_name(uid: str, name: str) -> str:
    """A state's name in the tables: qualified by its operator's uid, so two operators may both own a ``count``."""
    return f"{uid}.{name}"


def check_state_name(name: str, what: str = "state name") -> str:
    """``name`` when it may name a state (or, as ``what`` says, an operator uid); ValueError naming the rule."""
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
        """A new, empty accumulator: the start of an aggregation (called before the first ``add``)."""
        raise NotImplementedError

    def add(self, value: Any, accumulator: Any) -> Any:
        """Add ``value`` to ``accumulator`` and return the resulting accumulator (the one given, changed, or a
        new one)."""
        raise NotImplementedError

    def get_result(self, accumulator: Any) -> Any:
        """The result of the aggregation, computed from ``accumulator``."""
        raise NotImplementedError

    def merge(self, a: Any, b: Any) -> Any:
        """Merge two accumulators into one and return it (the one given, changed, or a new one), as when merging
        windows fold their states."""
        raise NotImplementedError


class StateDescriptor:
    """What every state descriptor has: the state's ``name``, the ``type_info`` of its values, its ``kind`` and
    its TTL (``enable_time_to_live``)."""

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
    """Declares a ``ValueState``: one value of type ``value_type`` per key and namespace; ``value()`` returns
    ``default_value`` (a copy) while it is empty. Raises ValueError for an invalid name, TypeError for a type not
    made with ``Types``.

    Example: ``ctx.get_state(ValueStateDescriptor("count", Types.LONG(), 0))``

    :param name: the state's name, unique in its operator.
    :param value_type: the value's type, made with ``Types``.
    :param default_value: what ``value()`` returns (a copy) while the state is empty.
    """

    kind = "value"

    def __init__(self, name: str, value_type: TypeInfo, default_value: Any = None):
        super().__init__(name, value_type)
        self.default_value = default_value


class ListStateDescriptor(StateDescriptor):
    """Declares a ``ListState``: a list of elements of type ``element_type`` per key and namespace (stored as one
    ``Types.LIST(element_type)`` value); also the descriptor of an operator's list and union list states.

    Example: ``ctx.get_list_state(ListStateDescriptor("items", Types.LONG()))``

    :param name: the state's name, unique in its operator.
    :param element_type: an element's type, made with ``Types``.
    """

    kind = "list"

    def __init__(self, name: str, element_type: TypeInfo):
        super().__init__(name, element_type)

    @override
    @property
    def stored_type(self) -> TypeInfo:
        stored = self.__dict__.get("_stored_type")
        if stored is None or stored.element is not self.type_info:  # made once (its compiled encoders with it)
            stored = self.__dict__["_stored_type"] = Types.LIST(self.type_info)
        return stored


class MapStateDescriptor(StateDescriptor):
    """Declares a ``MapState``: a map from ``key_type`` to ``value_type`` per key and namespace, each entry stored
    on its own; also the descriptor of a broadcast state. Raises TypeError for a type not made with ``Types``.

    Example: ``ctx.get_map_state(MapStateDescriptor("tags", Types.STRING(), Types.LONG()))``

    :param name: the state's name, unique in its operator.
    :param key_type: a map key's type, made with ``Types``.
    :param value_type: a map value's type, made with ``Types``.
    """

    kind = "map"

    def __init__(self, name: str, key_type: TypeInfo, value_type: TypeInfo):
        if not isinstance(key_type, TypeInfo) or not isinstance(value_type, TypeInfo):
            raise TypeError(f"state {name!r}: declare key and value types with state_store.Types")
        super().__init__(name, Types.MAP(key_type, value_type))
        self.key_type, self.value_type = key_type, value_type


class ReducingStateDescriptor(StateDescriptor):
    """Declares a ``ReducingState``: one value of type ``type_info`` per key and namespace, each added value folded
    into it with ``reduce_function(current, added)``. Raises TypeError when ``reduce_function`` is not callable.

    Example: ``ctx.get_reducing_state(ReducingStateDescriptor("total", lambda a, b: a + b, Types.LONG()))``

    :param name: the state's name, unique in its operator.
    :param reduce_function: ``(current, added) -> folded``.
    :param type_info: the value's type, made with ``Types``.
    """

    kind = "reducing"

    def __init__(self, name: str, reduce_function: Callable[[Any, Any], Any], type_info: TypeInfo):
        super().__init__(name, type_info)
        if not callable(reduce_function):
            raise TypeError(f"state {name!r}: reduce_function must be callable (a, b) -> value")
        self.reduce_function = reduce_function


class AggregatingStateDescriptor(StateDescriptor):
    """Declares an ``AggregatingState``: an accumulator of type ``accumulator_type`` per key and namespace, built
    from added values with ``agg_function`` (an ``AggregateFunction``; TypeError otherwise); ``get()`` returns its
    ``get_result``.

    Example: ``ctx.get_aggregating_state(AggregatingStateDescriptor("mean", Mean(), Types.LIST(Types.LONG())))``

    :param name: the state's name, unique in its operator.
    :param agg_function: the ``AggregateFunction`` (create_accumulator, add, get_result, merge).
    :param accumulator_type: the accumulator's type, made with ``Types``.
    """

    kind = "aggregating"

    def __init__(self, name: str, agg_function: AggregateFunction, accumulator_type: TypeInfo):
        super().__init__(name, accumulator_type)
        if not isinstance(agg_function, AggregateFunction):
            raise TypeError(f"state {name!r}: agg_function must be a state_store.AggregateFunction")
        self.agg_function = agg_function
