"""Flink's KeyGroupRangeAssignment, checked against Flink's own numbers."""
import pytest

from state_store.key_groups import (
    KeyGroupRange,
    check_parallelism,
    compute_default_max_parallelism,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
    key_group_ranges,
)


def test_max_parallelism_128_at_parallelism_3_gives_flinks_ranges():
    ranges = key_group_ranges(128, 3)
    assert [r.to_list() for r in ranges] == [[0, 42], [43, 85], [86, 127]]
    assert [len(r) for r in ranges] == [43, 43, 42]


@pytest.mark.parametrize("parallelism, expected", [(1, 128), (86, 256), (1000, 2048), (21846, 32768)])
def test_default_max_parallelism_follows_flinks_rule(parallelism, expected):
    assert compute_default_max_parallelism(parallelism) == expected


COMBINATIONS = [(maxp, p) for maxp in (1, 2, 3, 7, 10, 128, 129, 1000)
                for p in sorted({1, 2, 3, 5, 7, 64, 127, 128, 129, maxp}) if p <= maxp]
COMBINATIONS += [(32768, p) for p in (1, 3, 1000, 32767, 32768)]


@pytest.mark.parametrize("maxp, p", COMBINATIONS)
def test_ranges_are_contiguous_cover_all_key_groups_and_agree_with_operator_index(maxp, p):
    ranges = key_group_ranges(maxp, p)
    assert ranges[0].start == 0 and ranges[-1].end == maxp - 1
    for previous, current in zip(ranges, ranges[1:]):
        assert current.start == previous.end + 1
    assert all(len(r) >= 1 for r in ranges)  # every subtask owns at least one key group
    # Contiguous, non-overlapping ranges covering 0..maxP-1: each key group has exactly one
    # range; the owner computed from the key group alone must be that range's subtask.
    for subtask, r in enumerate(ranges):
        for key_group in r:
            assert compute_operator_index_for_key_group(maxp, p, key_group) == subtask


def test_key_group_range_contains_iterates_and_is_empty_when_end_before_start():
    r = KeyGroupRange(3, 5)
    assert list(r) == [3, 4, 5] and 3 in r and 5 in r and 6 not in r and 2 not in r
    assert len(KeyGroupRange(5, 4)) == 0 and list(KeyGroupRange(5, 4)) == []


@pytest.mark.parametrize("parallelism", [0, -1, -128])
def test_zero_or_negative_parallelism_is_refused(parallelism):
    with pytest.raises(ValueError, match="parallelism must be a positive integer"):
        compute_key_group_range_for_operator_index(128, parallelism, 0)
    with pytest.raises(ValueError, match="positive integer"):
        compute_default_max_parallelism(parallelism)
    with pytest.raises(ValueError, match="positive integer"):
        check_parallelism(parallelism, 128)


@pytest.mark.parametrize("parallelism", [0, -1])
def test_key_group_ranges_refuses_zero_or_negative_parallelism(parallelism):
    with pytest.raises(ValueError, match="parallelism must be a positive integer"):
        key_group_ranges(128, parallelism)


def test_parallelism_above_max_parallelism_error_names_both_numbers():
    with pytest.raises(ValueError) as err:
        key_group_ranges(4, 5)
    assert "5" in str(err.value) and "4" in str(err.value)
    assert "parallelism 5 is above max_parallelism 4" in str(err.value)


@pytest.mark.parametrize("maxp", [0, 32769, True, 2.0])
def test_max_parallelism_outside_1_to_32768_is_refused(maxp):
    with pytest.raises(ValueError, match="max_parallelism must be an integer in"):
        check_parallelism(1, maxp)


def test_operator_index_outside_parallelism_is_refused():
    with pytest.raises(ValueError, match="operator index 3 is outside"):
        compute_key_group_range_for_operator_index(128, 3, 3)
