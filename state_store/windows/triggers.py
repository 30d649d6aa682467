"""When a window fires: Flink's ``Trigger`` and its built-in triggers, with their rules line for line.

A trigger decides, for each element, timer and merge of a window, whether the window's function runs now
(``TriggerResult.FIRE``), its contents are dropped (``PURGE``), both, or neither. Its timers are the key's timers
in the window's namespace; its state (``ctx.get_partitioned_state``) is keyed state in that namespace, so both
are checkpointed, savepointed and rescaled with the window. No Spark here.

    class EveryTenth(Trigger):
        COUNT = ReducingStateDescriptor("n", lambda a, b: a + b, Types.LONG())

        def on_element(self, element, timestamp, window, ctx):
            n = ctx.get_partitioned_state(self.COUNT)
            n.add(1)
            return TriggerResult.FIRE if n.get() % 10 == 0 else TriggerResult.CONTINUE
"""
from __future__ import annotations

import enum
from typing import Any

from typing_extensions import override

from ..errors import ConfigError
from ..state.descriptors import ReducingStateDescriptor, StateDescriptor
from ..types import Types
from ..watermarks import millis


class TriggerResult(enum.Enum):
    """What a trigger asks of its window: (fire, purge)."""

    CONTINUE = (False, False)
    FIRE_AND_PURGE = (True, True)
    FIRE = (True, False)
    PURGE = (False, True)

    def is_fire(self) -> bool:
        """Whether the window's function runs on its contents now (``FIRE``, ``FIRE_AND_PURGE``)."""
        return self.value[0]

    def is_purge(self) -> bool:
        """Whether the window's contents are dropped now (``PURGE``, ``FIRE_AND_PURGE``)."""
        return self.value[1]


class TriggerContext:
    """What a trigger reaches (Flink's ``Trigger.TriggerContext`` and ``OnMergeContext``); given by the window
    operator, scoped to the key and window being handled."""

    def get_current_processing_time(self) -> int:
        """The current processing time of the microbatch."""
        raise NotImplementedError

    def get_current_watermark(self) -> int:
        """The operator's current event-time watermark."""
        raise NotImplementedError

    def register_event_time_timer(self, time: int) -> None:
        """Call the trigger's ``on_event_time`` when the watermark passes ``time`` (for this key and window)."""
        raise NotImplementedError

    def register_processing_time_timer(self, time: int) -> None:
        """Call the trigger's ``on_processing_time`` when processing time reaches ``time``."""
        raise NotImplementedError

    def delete_event_time_timer(self, time: int) -> None:
        """Delete the event-time timer at ``time`` of this key and window."""
        raise NotImplementedError

    def delete_processing_time_timer(self, time: int) -> None:
        """Delete the processing-time timer at ``time`` of this key and window."""
        raise NotImplementedError

    def get_partitioned_state(self, descriptor: StateDescriptor):
        """A keyed state handle of the current key in the current window's namespace."""
        raise NotImplementedError

    def merge_partitioned_state(self, descriptor: StateDescriptor) -> None:
        """In ``on_merge``: fold the merged windows' state of ``descriptor`` into the new window's."""
        raise NotImplementedError


class Trigger:
    """Flink's ``Trigger``: override ``on_element`` and the timers' callbacks; a trigger of session windows
    (merging) says ``can_merge`` and merges its state and timers in ``on_merge``; ``clear`` removes what it
    registered when the window is cleaned up."""

    def on_element(self, element: dict, timestamp: int | None, window, ctx: TriggerContext) -> TriggerResult:
        """Called for every element added to ``window``, once it is in the window's contents (``timestamp``: its
        event time, None without a timestamp column). Returns the ``TriggerResult`` for the window. Must be
        overridden."""
        raise NotImplementedError

    def on_processing_time(self, time: int, window, ctx: TriggerContext) -> TriggerResult:
        """Called when a processing-time timer of ``window`` fires at ``time`` (one registered through ``ctx``,
        or the window's cleanup timer). Returns the ``TriggerResult`` for the window: ``CONTINUE`` unless
        overridden."""
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window, ctx: TriggerContext) -> TriggerResult:
        """Called when the watermark passes an event-time timer of ``window`` at ``time`` (one registered through
        ``ctx``, or the window's cleanup timer). Returns the ``TriggerResult`` for the window: ``CONTINUE``
        unless overridden."""
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        """Whether this trigger supports merging windows (sessions), implementing ``on_merge``; a merging
        assigner refuses a trigger that does not. False unless overridden."""
        return False

    def on_merge(self, window, ctx: TriggerContext) -> None:
        """Called when windows merge into ``window``, before each merged one is ``clear``-ed: fold their trigger
        state into it (``ctx.merge_partitioned_state``) and register its timers. Raises ConfigError unless
        overridden."""
        raise ConfigError(f"{type(self).__name__} does not support merging windows (sessions): give it can_merge() "
                          f"and on_merge(), or use a trigger that does")

    def clear(self, window, ctx: TriggerContext) -> None:
        """Called when ``window`` is cleaned up (at its cleanup time, or merged into another): delete the timers
        and state the trigger keeps for it. Does nothing unless overridden."""
        pass


