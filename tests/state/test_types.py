"""Typed serializers: round trips, validation, schemas and compatibility on restore."""
import datetime
import decimal
import json
import math

import pytest

from state_store.types import StateMigrationError, Types, check_compatibility, from_schema

PERSON = Types.ROW_NAMED(["name", "age", "tags"], [Types.STRING(), Types.INT(), Types.LIST(Types.STRING())])

ROUND_TRIPS = [
    (Types.STRING(), "héllo \"quoted\" \n"),
    (Types.LONG(), 2**63 - 1),
    (Types.LONG(), -(2**63)),
    (Types.INT(), 2**31 - 1),
    (Types.INT(), -(2**31)),
    (Types.DOUBLE(), 1.5),
    (Types.DOUBLE(), -0.0),
    (Types.FLOAT(), 0.25),
    (Types.BOOLEAN(), True),
    (Types.BOOLEAN(), False),
    (Types.BYTES(), b"\x00\xffraw\n"),
    (Types.LIST(Types.LONG()), [3, 1, 2]),
    (Types.LIST(Types.LONG()), []),
    (Types.MAP(Types.STRING(), Types.LONG()), {"b": 2, "a": 1}),
    (Types.MAP(Types.LONG(), Types.BYTES()), {10: b"x", -1: b""}),
    (PERSON, {"name": "ann", "age": 31, "tags": ["a", "b"]}),
    (PERSON, {"name": None, "age": None, "tags": None}),
    (Types.LIST(Types.MAP(Types.STRING(), PERSON)),
     [{"p": {"name": "bo", "age": 2, "tags": []}}, {}]),
    (Types.MAP(Types.STRING(), Types.LIST(Types.ROW_NAMED(["x"], [Types.DOUBLE()]))),
     {"k": [{"x": 1.0}, {"x": None}]}),
]


@pytest.mark.parametrize("type_info, value", ROUND_TRIPS, ids=lambda x: repr(x)[:40])
def test_every_type_round_trips_through_json_text(type_info, value):
    text = type_info.dumps(value)
    json.loads(text)  # plain JSON, nothing pickled
    assert type_info.loads(text) == value


@pytest.mark.parametrize("type_info", [Types.DOUBLE(), Types.FLOAT()])
def test_nan_and_infinities_round_trip_as_valid_json(type_info):
    for special in (float("inf"), float("-inf")):
        assert type_info.loads(type_info.dumps(special)) == special
    text = type_info.dumps(float("nan"))
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert math.isnan(type_info.loads(text))


def test_nan_and_infinities_nested_in_list_and_map_round_trip():
    t = Types.MAP(Types.STRING(), Types.LIST(Types.DOUBLE()))
    back = t.loads(t.dumps({"a": [float("nan"), float("-inf"), 2]}))
    assert math.isnan(back["a"][0]) and back["a"][1:] == [float("-inf"), 2.0]


def test_bytearray_encodes_and_decodes_as_bytes():
    assert Types.BYTES().loads(Types.BYTES().dumps(bytearray(b"ab"))) == b"ab"


def test_none_encodes_as_json_null_for_every_type():
    for t, _ in ROUND_TRIPS:
        assert t.dumps(None) == "null" and t.loads("null") is None


def test_map_encoding_does_not_depend_on_insertion_order():
    t = Types.MAP(Types.STRING(), Types.LONG())
    assert t.dumps({"a": 1, "b": 2}) == t.dumps({"b": 2, "a": 1})


@pytest.mark.parametrize("type_info, value", [
    (Types.LONG(), True),
    (Types.LONG(), "1"),
    (Types.LONG(), 1.0),
    (Types.LONG(), 2**63),
    (Types.INT(), 2**31),
    (Types.INT(), -(2**31) - 1),
    (Types.INT(), False),
    (Types.DOUBLE(), "1.5"),
    (Types.DOUBLE(), True),
    (Types.STRING(), 1),
    (Types.STRING(), b"bytes"),
    (Types.BOOLEAN(), 1),
    (Types.BYTES(), "text"),
    (Types.LIST(Types.LONG()), {1, 2}),
    (Types.LIST(Types.LONG()), [1, "2"]),
    (Types.MAP(Types.STRING(), Types.LONG()), [("a", 1)]),
    (Types.MAP(Types.STRING(), Types.LONG()), {1: 1}),
    (PERSON, {"name": "ann", "age": "31"}),
    (PERSON, {"name": "ann", "unknown": 1}),
    (PERSON, ["ann", 31, []]),
], ids=lambda x: repr(x)[:40])
def test_values_of_the_wrong_type_raise_type_error(type_info, value):
    with pytest.raises(TypeError):
        type_info.encode(value)


def test_type_error_message_names_the_declared_type_and_the_value():
    with pytest.raises(TypeError, match=r"expected a value of type LONG, got bool True"):
        Types.LONG().encode(True)


@pytest.mark.parametrize("type_info", [t for t, _ in ROUND_TRIPS], ids=lambda x: repr(x)[:40])
def test_from_schema_of_to_schema_rebuilds_an_equal_type(type_info):
    schema = json.loads(json.dumps(type_info.to_schema()))  # as recorded in a checkpoint
    rebuilt = from_schema(schema)
    assert rebuilt == type_info and rebuilt.to_schema() == type_info.to_schema()


