"""Typed serializers for state values, keys and output rows (Flink's ``Types``).

State bytes are never pickled. Every value is validated against its declared
type and encoded as JSON text; the type's schema (``to_schema()``) is recorded
with each checkpoint so a restore can tell an identical, a compatible (it
migrates) and an incompatible (a clear error) change of a state's type.
"""
from __future__ import annotations

import base64
import json
import math
from typing import Any


class StateMigrationError(ValueError):
    """A state's declared type changed in a way its stored values cannot follow."""


def to_text(encoded: Any) -> str:
    """The canonical JSON text of an encoded value (sorted keys, no spaces)."""
    return json.dumps(encoded, separators=(",", ":"), sort_keys=True)


class TypeInfo:
    """A declared type: validates, encodes to JSON-able values, decodes back."""

    name: str = ""
    spark: str = ""

    def encode(self, value: Any) -> Any:
        raise NotImplementedError

    def decode(self, data: Any) -> Any:
        return data

    def to_schema(self) -> Any:
        return self.name

    def spark_ddl(self) -> str:
        return self.spark

    def dumps(self, value: Any) -> str:
        """The JSON text stored for ``value``."""
        return to_text(self.encode(value))

    def loads(self, text: str) -> Any:
        return self.decode(json.loads(text))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TypeInfo) and self.to_schema() == other.to_schema()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_schema(), sort_keys=True))

    def __repr__(self) -> str:
        return f"Types({json.dumps(self.to_schema())})"

    def _bad(self, value: Any) -> TypeError:
        return TypeError(f"expected a value of type {self.name}, got {type(value).__name__} {value!r}")


class _Scalar(TypeInfo):
    def __init__(self, name: str, spark: str, check):
        self.name, self.spark, self._check = name, spark, check

    def encode(self, value: Any) -> Any:
        if value is None:
            return None
        if not self._check(value):
            raise self._bad(value)
        if self.name in ("DOUBLE", "FLOAT"):
            value = float(value)
            if not math.isfinite(value):
                return repr(value)  # JSON has no NaN/Infinity
        return value

    def decode(self, data: Any) -> Any:
        if self.name in ("DOUBLE", "FLOAT") and isinstance(data, str):
            return float(data)
        if self.name in ("DOUBLE", "FLOAT") and data is not None:
            return float(data)
        return data


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_long(v: Any) -> bool:
    return _is_int(v) and -(2**63) <= v < 2**63


def _is_int32(v: Any) -> bool:
    return _is_int(v) and -(2**31) <= v < 2**31


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class _Bytes(TypeInfo):
    name, spark = "BYTES", "binary"

    def encode(self, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, (bytes, bytearray)):
            raise self._bad(value)
        return base64.b64encode(bytes(value)).decode("ascii")

    def decode(self, data: Any) -> Any:
        return None if data is None else base64.b64decode(data)


class ListTypeInfo(TypeInfo):
    name = "LIST"

    def __init__(self, element: TypeInfo):
        self.element = element

    def encode(self, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, (list, tuple)):
            raise self._bad(value)
        return [self.element.encode(v) for v in value]

    def decode(self, data: Any) -> Any:
        return None if data is None else [self.element.decode(v) for v in data]

    def to_schema(self) -> Any:
        return {"LIST": self.element.to_schema()}

    def spark_ddl(self) -> str:
        return f"array<{self.element.spark_ddl()}>"