class EventTimeTrigger(Trigger):
    """Fires once the watermark passes the window's end (the default of event-time assigners); an element that
    arrives for a window the watermark has passed, within allowed lateness, fires it again at once."""

    @classmethod
    def create(cls) -> "EventTimeTrigger":
        """An ``EventTimeTrigger``.

        Example: ``.window(TumblingEventTimeWindows.of(timedelta(minutes=1))).trigger(EventTimeTrigger.create())``
        """
        return cls()

    @override
    def on_element(self, element, timestamp, window, ctx):
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE  # the watermark is past the window: fire at once
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    @override
    def on_event_time(self, time, window, ctx):
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    @override
    def can_merge(self) -> bool:
        return True

    @override
    def on_merge(self, window, ctx):
        # Only when the watermark has not passed the merged window: a timer behind it fires at once, and the
        # window's cleanup timer fires it anyway (Flink's EventTimeTrigger.onMerge).
        if window.max_timestamp() > ctx.get_current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())

    @override
    def clear(self, window, ctx):
        ctx.delete_event_time_timer(window.max_timestamp())


class ProcessingTimeTrigger(Trigger):
    """Fires when processing time passes the window's end (the default of processing-time assigners)."""

    @classmethod
    def create(cls) -> "ProcessingTimeTrigger":
        """A ``ProcessingTimeTrigger``.

        Example: ``.window(ProcessingTimeSessionWindows.with_gap(gap)).trigger(ProcessingTimeTrigger.create())``
        """
        return cls()

    @override
    def on_element(self, element, timestamp, window, ctx):
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    @override
    def on_processing_time(self, time, window, ctx):
        return TriggerResult.FIRE

    @override
    def can_merge(self) -> bool:
        return True

    @override
    def on_merge(self, window, ctx):
        if window.max_timestamp() > ctx.get_current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp())

    @override
    def clear(self, window, ctx):
        ctx.delete_processing_time_timer(window.max_timestamp())


class NeverTrigger(Trigger):
    """``GlobalWindows``' default: never fires."""

    @override
    def on_element(self, element, timestamp, window, ctx):
        return TriggerResult.CONTINUE

    @override
    def can_merge(self) -> bool:
        return True

    @override
    def on_merge(self, window, ctx):
        pass


def _add(a: int, b: int) -> int:
    return a + b


class CountTrigger(Trigger):
    """Fires once ``count`` elements have arrived in the window since it last fired (``CountTrigger.of(n)``); its
    count is the window's keyed state ``count``."""

    def __init__(self, max_count: int):
        self.max_count = max_count
        self.state = ReducingStateDescriptor("count", _add, Types.LONG())

    @classmethod
    def of(cls, max_count: int) -> "CountTrigger":
        """A trigger that fires every ``max_count`` elements (a positive int; ConfigError otherwise).

        Example: ``.window(GlobalWindows.create()).trigger(CountTrigger.of(100))``
        """
        if not isinstance(max_count, int) or isinstance(max_count, bool) or max_count <= 0:
            raise ConfigError(f"CountTrigger.of takes a count of at least 1, got {max_count!r}")
        return cls(max_count)

    @override
    def on_element(self, element, timestamp, window, ctx):
        count = ctx.get_partitioned_state(self.state)
        count.add(1)
        if count.get() >= self.max_count:
            count.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    @override
    def can_merge(self) -> bool:
        return True

    @override
    def on_merge(self, window, ctx):
        ctx.merge_partitioned_state(self.state)

    @override
    def clear(self, window, ctx):
        ctx.get_partitioned_state(self.state).clear()


