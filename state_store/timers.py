"""Timers: Flink's ``TimerService`` for keyed functions, kept as keyed state (docs/writing/time.md).

A timer is unique per (key, namespace, timestamp, domain), as in Flink's ``InternalTimerServiceImpl``:
registering one twice keeps one. Timers are rows of the keyed table under two state names of the operator's uid
(``<uid>.__timers_event__``, ``<uid>.__timers_processing__``), one row per timer in its key's key group:
``user_key`` is the timestamp as text (so the row's id is the timer's), ``value`` the timestamp as JSON, and
the typed ``expiry`` column the timestamp again, so Spark selects the due timers without Python. A fired or
deleted timer is a removed entry (a tombstone compaction drops). Rescale moves them with their key groups.

``SubtaskTimers`` is one subtask's timers for a run: the stored timers of the keys the run loaded, plus those
registered; ``pop_due`` gives the due ones in Flink's order (timestamp, then key group, then key);
``flush`` says what changed in a microbatch, as the keyed store's ``flush`` does. No Spark here.
"""
from __future__ import annotations

import enum
import heapq
from itertools import compress
from operator import itemgetter, ne, not_
from typing import Any

from .records.layout import ChangeColumns
from .state.descriptors import qualified_name
from .watermarks import MIN_WATERMARK

EVENT_TIMERS, PROCESSING_TIMERS = "__timers_event__", "__timers_processing__"


class TimeDomain(enum.IntEnum):
    """Which clock a timer follows (Flink's ``TimeDomain``; an IntEnum so the subtask's dicts hash it fast)."""

    EVENT_TIME = 0
    PROCESSING_TIME = 1


_NAMES = {TimeDomain.EVENT_TIME: EVENT_TIMERS, TimeDomain.PROCESSING_TIME: PROCESSING_TIMERS}


def timer_state_names(uid: str) -> dict[TimeDomain, str]:
    """The keyed state names of an operator's timers, per domain."""
    return {domain: qualified_name(uid, name) for domain, name in _NAMES.items()}


def is_timer_state(state_name: str) -> bool:
    """Whether a qualified state name is one of an operator's timer states (event or processing time)."""
    return state_name.rpartition(".")[2] in (EVENT_TIMERS, PROCESSING_TIMERS)


_LONG_MIN, _LONG_MAX = MIN_WATERMARK, (1 << 63) - 1


def _check_timestamp(timestamp: Any) -> int:
    if not isinstance(timestamp, int) or isinstance(timestamp, bool):
        raise TypeError(f"a timer's timestamp is an int of epoch milliseconds, got {timestamp!r}")
    if not _LONG_MIN <= timestamp <= _LONG_MAX:
        raise ValueError(f"a timer's timestamp is a 64-bit long of epoch milliseconds (as in Flink), got {timestamp}")
    return timestamp


class SubtaskTimers:
    """The timers of one subtask in one run (see the module docstring)."""

    def __init__(self, uid: str):
        self.names = timer_state_names(uid)
        self._domains = {name: domain for domain, name in self.names.items()}
        # per domain: (timestamp, key group, key, namespace) -> True while it exists
        self._live: dict[TimeDomain, dict[tuple, bool]] = {d: {} for d in TimeDomain}
        self._stored: dict[TimeDomain, set[tuple]] = {d: set() for d in TimeDomain}
        self._heaps: dict[TimeDomain, list[tuple]] = {d: [] for d in TimeDomain}
        self._changed: dict[TimeDomain, set[tuple]] = {d: set() for d in TimeDomain}
        self.loaded = 0  # stored timers given to this subtask

    def load(self, state_name: str, key: str, key_group: int, namespace: str, timestamp: int) -> None:
        """A stored timer, read from the keyed table."""
        domain = self._domains[state_name]
        timer = (timestamp, key_group, key, namespace)
        self._stored[domain].add(timer)
        self._live[domain][timer] = True
        heapq.heappush(self._heaps[domain], timer)
        self.loaded += 1

    def clear(self) -> None:
        """Forget every timer (a window run on the vectorised path keeps its windows' timers itself)."""
        for timers in (self._live, self._stored, self._heaps, self._changed):
            for domain in TimeDomain:
                timers[domain].clear()

    def register(self, domain: TimeDomain, key: str, key_group: int, namespace: str, timestamp: Any) -> None:
        """Register a timer of ``domain`` for ``key`` in ``namespace`` at ``timestamp`` (once: a second registration of
        the same timer keeps one)."""
        if type(timestamp) is not int or not _LONG_MIN <= timestamp <= _LONG_MAX:
            timestamp = _check_timestamp(timestamp)  # raises, or accepts an int subclass
        timer = (timestamp, key_group, key, namespace)
        live = self._live[domain]
        if timer in live:
            return  # unique per (key, namespace, timestamp): registering twice keeps one
        live[timer] = True
        self._changed[domain].add(timer)
        heapq.heappush(self._heaps[domain], timer)

    def delete(self, domain: TimeDomain, key: str, key_group: int, namespace: str, timestamp: Any) -> None:
        """Delete the timer of ``domain`` for ``key`` in ``namespace`` at ``timestamp``, if there is one."""
        if type(timestamp) is not int or not _LONG_MIN <= timestamp <= _LONG_MAX:
            timestamp = _check_timestamp(timestamp)
        timer = (timestamp, key_group, key, namespace)
        if self._live[domain].pop(timer, None) is not None:
            self._changed[domain].add(timer)  # left in the heap: skipped when popped

    def pop_due(self, domain: TimeDomain, up_to: int) -> tuple | None:
        """The next timer of ``domain`` with timestamp <= ``up_to`` (removed), or None."""
        heap, live = self._heaps[domain], self._live[domain]
        while heap and heap[0][0] <= up_to:
            timer = heapq.heappop(heap)
            if live.pop(timer, None) is not None:
                self._changed[domain].add(timer)
                return timer
        return None

    def flush(self) -> ChangeColumns:
        """The timers registered, deleted or fired since the last flush, as keyed entries (columns, a timer's
        timestamp as its user key, value and expiry); they become stored."""
        out = ChangeColumns()
        for domain, changed in self._changed.items():
            if not changed:
                continue
            live, stored = self._live[domain], self._stored[domain]
            timers = list(changed)
            now = list(map(live.__contains__, timers))
            moved = list(map(ne, now, map(stored.__contains__, timers)))  # registered, or deleted or fired
            if not all(moved):
                timers, now = list(compress(timers, moved)), list(compress(now, moved))
            stored.update(compress(timers, now))
            stored.difference_update(compress(timers, map(not_, now)))
            changed.clear()
            timestamps = list(map(itemgetter(0), timers))
            texts = list(map(str, timestamps))
            out.extend(ChangeColumns([
                [self.names[domain]] * len(timers), list(map(itemgetter(1), timers)),
                list(map(itemgetter(2), timers)), list(map(itemgetter(3), timers)), texts,
                [t if n else None for t, n in zip(texts, now)], [1 if n else -1 for n in now],
                [t if n else None for t, n in zip(timestamps, now)]]))
        return out

    def keys_with_timers(self) -> set[str]:
        """The keys that have a live timer in any time domain."""
        return {t[2] for d in TimeDomain for t in self._live[d]}


