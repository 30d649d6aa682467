"""Flink's operator state redistribution cases (RoundRobinOperatorStateRepartitioner), up and down."""
import pytest

from state_store.repartition import broadcast, split_distribute, split_slices, union


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
