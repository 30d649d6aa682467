"""The five keyed state types, scoped per key and namespace, and what a store's flush returns.

A flush row is (state_name, key_group, key, namespace, user_key, text or None, delta, expiry): user_key is the JSON text
of a MapState entry's key (None for the other states), delta +1 created, -1 removed, 0 updated.
"""
import pytest

from state_store.errors import StoredValueError
from state_store.functions import RuntimeContext
from state_store.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from state_store.state.store import KeyedStateStore
from state_store.types import Types
from tests.support.jobs import Mean

POINT = Types.ROW_NAMED(["x", "y"], [Types.LONG(), Types.STRING()])
POINT_LIST = Types.LIST(POINT)
CREATED, UPDATED, REMOVED = 1, 0, -1


@pytest.fixture
def store():
    return KeyedStateStore()


@pytest.fixture
def ctx(store):
    return RuntimeContext("op", store, 0, 1, 128)


# -- value state ------------------------------------------------------------------------------------------------
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
    assert count.value() is None


def test_keyed_state_outside_a_key_raises(ctx):
    count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
    with pytest.raises(RuntimeError, match="only accessible while processing a key"):
        count.value()


def test_each_change_carries_its_keys_group_across_flushes_and_in_keys_of(store, ctx):
    """Key groups come from the key being processed when an entry is written: new keys, stored keys, a clear
    and a map entry each flush with their own, and ``keys_of`` names them before and after the flush."""
    count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
    tags = ctx.get_map_state(MapStateDescriptor("tags", Types.STRING(), Types.LONG()))
    store.load("op.count", "stored", "", None, 7, "1")
    for key, group in (("b", 3), ("a", 9), ("stored", 7), ("b", 3)):
        store.set_current_key(key, group)
        count.update((count.value() or 0) + 1)
    store.set_current_key("m", 4)
    tags.put("x", 1)
    assert store.keys_of("op.count") == [("b", 3), ("stored", 7), ("a", 9)]
    assert store.flush() == [("op.count", 9, "a", "", None, "1", CREATED, None),
                             ("op.count", 3, "b", "", None, "2", CREATED, None),
                             ("op.count", 7, "stored", "", None, "2", UPDATED, None),
                             ("op.tags", 4, "m", "", '"x"', "1", CREATED, None)]
    store.set_current_key("a", 9)
    count.clear()
    store.set_current_key("b", 3)
    count.update(5)
    assert store.keys_of("op.count") == [("b", 3), ("stored", 7)]
    assert store.keys_of("op.tags") == [("m", 4)]
    assert store.flush() == [("op.count", 9, "a", "", None, None, REMOVED, None),
                             ("op.count", 3, "b", "", None, "5", UPDATED, None)]


# -- list state -------------------------------------------------------------------------------------------------
def test_list_state_is_empty_list_when_empty_and_grows_with_add_and_add_all(store, ctx):
    """An add checks its element at once and the list's text is written at the flush, whole, from what the adds,
    updates and clears of the microbatch left; the next microbatch's adds go on from the stored list."""
    items = ctx.get_list_state(ListStateDescriptor("items", Types.LONG()))
    store.set_current_key("a", 1)
    assert items.get() == []
    items.add(1)
    items.add_all([2, 3])
    items.add_all([])
    assert items.get() == [1, 2, 3]
    with pytest.raises(TypeError):
        items.add("four")
    assert items.get() == [1, 2, 3]
    items.update([9])
    items.add(10)
    assert items.get() == [9, 10]
    store.set_current_key("b", 2)
    items.add(5)
    items.clear()
    assert store.flush() == [("op.items", 1, "a", "", None, "[9,10]", CREATED, None)]
    store.set_current_key("a", 1)
    items.add(11)
    items.add(12)
    assert items.get() == [9, 10, 11, 12]
    assert store.flush() == [("op.items", 1, "a", "", None, "[9,10,11,12]", UPDATED, None)]