class TimerService:
    """Flink's ``TimerService``, given by ``ctx.timer_service()`` in ``process`` and ``on_timer``: timers are
    registered for the key being processed, in epoch milliseconds.

    Example::

        timers = ctx.timer_service()
        timers.register_event_time_timer(r["ts"] + 60_000)   # on_timer once the watermark reaches it
        timers.register_processing_time_timer(timers.current_processing_time() + 60_000)
        timers.delete_event_time_timer(previous_ts)          # if there is one; timers.current_watermark() too
    """

    def __init__(self, timers: SubtaskTimers, store):
        self._timers, self._store = timers, store
        self.processing_time = 0  # the microbatch's, fixed in its plan
        self.watermark = MIN_WATERMARK  # W(m-1) while records are processed, W(m) in on_timer

    def current_processing_time(self) -> int:
        """The microbatch's processing time (fixed in its plan), epoch milliseconds."""
        return self.processing_time

    def current_watermark(self) -> int:
        """The current event-time watermark, epoch milliseconds (Long.MIN_VALUE before the first one)."""
        return self.watermark

    def _scope(self) -> tuple[str, int, str]:
        key = self._store.current_key
        if key is None:
            raise RuntimeError("timers belong to a key: register or delete them in process() or on_timer()")
        return key, self._store.current_key_group, ""

    def register_timer(self, domain: TimeDomain, timestamp: int, namespace: str) -> None:
        """A timer of the current key in ``namespace`` (a window's: the window operator's triggers)."""
        key, key_group, _ = self._scope()
        self._timers.register(domain, key, key_group, namespace, timestamp)

    def delete_timer(self, domain: TimeDomain, timestamp: int, namespace: str) -> None:
        """Delete the current key's ``domain`` timer at ``timestamp`` in ``namespace``, if there is one (the
        counterpart of ``register_timer``)."""
        key, key_group, _ = self._scope()
        self._timers.delete(domain, key, key_group, namespace, timestamp)

    def register_event_time_timer(self, timestamp: int) -> None:
        """Call ``on_timer`` for the current key once the watermark reaches ``timestamp``."""
        self._timers.register(TimeDomain.EVENT_TIME, *self._scope(), timestamp)

    def register_processing_time_timer(self, timestamp: int) -> None:
        """Call ``on_timer`` for the current key once processing time reaches ``timestamp``."""
        self._timers.register(TimeDomain.PROCESSING_TIME, *self._scope(), timestamp)

    def delete_event_time_timer(self, timestamp: int) -> None:
        """Delete the current key's event-time timer at ``timestamp``, if there is one."""
        self._timers.delete(TimeDomain.EVENT_TIME, *self._scope(), timestamp)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        """Delete the current key's processing-time timer at ``timestamp``, if there is one."""
        self._timers.delete(TimeDomain.PROCESSING_TIME, *self._scope(), timestamp)
