"""The key of a keyed stream, the one place it is stated: the types a key may have, its columns and its codec.

A key is one column (``key_by("user")``) or several (``key_by(["user", "device"])``, a composite key), each of a
type Spark hashes stably (``KEY_SCALARS``: STRING, LONG, INT, BOOLEAN, DATE, TIMESTAMP, DECIMAL, BYTES, and rows
of them). A composite key's type is the row of its columns (``Types.ROW_NAMED(columns, types)``), and so is its
hash: Spark's Murmur3 of a struct chains its fields as the hash of the columns does. Its key group is Flink's rule
over that hash, computed in the JVM (``key_groups.key_group_column`` of ``key_expression``).

A key travels between subtasks and is stored in the state tables as text (``key_text``, in the JVM): a STRING
itself; a LONG, INT, BOOLEAN, DATE or DECIMAL Spark's cast to string (the LONG 42 is "42", a DATE "2024-02-29", a
DECIMAL at its scale); a TIMESTAMP its epoch microseconds; BYTES their hex; a row the JSON array of its fields'
texts (``["alice","phone"]``). A subtask turns the text back into the user's value (``decode_key``,
``key_decoder``: a row is a tuple of its fields, in order; ``arrow_keys`` for a column of them), and a reader of
the tables back into typed columns (``typed_key``). A source's key columns must already have the key type's Spark
types (``mistyped_key``): a key is never converted on its way in, so the same key always lands in the same key
group.

Pure: pyspark and pyarrow are never imported at the top; the Spark and Arrow helpers import them inside.
"""
from __future__ import annotations

import datetime
import decimal
from typing import Any, Callable

import orjson

from .errors import ConfigError
from .types import RowTypeInfo, TypeInfo, Types, from_schema

KEY_SCALARS = ("STRING", "LONG", "INT", "BOOLEAN", "DATE", "TIMESTAMP", "DECIMAL", "BYTES")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def check_key_type(key_type: Any, what: str = "key_type") -> TypeInfo:
    """``key_type`` as a fresh ``TypeInfo``, or a ConfigError naming ``what`` and the types a key may have."""
    if not _keyable(key_type):
        raise ConfigError(f"{what}: a key is STRING, LONG, INT, BOOLEAN, DATE, TIMESTAMP, DECIMAL or BYTES, or a row "
                          f"of them (Types.STRING(), ..., Types.ROW_NAMED([...], [...])), not {key_type!r}")
    return from_schema(key_type.to_schema())


def _keyable(t: Any) -> bool:
    if isinstance(t, RowTypeInfo):
        return bool(t.fields) and all(_keyable(f) for f in t.fields.values())
    return isinstance(t, TypeInfo) and t.name in KEY_SCALARS


def key_columns(key: "str | tuple[str, ...]") -> tuple[str, ...]:
    """The columns of a key: ``("user",)`` or ``("user", "device")``."""
    return (key,) if isinstance(key, str) else tuple(key)


def is_composite(key: Any) -> bool:
    return not isinstance(key, str)


def check_key(key: Any, key_type: Any, what: str = "key") -> tuple:
    """``(key, key_type)`` checked and normalised: a key of one column is its name (``["user"]`` is ``"user"``),
    a composite key a tuple of names whose type is the row of them (given as that row or as a list of types, one
    a column); a ConfigError naming ``what`` and the fix otherwise."""
    if isinstance(key, (list, tuple)):
        names = tuple(key)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise ConfigError(f"{what}: a composite key is a list of column names, got {list(key)!r}")
        if len(set(names)) != len(names):
            raise ConfigError(f"{what}: the key names a column twice: {list(names)}")
        if len(names) == 1:
            if isinstance(key_type, (list, tuple)) and len(key_type) == 1:
                key_type = key_type[0]
            return names[0], check_key_type(key_type, what)
        if isinstance(key_type, (list, tuple)):
            if len(key_type) != len(names):
                raise ConfigError(f"{what}: {len(names)} key columns {list(names)} but {len(key_type)} key types; "
                                  f"give one type a column")
            key_type = Types.ROW_NAMED(list(names), list(key_type))
        if not isinstance(key_type, RowTypeInfo) or tuple(key_type.fields) != names:
            raise ConfigError(f"{what}: the type of the composite key {list(names)} is a list of their types, or "
                              f"Types.ROW_NAMED({list(names)}, [...]), not {key_type!r}")
        return names, check_key_type(key_type, what)
    if not isinstance(key, str) or not key:
        raise ConfigError(f"{what}: a key is a column name or a list of them, got {key!r}")
    return key, check_key_type(key_type, what)


