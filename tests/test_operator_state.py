"""Operator state of one subtask: list, union list and broadcast state, and what changed."""
import pytest

from state_store.descriptors import ListStateDescriptor, MapStateDescriptor
from state_store.operator_state import BROADCAST, SPLIT_DISTRIBUTE, UNION, OperatorStateStore
from state_store.types import Types

OFFSETS = ListStateDescriptor("offsets", Types.LONG())
RULES = MapStateDescriptor("rules", Types.STRING(), Types.DOUBLE())


def test_list_state_add_update_clear_and_changes_in_split_mode():
    store = OperatorStateStore("op")
    offsets = store.get_list_state(OFFSETS)
    assert offsets.get() == []
    offsets.add(1)
    offsets.add_all([2, 3])
    assert offsets.get() == [1, 2, 3]
    assert store.changes() == [("op.offsets", SPLIT_DISTRIBUTE, "[1,2,3]")]
    offsets.update([7])
    assert offsets.get() == [7]
    offsets.clear()
    assert offsets.get() == [] and store.changes() == []  # never stored: nothing to write


def test_list_state_validates_elements_and_rejects_none():
    offsets = OperatorStateStore("op").get_list_state(OFFSETS)
    with pytest.raises(TypeError):
        offsets.add("one")
    with pytest.raises(ValueError, match="cannot add None"):
        offsets.add(None)
    with pytest.raises(ValueError, match="cannot add None"):
        offsets.update([1, None])
    assert offsets.get() == []


def test_union_list_state_is_stored_in_union_mode_and_restored():
    store = OperatorStateStore("op")
    store.get_union_list_state(OFFSETS).update([4, 5])
    (qname, mode, text), = store.changes()
    assert (qname, mode) == ("op.offsets", UNION)
    restored = OperatorStateStore("op", {qname: (mode, text)})
    assert restored.get_union_list_state(OFFSETS).get() == [4, 5]
    assert restored.changes() == []  # read but unchanged


def test_stored_state_requested_in_another_mode_is_refused():
    store = OperatorStateStore("op", {"op.offsets": (UNION, "[1]")})
    with pytest.raises(ValueError, match="stored as union state but is now requested as split"):
        store.get_list_state(OFFSETS)


def test_clearing_stored_list_state_emits_a_tombstone():
    store = OperatorStateStore("op", {"op.offsets": (SPLIT_DISTRIBUTE, "[1,2]")})
    store.get_list_state(OFFSETS).clear()
    assert store.changes() == [("op.offsets", SPLIT_DISTRIBUTE, None)]


def test_broadcast_state_map_operations_and_changes():
    store = OperatorStateStore("op")
    rules = store.get_broadcast_state(RULES)
    assert rules.is_empty() and rules.get("r") is None
    rules.put("a", 1.0)
    rules.put_all({"b": 2.0, "c": 3.0})
    rules.remove("b")
    assert rules.contains("a") and not rules.contains("b")
    assert sorted(rules.keys()) == ["a", "c"] and sorted(rules.items()) == [("a", 1.0), ("c", 3.0)]
    (qname, mode, text), = store.changes()
    assert (qname, mode) == ("op.rules", BROADCAST)
    assert RULES.stored_type.loads(text) == {"a": 1.0, "c": 3.0}


def test_broadcast_state_rejects_values_of_the_wrong_type():
    rules = OperatorStateStore("op").get_broadcast_state(RULES)
    with pytest.raises(TypeError):
        rules.put("a", "high")
    assert rules.is_empty()


def test_read_only_broadcast_state_raises_permission_error_on_every_write_but_reads():
    store = OperatorStateStore("op", {"op.rules": (BROADCAST, RULES.stored_type.dumps({"a": 1.0}))},
                               read_only_broadcast=True)
    rules = store.get_broadcast_state(RULES)
    for write in (lambda: rules.put("b", 2.0), lambda: rules.put_all({"b": 2.0}),
                  lambda: rules.remove("a"), rules.clear):
        with pytest.raises(PermissionError, match="read-only"):
            write()
    assert rules.get("a") == 1.0 and store.changes() == []


def test_broadcast_state_needs_a_map_state_descriptor():
    with pytest.raises(TypeError, match="MapStateDescriptor"):
        OperatorStateStore("op").get_broadcast_state(OFFSETS)


def test_same_name_registered_in_two_modes_is_refused():
    store = OperatorStateStore("op")
    store.get_list_state(OFFSETS)
    with pytest.raises(ValueError, match="already registered as split, not union"):
        store.get_union_list_state(OFFSETS)


def test_raw_operator_state_is_written_as_bytes_and_read_back_from_stored_entries():
    store = OperatorStateStore("op")
    assert store.raw() is None
    store.set_raw(b"\x01\x02")
    (qname, mode, text), = store.changes()
    restored = OperatorStateStore("op", {qname: (mode, text)})
    assert restored.raw() == b"\x01\x02" and restored.changes() == []
    assert "op.__raw__" not in restored.descriptors()


def test_unregistered_stored_state_is_left_untouched():
    store = OperatorStateStore("op", {"op.old": (SPLIT_DISTRIBUTE, "[1]")})
    store.get_list_state(OFFSETS).add(1)
    assert [q for q, _, _ in store.changes()] == ["op.offsets"]
