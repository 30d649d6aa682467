"""Windows and the assigners that put each element in them: Flink's ``TimeWindow``, ``GlobalWindow`` and its
``WindowAssigner``s, with their arithmetic (``TimeWindow.getWindowStartWithOffset``, negative timestamps
included) and their errors.

A window is stored as the namespace of its keyed state and timers: ``"<start>:<end>"`` for a ``TimeWindow``,
``"global"`` for the ``GlobalWindow`` (the void namespace, '', is the key's own state). No Spark here.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

from typing_extensions import override

from ..errors import ConfigError
from ..watermarks import MIN_WATERMARK, millis
from .triggers import EventTimeTrigger, NeverTrigger, ProcessingTimeTrigger

MAX_TIMESTAMP = (1 << 63) - 1  # Long.MAX_VALUE


@dataclass(frozen=True, order=True)
class TimeWindow:
    """Flink's ``TimeWindow``: the half-open interval [start, end) of epoch milliseconds."""

    start: int
    end: int

    def max_timestamp(self) -> int:
        """The largest timestamp still in the window: ``end - 1``."""
        return self.end - 1

    def intersects(self, other: "TimeWindow") -> bool:
        """True when the two windows overlap or touch (Flink's: merging sessions that meet)."""
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: "TimeWindow") -> "TimeWindow":
        """The smallest window spanning both."""
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))

    @functools.cached_property
    def namespace(self) -> str:
        """The namespace of the window's keyed state and timers: ``"<start>:<end>"``."""
        return f"{self.start}:{self.end}"

    def __str__(self) -> str:
        return f"TimeWindow(start={self.start}, end={self.end})"


@dataclass(frozen=True, order=True)
class GlobalWindow:
    """Flink's ``GlobalWindow``: the one window of ``GlobalWindows``, ending at the end of time."""

    def max_timestamp(self) -> int:
        """The end of time: the global window never ends before the job does."""
        return MAX_TIMESTAMP

    @property
    def namespace(self) -> str:
        """The namespace of the window's state and timers."""
        return "global"

    def __str__(self) -> str:
        return "GlobalWindow"


def window_of_namespace(namespace: str) -> TimeWindow | GlobalWindow:
    """The window a namespace names (the inverse of ``.namespace``)."""
    if namespace == "global":
        return GlobalWindow()
    start, _, end = namespace.rpartition(":")
    return TimeWindow(int(start), int(end))


def window_start_with_offset(timestamp: int, offset: int, window_size: int) -> int:
    """Flink's ``TimeWindow.getWindowStartWithOffset``: the start of the window of ``window_size`` that holds
    ``timestamp``, windows starting at ``offset`` modulo the size (a floor, also for negative timestamps)."""
    return timestamp - (timestamp - offset) % window_size