def test_list_state_created_and_emptied_in_one_microbatch_flushes_nothing(store, ctx):
    items = ctx.get_list_state(ListStateDescriptor("items", Types.LONG()))
    store.set_current_key("a", 1)
    items.add(1)
    items.update([])
    assert items.get() == []
    assert store.flush() == []


def test_list_state_update_with_empty_list_on_a_stored_list_flushes_a_tombstone(store, ctx):
    items = ctx.get_list_state(ListStateDescriptor("items", Types.LONG()))
    store.load("op.items", "a", "", None, 2, "[1,2]")
    store.set_current_key("a", 2)
    assert items.get() == [1, 2]
    items.update([])
    assert items.get() == []
    assert store.flush() == [("op.items", 2, "a", "", None, None, REMOVED, None)]


def test_list_state_rejects_none_elements(store, ctx):
    items = ctx.get_list_state(ListStateDescriptor("items", Types.LONG()))
    store.set_current_key("a", 1)
    for call in (lambda: items.add(None), lambda: items.add_all([1, None]), lambda: items.update([None])):
        with pytest.raises(ValueError, match="cannot add None"):
            call()
    assert items.get() == []


def test_list_state_update_none_and_add_all_none_raise_value_error(store, ctx):
    items = ctx.get_list_state(ListStateDescriptor("items", Types.LONG()))
    store.set_current_key("a", 1)
    items.add(1)
    with pytest.raises(ValueError, match=r"update\(None\)"):
        items.update(None)
    with pytest.raises(ValueError, match=r"add_all\(None\)"):
        items.add_all(None)
    assert items.get() == [1]


def test_mutating_an_element_returned_by_list_state_get_does_not_change_the_state(store, ctx):
    items = ctx.get_list_state(ListStateDescriptor("items", POINT))
    store.load("op.items", "a", "", None, 1, POINT_LIST.dumps([{"x": 1, "y": "a"}]))
    store.set_current_key("a", 1)
    items.get()[0]["x"] = 99
    assert items.get() == [{"x": 1, "y": "a"}]


# -- map state --------------------------------------------------------------------------------------------------
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


def test_map_state_put_flushes_one_row_per_entry_keyed_by_the_json_text_of_the_map_key(store, ctx):
    by_name = ctx.get_map_state(MapStateDescriptor("by_name", Types.STRING(), Types.LONG()))
    by_id = ctx.get_map_state(MapStateDescriptor("by_id", Types.LONG(), Types.STRING()))
    store.set_current_key("a", 3)
    by_name.put("even", 2)
    by_name.put("odd", 1)
    by_id.put(42, "answer")
    assert store.flush() == [("op.by_id", 3, "a", "", "42", '"answer"', CREATED, None),
                             ("op.by_name", 3, "a", "", '"even"', "2", CREATED, None),
                             ("op.by_name", 3, "a", "", '"odd"', "1", CREATED, None)]


def test_map_state_entries_loaded_as_rows_read_back_as_one_map(store, ctx):
    m = ctx.get_map_state(MapStateDescriptor("m", Types.LONG(), POINT))
    store.load("op.m", "a", "", "1", 4, POINT.dumps({"x": 1, "y": "one"}))
    store.load("op.m", "a", "", "2", 4, POINT.dumps({"x": 2}))
    store.load("op.m", "b", "", "1", 5, POINT.dumps({"x": 9}))
    store.set_current_key("a", 4)
    assert dict(m.items()) == {1: {"x": 1, "y": "one"}, 2: {"x": 2, "y": None}}
    assert m.contains(2) and not m.contains(3)


def test_map_state_updating_one_entry_of_a_stored_map_flushes_only_that_entry(store, ctx):
    m = ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), Types.LONG()))
    store.load("op.m", "a", "", '"x"', 1, "1")
    store.load("op.m", "a", "", '"y"', 1, "2")
    store.set_current_key("a", 1)
    m.put("x", 10)
    m.put("y", 2)  # written back unchanged
    assert store.flush() == [("op.m", 1, "a", "", '"x"', "10", UPDATED, None)]