class MapTypeInfo(TypeInfo):
    """A map. With STRING keys it is a JSON object (a Spark map column in output rows);
    with other keys a sorted list of [key, value] pairs, so keys of any type survive JSON."""

    name = "MAP"

    def __init__(self, key: TypeInfo, value: TypeInfo):
        if not isinstance(key, _Scalar):
            raise TypeError(f"map keys must be a scalar type (STRING, LONG, ...), got {key!r}")
        self.key, self.value = key, value

    @property
    def _string_keys(self) -> bool:
        return self.key.name == "STRING"

    def encode(self, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self._bad(value)
        if self._string_keys:
            for k in value:
                if not isinstance(k, str):
                    raise TypeError(f"map key {k!r} is not a STRING")
            return {k: self.value.encode(v) for k, v in value.items()}
        pairs = [[self.key.encode(k), self.value.encode(v)] for k, v in value.items()]
        pairs.sort(key=lambda kv: json.dumps(kv[0], sort_keys=True))
        return pairs

    def decode(self, data: Any) -> Any:
        if data is None:
            return None
        if isinstance(data, dict):
            return {k: self.value.decode(v) for k, v in data.items()}
        return {self.key.decode(k): self.value.decode(v) for k, v in data}

    def to_schema(self) -> Any:
        return {"MAP": [self.key.to_schema(), self.value.to_schema()]}

    def spark_ddl(self) -> str:
        if self._string_keys:
            return f"map<string,{self.value.spark_ddl()}>"
        raise TypeError(f"a map with {self.key.name} keys cannot be an output column; use STRING keys")


class RowTypeInfo(TypeInfo):
    """A row of named, nullable fields; values are dicts."""

    name = "ROW"

    def __init__(self, names: list[str], types: list[TypeInfo]):
        if len(names) != len(types):
            raise ValueError("ROW_NAMED needs as many field names as field types")
        if len(set(names)) != len(names):
            raise ValueError(f"ROW_NAMED has duplicate field names: {names}")
        self.fields = dict(zip(names, types))

    def encode(self, value: Any) -> Any:
        if value is None:
            return None
        if hasattr(value, "asDict"):
            value = value.asDict()
        if not isinstance(value, dict):
            raise self._bad(value)
        unknown = set(value) - set(self.fields)
        if unknown:
            raise TypeError(f"row has fields {sorted(unknown)} that the declared type {self.to_schema()} lacks")
        return {n: t.encode(value.get(n)) for n, t in self.fields.items()}

    def decode(self, data: Any) -> Any:
        if data is None:
            return None
        # Fields added since the value was written decode as None: that is the migration.
        return {n: t.decode(data.get(n)) for n, t in self.fields.items()}

    def to_schema(self) -> Any:
        return {"ROW": [[n, t.to_schema()] for n, t in self.fields.items()]}

    def spark_ddl(self) -> str:
        return "struct<" + ",".join(f"`{n}`:{t.spark_ddl()}" for n, t in self.fields.items()) + ">"

    def spark_schema_ddl(self) -> str:
        """``a long, b string``: the DDL of a table with these columns."""
        return ", ".join(f"`{n}` {t.spark_ddl()}" for n, t in self.fields.items())


class Types:
    """Factories for declared types, named as in PyFlink."""

    @staticmethod
    def STRING() -> TypeInfo:
        return _Scalar("STRING", "string", lambda v: isinstance(v, str))

    @staticmethod
    def LONG() -> TypeInfo:
        return _Scalar("LONG", "bigint", _is_long)

    @staticmethod
    def INT() -> TypeInfo:
        return _Scalar("INT", "int", _is_int32)

    @staticmethod
    def DOUBLE() -> TypeInfo:
        return _Scalar("DOUBLE", "double", _is_number)

    @staticmethod
    def FLOAT() -> TypeInfo:
        return _Scalar("FLOAT", "float", _is_number)

    @staticmethod
    def BOOLEAN() -> TypeInfo:
        return _Scalar("BOOLEAN", "boolean", lambda v: isinstance(v, bool))

    @staticmethod
    def BYTES() -> TypeInfo:
        return _Bytes()

    @staticmethod
    def LIST(element: TypeInfo) -> TypeInfo:
        return ListTypeInfo(element)

    @staticmethod
    def MAP(key: TypeInfo, value: TypeInfo) -> TypeInfo:
        return MapTypeInfo(key, value)

    @staticmethod
    def ROW_NAMED(names: list[str], types: list[TypeInfo]) -> RowTypeInfo:
        return RowTypeInfo(list(names), list(types))


_SCALARS = {"STRING": Types.STRING, "LONG": Types.LONG, "INT": Types.INT, "DOUBLE": Types.DOUBLE,
            "FLOAT": Types.FLOAT, "BOOLEAN": Types.BOOLEAN, "BYTES": Types.BYTES}
_WIDENINGS = {("INT", "LONG"), ("FLOAT", "DOUBLE"), ("INT", "DOUBLE"), ("INT", "FLOAT")}


def from_schema(schema: Any) -> TypeInfo:
    """Rebuild a TypeInfo from ``to_schema()`` output (as recorded in a checkpoint)."""
    if isinstance(schema, str):
        return _SCALARS[schema]()
    (kind, arg), = schema.items()
    if kind == "LIST":
        return Types.LIST(from_schema(arg))
    if kind == "MAP":
        return Types.MAP(from_schema(arg[0]), from_schema(arg[1]))
    if kind == "ROW":
        return Types.ROW_NAMED([n for n, _ in arg], [from_schema(t) for _, t in arg])
    raise ValueError(f"unknown type schema {schema!r}")


def check_compatibility(old: Any, new: Any, where: str = "value") -> str:
    """Compare two type schemas: 'identical', 'compatible' (stored values migrate), or raise.

    Compatible changes are Flink's "compatible after migration": a widened
    number (INT->LONG, FLOAT->DOUBLE, INT->DOUBLE) and a row with added fields
    (they read as None). Anything else raises StateMigrationError.
    """
    if old == new:
        return "identical"
    if isinstance(old, str) and isinstance(new, str):
        if (old, new) in _WIDENINGS:
            return "compatible"
        raise StateMigrationError(f"{where}: type changed from {old} to {new}, which stored values cannot be read as")
    if isinstance(old, dict) and isinstance(new, dict) and set(old) == set(new):
        (kind, a), = old.items()
        b = new[kind]
        if kind == "LIST":
            check_compatibility(a, b, where + "[]")
            return "compatible"
        if kind == "MAP":
            check_compatibility(a[0], b[0], where + ".key")
            check_compatibility(a[1], b[1], where + ".value")
            return "compatible"
        if kind == "ROW":
            old_fields, new_fields = dict((n, t) for n, t in a), dict((n, t) for n, t in b)
            removed = sorted(set(old_fields) - set(new_fields))
            if removed:
                raise StateMigrationError(f"{where}: row fields {removed} were removed; stored values would lose them")
            for n, t in old_fields.items():
                check_compatibility(t, new_fields[n], f"{where}.{n}")
            return "compatible"
    raise StateMigrationError(
        f"{where}: type changed from {json.dumps(old)} to {json.dumps(new)}, which stored values cannot be read as"
    )
