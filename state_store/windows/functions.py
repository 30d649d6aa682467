"""What a user writes for a window: Flink's ``ProcessWindowFunction`` (with its context: the window, the clocks,
per-window and per-key state, side outputs) and the evictors (``CountEvictor``, ``TimeEvictor``). No Spark here.

    class Clicks(ProcessWindowFunction):
        def process(self, key, context, elements):
            w = context.window()
            yield {"user": key, "start": w.start, "end": w.end, "clicks": len(elements)}
"""
from __future__ import annotations

from typing import Any, Iterable

from ..errors import ConfigError
from ..watermarks import millis


class ProcessWindowFunction:
    """Flink's ``ProcessWindowFunction``: ``process(key, context, elements)`` yields the rows of one firing of a
    window (``elements``: the window's elements, or the one result of its incremental ``reduce`` / ``aggregate``);
    ``clear(context)`` runs when the window is cleaned up (clear its ``window_state()`` there); ``open(ctx)`` once
    a run, as a keyed function's."""

    def open(self, ctx) -> None:
        """Register keyed state (``ctx`` is a keyed function's ``RuntimeContext``); runs once per subtask and run,
        before any window fires. Does nothing unless overridden."""
        pass

    def process(self, key: Any, context: "ProcessWindowContext", elements: list) -> Iterable[dict] | None:
        """Called when a window of ``key`` fires, with its elements (after an evictor's removals) or, after an
        incremental ``reduce`` / ``aggregate``, a list of its one result; ``context`` gives the window, the
        clocks, state and side outputs. Returns (or yields) the output rows, or None. Must be overridden."""
        raise NotImplementedError

    def clear(self, context: "ProcessWindowContext") -> None:
        """Called when the window ``context.window()`` is cleaned up (its cleanup time has passed): clear what it
        kept in ``context.window_state()``. Does nothing unless overridden."""
        pass

    def close(self) -> None:
        """Release what ``open`` acquired; runs once per subtask at the end of a run. Does nothing unless
        overridden."""
        pass


class _ScopedState:
    """Keyed state of the current key in one namespace (Flink's ``KeyedStateStore`` of a window's context)."""

    def __init__(self, runtime_ctx, namespace: str):
        self._ctx, self._namespace = runtime_ctx, namespace

    def _scoped(self, handle):
        handle.set_current_namespace(self._namespace)
        return handle

    def get_state(self, descriptor):
        return self._scoped(self._ctx.get_state(descriptor))

    def get_list_state(self, descriptor):
        return self._scoped(self._ctx.get_list_state(descriptor))

    def get_map_state(self, descriptor):
        return self._scoped(self._ctx.get_map_state(descriptor))

    def get_reducing_state(self, descriptor):
        return self._scoped(self._ctx.get_reducing_state(descriptor))

    def get_aggregating_state(self, descriptor):
        return self._scoped(self._ctx.get_aggregating_state(descriptor))


class ProcessWindowContext:
    """Given to ``ProcessWindowFunction.process`` and ``clear``: the window being fired or cleared, the clocks,
    ``window_state()`` (the key's state in this window, cleared by you in ``clear``), ``global_state()`` (the
    key's state across windows) and ``output(tag, row)``."""

    def __init__(self, operator, window):
        self._operator, self._window = operator, window

    def window(self):
        """The window: ``start``, ``end``, ``max_timestamp()`` (a ``TimeWindow``), or the ``GlobalWindow``."""
        return self._window

    def current_watermark(self) -> int:
        """The operator's current event-time watermark."""
        return self._operator.watermark()

    def current_processing_time(self) -> int:
        """The current processing time (epoch milliseconds) of the microbatch."""
        return self._operator.processing_time()

    def window_state(self) -> _ScopedState:
        """Keyed state of this key and window only (Flink's ``windowState``), cleared with the window."""
        return _ScopedState(self._operator.runtime_ctx, self._window.namespace)

    def global_state(self) -> _ScopedState:
        """Keyed state of this key across all its windows (Flink's ``globalState``)."""
        return _ScopedState(self._operator.runtime_ctx, "")

    def output(self, tag, row: dict) -> None:
        """Emit ``row`` to side output ``tag`` (an ``OutputTag`` the job declares)."""
        self._operator.ctx.output(tag, row)


class Evictor:
    """Flink's ``Evictor``: removes elements of a firing window before and/or after its function runs.
    ``elements`` is a list of ``(timestamp, element)`` pairs the evictor removes from in place. The built-in
    ones evict before the function, or after it when made with ``do_evict_after=True``."""

    do_evict_after = False

    def _evict(self, elements: list) -> None:
        pass

    def evict_before(self, elements: list, window) -> None:
        """Remove elements from ``elements`` (in place) before the window function runs."""
        if not self.do_evict_after:
            self._evict(elements)

    def evict_after(self, elements: list, window) -> None:
        """Remove elements from ``elements`` (in place) after the window function ran."""
        if self.do_evict_after:
            self._evict(elements)


class CountEvictor(Evictor):
    """Keeps the last ``max_count`` elements (``CountEvictor.of(n)``; ``do_evict_after``: after the function)."""

    def __init__(self, max_count: int, do_evict_after: bool):
        self.max_count, self.do_evict_after = max_count, do_evict_after

    @classmethod
    def of(cls, max_count: int, do_evict_after: bool = False) -> "CountEvictor":
        """An evictor keeping a firing window's last ``max_count`` elements (an int >= 0; ConfigError otherwise),
        before the window's function runs, or after it with ``do_evict_after``.

        Example: ``.window(GlobalWindows.create()).trigger(CountTrigger.of(10)).evictor(CountEvictor.of(100))``
        """
        if not isinstance(max_count, int) or isinstance(max_count, bool) or max_count < 0:
            raise ConfigError(f"CountEvictor.of takes a count of 0 or more, got {max_count!r}")
        return cls(max_count, do_evict_after)

    def _evict(self, elements: list) -> None:
        if len(elements) > self.max_count:
            del elements[:len(elements) - self.max_count]


class TimeEvictor(Evictor):
    """Keeps the elements within ``window_size`` of the latest element's timestamp (``TimeEvictor.of(d)``):
    those at or before ``max timestamp - window_size`` go. Elements without timestamps are kept."""

    def __init__(self, window_size: int, do_evict_after: bool):
        self.window_size, self.do_evict_after = window_size, do_evict_after

    @classmethod
    def of(cls, window_size, do_evict_after: bool = False) -> "TimeEvictor":
        """An evictor keeping a firing window's elements within ``window_size`` (a ``timedelta`` or milliseconds)
        of its latest element's timestamp, before the window's function runs, or after it with
        ``do_evict_after``.

        Example: ``.evictor(TimeEvictor.of(timedelta(seconds=10)))``
        """
        return cls(millis(window_size, "TimeEvictor's window size"), do_evict_after)

    def _evict(self, elements: list) -> None:
        if not elements or elements[0][0] is None:
            return
        cutoff = max(ts for ts, _ in elements) - self.window_size
        elements[:] = [(ts, e) for ts, e in elements if ts > cutoff]