def test_row_needs_unique_names_matching_its_types():
    with pytest.raises(ValueError, match="duplicate"):
        Types.ROW_NAMED(["a", "a"], [Types.LONG(), Types.LONG()])
    with pytest.raises(ValueError, match="as many field names"):
        Types.ROW_NAMED(["a"], [])


def test_identical_schemas_are_identical():
    assert check_compatibility(PERSON.to_schema(), PERSON.to_schema()) == "identical"


def test_int_widened_to_long_is_compatible_and_old_values_decode():
    assert check_compatibility("INT", "LONG") == "compatible"
    old = Types.LIST(Types.INT())
    new = Types.LIST(Types.LONG())
    assert check_compatibility(old.to_schema(), new.to_schema()) == "compatible"
    assert new.loads(old.dumps([1, -(2**31)])) == [1, -(2**31)]


def test_row_with_an_added_field_is_compatible_and_old_json_reads_none_for_it():
    old = Types.ROW_NAMED(["a"], [Types.LONG()])
    new = Types.ROW_NAMED(["a", "b"], [Types.LONG(), Types.STRING()])
    assert check_compatibility(old.to_schema(), new.to_schema(), "job.op.count") == "compatible"
    assert new.loads(old.dumps({"a": 7})) == {"a": 7, "b": None}


@pytest.mark.parametrize("old, new, fragment", [
    (Types.ROW_NAMED(["a", "b"], [Types.LONG(), Types.LONG()]), Types.ROW_NAMED(["a"], [Types.LONG()]),
     "row fields ['b'] were removed"),
    (Types.STRING(), Types.LONG(), "from STRING to LONG"),
    (Types.LONG(), Types.INT(), "from LONG to INT"),
    (Types.LIST(Types.STRING()), Types.MAP(Types.STRING(), Types.STRING()), "type changed"),
])
def test_incompatible_changes_raise_state_migration_error_naming_the_state(old, new, fragment):
    with pytest.raises(StateMigrationError) as err:
        check_compatibility(old.to_schema(), new.to_schema(), "clicks.counter.totals")
    assert "clicks.counter.totals" in str(err.value) and fragment in str(err.value)


def test_incompatible_nested_change_names_the_path_inside_the_state():
    old = Types.ROW_NAMED(["a"], [Types.MAP(Types.STRING(), Types.STRING())])
    new = Types.ROW_NAMED(["a"], [Types.MAP(Types.STRING(), Types.LONG())])
    with pytest.raises(StateMigrationError, match=r"op\.s\.a\.value: type changed from STRING to LONG"):
        check_compatibility(old.to_schema(), new.to_schema(), "op.s")


def test_map_with_non_scalar_keys_is_refused_when_declared():
    with pytest.raises(TypeError, match="map keys must be a scalar type"):
        Types.MAP(Types.LIST(Types.LONG()), Types.STRING())


_NAIVE, _PARIS = datetime.datetime(2024, 1, 1, 12, 0, 0, 5), datetime.timezone(datetime.timedelta(hours=1))
_FULL = {"s": "x", "n": 1, "i": 2, "d": 1, "b": True, "t": _NAIVE, "m": decimal.Decimal("-123.45")}


@pytest.mark.parametrize("value", [
    _FULL, {"s": None}, {}, {"d": float("nan")},
    {"d": float("inf")}, {"n": 1.5}, {"n": True}, {"i": 2**31}, {"n": 2**63}, {"s": b"x"}, {"b": 1}, {"extra": 1},
    "not a row", None, {**_FULL, "t": _NAIVE.replace(tzinfo=_PARIS)}, {**_FULL, "t": datetime.date(2024, 1, 1)},
    {"t": "2024-01-01"}, {**_FULL, "m": decimal.Decimal("1.5")}, {**_FULL, "m": decimal.Decimal("1234.56")},
    {**_FULL, "m": decimal.Decimal("0.001")}, {**_FULL, "m": decimal.Decimal("NaN")}, {**_FULL, "m": 7},
    {**_FULL, "m": None}, {**_FULL, "m": 1.5},
])
def test_the_compiled_fast_path_of_a_row_of_scalars_agrees_with_field_by_field_conversion(value):
    """The generated encoder and Arrow converter of a row of scalars, timestamps and decimals give what the field
    by field conversion gives (an Arrow value read back by pyarrow: a naive datetime is taken as UTC either way),
    or the same error."""
    import pyarrow as pa

    row = Types.ROW_NAMED(["s", "n", "i", "d", "b", "t", "m"], [
        Types.STRING(), Types.LONG(), Types.INT(), Types.DOUBLE(), Types.BOOLEAN(), Types.TIMESTAMP(),
        Types.DECIMAL(5, 2)])
    assert row.arrow_tuple_converter().__name__ == "fast"  # compiled, not the field by field fallback
    as_read = {"encode": repr, "to_arrow": lambda v: repr(pa.array([v], row.arrow_type()).to_pylist())}
    for convert in ("encode", "to_arrow"):
        try:
            expected = ("ok", as_read[convert](row._by_field(value, convert)))
        except (TypeError, ValueError) as e:
            expected = ("error", type(e).__name__)
        try:
            got = ("ok", as_read[convert](getattr(row, convert)(value)))
        except (TypeError, ValueError) as e:
            got = ("error", type(e).__name__)
        assert got == expected, convert
