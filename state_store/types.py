"""Typed serializers for state values, keys and output rows (Flink's ``Types``).

State bytes are never pickled. Every value is validated against its declared
type and encoded as JSON text (engine-neutral: any engine can read a state
table); the type's schema (``to_schema()``) is recorded with each checkpoint so
a restore can tell an identical, a compatible (it migrates) and an
incompatible (a clear error) change of a state's type. Records and output rows
cross the JVM boundary as typed Arrow columns: ``arrow_type`` and
``to_arrow`` validates a value and gives what pyarrow builds a column from.
"""
from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
from typing import Any

import orjson
from typing_extensions import override


class StateMigrationError(ValueError):
    """A state's declared type changed in a way its stored values cannot follow."""


def to_text(encoded: Any) -> str:
    """The canonical JSON text of an encoded value (sorted keys, no spaces)."""
    return orjson.dumps(encoded, option=orjson.OPT_SORT_KEYS).decode()


def from_text(text: str) -> Any:
    """The JSON-able value a stored text holds."""
    return orjson.loads(text)


class TypeInfo:
    """A declared type: validates, encodes to JSON-able values, decodes back."""

    name: str = ""
    spark: str = ""

    def encode(self, value: Any) -> Any:
        """``value`` as a JSON-able value of this type; TypeError naming the problem when it is not one."""
        raise NotImplementedError

    def decode(self, data: Any) -> Any:
        """The value ``encode`` gave ``data`` for."""
        return data

    def to_schema(self) -> Any:
        """This type as a checkpoint's descriptors record it (``from_schema`` reads it back)."""
        return self.name

    def spark_ddl(self) -> str:
        """This type in Spark's DDL (a column's type)."""
        return self.spark

    def dumps(self, value: Any) -> str:
        """The JSON text stored for ``value``."""
        return to_text(self.encode(value))

    def loads(self, text: str) -> Any:
        """The value stored as ``text``, checked against this type (TypeError, ValueError or AttributeError
        when it does not have it: state written outside the job must not reach user code untyped)."""
        return self.from_json(orjson.loads(text))

    def from_json(self, data: Any) -> Any:
        """``loads`` of the text whose JSON parse is ``data``."""
        value = data if self.decodes_as_is else self.decode(data)
        self.encode(value)
        return value

    def loads_many(self, texts: list[str]) -> list | None:
        """``loads`` of each of ``texts`` with one JSON parse of them all; None when one of them does not load
        (the caller loads each then, so the error names its entry)."""
        try:
            parsed = orjson.loads("[" + ",".join(texts) + "]")
            if len(parsed) != len(texts):  # a text that is not one JSON value
                return None
            return list(map(self.from_json, parsed))
        except (TypeError, ValueError, AttributeError, RecursionError):
            return None

    @property
    def decodes_as_is(self) -> bool:
        """True when ``decode`` returns what it is given (no floats, bytes, maps or nested changes)."""
        return False

    def encoder(self):
        """``encode`` as the cheapest function this type has (a row of scalars: its compiled encoder)."""
        return self.encode

    @property
    def encoding_is_value(self) -> bool:
        """True when ``decode(encode(v))`` is ``encode(v)`` itself, so a write need not decode (cached)."""
        cached = self.__dict__.get("_encoding_is_value")
        if cached is None:
            fields = getattr(self, "fields", None)
            cached = (all(f.encoding_is_value for f in fields.values()) if fields is not None
                      else self.decodes_as_is)
            self.__dict__["_encoding_is_value"] = cached
        return cached

    def arrow_type(self):
        """The pyarrow type Spark exchanges this type as (matches ``spark_ddl``)."""
        raise TypeError(f"{self.name} has no Arrow column type")

    def to_arrow(self, value: Any) -> Any:
        """Validate ``value`` and return what pyarrow builds a column of this type from."""
        return self.decode(self.encode(value))

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
        self.floating = name in ("DOUBLE", "FLOAT")

    def encode(self, value: Any) -> Any:
        if value is None:
            return None
        if not self._check(value):
            raise self._bad(value)
        if self.floating:
            value = float(value)
            if not math.isfinite(value):
                return repr(value)  # JSON has no NaN/Infinity
        return value

    def decode(self, data: Any) -> Any:
        if self.floating and data is not None:
            return float(data)
        return data

    @property
    def decodes_as_is(self) -> bool:
        return not self.floating

    def arrow_type(self):
        import pyarrow as pa

        return {"STRING": pa.string(), "LONG": pa.int64(), "INT": pa.int32(), "DOUBLE": pa.float64(),
                "FLOAT": pa.float32(), "BOOLEAN": pa.bool_()}[self.name]

    def to_arrow(self, value: Any) -> Any:
        if value is None:
            return None
        if not self._check(value):
            raise self._bad(value)
        return float(value) if self.name in ("DOUBLE", "FLOAT") else value


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_long(v: Any) -> bool:
    return (type(v) is int or _is_int(v)) and -(2**63) <= v < 2**63


