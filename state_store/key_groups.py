"""Key groups: Flink's KeyGroupRangeAssignment, each rule in its scalar form and, beside it, its form as a Spark
column (pyspark imported inside those, so this module loads without Spark): the key group of a record is
computed in the JVM (``key_group_column``), its owner and a subtask's first key group both ways.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 1 << 7
UPPER_BOUND_MAX_PARALLELISM = 1 << 15


def round_up_to_power_of_two(x: int) -> int:
    """The smallest power of two >= x (1 for x <= 1)."""
    if x <= 1:
        return 1
    return 1 << (x - 1).bit_length()


def compute_default_max_parallelism(parallelism: int) -> int:
    """Flink's default: min(max(roundUpToPowerOfTwo(p + p/2), 128), 32768)."""
    check_parallelism(parallelism)
    return min(
        max(round_up_to_power_of_two(parallelism + parallelism // 2), DEFAULT_LOWER_BOUND_MAX_PARALLELISM),
        UPPER_BOUND_MAX_PARALLELISM,
    )


@dataclass(frozen=True)
class KeyGroupRange:
    """An inclusive range of key groups [start, end]; empty when end < start."""

    start: int
    end: int

    def __contains__(self, key_group: int) -> bool:
        return self.start <= key_group <= self.end

    def __len__(self) -> int:
        return max(0, self.end - self.start + 1)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end + 1))

    def to_list(self) -> list[int]:
        return [self.start, self.end]


def check_parallelism(parallelism: int, max_parallelism: int | None = None) -> None:
    """Raise ValueError naming the problem and the fix for an unusable pair."""
    if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism <= 0:
        raise ValueError(f"parallelism must be a positive integer, got {parallelism!r}")
    if parallelism > UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(f"parallelism {parallelism} is above Flink's limit {UPPER_BOUND_MAX_PARALLELISM}; lower it")
    if max_parallelism is None:
        return
    if (
        not isinstance(max_parallelism, int)
        or isinstance(max_parallelism, bool)
        or not 0 < max_parallelism <= UPPER_BOUND_MAX_PARALLELISM
    ):
        raise ValueError(
            f"max_parallelism must be an integer in [1, {UPPER_BOUND_MAX_PARALLELISM}], got {max_parallelism!r}"
        )
    if parallelism > max_parallelism:
        raise ValueError(
            f"parallelism {parallelism} is above max_parallelism {max_parallelism}: "
            f"each subtask needs at least one key group; lower parallelism to <= {max_parallelism}"
        )


def compute_key_group_range_for_operator_index(max_parallelism: int, parallelism: int,
                                               operator_index: int) -> KeyGroupRange:
    """The key groups owned by subtask ``operator_index`` (Flink's formula)."""
    check_parallelism(parallelism, max_parallelism)
    if not 0 <= operator_index < parallelism:
        raise ValueError(f"operator index {operator_index} is outside [0, {parallelism})")
    start = (operator_index * max_parallelism + parallelism - 1) // parallelism
    end = ((operator_index + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(start, end)


def compute_operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """The subtask that owns ``key_group``: key_group * parallelism / max_parallelism."""
    return key_group * parallelism // max_parallelism


def key_group_ranges(max_parallelism: int, parallelism: int) -> list[KeyGroupRange]:
    """The ranges of all subtasks, in subtask order."""
    check_parallelism(parallelism, max_parallelism)
    return [compute_key_group_range_for_operator_index(max_parallelism, parallelism, i) for i in range(parallelism)]


def key_group_column(key_column, max_parallelism: int):
    """A record's key group as a Spark column: pmod(hash(key), max_parallelism), Spark SQL's Murmur3 hash, stable
    across runs and machines."""
    from pyspark.sql import functions as F

    return F.pmod(F.hash(key_column), F.lit(max_parallelism)).cast("int")


def subtask_column(key_group_col, parallelism: int, max_parallelism: int):
    """``compute_operator_index_for_key_group`` as a Spark column: key_group * parallelism / max_parallelism."""
    from pyspark.sql import functions as F

    return F.floor(key_group_col * F.lit(parallelism) / F.lit(max_parallelism)).cast("int")


def first_key_group_column(subtask_col, parallelism: int, max_parallelism: int):
    """The first key group of a subtask (``compute_key_group_range_for_operator_index(...).start``) as a Spark
    column."""
    from pyspark.sql import functions as F

    return F.floor((subtask_col * F.lit(max_parallelism) + F.lit(parallelism - 1)) / F.lit(parallelism)).cast("int")
