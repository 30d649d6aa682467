"""The five keyed state types, scoped per key and namespace, and the changes a store emits."""
import pytest

from state_store.descriptors import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from state_store.functions import RuntimeContext
from state_store.keyed_state import KeyedStateStore
from state_store.types import Types

POINT = Types.ROW_NAMED(["x", "y"], [Types.LONG(), Types.STRING()])
POINT_LIST = Types.LIST(POINT)


class Average(AggregateFunction):
    def create_accumulator(self):
        return [0, 0]

    def add(self, value, accumulator):
        return [accumulator[0] + value, accumulator[1] + 1]

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]

    def merge(self, a, b):
        return [a[0] + b[0], a[1] + b[1]]


@pytest.fixture
def store():
    return KeyedStateStore()


@pytest.fixture
def ctx(store):
    return RuntimeContext("op", store, 0, 1, 128)


def changes(store, ctx):
    return list(store.changes())


def test_value_state_returns_default_until_updated_and_again_after_clear(store, ctx):
    count = ctx.get_state(ValueStateDescriptor("count", Types.LONG(), 0))
    store.set_current_key("a", 5)
    assert count.value() == 0
    count.update(3)
    assert count.value() == 3
    count.clear()
    assert count.value() == 0


def test_value_state_mutable_default_is_copied_not_shared(store, ctx):
    seen = ctx.get_state(ValueStateDescriptor("seen", Types.LIST(Types.STRING()), []))
    store.set_current_key("a", 1)
    seen.value().append("x")
    assert seen.value() == []


def test_value_state_rejects_a_value_of_the_wrong_type_in_update(store, ctx):
    count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
    store.set_current_key("a", 1)
    with pytest.raises(TypeError, match="LONG"):
        count.update("three")


def test_keyed_state_outside_a_key_raises(ctx):
    count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
    with pytest.raises(RuntimeError, match="only accessible while processing a key"):
        count.value()


def test_list_state_is_empty_list_when_empty_and_grows_with_add_and_add_all(store, ctx):
    items = ctx.get_list_state(ListStateDescriptor("items", Types.LONG()))
    store.set_current_key("a", 1)
    assert items.get() == []
    items.add(1)
    items.add_all([2, 3])
    items.add_all([])
    assert items.get() == [1, 2, 3]
    items.update([9])
    assert items.get() == [9]


def test_list_state_update_with_empty_list_clears_and_emits_nothing_if_never_stored(store, ctx):
    items = ctx.get_list_state(ListStateDescriptor("items", Types.LONG()))
    store.set_current_key("a", 1)
    items.add(1)
    items.update([])
    assert items.get() == []
    assert changes(store, ctx) == []


def test_list_state_update_with_empty_list_on_a_stored_list_emits_a_tombstone(store, ctx):
    items = ctx.get_list_state(ListStateDescriptor("items", Types.LONG()))
    store.load("op.items", "a", "", 2, "[1,2]")
    store.set_current_key("a", 2)
    assert items.get() == [1, 2]
    items.update([])
    assert items.get() == []
    assert changes(store, ctx) == [("op.items", 2, "a", "", None)]


def test_list_state_rejects_none_elements(store, ctx):
    items = ctx.get_list_state(ListStateDescriptor("items", Types.LONG()))
    store.set_current_key("a", 1)
    for call in (lambda: items.add(None), lambda: items.add_all([1, None]), lambda: items.update([None])):
        with pytest.raises(ValueError, match="cannot add None"):
            call()
    assert items.get() == []


def test_map_state_supports_every_flink_map_operation(store, ctx):
    m = ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), Types.LONG()))
    store.set_current_key("a", 1)
    assert m.is_empty() and m.get("x") is None and m.keys() == [] and not m.contains("x")
    m.put("x", 1)
    m.put_all({"y": 2, "z": 3})
    assert m.get("x") == 1 and m.contains("y") and not m.contains("w")
    assert sorted(m.keys()) == ["x", "y", "z"] and sorted(m.values()) == [1, 2, 3]
    assert sorted(m.items()) == [("x", 1), ("y", 2), ("z", 3)]
    m.remove("y")
    m.remove("missing")
    assert sorted(m.keys()) == ["x", "z"] and not m.is_empty()


def test_map_state_removing_the_last_entry_empties_the_state(store, ctx):
    m = ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), Types.LONG()))
    store.load("op.m", "a", "", 1, Types.MAP(Types.STRING(), Types.LONG()).dumps({"only": 1}))
    store.set_current_key("a", 1)
    m.remove("only")
    assert m.is_empty()
    assert changes(store, ctx) == [("op.m", 1, "a", "", None)]


def test_map_state_rejects_keys_of_the_wrong_type(store, ctx):
    m = ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), Types.LONG()))
    store.set_current_key("a", 1)
    with pytest.raises(TypeError):
        m.put(1, 1)
    assert m.is_empty()


def test_reducing_state_folds_added_values_and_is_none_when_empty(store, ctx):
    total = ctx.get_reducing_state(ReducingStateDescriptor("total", lambda a, b: a + b, Types.LONG()))
    store.set_current_key("a", 1)
    assert total.get() is None
    for v in (1, 2, 3):
        total.add(v)
    assert total.get() == 6
    total.clear()
    assert total.get() is None


