"""The key of a keyed stream, the one place it is stated: the types a key may have and its codec.

A key is STRING, LONG or INT (``KEY_TYPES``). It travels between subtasks and is stored in the state tables as
text, Spark's cast to string (``key_text``: the LONG 42 is "42"); a subtask turns the text back into the declared
type (``decode_key``, ``key_decoder``; ``arrow_keys`` for a column of them), and a reader of the tables casts it
(``typed_key``). A source's key column must already have the key type's Spark type (``mistyped_key``): a key is
never converted on its way in, so the same key always lands in the same key group.

Pure: pyspark and pyarrow are never imported here; the Spark and Arrow helpers take their columns.
"""
from __future__ import annotations

from typing import Any

from .errors import ConfigError
from .types import TypeInfo, Types

KEY_TYPES = {"STRING": Types.STRING, "LONG": Types.LONG, "INT": Types.INT}
_NUMERIC = ("LONG", "INT")


def check_key_type(key_type: Any, what: str = "key_type") -> TypeInfo:
    """``key_type`` as a fresh ``TypeInfo``, or a ConfigError naming ``what`` and the types a key may have."""
    if not isinstance(key_type, TypeInfo) or key_type.name not in KEY_TYPES:
        raise ConfigError(f"{what}: a key is STRING, LONG or INT (Types.STRING(), Types.LONG() or Types.INT()), "
                          f"not {key_type!r}")
    return KEY_TYPES[key_type.name]()


def spark_key_type(key_type: TypeInfo) -> str:
    """The Spark SQL type of a key column of ``key_type``: 'string', 'bigint' or 'int'."""
    return key_type.spark_ddl()


def decode_key(key_type: TypeInfo, encoded: str) -> Any:
    """A key's text (Spark's cast to string) back in the declared type."""
    if key_type.name in _NUMERIC:
        return int(encoded)
    return encoded


def key_decoder(key_type: TypeInfo):
    """``decode_key`` for ``key_type`` as one function, or None for a STRING key (its text is the key)."""
    return int if key_type.name in _NUMERIC else None


def arrow_keys(key_type: TypeInfo, texts):
    """``decode_key`` over an Arrow column of key texts."""
    return texts.cast(key_type.arrow_type())


# -- Spark columns -------------------------------------------------------------------------------------------------
def key_text(column):
    """A key column (of its key type's Spark type) as the text it travels and is stored as."""
    return column.cast("string")


def typed_key(column, key_type: TypeInfo, lenient: bool = False):
    """A column of key texts in ``key_type``; ``lenient``: null for a text that is no such key (Spark's
    ``try_cast``, which parses "042" as the LONG 42)."""
    return column.try_cast(spark_key_type(key_type)) if lenient else column.cast(spark_key_type(key_type))


def mistyped_key(df, column: str, key_type: TypeInfo) -> str | None:
    """The Spark type of ``df``'s key ``column`` when it is not ``key_type``'s, else None."""
    actual = df.schema[column].dataType.simpleString()
    return None if actual == spark_key_type(key_type) else actual
