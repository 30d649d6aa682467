"""Operator state of one subtask: list, union list, broadcast and raw state, and what a flush returns.

A flush row is (qualified name, mode, text or None, delta): delta +1 created, -1 removed, 0 updated.
"""
import pytest

from state_store.state.descriptors import ListStateDescriptor, MapStateDescriptor
from state_store.state.operator import BROADCAST, RAW, SPLIT_DISTRIBUTE, UNION, OperatorStateStore
from state_store.types import Types

OFFSETS = ListStateDescriptor("offsets", Types.LONG())
RULES = MapStateDescriptor("rules", Types.STRING(), Types.DOUBLE())
BYTES = Types.BYTES()
CREATED, UPDATED, REMOVED = 1, 0, -1


# -- list state -------------------------------------------------------------------------------------------------
def test_list_state_add_update_and_clear_in_split_mode():
    offsets = OperatorStateStore("op").get_list_state(OFFSETS)
    assert offsets.get() == []
    offsets.add(1)
    offsets.add_all([2, 3])
    assert offsets.get() == [1, 2, 3]
    offsets.update([7])
    assert offsets.get() == [7]
    offsets.clear()
    assert offsets.get() == []


def test_list_state_flush_marks_created_updated_and_removed_and_stores_the_change():
    store = OperatorStateStore("op")
    offsets = store.get_list_state(OFFSETS)
    offsets.add_all([1, 2, 3])
    assert store.flush() == [("op.offsets", SPLIT_DISTRIBUTE, "[1,2,3]", CREATED)]
    assert store.flush() == []  # the change is now what is stored
    offsets.update([7])
    assert store.flush() == [("op.offsets", SPLIT_DISTRIBUTE, "[7]", UPDATED)]
    offsets.clear()
    assert store.flush() == [("op.offsets", SPLIT_DISTRIBUTE, None, REMOVED)]
    assert store.flush() == []


def test_list_state_created_and_cleared_before_a_flush_flushes_nothing():
    store = OperatorStateStore("op")
    offsets = store.get_list_state(OFFSETS)
    offsets.add(1)
    offsets.clear()
    assert store.flush() == []


def test_list_state_validates_elements_and_rejects_none():
    offsets = OperatorStateStore("op").get_list_state(OFFSETS)
    with pytest.raises(TypeError):
        offsets.add("one")
    with pytest.raises(ValueError, match="cannot add None"):
        offsets.add(None)
    with pytest.raises(ValueError, match="cannot add None"):
        offsets.update([1, None])
    assert offsets.get() == []


def test_list_state_update_none_and_add_all_none_raise_value_error():
    offsets = OperatorStateStore("op").get_list_state(OFFSETS)
    offsets.add(1)
    with pytest.raises(ValueError, match=r"update\(None\)"):
        offsets.update(None)
    with pytest.raises(ValueError, match=r"add_all\(None\)"):
        offsets.add_all(None)
    assert offsets.get() == [1]


def test_clearing_stored_list_state_flushes_a_tombstone():
    store = OperatorStateStore("op", own={"op.offsets": (SPLIT_DISTRIBUTE, "[1,2]")})
    offsets = store.get_list_state(OFFSETS)
    assert offsets.get() == [1, 2]
    offsets.clear()
    assert store.flush() == [("op.offsets", SPLIT_DISTRIBUTE, None, REMOVED)]


POINT = Types.ROW_NAMED(["x", "y"], [Types.LONG(), Types.STRING()])


def test_list_state_values_read_in_the_run_that_wrote_them_equal_values_read_after_a_restore():
    store = OperatorStateStore("op")
    points = store.get_list_state(ListStateDescriptor("points", POINT))
    points.add({"x": 1})
    own = {qname: (mode, text) for qname, mode, text, _ in store.flush()}
    restored = OperatorStateStore("op", own=own).get_list_state(ListStateDescriptor("points", POINT))
    assert points.get() == restored.get()


# -- union list state -----------------------------------------------------------------------------------------
def test_union_list_state_is_flushed_in_union_mode_and_restored():
    store = OperatorStateStore("op")
    store.get_union_list_state(OFFSETS).update([4, 5])
    (qname, mode, text, delta), = store.flush()
    assert (qname, mode, delta) == ("op.offsets", UNION, CREATED)
    restored = OperatorStateStore("op", own={qname: (mode, text)}, union={qname: [text]})
    assert restored.get_union_list_state(OFFSETS).get() == [4, 5]
    assert restored.flush() == []  # read but unchanged


def test_union_list_state_restores_the_concatenation_of_every_subtasks_list_in_subtask_order():
    union = {"op.offsets": ["[1,2]", "[3]", "[4,5]"]}  # stored by subtasks 0, 1 and 2
    for own in ({"op.offsets": (UNION, "[3]")}, None):  # subtask 1, and a new subtask with nothing of its own
        assert OperatorStateStore("op", own=own, union=union).get_union_list_state(OFFSETS).get() == [1, 2, 3, 4, 5]


