"""Operator state redistribution on rescale: Flink's ``RoundRobinOperatorStateRepartitioner``, as pure functions.

No Spark here: ``restore`` applies these per state name inside Spark tasks.
Each function takes the old subtasks' values in subtask order and returns the
new subtasks' values in subtask order.

- **split** (ListState, SPLIT_DISTRIBUTE): the old lists are concatenated and
  cut into contiguous slices; ``base = total // p``, the first ``total % p``
  subtasks get one element more.
- **union** (UnionListState, UNION): every new subtask gets every element.
- **broadcast** (BroadcastState, BROADCAST): new subtask ``i`` gets a copy of
  old subtask ``i % p_old``'s map.
"""
from __future__ import annotations

from typing import Any, Sequence


def split_distribute(old: Sequence[Sequence[Any]], new_parallelism: int) -> list[list[Any]]:
    """Round-robin split: ``[[a, b, c], [d, e]]`` to 3 subtasks is ``[[a, b], [c, d], [e]]``."""
    elements = [e for part in old for e in part]
    return [elements[start:end] for start, end in split_slices(len(elements), new_parallelism)]


def union(old: Sequence[Sequence[Any]], new_parallelism: int) -> list[list[Any]]:
    """Every new subtask gets every element, in old subtask order."""
    _check(new_parallelism)
    elements = [e for part in old for e in part]
    return [list(elements) for _ in range(new_parallelism)]


def broadcast(old: Sequence[Any], new_parallelism: int) -> list[Any]:
    """New subtask ``i`` gets old subtask ``i % p_old``'s value."""
    _check(new_parallelism)
    if not old:
        return [None] * new_parallelism
    return [old[i % len(old)] for i in range(new_parallelism)]


def split_slices(total: int, new_parallelism: int) -> list[tuple[int, int]]:
    """The ``[start, end)`` element positions each new subtask gets from a concatenated list of ``total``."""
    _check(new_parallelism)
    base, remainder = divmod(total, new_parallelism)
    out, start = [], 0
    for i in range(new_parallelism):
        end = start + base + (1 if i < remainder else 0)
        out.append((start, end))
        start = end
    return out


def _check(new_parallelism: int) -> None:
    if not isinstance(new_parallelism, int) or isinstance(new_parallelism, bool) or new_parallelism <= 0:
        raise ValueError(f"new parallelism must be a positive integer, got {new_parallelism!r}")