def test_map_state_remove_flushes_one_tombstone_and_removing_the_last_entry_empties_the_state(store, ctx):
    m = ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), Types.LONG()))
    store.load("op.m", "a", "", '"only"', 1, "1")
    store.set_current_key("a", 1)
    m.remove("only")
    assert m.is_empty()
    assert store.flush() == [("op.m", 1, "a", "", '"only"', None, REMOVED, None)]
    assert m.is_empty()


def test_map_state_clear_flushes_a_tombstone_per_stored_entry(store, ctx):
    m = ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), Types.LONG()))
    store.load("op.m", "a", "", '"x"', 1, "1")
    store.load("op.m", "a", "", '"y"', 1, "2")
    store.set_current_key("a", 1)
    m.put("z", 3)  # never stored: cleared before the flush, so no row
    m.clear()
    assert m.is_empty()
    assert store.flush() == [("op.m", 1, "a", "", '"x"', None, REMOVED, None),
                             ("op.m", 1, "a", "", '"y"', None, REMOVED, None)]


def test_map_state_put_of_a_none_value_raises_value_error(store, ctx):
    m = ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), Types.LONG()))
    store.set_current_key("a", 1)
    with pytest.raises(ValueError, match="remove"):
        m.put("x", None)
    assert m.is_empty() and store.flush() == []


def test_map_state_rejects_keys_of_the_wrong_type(store, ctx):
    m = ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), Types.LONG()))
    store.set_current_key("a", 1)
    with pytest.raises(TypeError):
        m.put(1, 1)
    assert m.is_empty()


# -- reducing and aggregating state -----------------------------------------------------------------------------
def test_reducing_state_folds_added_values_and_is_none_when_empty(store, ctx):
    total = ctx.get_reducing_state(ReducingStateDescriptor("total", lambda a, b: a + b, Types.LONG()))
    store.set_current_key("a", 1)
    assert total.get() is None
    for v in (1, 2, 3):
        total.add(v)
    assert total.get() == 6
    total.clear()
    assert total.get() is None


def test_aggregating_state_uses_the_aggregate_function_and_stores_the_accumulator(store, ctx):
    avg = ctx.get_aggregating_state(AggregatingStateDescriptor("avg", Mean(), Types.LIST(Types.LONG())))
    store.set_current_key("a", 1)
    assert avg.get() is None
    for v in (1, 2, 6):
        avg.add(v)
    assert avg.get() == 3.0
    (_, _, _, _, _, text, delta, _), = store.flush()
    assert Types.LIST(Types.LONG()).loads(text) == [9, 3] and delta == CREATED  # the accumulator is what is stored
    avg.clear()
    assert avg.get() is None


def test_aggregating_state_add_none_raises_value_error(store, ctx):
    avg = ctx.get_aggregating_state(AggregatingStateDescriptor("avg", Mean(), Types.LIST(Types.LONG())))
    store.set_current_key("a", 1)
    with pytest.raises(ValueError, match="None"):
        avg.add(None)
    assert avg.get() is None


# -- scoping --------------------------------------------------------------------------------------------------
def test_namespaces_keep_separate_values_for_the_same_key(store, ctx):
    count = ctx.get_state(ValueStateDescriptor("count", Types.LONG(), 0))
    store.set_current_key("a", 1)
    count.update(1)
    count.set_current_namespace("window-10")
    assert count.value() == 0
    count.update(10)
    count.set_current_namespace("")
    assert count.value() == 1
    assert [(row[3], row[5]) for row in store.flush()] == [("", "1"), ("window-10", "10")]
    # A namespace cleared (a window fired and purged) leaves nothing held after the flush; it reads empty again.
    count.set_current_namespace("window-10")
    count.clear()
    assert [(row[3], row[5], row[6]) for row in store.flush()] == [("window-10", None, REMOVED)]
    assert sorted(store._values) == [("op.count", "")]
    assert count.value() == 0 and not store.flush()