def component_types(key: Any, key_type: TypeInfo) -> list[TypeInfo]:
    """The type of each of ``key``'s columns, in order: a composite key's row's fields, or the one key type."""
    return list(key_type.fields.values()) if is_composite(key) else [key_type]


def key_fields(key: Any, key_type: TypeInfo) -> dict[str, TypeInfo]:
    """Each of ``key``'s columns with its type, in order (a second input's key columns have the first's types by
    position, whatever their names)."""
    return dict(zip(key_columns(key), component_types(key, key_type)))


def check_declared_key(declared: dict | None, key: Any, key_type: TypeInfo, which: str) -> None:
    """A ConfigError naming the column and the fix when a source that declares its columns (``declared``, None:
    it does not) lacks one of ``key``'s or has it of another type; ``which`` starts the message ("" for the first
    input, "the second input's ")."""
    if declared is None:
        return
    for column, t in key_fields(key, key_type).items():
        if column not in declared:
            raise ConfigError(f"{which}key column {column!r} is not in the source schema {list(declared)}")
        if declared[column] != t:
            raise ConfigError(f"{which}key column {column!r} is declared {declared[column].name} in the source "
                              f"schema but key_type is {t.name} ({spark_key_type(t)}); make them the same")


def spark_key_type(key_type: TypeInfo) -> str:
    """The Spark SQL type of a key column of ``key_type`` in Spark's ``simpleString`` form ('bigint',
    'decimal(10,2)', 'struct<a:string,b:int>')."""
    if isinstance(key_type, RowTypeInfo):
        return "struct<" + ",".join(f"{n}:{spark_key_type(t)}" for n, t in key_type.fields.items()) + ">"
    return key_type.spark_ddl()


# -- decoding, in the subtasks --------------------------------------------------------------------------------------
def _component_decoder(key_type: TypeInfo) -> Callable[[str], Any]:
    name = key_type.name
    if isinstance(key_type, RowTypeInfo):
        # Once per key and microbatch: orjson, and no call for a STRING column (its text is its value).
        parts = tuple(None if t.name == "STRING" else _component_decoder(t) for t in key_type.fields.values())
        loads = orjson.loads
        if not any(parts):
            return lambda text: tuple(loads(text))
        return lambda text: tuple([v if d is None or v is None else d(v) for d, v in zip(parts, loads(text))])
    return {"STRING": str, "LONG": int, "INT": int, "BOOLEAN": lambda t: t == "true",
            "DATE": datetime.date.fromisoformat, "DECIMAL": decimal.Decimal, "BYTES": bytes.fromhex,
            "TIMESTAMP": lambda t: _EPOCH + datetime.timedelta(microseconds=int(t))}[name]


def key_decoder(key_type: TypeInfo):
    """``decode_key`` for ``key_type`` as one function, or None for a STRING key (its text is the key)."""
    return None if key_type.name == "STRING" else _component_decoder(key_type)


def record_key_columns(key: Any, key_type: TypeInfo) -> tuple[str, ...]:
    """A composite key's columns when a record's values of them are the key's decoded values (STRING, LONG, INT
    and BOOLEAN columns), so a subtask takes a key from its first record, with no parse of its text; () when not."""
    if not is_composite(key) or not all(t.name in ("STRING", "LONG", "INT", "BOOLEAN")
                                        for t in key_type.fields.values()):
        return ()
    return tuple(key)


def decode_key(key_type: TypeInfo, encoded: str) -> Any:
    """A key's text back as the user's value (a row's: a tuple of its fields)."""
    decode = key_decoder(key_type)
    return encoded if decode is None else decode(encoded)