class PurgingTrigger(Trigger):
    """Another trigger whose every FIRE also purges the window (``PurgingTrigger.of(trigger)``)."""

    def __init__(self, nested: Trigger):
        self.nested = nested

    @classmethod
    def of(cls, nested: Trigger) -> "PurgingTrigger":
        """``nested`` (a ``Trigger``; ConfigError otherwise) with every FIRE turned into FIRE_AND_PURGE.

        Example: ``.window(GlobalWindows.create()).trigger(PurgingTrigger.of(CountTrigger.of(100)))``
        """
        if not isinstance(nested, Trigger):
            raise ConfigError(f"PurgingTrigger.of takes a Trigger, got {nested!r}")
        return cls(nested)

    @staticmethod
    def _purging(result: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if result.is_fire() else result

    @override
    def on_element(self, element, timestamp, window, ctx):
        return self._purging(self.nested.on_element(element, timestamp, window, ctx))

    @override
    def on_event_time(self, time, window, ctx):
        return self._purging(self.nested.on_event_time(time, window, ctx))

    @override
    def on_processing_time(self, time, window, ctx):
        return self._purging(self.nested.on_processing_time(time, window, ctx))

    @override
    def can_merge(self) -> bool:
        return self.nested.can_merge()

    @override
    def on_merge(self, window, ctx):
        self.nested.on_merge(window, ctx)

    @override
    def clear(self, window, ctx):
        self.nested.clear(window, ctx)


def java_remainder(a: int, b: int) -> int:
    """Java's ``a % b`` (the sign of ``a``), which Flink's triggers compute with."""
    r = abs(a) % abs(b)
    return -r if a < 0 else r


class ContinuousEventTimeTrigger(Trigger):
    """Fires every ``interval`` of event time while the window is open, and at its end
    (``ContinuousEventTimeTrigger.of(interval)``); the next fire time is the window's keyed state ``fire-time``."""

    def __init__(self, interval: int):
        self.interval = interval
        self.state = ReducingStateDescriptor("fire-time", min, Types.LONG())

    @classmethod
    def of(cls, interval) -> "ContinuousEventTimeTrigger":
        """A trigger that fires every ``interval`` (a ``timedelta``, or milliseconds as an int, above 0;
        ConfigError otherwise) of event time, and at the window's end.

        Example: ``.trigger(ContinuousEventTimeTrigger.of(timedelta(minutes=1)))`` (on hourly event-time windows)
        """
        interval = millis(interval, "ContinuousEventTimeTrigger's interval")
        if interval <= 0:
            raise ConfigError(f"ContinuousEventTimeTrigger.of takes an interval above 0, got {interval} ms")
        return cls(interval)

    @override
    def on_element(self, element, timestamp, window, ctx):
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE  # the watermark is past the window: fire at once
        ctx.register_event_time_timer(window.max_timestamp())
        fire_time = ctx.get_partitioned_state(self.state)
        if fire_time.get() is None:
            self._register_next(timestamp - java_remainder(timestamp, self.interval), window, ctx, fire_time)
        return TriggerResult.CONTINUE

    @override
    def on_event_time(self, time, window, ctx):
        if time == window.max_timestamp():
            return TriggerResult.FIRE
        fire_time = ctx.get_partitioned_state(self.state)
        if fire_time.get() == time:
            fire_time.clear()
            self._register_next(time, window, ctx, fire_time)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def _register_next(self, time: int, window, ctx, fire_time) -> None:
        next_fire = min(time + self.interval, window.max_timestamp())
        fire_time.add(next_fire)
        ctx.register_event_time_timer(next_fire)

    @override
    def can_merge(self) -> bool:
        return True

    @override
    def on_merge(self, window, ctx):
        ctx.merge_partitioned_state(self.state)
        next_fire = ctx.get_partitioned_state(self.state).get()
        if next_fire is not None:
            ctx.register_event_time_timer(next_fire)

    @override
    def clear(self, window, ctx):
        fire_time = ctx.get_partitioned_state(self.state)
        timestamp: Any = fire_time.get()
        if timestamp is not None:
            ctx.delete_event_time_timer(timestamp)
            fire_time.clear()