def test_state_is_scoped_to_the_current_key(store, ctx):
    items = ctx.get_list_state(ListStateDescriptor("items", Types.STRING()))
    store.set_current_key("a", 3)
    items.add("for a")
    store.set_current_key("b", 7)
    assert items.get() == []
    items.add("for b")
    store.set_current_key("a", 3)
    assert items.get() == ["for a"]
    assert store.flush() == [("op.items", 3, "a", "", None, '["for a"]', CREATED, None),
                             ("op.items", 7, "b", "", None, '["for b"]', CREATED, None)]


def test_registering_the_same_name_with_another_type_is_refused(ctx):
    ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
    with pytest.raises(ValueError, match="registered twice"):
        ctx.get_state(ValueStateDescriptor("count", Types.STRING()))


# -- flush ------------------------------------------------------------------------------------------------------
def test_flush_returns_encoded_values_that_decode_back_for_all_five_types(store, ctx):
    v = ctx.get_state(ValueStateDescriptor("v", POINT))
    lst = ctx.get_list_state(ListStateDescriptor("l", POINT))
    m = ctx.get_map_state(MapStateDescriptor("m", Types.LONG(), POINT))
    r = ctx.get_reducing_state(ReducingStateDescriptor("r", max, Types.DOUBLE()))
    a = ctx.get_aggregating_state(AggregatingStateDescriptor("a", Mean(), Types.LIST(Types.LONG())))
    store.set_current_key("k", 9)
    p = {"x": 1, "y": "one"}
    v.update(p)
    lst.add(p)
    m.put(1, p)
    r.add(2.5)
    a.add(4)
    rows = store.flush()
    assert {(kg, key, ns, delta) for _, kg, key, ns, _, _, delta, _ in rows} == {(9, "k", "", CREATED)}
    assert {name: user_key for name, _, _, _, user_key, _, _, _ in rows} == {
        "op.v": None, "op.l": None, "op.m": "1", "op.r": None, "op.a": None}
    m_type = ctx.descriptors["op.m"].value_type
    decoded = {name: (m_type if name == "op.m" else ctx.descriptors[name].stored_type).loads(text)
               for name, _, _, _, _, text, _, _ in rows}
    assert decoded == {"op.v": p, "op.l": [p], "op.m": p, "op.r": 2.5, "op.a": [4, 1]}


def test_flush_marks_created_updated_and_removed_entries(store, ctx):
    count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
    store.load("op.count", "a", "", None, 4, "5")
    store.load("op.count", "b", "", None, 6, "7")
    store.set_current_key("a", 4)
    count.clear()
    store.set_current_key("b", 6)
    count.update(8)
    store.set_current_key("c", 2)
    count.update(1)
    assert store.flush() == [("op.count", 4, "a", "", None, None, REMOVED, None),
                             ("op.count", 6, "b", "", None, "8", UPDATED, None),
                             ("op.count", 2, "c", "", None, "1", CREATED, None)]


def test_flush_skips_entries_read_or_written_back_unchanged(store, ctx):
    count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
    items = ctx.get_list_state(ListStateDescriptor("items", Types.LONG()))
    store.load("op.count", "a", "", None, 4, "5")
    store.load("op.items", "a", "", None, 4, "[1,2]")
    store.load("op.count", "b", "", None, 6, "7")
    store.set_current_key("a", 4)
    count.update(count.value())
    items.update(items.get())
    store.set_current_key("b", 6)
    count.value()
    assert store.flush() == []


def test_flush_makes_the_changes_the_stored_state_so_a_second_flush_returns_nothing(store, ctx):
    count = ctx.get_state(ValueStateDescriptor("count", Types.LONG(), 0))
    m = ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), Types.LONG()))
    store.set_current_key("a", 1)
    count.update(1)
    m.put("x", 1)
    assert len(store.flush()) == 2
    assert store.flush() == []
    store.set_current_key("a", 1)  # the next microbatch of the run
    assert count.value() == 1 and m.get("x") == 1
    count.clear()
    m.remove("x")
    assert store.flush() == [("op.count", 1, "a", "", None, None, REMOVED, None),
                             ("op.m", 1, "a", "", '"x"', None, REMOVED, None)]
    assert store.flush() == []