def window_starts(timestamps, size: int, slide: int, offset: int):
    """``assign_windows`` of a tumbling (``slide == size``) or sliding assigner over a column of event times, the
    rule's columnar form (numpy): ``(record index, window start)`` arrays, each record's windows in the order
    ``assign_windows`` lists them (the latest first). The vectorised window (``subtask/window_run``) runs it."""
    import numpy as np

    ts = np.asarray(timestamps, dtype=np.int64)
    last = ts - np.mod(ts - offset, slide)  # window_start_with_offset, per element
    if slide == size:
        return np.arange(len(ts)), last
    k = -(-size // slide)
    at = np.repeat(np.arange(len(ts)), k)
    starts = last[at] - np.tile(np.arange(k, dtype=np.int64), len(ts)) * slide
    inside = starts > ts[at] - size
    return at[inside], starts[inside]


def merge_windows(windows: list[TimeWindow]) -> list[tuple[TimeWindow, list[TimeWindow]]]:
    """Flink's ``TimeWindow.mergeWindows``: the windows sorted by start, each run of intersecting ones merged into
    their cover; only the merges of two or more windows, as ``(merge result, the merged windows)``."""
    merged: list[tuple[TimeWindow, list[TimeWindow]]] = []
    for window in sorted(windows):
        if merged and merged[-1][0].intersects(window):
            cover, members = merged[-1]
            merged[-1] = (cover.cover(window), members + [window])
        else:
            merged.append((window, [window]))
    return [(cover, members) for cover, members in merged if len(members) > 1]


class WindowAssigner:
    """Puts an element in zero or more windows (Flink's ``WindowAssigner``)."""

    is_event_time = True
    merging = False  # a merging assigner (sessions) also has ``merge_windows``

    def assign_windows(self, element: dict, timestamp: int | None, processing_time: int) -> list:
        """The windows ``element`` belongs to, by its event time ``timestamp`` (None without one) or, for a
        processing-time assigner, the microbatch's ``processing_time`` (epoch milliseconds). An event-time
        assigner raises ValueError for an element without an event time. Must be overridden."""
        raise NotImplementedError

    def default_trigger(self):
        """The trigger of the windows unless ``WindowedStream.trigger`` gives one: an ``EventTimeTrigger`` for an
        event-time assigner, a ``ProcessingTimeTrigger`` for a processing-time one."""
        return EventTimeTrigger.create() if self.is_event_time else ProcessingTimeTrigger.create()


def _event_timestamp(timestamp: int | None, assigner: str) -> int:
    if timestamp is None or timestamp <= MIN_WATERMARK:
        raise ValueError(f"an element has no event time (its timestamp column is null or Long.MIN_VALUE) but "
                         f"{assigner} assigns windows by event time: give every record a timestamp, or use the "
                         f"processing-time assigner")
    return timestamp


def _check_offset(size: int, offset: int, name: str, limit: str = "size") -> None:
    if size <= 0 or abs(offset) >= size:
        raise ConfigError(f"{name} parameters must satisfy abs(offset) < {limit} and {limit} > 0: got {limit} "
                          f"{size} ms, offset {offset} ms")


class TumblingEventTimeWindows(WindowAssigner):
    """Windows of ``size`` one after the other, by event time (``TumblingEventTimeWindows.of(size, offset)``)."""

    def __init__(self, size: int, offset: int):
        self.size, self.offset = size, offset

    @classmethod
    def of(cls, size, offset=0) -> "TumblingEventTimeWindows":
        """Windows of ``size``, one after the other, starting at the multiples of ``size`` shifted by ``offset``
        (each a ``timedelta`` or milliseconds). Raises ConfigError unless size > 0 and abs(offset) < size.

        Example: ``.window(TumblingEventTimeWindows.of(timedelta(minutes=1)))``
        """
        size, offset = millis(size, f"{cls.__name__}'s size"), millis(offset, f"{cls.__name__}'s offset")
        _check_offset(size, offset, cls.__name__)
        return cls(size, offset)

    def _timestamp(self, timestamp, processing_time) -> int:
        return _event_timestamp(timestamp, type(self).__name__)

    @override
    def assign_windows(self, element, timestamp, processing_time) -> list[TimeWindow]:
        ts = self._timestamp(timestamp, processing_time)
        start = window_start_with_offset(ts, self.offset % self.size, self.size)
        return [TimeWindow(start, start + self.size)]


class TumblingProcessingTimeWindows(TumblingEventTimeWindows):
    """Tumbling windows by processing time: a microbatch's elements fall in the window of its processing time."""

    is_event_time = False

    def _timestamp(self, timestamp, processing_time) -> int:
        return processing_time


class SlidingEventTimeWindows(WindowAssigner):
    """Windows of ``size`` starting every ``slide`` (``SlidingEventTimeWindows.of(size, slide, offset)``): an
    element is in size/slide of them, the latest first, as Flink lists them."""

    def __init__(self, size: int, slide: int, offset: int):
        self.size, self.slide, self.offset = size, slide, offset

    @classmethod
    def of(cls, size, slide, offset=0) -> "SlidingEventTimeWindows":
        """Windows of ``size`` starting every ``slide``, at the multiples of ``slide`` shifted by ``offset`` (each
        a ``timedelta`` or milliseconds). Raises ConfigError unless size > 0, slide > 0 and abs(offset) < slide.

        Example: ``.window(SlidingEventTimeWindows.of(timedelta(minutes=10), timedelta(minutes=1)))``
        """
        size, slide = millis(size, f"{cls.__name__}'s size"), millis(slide, f"{cls.__name__}'s slide")
        offset = millis(offset, f"{cls.__name__}'s offset")
        if size <= 0:
            raise ConfigError(f"{cls.__name__} parameters must satisfy abs(offset) < slide and size > 0: got size "
                              f"{size} ms")
        _check_offset(slide, offset, cls.__name__, "slide")
        return cls(size, slide, offset)

    def _timestamp(self, timestamp, processing_time) -> int:
        return _event_timestamp(timestamp, type(self).__name__)

    @override
    def assign_windows(self, element, timestamp, processing_time) -> list[TimeWindow]:
        ts = self._timestamp(timestamp, processing_time)
        start = window_start_with_offset(ts, self.offset, self.slide)
        windows = []
        while start > ts - self.size:
            windows.append(TimeWindow(start, start + self.size))
            start -= self.slide
        return windows


class SlidingProcessingTimeWindows(SlidingEventTimeWindows):
    """Sliding windows by processing time (``SlidingProcessingTimeWindows.of(size, slide, offset)``): a
    microbatch's elements fall in the windows of its processing time."""

    is_event_time = False

    def _timestamp(self, timestamp, processing_time) -> int:
        return processing_time


class CumulativeEventTimeWindows(WindowAssigner):
    """Windows that grow by ``step`` from the start of each window of ``max_size`` until they are it
    (``CumulativeEventTimeWindows.of(max_size, step)``; Flink SQL's ``CUMULATE``, its ``CumulativeWindowAssigner``):
    an element is in each of them that ends after it, the smallest first."""

    def __init__(self, max_size: int, step: int, offset: int = 0):
        self.max_size, self.step, self.offset = max_size, step, offset

    @classmethod
    def of(cls, max_size, step, offset=0) -> "CumulativeEventTimeWindows":
        """Windows [start, start + step), [start, start + 2 step), ... [start, start + max_size) at each multiple
        of ``max_size`` shifted by ``offset`` (each a ``timedelta`` or milliseconds). ConfigError unless step > 0
        and ``max_size`` is a multiple of it, as Flink requires."""
        max_size, step = millis(max_size, f"{cls.__name__}'s max size"), millis(step, f"{cls.__name__}'s step")
        offset = millis(offset, f"{cls.__name__}'s offset")
        if step <= 0 or max_size <= 0 or max_size % step:
            raise ConfigError(f"{cls.__name__}'s max size must be a multiple of its step, both above 0: got max "
                              f"size {max_size} ms, step {step} ms")
        _check_offset(max_size, offset, cls.__name__)
        return cls(max_size, step, offset)

    @override
    def assign_windows(self, element, timestamp, processing_time) -> list[TimeWindow]:
        ts = _event_timestamp(timestamp, type(self).__name__)
        start = window_start_with_offset(ts, self.offset % self.max_size, self.max_size)
        return [TimeWindow(start, end) for end in range(start + self.step, start + self.max_size + 1, self.step)
                if end > ts]


class EventTimeSessionWindows(WindowAssigner):
    """Sessions: each element opens the window [ts, ts + gap), and windows that meet merge
    (``EventTimeSessionWindows.with_gap(gap)``, or ``with_dynamic_gap(extractor)``: the gap from each element)."""

    merging = True

    def __init__(self, gap: int | None, extractor: Callable[[dict], Any] | None = None):
        self.gap, self.extractor = gap, extractor

    @classmethod
    def with_gap(cls, gap) -> "EventTimeSessionWindows":
        """Sessions of a fixed ``gap`` (a ``timedelta`` or milliseconds; ConfigError unless above 0): a session
        ends once ``gap`` passes without an element of its key.

        Example: ``.window(EventTimeSessionWindows.with_gap(timedelta(minutes=30)))``
        """
        gap = millis(gap, f"{cls.__name__}'s gap")
        if gap <= 0:
            raise ConfigError(f"{cls.__name__} parameters must satisfy 0 < gap: got {gap} ms")
        return cls(gap)

    @classmethod
    def with_dynamic_gap(cls, extractor: Callable[[dict], Any]) -> "EventTimeSessionWindows":
        """The gap of each element's session from ``extractor(element)`` (a timedelta or milliseconds)."""
        if not callable(extractor):
            raise ConfigError(f"{cls.__name__}.with_dynamic_gap takes a function of the element, got {extractor!r}")
        return cls(None, extractor)

    def _timestamp(self, timestamp, processing_time) -> int:
        return _event_timestamp(timestamp, type(self).__name__)

    @override
    def assign_windows(self, element, timestamp, processing_time) -> list[TimeWindow]:
        ts = self._timestamp(timestamp, processing_time)
        gap = self.gap
        if gap is None:
            gap = millis(self.extractor(element), "a dynamic session gap")
            if gap <= 0:
                raise ValueError(f"Dynamic session time gap must satisfy 0 < gap: the extractor gave {gap} ms for "
                                 f"{element!r}")
        return [TimeWindow(ts, ts + gap)]

    @staticmethod
    def merge_windows(windows: list[TimeWindow]) -> list[tuple[TimeWindow, list[TimeWindow]]]:
        """Flink's ``mergeWindows``: each run of ``windows`` that overlap or touch merged into the window spanning
        them; only the merges of two or more windows, as ``(merge result, the merged windows)``."""
        return merge_windows(windows)


class ProcessingTimeSessionWindows(EventTimeSessionWindows):
    """Sessions by processing time (``ProcessingTimeSessionWindows.with_gap(gap)``, or ``with_dynamic_gap``): a
    microbatch's elements open the window [processing time, + gap), and windows that meet merge."""

    is_event_time = False

    def _timestamp(self, timestamp, processing_time) -> int:
        return processing_time


class GlobalWindows(WindowAssigner):
    """Every element in the one ``GlobalWindow``; its default trigger never fires (give one, e.g.
    ``CountTrigger.of(n)``)."""

    is_event_time = False

    @classmethod
    def create(cls) -> "GlobalWindows":
        """The ``GlobalWindows`` assigner; give its windows a trigger.

        Example: ``.window(GlobalWindows.create()).trigger(CountTrigger.of(100))``
        """
        return cls()

    @override
    def assign_windows(self, element, timestamp, processing_time) -> list[GlobalWindow]:
        return [GlobalWindow()]

    def default_trigger(self):
        """A trigger that never fires: give the window one with ``WindowedStream.trigger``."""
        return NeverTrigger()