def test_stored_state_requested_in_another_mode_is_refused():
    store = OperatorStateStore("op", own={"op.offsets": (UNION, "[1]")})
    with pytest.raises(ValueError, match="stored as union state but is now requested as split"):
        store.get_list_state(OFFSETS)


def test_same_name_registered_in_two_modes_is_refused():
    store = OperatorStateStore("op")
    store.get_list_state(OFFSETS)
    with pytest.raises(ValueError, match="already registered as split, not union"):
        store.get_union_list_state(OFFSETS)


def test_registering_again_in_a_later_microbatch_sees_the_live_value_not_the_restored_one():
    store = OperatorStateStore("op", own={"op.offsets": (SPLIT_DISTRIBUTE, "[1]")})
    store.get_list_state(OFFSETS).add(2)
    store.flush()
    assert store.get_list_state(OFFSETS).get() == [1, 2]


# -- broadcast state ------------------------------------------------------------------------------------------
def test_broadcast_state_map_operations_and_flush():
    store = OperatorStateStore("op")
    rules = store.get_broadcast_state(RULES)
    assert rules.is_empty() and rules.get("r") is None
    rules.put("a", 1.0)
    rules.put_all({"b": 2.0, "c": 3.0})
    rules.remove("b")
    assert rules.contains("a") and not rules.contains("b")
    assert sorted(rules.keys()) == ["a", "c"] and sorted(rules.items()) == [("a", 1.0), ("c", 3.0)]
    (qname, mode, text, delta), = store.flush()
    assert (qname, mode, delta) == ("op.rules", BROADCAST, CREATED)
    assert RULES.stored_type.loads(text) == {"a": 1.0, "c": 3.0}


def test_broadcast_state_rejects_values_of_the_wrong_type():
    rules = OperatorStateStore("op").get_broadcast_state(RULES)
    with pytest.raises(TypeError):
        rules.put("a", "high")
    assert rules.is_empty()


def test_read_only_broadcast_state_raises_permission_error_on_every_write_but_reads():
    store = OperatorStateStore("op", own={"op.rules": (BROADCAST, RULES.stored_type.dumps({"a": 1.0}))},
                               read_only_broadcast=True)
    rules = store.get_broadcast_state(RULES)
    for write in (lambda: rules.put("b", 2.0), lambda: rules.put_all({"b": 2.0}),
                  lambda: rules.remove("a"), rules.clear):
        with pytest.raises(PermissionError, match="read-only"):
            write()
    assert rules.get("a") == 1.0 and store.flush() == []


def test_broadcast_state_needs_a_map_state_descriptor():
    with pytest.raises(TypeError, match="MapStateDescriptor"):
        OperatorStateStore("op").get_broadcast_state(OFFSETS)


# -- raw state ------------------------------------------------------------------------------------------------
def test_raw_operator_state_is_flushed_as_bytes_and_read_back_from_stored_state():
    store = OperatorStateStore("op")
    assert store.raw() is None
    store.set_raw(b"\x01\x02")
    (qname, mode, text, delta), = store.flush()
    assert (qname, mode, text, delta) == ("op.__raw__", RAW, BYTES.dumps(b"\x01\x02"), CREATED)
    assert store.raw() == b"\x01\x02"  # what the next microbatch's initialize_state reads
    restored = OperatorStateStore("op", own={qname: (mode, text)})
    assert restored.raw() == b"\x01\x02"
    assert "op.__raw__" not in restored.descriptors() and restored.get_registered_state_names() == []


def test_raw_operator_state_is_what_the_last_snapshot_wrote_and_dropped_when_not_written_again():
    store = OperatorStateStore("op", own={"op.__raw__": (RAW, BYTES.dumps(b"old"))})
    assert store.raw() == b"old"
    store.set_raw(b"new")
    assert store.flush() == [("op.__raw__", RAW, BYTES.dumps(b"new"), UPDATED)]
    assert store.raw() == b"new"
    assert store.flush() == [("op.__raw__", RAW, None, REMOVED)]  # no set_raw since the last flush
    assert store.raw() is None
    assert store.flush() == []  # the tombstone is written once


def test_raw_operator_state_stored_but_never_written_in_a_run_is_dropped_at_the_first_flush():
    store = OperatorStateStore("op", own={"op.__raw__": (RAW, BYTES.dumps(b"old"))})
    assert store.flush() == [("op.__raw__", RAW, None, REMOVED)]


def test_raw_operator_state_set_to_none_flushes_a_tombstone():
    store = OperatorStateStore("op", own={"op.__raw__": (RAW, BYTES.dumps(b"old"))})
    store.set_raw(None)
    assert store.flush() == [("op.__raw__", RAW, None, REMOVED)]


def test_unregistered_stored_state_is_left_untouched():
    store = OperatorStateStore("op", own={"op.old": (SPLIT_DISTRIBUTE, "[1]")})
    store.get_list_state(OFFSETS).add(1)
    assert [q for q, _, _, _ in store.flush()] == ["op.offsets"]
    assert store.flush() == []
