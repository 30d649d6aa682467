"""Stored state values as whole Arrow columns: JSON text column <-> typed column, for the vectorised path.

A state value is stored as the canonical JSON text of its declared type
(``types.to_text``: sorted keys, no spaces). ``encode_column`` builds those
texts for a whole typed column with Arrow string kernels, so a stored value
written by the vectorised path is byte for byte what the per-record path
writes for the same value; ``decode_column`` parses a column of texts with
Arrow's JSON reader against the declared type. Both fall back to the
per-value serializers where the column-wise form would differ (non-finite
floats; bytes; maps; lists; strings with control characters) or fail
(a stored value of another type: the per-value path then names it).

No Spark import here.
"""
from __future__ import annotations

from typing import Any, Callable

from ..errors import stored_value_error
from ..types import ListTypeInfo, MapTypeInfo, RowTypeInfo, TypeInfo

_NULL = "null"


def _string_texts(array):
    """JSON strings as orjson writes them, or None when a value needs a ``\\u`` escape (control characters)."""
    import pyarrow.compute as pc

    if pc.any(pc.match_substring_regex(array, "[\\x00-\\x1f]")).as_py():
        return None
    escaped = pc.replace_substring(pc.replace_substring(array, "\\", "\\\\"), '"', '\\"')
    return pc.binary_join_element_wise('"', escaped, '"', "")


def _float_texts(array):
    """JSON numbers as orjson writes a Python float (its numpy serializer formats them alike, in one call), or
    None when a value is not finite (stored as text: ``types._Scalar.encode``)."""
    import numpy as np
    import orjson
    import pyarrow as pa
    import pyarrow.compute as pc

    values = pc.fill_null(pc.cast(array, pa.float64()), 0.0)
    if not len(values) or not pc.all(pc.is_finite(values)).as_py():
        return None if len(values) else pa.array([], pa.string())
    texts = orjson.dumps(np.asarray(values.to_numpy()), option=orjson.OPT_SERIALIZE_NUMPY).decode()[1:-1].split(",")
    return pc.if_else(pc.is_valid(array), pa.array(texts, pa.string()), pa.scalar(None, pa.string()))


def _texts(type_info: TypeInfo, array):
    """The JSON texts of ``array``'s values (nulls where it is null), or None when not column-wise."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if type_info.name in ("LONG", "INT"):
        return pc.cast(array, pa.string())
    if type_info.name == "BOOLEAN":
        return pc.if_else(array, "true", "false")
    if type_info.name == "STRING":
        return _string_texts(array)
    if type_info.name in ("DOUBLE", "FLOAT"):
        return _float_texts(array)
    if isinstance(type_info, RowTypeInfo):
        parts = []
        for name in sorted(type_info.fields):  # sorted keys, as ``to_text``
            texts = _texts(type_info.fields[name], array.field(name))
            if texts is None:
                return None
            parts += ["," if parts else "{", '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '":',
                      pc.fill_null(texts, _NULL)]
        joined = pc.binary_join_element_wise(*(parts or ["{"]), "}", "")
        return pc.if_else(pc.is_valid(array), joined, pa.scalar(None, pa.string()))
    return None


def _json_native(type_info: TypeInfo) -> bool:
    """Whether Arrow's JSON reader gives a stored text's value as the type's own decoder does (bytes are base64
    text, a map an object or a list of pairs: not)."""
    if isinstance(type_info, RowTypeInfo):
        return all(_json_native(t) for t in type_info.fields.values())
    if isinstance(type_info, ListTypeInfo):
        return _json_native(type_info.element)
    return type_info.name in ("STRING", "LONG", "INT", "BOOLEAN", "DOUBLE", "FLOAT")


def _from_arrow(type_info: TypeInfo) -> Callable[[Any], Any] | None:
    """pyarrow's Python value of ``type_info`` as the user's value (maps become dicts), or None when the same."""
    if isinstance(type_info, MapTypeInfo):
        k, v = _from_arrow(type_info.key), _from_arrow(type_info.value)
        return lambda x: {(k(a) if k else a): (v(b) if v else b) for a, b in x}
    if isinstance(type_info, RowTypeInfo):
        fields = [(n, _from_arrow(t)) for n, t in type_info.fields.items()]
        if all(c is None for _, c in fields):
            return None
        return lambda x: {n: (None if x[n] is None else c(x[n]) if c else x[n]) for n, c in fields}
    if isinstance(type_info, ListTypeInfo):
        e = _from_arrow(type_info.element)
        return None if e is None else (lambda x: [None if i is None else e(i) for i in x])
    return None


def encode_column(type_info: TypeInfo, array):
    """The stored JSON texts of a typed column (a string array, null where ``array`` is null)."""
    import pyarrow as pa

    texts = _texts(type_info, array)
    if texts is not None:
        return texts
    convert = _from_arrow(type_info)
    values = array.to_pylist()
    return pa.array([None if v is None else type_info.dumps(convert(v) if convert else v) for v in values],
                    type=pa.string())


def decode_column(type_info: TypeInfo, texts, keys, state: str):
    """The typed column of stored JSON ``texts`` (null where a text is null); a text that is not a value of
    ``type_info`` is a StoredValueError naming ``state`` and its key (``keys`` lie beside ``texts``)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    arrow_type = type_info.arrow_type()
    present = pc.drop_null(texts)
    if len(present) == 0:
        return pa.nulls(len(texts), arrow_type)
    if not _json_native(type_info):
        return _decode_each(type_info, texts, keys, state, arrow_type)
    lines = pc.binary_join_element_wise('{"v":', present, "}\n", "")
    data = _values_buffer(lines)
    options = pj.ParseOptions(explicit_schema=pa.schema([("v", arrow_type)]), unexpected_field_behavior="error")
    try:
        column = pj.read_json(pa.BufferReader(data), parse_options=options, read_options=pj.ReadOptions(
            use_threads=False, block_size=max(1 << 20, data.size + 1))).column("v").combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        column = _decode_each(type_info, texts, keys, state, arrow_type)  # raises for a value not of the type
        return column
    if len(present) == len(texts):
        return column
    # The i-th text's value is the (number of texts present before it)-th decoded one; absent texts stay null.
    valid = pc.is_valid(texts)
    position = pc.subtract(pc.cumulative_sum(pc.cast(valid, pa.int64())), 1)
    return column.take(pc.if_else(valid, position, pa.scalar(None, pa.int64())))


def _values_buffer(strings):
    """The bytes of a string array's values, back to back (its data buffer, without a copy)."""
    import numpy as np

    offsets = np.frombuffer(strings.buffers()[1], dtype=np.int32)[strings.offset:strings.offset + len(strings) + 1]
    return strings.buffers()[2][int(offsets[0]):int(offsets[-1])]


def _decode_each(type_info: TypeInfo, texts, keys, state: str, arrow_type):
    """``decode_column`` one value at a time, with the per-record path's checks and errors."""
    import pyarrow as pa

    values = []
    for key, text in zip(keys.to_pylist(), texts.to_pylist()):
        if text is None:
            values.append(None)
            continue
        try:
            values.append(type_info.to_arrow(type_info.loads(text)))
        except (TypeError, ValueError, AttributeError) as e:
            raise stored_value_error(f"state {state!r} of key {key!r}", type_info.name, e, text) from None
    return pa.array(values, type=arrow_type)