def test_aggregating_state_uses_the_aggregate_function_and_is_none_when_empty(store, ctx):
    avg = ctx.get_aggregating_state(AggregatingStateDescriptor("avg", Average(), Types.LIST(Types.LONG())))
    store.set_current_key("a", 1)
    assert avg.get() is None
    for v in (1, 2, 6):
        avg.add(v)
    assert avg.get() == 3.0
    (name, _, _, _, text), = changes(store, ctx)
    assert Types.LIST(Types.LONG()).loads(text) == [9, 3]  # the accumulator is what is stored
    avg.clear()
    assert avg.get() is None


def test_namespaces_keep_separate_values_for_the_same_key(store, ctx):
    count = ctx.get_state(ValueStateDescriptor("count", Types.LONG(), 0))
    store.set_current_key("a", 1)
    count.update(1)
    count.set_current_namespace("window-10")
    assert count.value() == 0
    count.update(10)
    count.set_current_namespace("")
    assert count.value() == 1
    assert [(c[3], c[4]) for c in changes(store, ctx)] == [("", "1"), ("window-10", "10")]


def test_state_is_scoped_to_the_current_key(store, ctx):
    items = ctx.get_list_state(ListStateDescriptor("items", Types.STRING()))
    store.set_current_key("a", 3)
    items.add("for a")
    store.set_current_key("b", 7)
    assert items.get() == []
    items.add("for b")
    store.set_current_key("a", 3)
    assert items.get() == ["for a"]
    assert changes(store, ctx) == [("op.items", 3, "a", "", '["for a"]'), ("op.items", 7, "b", "", '["for b"]')]


def test_changes_emit_encoded_values_that_decode_back_for_all_five_types(store, ctx):
    v = ctx.get_state(ValueStateDescriptor("v", POINT))
    lst = ctx.get_list_state(ListStateDescriptor("l", POINT))
    m = ctx.get_map_state(MapStateDescriptor("m", Types.LONG(), POINT))
    r = ctx.get_reducing_state(ReducingStateDescriptor("r", max, Types.DOUBLE()))
    a = ctx.get_aggregating_state(AggregatingStateDescriptor("a", Average(), Types.LIST(Types.LONG())))
    store.set_current_key("k", 9)
    p = {"x": 1, "y": "one"}
    v.update(p)
    lst.add(p)
    m.put(1, p)
    r.add(2.5)
    a.add(4)
    emitted = {name: (kg, key, ns, text) for name, kg, key, ns, text in changes(store, ctx)}
    assert set(emitted) == {"op.v", "op.l", "op.m", "op.r", "op.a"}
    assert {(kg, key, ns) for kg, key, ns, _ in emitted.values()} == {(9, "k", "")}
    decoded = {n: ctx.descriptors[n].stored_type.loads(t) for n, (_, _, _, t) in emitted.items()}
    assert decoded == {"op.v": p, "op.l": [p], "op.m": {1: p}, "op.r": 2.5, "op.a": [4, 1]}


def test_changes_emit_tombstones_for_cleared_entries_that_existed(store, ctx):
    count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
    store.load("op.count", "a", "", 4, "5")
    store.set_current_key("a", 4)
    assert count.value() == 5
    count.clear()
    assert changes(store, ctx) == [("op.count", 4, "a", "", None)]


def test_changes_skip_entries_read_or_written_back_unchanged(store, ctx):
    count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
    items = ctx.get_list_state(ListStateDescriptor("items", Types.LONG()))
    store.load("op.count", "a", "", 4, "5")
    store.load("op.items", "a", "", 4, "[1,2]")
    store.load("op.count", "b", "", 6, "7")
    store.set_current_key("a", 4)
    count.update(count.value())
    items.update(items.get())
    store.set_current_key("b", 6)
    count.value()
    assert changes(store, ctx) == []
    count.update(8)
    assert changes(store, ctx) == [("op.count", 6, "b", "", "8")]


def test_registering_the_same_name_with_another_type_is_refused(ctx):
    ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
    with pytest.raises(ValueError, match="registered twice"):
        ctx.get_state(ValueStateDescriptor("count", Types.STRING()))


def test_mutating_an_element_returned_by_list_state_get_does_not_change_the_state(store, ctx):
    items = ctx.get_list_state(ListStateDescriptor("items", POINT))
    store.load("op.items", "a", "", 1, POINT_LIST.dumps([{"x": 1, "y": "a"}]))
    store.set_current_key("a", 1)
    items.get()[0]["x"] = 99
    assert items.get() == [{"x": 1, "y": "a"}]


def test_value_read_in_the_same_microbatch_equals_the_value_read_after_a_reload(store, ctx):
    v = ctx.get_state(ValueStateDescriptor("v", POINT))
    store.set_current_key("a", 1)
    v.update({"x": 1})  # y omitted: a nullable field
    (_, _, _, _, text), = changes(store, ctx)
    reloaded = KeyedStateStore()
    reloaded.load("op.v", "a", "", 1, text)
    reloaded.set_current_key("a", 1)
    assert reloaded.get("op.v", "", ctx.descriptors["op.v"]) == {"x": 1, "y": None}
    assert v.value() == {"x": 1, "y": None}
