"""Flink's operator state redistribution cases (RoundRobinOperatorStateRepartitioner), up and down."""
import pytest

from state_store.repartition import (
    broadcast,
    java_hash_map_order,
    java_string_hash,
    kafka_partition_owner,
    operator_split_starts,
    place_source_entries,
    split_distribute,
    split_slices,
    union,
    union_stored,
)


def test_split_lists_abc_and_de_to_three_subtasks_give_ab_cd_e():
    assert split_distribute([["a", "b", "c"], ["d", "e"]], 3) == [["a", "b"], ["c", "d"], ["e"]]


@pytest.mark.parametrize("old,p,expected", [
    ([["a", "b", "c"], ["d", "e"]], 1, [["a", "b", "c", "d", "e"]]),
    ([["a"], ["b"], ["c"], ["d"]], 2, [["a", "b"], ["c", "d"]]),
    ([["a", "b"]], 4, [["a"], ["b"], [], []]),
    ([[], [], []], 2, [[], []]),
    ([["a", "b", "c", "d", "e", "f", "g"]], 3, [["a", "b", "c"], ["d", "e"], ["f", "g"]]),
])
def test_split_gives_the_first_total_mod_p_subtasks_one_more_in_contiguous_slices(old, p, expected):
    assert split_distribute(old, p) == expected
    assert [e for part in split_distribute(old, p) for e in part] == [e for part in old for e in part]


@pytest.mark.parametrize("p_old,p_new", [(2, 3), (3, 1), (4, 2)])
def test_union_gives_every_new_subtask_every_element(p_old, p_new):
    old = [[f"s{i}e{j}" for j in range(i + 1)] for i in range(p_old)]
    everything = [e for part in old for e in part]
    assert union(old, p_new) == [everything] * p_new
    assert union_stored(old, p_new) == [everything] + [[]] * (p_new - 1)  # kept once; every subtask given it all


@pytest.mark.parametrize("p_old,p_new,expected", [
    (2, 3, [{"o": 0}, {"o": 1}, {"o": 0}]),
    (3, 1, [{"o": 0}]),
    (4, 2, [{"o": 0}, {"o": 1}]),
])
def test_broadcast_gives_new_subtask_i_the_map_of_old_subtask_i_mod_p_old(p_old, p_new, expected):
    assert broadcast([{"o": i} for i in range(p_old)], p_new) == expected


def test_split_slices_cover_the_list_once():
    assert split_slices(5, 3) == [(0, 2), (2, 4), (4, 5)]
    assert split_slices(0, 2) == [(0, 0), (0, 0)]


@pytest.mark.parametrize("p", [0, -1, 1.5, True])
def test_a_parallelism_that_is_not_a_positive_integer_is_refused(p):
    with pytest.raises(ValueError, match="new parallelism must be a positive integer"):
        split_distribute([["a"]], p)


# -- several split states of one operator: Flink rotates where each starts --------------------------------------
@pytest.mark.parametrize("sizes, per_subtask", [
    # 2 -> 3 subtasks. Java's HashMap iterates "split" (bucket 3) before "pending" (bucket 7): "split" starts at
    # subtask 0 and gives its extra elements to 0 and 1, so "pending" starts at subtask 2, where they stopped.
    ({"split": 5, "pending": 4}, {"split": [2, 2, 1], "pending": [1, 1, 2]}),
    ({"split": 5, "pending": 7}, {"split": [2, 2, 1], "pending": [2, 2, 3]}),  # every start at 0: 3+2, 2+2, 2+1
])
def test_each_further_split_state_starts_at_the_first_subtask_the_previous_gave_no_extra_element(sizes, per_subtask):
    starts = operator_split_starts({f"op.{name}": size for name, size in sizes.items()}, 3)
    assert starts == {"op.split": 0, "op.pending": 2}
    for name, size in sizes.items():
        old = [[f"{name}{i}" for i in range(size // 2)], [f"{name}{i}" for i in range(size // 2, size)]]
        new = split_distribute(old, 3, starts[f"op.{name}"])
        assert [len(part) for part in new] == per_subtask[name]
        assert [e for part in new[starts[f"op.{name}"]:] + new[:starts[f"op.{name}"]] for e in part] == \
            [e for part in old for e in part]  # still contiguous slices, in order, from the start subtask on


def test_split_states_rotate_per_operator_and_the_source_offsets_are_an_operator_of_their_own():
    starts = operator_split_starts({"a.split": 5, "a.pending": 4, "b.pending": 4, "__source__.offsets": 2}, 3)
    assert starts == {"a.split": 0, "a.pending": 2, "b.pending": 0, "__source__.offsets": 0}


def test_java_string_hash_is_javas_over_utf16_code_units():
    # Values printed by Java 17's String.hashCode().
    assert [java_string_hash(s) for s in ("a", "ü", "😀", "split", "pending", "buffer")] == \
        [97, 252, 1772899, 109648666, -682587753, -1378118592]


def test_java_hash_map_order_is_javas_bucket_order_and_grows_the_table_past_three_quarters_full():
    # Orders printed by a Java 17 HashMap<String, ?> filled with put() in name order.
    assert java_hash_map_order(["seen", "buffer", "words", "union", "offsets", "count", "bcast"]) == \
        ["bcast", "offsets", "count", "words", "buffer", "union", "seen"]
    twelve = [f"state{i}" for i in range(12)]  # 16 buckets hold 12 names
    assert java_hash_map_order(twelve) == ["state0", "state9", "state6", "state5", "state11", "state8", "state10",
                                           "state7", "state2", "state1", "state4", "state3"]
    assert java_hash_map_order(twelve + ["state12"]) == [  # a 13th doubles the table to 32 buckets
        "state9", "state6", "state5", "state8", "state7", "state2", "state1", "state4", "state3", "state0", "state12",
        "state11", "state10"]


# Printed by Java 17: (((topic.hashCode() * 31) & 0x7FFFFFFF) % p + i) % p for partitions i = 0..3.
@pytest.mark.parametrize("topic, p, owners", [
    ("rescale", 2, [1, 0, 1, 0]), ("rescale", 3, [0, 1, 2, 0]), ("events", 3, [2, 0, 1, 2]),
    ("events", 4, [3, 0, 1, 2]), ("kafka-rescale", 2, [0, 1, 0, 1]), ("kafka-rescale", 4, [0, 1, 2, 3])])
def test_a_kafka_partition_goes_to_the_subtask_flinks_kafka_source_assigns_it(topic, p, owners):
    assert [kafka_partition_owner(topic, i, p) for i in range(4)] == owners


def _kafka(topic, partition, offset=0):
    return {"split": f"main:{topic}:{partition}", "topic": topic, "partition": partition, "offset": offset}


def test_source_entries_give_the_seeds_table_from_any_old_layout_and_cut_other_sources_contiguously():
    p0, p1, p2, p3 = (_kafka("kafka-rescale", i, 10 * i) for i in range(4))
    on_two = place_source_entries([p3, p1, p0, p2], 2)
    assert on_two == [[p0, p2], [p1, p3]]
    # The seeds' table: 4 partitions on 2 subtasks, then 3 subtasks get [p1, p4], [p2], [p3] (1-based).
    assert place_source_entries([e for part in on_two for e in part], 3) == [[p0, p3], [p1], [p2]]
    files = {"split": "side", "offset": {"files": 3}}
    assert place_source_entries([files, p1, p0], 3) == [[files, p0], [p1], []]
