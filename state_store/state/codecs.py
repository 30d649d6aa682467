"""The stored forms of state entries that are more than one value's JSON, in one place: what the keyed store
writes and reads, what TTL's table cleanup prunes and what the State Processor decodes.

A list whose elements carry their own expiries (a ListState with TTL) is stored as ``[[expiry, element], ...]``
(each element in its type's encoded form), and its entry's expiry is the latest of them: the entry is dead
once every element is. Each rule has its per-entry form here; ``state.ttl.tables`` runs ``prune_stamped_list``
over a column of them.
"""
from __future__ import annotations

from typing import Any, Iterable

from ..types import from_text, to_text


def encode_stamped_list(expiries: Iterable[int], encoded: Iterable[Any]) -> str:
    """The stored text of a list whose elements (already encoded) expire at ``expiries``."""
    return to_text([[x, e] for x, e in zip(expiries, encoded)])


def decode_stamped_list(text: str) -> tuple[list[int], list[Any]]:
    """``(expiries, encoded elements)`` of a stored list with element expiries."""
    pairs = from_text(text)
    return [int(x) for x, _ in pairs], [e for _, e in pairs]


def prune_stamped_list(text: str, now: int) -> str:
    """The stored list without the elements expired at ``now`` (an expiry at or before it)."""
    return to_text([p for p in from_text(text) if p[0] > now])