def _is_int32(v: Any) -> bool:
    return (type(v) is int or _is_int(v)) and -(2**31) <= v < 2**31


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

    def arrow_type(self):
        import pyarrow as pa

        return pa.binary()

    def to_arrow(self, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, (bytes, bytearray)):
            raise self._bad(value)
        return bytes(value)


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


class _Date(TypeInfo):
    """A calendar date (``datetime.date``), stored as its ISO text."""

    name, spark = "DATE", "date"

    def encode(self, value: Any) -> Any:
        if value is None:
            return None
        if type(value) is not datetime.date:  # a datetime is a date too: refused, it would lose its time
            raise self._bad(value)
        return value.isoformat()

    def decode(self, data: Any) -> Any:
        return None if data is None else datetime.date.fromisoformat(data)

    def arrow_type(self):
        import pyarrow as pa

        return pa.date32()

    def to_arrow(self, value: Any) -> Any:
        self.encode(value)
        return value


class _Timestamp(TypeInfo):
    """An instant (a ``datetime.datetime``; one without a time zone is taken as UTC), stored as epoch
    microseconds and read back in UTC: Spark's ``timestamp``, which the session's UTC zone shows."""

    name, spark = "TIMESTAMP", "timestamp"

    def encode(self, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, datetime.datetime):
            raise self._bad(value)
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return (value - _EPOCH) // datetime.timedelta(microseconds=1)

    def decode(self, data: Any) -> Any:
        return None if data is None else _EPOCH + datetime.timedelta(microseconds=data)

    def arrow_type(self):
        import pyarrow as pa

        return pa.timestamp("us", tz="UTC")

    def to_arrow(self, value: Any) -> Any:
        return self.decode(self.encode(value))


class DecimalTypeInfo(TypeInfo):
    """``Types.DECIMAL(precision, scale)``: an exact number (a ``decimal.Decimal`` or an ``int``) of at most
    ``precision`` digits, ``scale`` of them after the point; stored as its text at that scale."""

    name = "DECIMAL"

    def __init__(self, precision: int, scale: int):
        if not (isinstance(precision, int) and isinstance(scale, int) and 1 <= precision <= 38
                and 0 <= scale <= precision):
            raise ValueError(f"DECIMAL(precision, scale) needs 1 <= precision <= 38 and 0 <= scale <= precision, "
                             f"got ({precision!r}, {scale!r})")
        self.precision, self.scale = precision, scale
        self.spark = f"decimal({precision},{scale})"
        self._quantum = decimal.Decimal(1).scaleb(-scale)

    def _exact(self, value: Any) -> decimal.Decimal:
        if isinstance(value, bool) or not isinstance(value, (decimal.Decimal, int)):
            raise self._bad(value)
        try:
            exact = decimal.Decimal(value).quantize(self._quantum, context=decimal.Context(prec=self.precision))
        except decimal.InvalidOperation:
            raise TypeError(f"{value!r} does not fit DECIMAL({self.precision}, {self.scale})") from None
        if exact != value:
            raise TypeError(f"{value!r} has more than {self.scale} digits after the point of DECIMAL("
                            f"{self.precision}, {self.scale})")
        return exact

    @override
    def encode(self, value: Any) -> Any:
        return None if value is None else format(self._exact(value), "f")  # plain, as Spark casts it

    @override
    def decode(self, data: Any) -> Any:
        return None if data is None else decimal.Decimal(data)

    @override
    def to_schema(self) -> Any:
        return {"DECIMAL": [self.precision, self.scale]}

    @override
    def arrow_type(self):
        import pyarrow as pa

        return pa.decimal128(self.precision, self.scale)

    @override
    def to_arrow(self, value: Any) -> Any:
        return None if value is None else self._exact(value)