def arrow_keys(key_type: TypeInfo, texts, lenient: bool = False):
    """``decode_key`` over an Arrow column of key texts: a column of the key's Arrow type (a struct for a row),
    decoded in Arrow, with no Python call per key. ``lenient``: the text "" (a raw keyed row's, which belongs to a
    key group, not a key) is null for a key type whose text is never empty (all but STRING and BYTES)."""
    import pyarrow as pa

    if isinstance(texts, pa.ChunkedArray):  # a table's column: the same kind back
        return pa.chunked_array([_arrow_keys(key_type, texts.combine_chunks(), lenient)])
    return _arrow_keys(key_type, texts, lenient)


def _arrow_keys(key_type: TypeInfo, texts, lenient: bool):
    import pyarrow as pa
    import pyarrow.compute as pc

    name = key_type.name
    if lenient and name not in ("STRING", "BYTES") and len(texts):
        texts = pc.if_else(pc.equal(texts, ""), pa.scalar(None, texts.type), texts)
    if name == "STRING":
        return texts
    if name in ("LONG", "INT", "DATE", "DECIMAL"):
        return pc.cast(texts, key_type.arrow_type())
    if name == "TIMESTAMP":
        return pc.cast(texts, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    if name == "BOOLEAN":
        return pc.equal(texts, "true")
    if name == "BYTES":
        return pa.array([None if t is None else bytes.fromhex(t) for t in texts.to_pylist()], pa.binary())
    # A row: its text is the JSON array of its fields' texts (``key_text``), parsed by Arrow's JSON reader as
    # one document per line, each field then decoded as a column of its own.
    fields = list(key_type.fields.items())
    if not len(texts):
        return pa.array([], key_type.arrow_type())
    parts = _split_plain_rows(texts, len(fields))
    if parts is not None:
        columns = [_arrow_keys(t, pc.list_element(parts, i), lenient) for i, (_, t) in enumerate(fields)]
        return pa.StructArray.from_arrays(columns, names=[n for n, _ in fields], mask=pc.is_null(texts))
    lines = pc.binary_join_element_wise('{"k":', pc.fill_null(texts, "null"), "}", "").cast(pa.large_string())
    document = pc.binary_join(pa.LargeListArray.from_arrays(pa.array([0, len(lines)], pa.int64()), lines),
                              pa.scalar("\n", pa.large_string()))[0].as_buffer()
    import pyarrow.json as pj

    parsed = pj.read_json(pa.BufferReader(document), parse_options=pj.ParseOptions(
        explicit_schema=pa.schema([("k", pa.list_(pa.string()))]))).column("k").combine_chunks()
    columns = [_arrow_keys(t, pc.list_element(parsed, i), lenient) for i, (_, t) in enumerate(fields)]
    return pa.StructArray.from_arrays(columns, names=[n for n, _ in fields], mask=pc.is_null(parsed))


def _split_plain_rows(texts, n: int):
    """Row keys' texts as lists of their ``n`` fields' texts, by splitting on the separator, when every text is
    ``["…","…",…]`` with no null field and no escape (so a quote is a field's edge, never inside one: most keys),
    a null text null; None otherwise (for the JSON reader)."""
    import pyarrow.compute as pc

    if not pc.all(pc.and_(
            pc.and_(pc.starts_with(texts, '["'), pc.ends_with(texts, '"]')),
            pc.and_(pc.invert(pc.match_substring(texts, "\\")),
                    pc.equal(pc.count_substring(texts, '","'), n - 1)))).as_py():
        return None
    return pc.split_pattern(pc.utf8_slice_codeunits(texts, 2, -2), '","')


def row_tuple(value: dict | None) -> tuple | None:
    """A composite key's value as a dict of its columns (from Arrow) as the hashable tuple the function sees."""
    return None if value is None else tuple(row_tuple(v) if isinstance(v, dict) else v for v in value.values())


def arrow_key_columns(key: Any, key_type: TypeInfo, texts) -> dict:
    """The key's columns as an operator emits them, by name, from a column of key texts: the one key column, or
    each column of a composite key."""
    typed = arrow_keys(key_type, texts)
    if not is_composite(key):
        return {key: typed}
    return {name: typed.field(i) for i, name in enumerate(key_type.fields)}


# -- Spark columns -------------------------------------------------------------------------------------------------
def key_expression(key: Any):
    """The key as one Spark column: its column, or the struct of a composite key's columns."""
    from pyspark.sql import functions as F

    if is_composite(key):
        return F.struct(*[F.col(f"`{c}`") for c in key])
    return F.col(f"`{key}`")


def key_text_of(key: Any, key_type: TypeInfo):
    """The text of the key of each record, from its key columns (a composite key's by position)."""
    from pyspark.sql import functions as F

    if not is_composite(key):
        return key_text(F.col(f"`{key}`"), key_type)
    return F.to_json(F.array(*[key_text(F.col(f"`{c}`"), t) for c, t in zip(key, key_type.fields.values())]))


def key_text(column, key_type: TypeInfo | None = None):
    """A key column (of its key type's Spark type) as the text it travels and is stored as (``key_type`` None:
    a key whose text is Spark's cast to string, as a non-keyed operator's subtask number)."""
    from pyspark.sql import functions as F

    name = "STRING" if key_type is None else key_type.name
    if isinstance(key_type, RowTypeInfo):
        return F.to_json(F.array(*[key_text(column.getField(n), t) for n, t in key_type.fields.items()]))
    if name == "TIMESTAMP":
        return F.unix_micros(column).cast("string")
    if name == "BYTES":
        return F.hex(column)
    return column.cast("string")


def typed_key(column, key_type: TypeInfo, lenient: bool = False):
    """A column of key texts as ``key_type``'s Spark type (a row's as a struct of its fields); ``lenient``: null
    for a text that is no such key (Spark's ``try_cast``, which parses "042" as the LONG 42)."""
    from pyspark.sql import functions as F

    def cast(c, t: str):
        return c.try_cast(t) if lenient else c.cast(t)

    name = key_type.name
    if isinstance(key_type, RowTypeInfo):
        parts = F.from_json(column, "array<string>")
        return F.when(parts.isNotNull(), F.struct(*[typed_key(parts.getItem(i), t, lenient).alias(n)
                                                    for i, (n, t) in enumerate(key_type.fields.items())]))
    if name == "STRING":
        return column
    if name == "TIMESTAMP":
        return F.timestamp_micros(cast(column, "bigint"))
    if name == "BYTES":
        return F.unhex(column)
    return cast(column, key_type.spark_ddl())


def parsed_key(column, key_type: TypeInfo):
    """A column of text a user typed as a key of ``key_type`` (one that is not a row), as Spark parses text
    (``try_cast``: null when it is none; "042" is the LONG 42, a TIMESTAMP in the session's zone, UTC); BYTES
    as hex, as their text is stored."""
    from pyspark.sql import functions as F

    if key_type.name == "STRING":
        return column
    if key_type.name == "BYTES":
        return F.try_to_binary(column, F.lit("hex"))
    return column.try_cast(key_type.spark_ddl())


def key_literal(key_type: TypeInfo, value: Any):
    """A key's value (a row's: a tuple, a Spark ``Row`` or a dict) as a Spark literal of its typed column, to
    compare ``typed_key`` with."""
    from pyspark.sql import functions as F

    if isinstance(key_type, RowTypeInfo):
        values = list(value.values()) if isinstance(value, dict) else list(value)
        if len(values) != len(key_type.fields):
            raise ConfigError(f"a key of {list(key_type.fields)} has {len(key_type.fields)} values, not {value!r}")
        return F.struct(*[key_literal(t, v).alias(n) for (n, t), v in zip(key_type.fields.items(), values)])
    return F.lit(value).cast(key_type.spark_ddl())


def mistyped_key(df, key: Any, key_type: TypeInfo) -> str | None:
    """What is wrong with ``df``'s key columns when they are not ``key_type``'s ("key column 'n' is bigint";
    for a composite key "key column 'device' of ['user', 'device'] is bigint, not string"), else None."""
    fields = key_fields(key, key_type)
    for column, t in fields.items():
        actual = df.schema[column].dataType.simpleString()
        if actual != spark_key_type(t):
            if is_composite(key):
                return f"key column {column!r} of {list(key)} is {actual}, not {spark_key_type(t)},"
            return f"key column {column!r} is {actual}"
    return None