def test_values_read_in_the_same_microbatch_equal_values_read_after_a_flush_and_a_reload(store, ctx):
    v = ctx.get_state(ValueStateDescriptor("v", POINT))
    lst = ctx.get_list_state(ListStateDescriptor("l", Types.DOUBLE()))
    m = ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), POINT))
    r = ctx.get_reducing_state(ReducingStateDescriptor("r", lambda a, b: a + b, Types.DOUBLE()))

    def read():  # repr, so an int read as 2 and a float read as 2.0 differ
        return repr((v.value(), lst.get(), m.get("p"), r.get()))

    store.set_current_key("a", 1)
    v.update({"x": 1})  # y omitted: a nullable field
    lst.add(2)  # an int in a DOUBLE list
    m.put("p", {"y": "why"})
    r.add(3)
    in_microbatch = read()
    assert in_microbatch == repr(({"x": 1, "y": None}, [2.0], {"x": None, "y": "why"}, 3.0))
    rows = store.flush()
    store.set_current_key("a", 1)
    assert read() == in_microbatch  # after a flush, in the same run
    reloaded = KeyedStateStore()
    for name, kg, key, ns, user_key, text, _, _ in rows:
        reloaded.load(name, key, ns, user_key, kg, text)
    reloaded_ctx = RuntimeContext("op", reloaded, 0, 1, 128)
    v = reloaded_ctx.get_state(ValueStateDescriptor("v", POINT))
    lst = reloaded_ctx.get_list_state(ListStateDescriptor("l", Types.DOUBLE()))
    m = reloaded_ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), POINT))
    r = reloaded_ctx.get_reducing_state(ReducingStateDescriptor("r", lambda a, b: a + b, Types.DOUBLE()))
    reloaded.set_current_key("a", 1)
    assert read() == in_microbatch  # in a later run


def test_entries_loaded_as_columns_decode_together_as_each_alone_and_a_bad_one_is_named_when_read(store, ctx):
    """The first read after a load decodes every entry loaded (one JSON parse, ``_decode_loaded``); the values
    are those of a read of each alone, and a stored value that does not load fails the read of its own key only,
    the error naming it."""
    v = ctx.get_state(ValueStateDescriptor("v", POINT))
    texts = {"a": '{"x": 1, "y": "one"}', "b": '{"x": 2}', "c": '{"x": 3.5}', "d": "null", "e": '{"x": 5}'}
    store.load_columns(["op.v"] * 5, list(texts), [""] * 5, [None] * 5, [1, 2, 3, 4, 5], list(texts.values()),
                       [None] * 5)
    store.set_current_key("a", 1)
    assert v.value() == {"x": 1, "y": "one"}
    store.set_current_key("c", 3)
    with pytest.raises(StoredValueError, match=r"state 'op.v' of key 'c' holds a stored value that is not its "
                                               r"declared ROW"):
        v.value()
    one_by_one = KeyedStateStore()
    alone = RuntimeContext("op", one_by_one, 0, 1, 128).get_state(ValueStateDescriptor("v", POINT))
    for key in ("b", "d", "e"):
        store.set_current_key(key, 1)
        one_by_one.load("op.v", key, "", None, 1, texts[key])
        one_by_one.set_current_key(key, 1)
        assert repr(v.value()) == repr(alone.value())
    good = {k: t for k, t in texts.items() if k != "c"}
    store = KeyedStateStore()
    v = RuntimeContext("op", store, 0, 1, 128).get_state(ValueStateDescriptor("v", POINT))
    store.load_columns(["op.v"] * 4, list(good), [""] * 4, [None] * 4, [1] * 4, list(good.values()), [None] * 4)
    store.set_current_key("e", 1)
    assert v.value() == {"x": 5, "y": None}
    assert set(store.entries("op.v", "").decoded) == set(good)  # all four decoded by the first read