class ListTypeInfo(TypeInfo):
    """``Types.LIST(element)``: a list of values of one type."""

    name = "LIST"

    def __init__(self, element: TypeInfo):
        self.element = element

    @override
    def encode(self, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, (list, tuple)):
            raise self._bad(value)
        return [self.element.encode(v) for v in value]

    @override
    def decode(self, data: Any) -> Any:
        return None if data is None else [self.element.decode(v) for v in data]

    @override
    @property
    def decodes_as_is(self) -> bool:
        return self.element.decodes_as_is

    @override
    def to_schema(self) -> Any:
        return {"LIST": self.element.to_schema()}

    @override
    def spark_ddl(self) -> str:
        return f"array<{self.element.spark_ddl()}>"

    @override
    def arrow_type(self):
        import pyarrow as pa

        return pa.list_(self.element.arrow_type())

    @override
    def to_arrow(self, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, (list, tuple)):
            raise self._bad(value)
        return [self.element.to_arrow(v) for v in value]


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

    @override
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

    @override
    def decode(self, data: Any) -> Any:
        if data is None:
            return None
        if isinstance(data, dict):
            return {k: self.value.decode(v) for k, v in data.items()}
        return {self.key.decode(k): self.value.decode(v) for k, v in data}

    @override
    def to_schema(self) -> Any:
        return {"MAP": [self.key.to_schema(), self.value.to_schema()]}

    @override
    def spark_ddl(self) -> str:
        if self._string_keys:
            return f"map<string,{self.value.spark_ddl()}>"
        raise TypeError(f"a map with {self.key.name} keys cannot be an output column; use STRING keys")

    @override
    def arrow_type(self):
        import pyarrow as pa

        return pa.map_(self.key.arrow_type(), self.value.arrow_type())

    @override
    def to_arrow(self, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self._bad(value)
        return [(self.key.to_arrow(k), self.value.to_arrow(v)) for k, v in value.items()]


_SCALAR_CHECKS = {
    "STRING": "type({v}) is str",
    "LONG": "type({v}) is int and -9223372036854775808 <= {v} <= 9223372036854775807",
    "INT": "type({v}) is int and -2147483648 <= {v} <= 2147483647",
    "BOOLEAN": "type({v}) is bool",
    "DOUBLE": "(type({v}) is float or type({v}) is int) and -1e309 < {v} < 1e309",
    "FLOAT": "(type({v}) is float or type({v}) is int) and -1e309 < {v} < 1e309",
}


# A TIMESTAMP field in a compiled row: its check, and what ``encode`` makes of it (``to_arrow`` passes a datetime
# as it is: pyarrow takes an aware one at its instant and a naive one as UTC, as ``_Timestamp.encode`` does).
_TIMESTAMP_CHECK = "type({v}) is _datetime"
_TIMESTAMP_ENCODE = "{v} = (({v} if {v}.tzinfo is not None else {v}.replace(tzinfo=_utc)) - _EPOCH) // _MICROSECOND"
# A DECIMAL field: a Decimal already at the type's scale, of no more digits than its precision (anything else
# goes the slow way, ``DecimalTypeInfo._exact``'s, which rounds nothing and names what does not fit); ``encode``
# makes its plain text, ``to_arrow`` passes it as it is.
_DECIMAL_CHECK = ("type({v}) is _Decimal and ({v}_t := {v}.as_tuple()).exponent == {exponent} "
                  "and len({v}_t.digits) <= {precision}")


def _field_check(t: "TypeInfo", v: str) -> str:
    """The inline check of a compiled row's field ``t`` held in variable ``v``."""
    if isinstance(t, _Timestamp):
        return _TIMESTAMP_CHECK.format(v=v)
    if isinstance(t, DecimalTypeInfo):
        return _DECIMAL_CHECK.format(v=v, exponent=-t.scale, precision=t.precision)
    return _SCALAR_CHECKS[t.name].format(v=v)


def _compile_flat_row(row: "RowTypeInfo", slow, as_tuple: bool = False, convert: str = "encode"):
    """A fast encoder (or Arrow converter: ``convert`` "to_arrow") for a row of scalar, timestamp and decimal
    fields: one generated function that checks each field inline and builds the result (a dict, or with
    ``as_tuple`` the values in field order), falling back to ``slow`` (which raises the precise error, or handles
    what the fast path does not: non-dict rows, non-finite floats, int subclasses, datetime subclasses, decimals
    to rescale). None when the row has a field of another type."""
    if not all(isinstance(t, (_Scalar, _Timestamp, DecimalTypeInfo)) for t in row.fields.values()):
        return None
    # A dict of as many fields as declared that has each declared one has no other (one with fewer, which
    # reads as None, goes the slow way).
    lines = ["def fast(row):",
             f"    if type(row) is not dict or len(row) != {len(row.fields)}:",
             "        return _slow(row)",
             "    try:",
             "        " + ", ".join(f"v{i}" for i in range(len(row.fields))) + ", = "
             + ", ".join(f"row[{name!r}]" for name in row.fields) + ",",
             "    except KeyError:",
             "        return _slow(row)"]
    out = []
    for i, (name, t) in enumerate(row.fields.items()):
        v = f"v{i}"
        lines.append(f"    if {v} is not None:")
        lines.append(f"        if not ({_field_check(t, v)}):")
        lines.append("            return _slow(row)")
        if isinstance(t, _Timestamp):
            if convert == "encode":
                lines.append("        " + _TIMESTAMP_ENCODE.format(v=v))
        elif isinstance(t, DecimalTypeInfo):
            if convert == "encode":
                lines.append(f'        {v} = format({v}, "f")')
        elif t.floating:
            lines.append(f"        {v} = float({v})")
        out.append(v if as_tuple else f"{name!r}: {v}")
    lines.append("    return (" + ", ".join(out) + ",)" if as_tuple else "    return {" + ", ".join(out) + "}")
    namespace = {"_slow": slow, "_datetime": datetime.datetime, "_Decimal": decimal.Decimal,
                 "_utc": datetime.timezone.utc, "_EPOCH": _EPOCH,
                 "_MICROSECOND": datetime.timedelta(microseconds=1)}
    exec("\n".join(lines), namespace)  # generated from declared field names (repr-quoted) only
    return namespace["fast"]


class RowTypeInfo(TypeInfo):
    """A row of named, nullable fields; values are dicts."""

    name = "ROW"

    def __init__(self, names: list[str], types: list[TypeInfo]):
        if len(names) != len(types):
            raise ValueError("ROW_NAMED needs as many field names as field types")
        if len(set(names)) != len(names):
            raise ValueError(f"ROW_NAMED has duplicate field names: {names}")
        self.fields = dict(zip(names, types))
        self._plain: bool | None = None  # every field decodes as itself (worked out on first use)

    def _by_field(self, value: Any, convert: str) -> Any:
        """Each declared field of ``value`` through its type's ``convert`` method (missing fields: None)."""
        if value is None:
            return None
        if type(value) is not dict:
            if hasattr(value, "asDict"):
                value = value.asDict()
            elif type(value) is tuple and len(value) == len(self.fields):  # a row key's value: its fields in order
                value = dict(zip(self.fields, value))
            if not isinstance(value, dict):
                raise self._bad(value)
        fields = self.fields
        if len(value) > len(fields) or any(n not in fields for n in value):
            unknown = sorted(set(value) - set(fields))
            raise TypeError(f"row has fields {unknown} that the declared type {self.to_schema()} lacks")
        return {n: getattr(t, convert)(value.get(n)) for n, t in fields.items()}

    def __getstate__(self) -> dict:
        # Compiled converters are made again on first use, wherever the type is unpickled.
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_fast_")}

    def _compile(self, convert: str):
        """The compiled form of ``convert`` for a row of scalars, or None for other rows."""
        return _compile_flat_row(self, lambda v: self._by_field(v, convert), convert=convert)

    @override
    def encode(self, value: Any) -> Any:
        try:
            fast = self._fast_encode
        except AttributeError:
            fast = self._fast_encode = self._compile("encode")
        return self._by_field(value, "encode") if fast is None else fast(value)

    @override
    def encoder(self):
        self.encode(None)  # compiles the fast encoder when the row has one
        return self.encode if self._fast_encode is None else self._fast_encode

    @override
    def from_json(self, data: Any) -> Any:
        if self._plain is None:
            self._plain = all(t.decodes_as_is for t in self.fields.values())
        if self._plain and type(data) is dict and data.keys() <= self.fields.keys():
            # The encoding of a row whose fields decode as is lists every declared field (missing ones None):
            # what ``decode`` gives, checked in the same pass.
            return self.encode(data)
        return super().from_json(data)

    @override
    def decode(self, data: Any) -> Any:
        if data is None:
            return None
        # Fields added since the value was written decode as None: that is the migration.
        if self._plain is None:
            self._plain = all(t.decodes_as_is for t in self.fields.values())
        if self._plain:
            return {n: data.get(n) for n in self.fields}
        return {n: t.decode(data.get(n)) for n, t in self.fields.items()}

    @override
    def to_schema(self) -> Any:
        return {"ROW": [[n, t.to_schema()] for n, t in self.fields.items()]}

    @override
    def spark_ddl(self) -> str:
        return "struct<" + ",".join(f"`{n}`:{t.spark_ddl()}" for n, t in self.fields.items()) + ">"

    @override
    def arrow_type(self):
        import pyarrow as pa

        return pa.struct([(n, t.arrow_type()) for n, t in self.fields.items()])

    @override
    def to_arrow(self, value: Any) -> Any:
        try:
            fast = self._fast_to_arrow
        except AttributeError:
            fast = self._fast_to_arrow = self._compile("to_arrow")
        return self._by_field(value, "to_arrow") if fast is None else fast(value)

    def arrow_tuple_converter(self):
        """``to_arrow`` giving the row's values as a tuple in field order (None for None), which pyarrow builds a
        struct column from faster than from dicts: compiled for a row of scalars. One column takes tuples only."""
        def slow(value: Any) -> tuple | None:
            converted = self._by_field(value, "to_arrow")
            return None if converted is None else tuple(converted.values())
        return _compile_flat_row(self, slow, as_tuple=True, convert="to_arrow") or slow

    def spark_schema_ddl(self) -> str:
        """``a long, b string``: the DDL of a table with these columns."""
        return ", ".join(f"`{n}` {t.spark_ddl()}" for n, t in self.fields.items())


class Types:
    """Factories for declared types, named as in PyFlink."""

    @staticmethod
    def STRING() -> TypeInfo:
        """A text value (a Python ``str``); a Spark ``string`` column."""
        return _Scalar("STRING", "string", lambda v: isinstance(v, str))

    @staticmethod
    def LONG() -> TypeInfo:
        """A signed 64-bit integer (a Python ``int``, not a ``bool``); a Spark ``bigint`` column."""
        return _Scalar("LONG", "bigint", _is_long)

    @staticmethod
    def INT() -> TypeInfo:
        """A signed 32-bit integer (a Python ``int``, not a ``bool``); a Spark ``int`` column."""
        return _Scalar("INT", "int", _is_int32)

    @staticmethod
    def DOUBLE() -> TypeInfo:
        """A 64-bit floating-point number (an ``int`` or ``float``, read back as ``float``); a Spark ``double``
        column."""
        return _Scalar("DOUBLE", "double", _is_number)

    @staticmethod
    def FLOAT() -> TypeInfo:
        """A 32-bit floating-point number (an ``int`` or ``float``, read back as ``float``); a Spark ``float``
        column."""
        return _Scalar("FLOAT", "float", _is_number)

    @staticmethod
    def BOOLEAN() -> TypeInfo:
        """A ``bool``; a Spark ``boolean`` column."""
        return _Scalar("BOOLEAN", "boolean", lambda v: isinstance(v, bool))

    @staticmethod
    def BYTES() -> TypeInfo:
        """A byte string (``bytes`` or ``bytearray``, stored as base64 text); a Spark ``binary`` column."""
        return _Bytes()

    @staticmethod
    def DATE() -> TypeInfo:
        """A calendar date (a ``datetime.date``, stored as ISO text); a Spark ``date`` column."""
        return _Date()

    @staticmethod
    def TIMESTAMP() -> TypeInfo:
        """An instant (a ``datetime.datetime``, taken as UTC when it has no time zone; read back in UTC); a Spark
        ``timestamp`` column."""
        return _Timestamp()

    @staticmethod
    def DECIMAL(precision: int, scale: int) -> TypeInfo:
        """An exact number of ``precision`` digits, ``scale`` after the point (a ``decimal.Decimal`` or ``int``);
        a Spark ``decimal(precision, scale)`` column.

        Example: ``Types.DECIMAL(10, 2)``
        """
        return DecimalTypeInfo(precision, scale)

    @staticmethod
    def LIST(element: TypeInfo) -> TypeInfo:
        """A list (or tuple) of ``element`` values; a Spark ``array`` column.

        Example: ``Types.LIST(Types.LONG())``
        """
        return ListTypeInfo(element)

    @staticmethod
    def MAP(key: TypeInfo, value: TypeInfo) -> TypeInfo:
        """A ``dict`` from ``key`` values (a scalar type; TypeError otherwise) to ``value`` values; as an output
        column (a Spark ``map``) its keys must be STRING.

        Example: ``Types.MAP(Types.STRING(), Types.LONG())``
        """
        return MapTypeInfo(key, value)

    @staticmethod
    def ROW_NAMED(names: list[str], types: list[TypeInfo]) -> RowTypeInfo:
        """A row of named, nullable fields, ``names[i]`` of type ``types[i]``; its values are dicts (a missing
        field is None). Declares a source's records, an operator's output and row-valued state. Raises ValueError
        when the lists differ in length or a name repeats.

        Example: ``Types.ROW_NAMED(["user", "ts"], [Types.STRING(), Types.LONG()])``
        """
        return RowTypeInfo(list(names), list(types))


_SCALARS = {"STRING": Types.STRING, "LONG": Types.LONG, "INT": Types.INT, "DOUBLE": Types.DOUBLE,
            "FLOAT": Types.FLOAT, "BOOLEAN": Types.BOOLEAN, "BYTES": Types.BYTES, "DATE": Types.DATE,
            "TIMESTAMP": Types.TIMESTAMP}
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
    if kind == "DECIMAL":
        return Types.DECIMAL(*arg)
    raise ValueError(f"unknown type schema {schema!r}")


def shown_type(schema: Any) -> str:
    """A recorded type schema as messages show it: ``LONG``, ``DECIMAL(10, 2)``, ``ROW(user STRING, device INT)``,
    ``LIST<LONG>``, ``MAP<STRING, LONG>``."""
    if isinstance(schema, str):
        return schema
    (kind, arg), = schema.items()
    if kind == "ROW":
        return "ROW(" + ", ".join(f"{n} {shown_type(t)}" for n, t in arg) + ")"
    if kind == "DECIMAL":
        return f"DECIMAL({arg[0]}, {arg[1]})"
    if kind == "MAP":
        return f"MAP<{shown_type(arg[0])}, {shown_type(arg[1])}>"
    return f"{kind}<{shown_type(arg)}>"


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
