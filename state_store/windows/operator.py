"""Flink's ``WindowOperator`` (and ``EvictingWindowOperator``) as a keyed function: a window's contents are keyed
state in the window's namespace, its trigger's timers are the key's timers in that namespace, and a cleanup
timer at ``max_timestamp() + allowed_lateness`` clears both (docs/writing/windows.md). Built by
``Dataflow.key_by(...).window(assigner)``; a run runs it as any keyed function, so checkpoints, savepoints,
restores, rescales and the State Processor see its state and timers as any other.

In Lakestate's model the watermark an element meets is the one before its microbatch, W(m-1), and windows
fire after the microbatch's records, when its watermark W(m) (or its processing time) passes their timers, in
timestamp order: as Flink's operator runs each element and then each watermark. No Spark here.
"""
from __future__ import annotations

import functools
from typing import Any

from typing_extensions import override

from ..functions import KeyedProcessFunction
from ..state.descriptors import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
)
from ..timers import TimeDomain
from ..types import Types
from .assigners import MAX_TIMESTAMP, WindowAssigner, window_of_namespace
from .functions import Evictor, ProcessWindowContext, ProcessWindowFunction
from .merging import MergingWindowSet
from .triggers import Trigger, TriggerContext

CONTENTS, MERGING_SET = "window-contents", "merging-window-set"
PAIR = Types.ROW_NAMED(["window", "state_window"], [Types.STRING(), Types.STRING()])


class _TriggerContext(TriggerContext):
    """The trigger's view of the key and window being handled; its timers are the key's, in the window's
    namespace."""

    def __init__(self, operator: "WindowOperator"):
        self._op = operator
        self.window = None
        self.merged: list = []

    def get_current_processing_time(self) -> int:
        return self._op.processing_time()

    def get_current_watermark(self) -> int:
        return self._op.watermark()

    def register_event_time_timer(self, time: int) -> None:
        self._op.ctx.timer_service().register_timer(TimeDomain.EVENT_TIME, time, self.window.namespace)

    def register_processing_time_timer(self, time: int) -> None:
        self._op.ctx.timer_service().register_timer(TimeDomain.PROCESSING_TIME, time, self.window.namespace)

    def delete_event_time_timer(self, time: int) -> None:
        self._op.ctx.timer_service().delete_timer(TimeDomain.EVENT_TIME, time, self.window.namespace)

    def delete_processing_time_timer(self, time: int) -> None:
        self._op.ctx.timer_service().delete_timer(TimeDomain.PROCESSING_TIME, time, self.window.namespace)

    def get_partitioned_state(self, descriptor: StateDescriptor):
        handle = self._op.handle(descriptor)
        handle.set_current_namespace(self.window.namespace)
        return handle

    def merge_partitioned_state(self, descriptor: StateDescriptor) -> None:
        if self.merged:
            self._op.handle(descriptor).merge_namespaces(self.window.namespace, [w.namespace for w in self.merged])


class WindowOperator(KeyedProcessFunction):
    """A window assigner, trigger and function over a keyed stream (see the module docstring). ``kind`` is how
    the contents are kept: ``process`` (the elements, a list), ``reduce`` or ``aggregate`` (one value, folded as
    elements arrive); an evictor keeps the elements whatever the kind."""

    def __init__(self, *, assigner: WindowAssigner, trigger: Trigger, kind: str, function: Any,
                 window_function: ProcessWindowFunction | None, element_type, accumulator_type=None,
                 allowed_lateness: int = 0, late_tag=None, evictor: Evictor | None = None,
                 timestamp_column: str | None = None):
        self.assigner, self.trigger, self.kind, self.function = assigner, trigger, kind, function
        self.window_function, self.allowed_lateness, self.late_tag = window_function, allowed_lateness, late_tag
        self.evictor, self.timestamp_column = evictor, timestamp_column
        if evictor is not None or kind == "process":
            self.contents = ListStateDescriptor(CONTENTS, element_type)
        elif kind == "reduce":
            self.contents = ReducingStateDescriptor(CONTENTS, function, element_type)
        else:
            self.contents = AggregatingStateDescriptor(CONTENTS, function, accumulator_type)

    # -- the run's calls ---------------------------------------------------------------------------------------
    @override
    def open(self, ctx) -> None:
        self.runtime_ctx, self._handles = ctx, {}
        self._state = self.handle(self.contents)
        self._merging_state = self.handle(ListStateDescriptor(MERGING_SET, PAIR)) if self.assigner.merging else None
        self._trigger_ctx = _TriggerContext(self)
        if self.window_function is not None:
            self.window_function.open(ctx)

    @override
    def close(self) -> None:
        if self.window_function is not None:
            self.window_function.close()

    @override
    def process(self, key, records, ctx) -> list[dict]:
        self.ctx, self._out = ctx, []
        column, processing_time = self.timestamp_column, ctx.current_processing_time()
        merging = self._merging_set() if self.assigner.merging else None
        for element in records:
            timestamp = element.get(column) if column else None
            windows = self.assigner.assign_windows(element, timestamp, processing_time)
            if merging is not None:
                handled = self._merging_element(merging, element, timestamp, windows)
            else:
                handled = [self._element(window, window, element, timestamp) for window in windows]
            if not any(handled) and self._element_late(timestamp):
                if self.late_tag is not None:
                    ctx.output(self.late_tag, element)
                else:
                    ctx.count_late_dropped()
        if merging is not None:
            merging.persist()
        return self._out

    @override
    def on_timer(self, timestamp: int, ctx) -> list[dict]:
        self.ctx, self._out = ctx, []
        window = window_of_namespace(ctx.timer_namespace)
        merging, state_window = None, window
        if self.assigner.merging:
            merging = self._merging_set()
            state_window = merging.state_window(window)
            if state_window is None:
                return self._out  # a timer a trigger left behind for a window already cleared: nothing to do
        self._state.set_current_namespace(state_window.namespace)
        self._trigger_ctx.window = window
        event_time = ctx.time_domain() == TimeDomain.EVENT_TIME
        result = (self.trigger.on_event_time if event_time else self.trigger.on_processing_time)(
            timestamp, window, self._trigger_ctx)
        if result.is_fire():
            contents = self._contents()
            if contents is not None:
                self._emit(window, contents)
        if result.is_purge():
            self._state.clear()
        if event_time == self.assigner.is_event_time and self._cleanup_time(window) == timestamp:
            self._clear_all(window, merging)
        if merging is not None:
            merging.persist()
        return self._out

    # -- elements ----------------------------------------------------------------------------------------------
    def _element(self, window, state_window, element: dict, timestamp) -> bool:
        """Flink's per-window step of ``processElement``: False when the window is late (the element skipped)."""
        if self._window_late(window):
            return False
        self._state.set_current_namespace(state_window.namespace)
        self._state.add(element)
        self._trigger_ctx.window = window
        result = self.trigger.on_element(element, timestamp, window, self._trigger_ctx)
        if result.is_fire():
            contents = self._contents()
            if contents is None:
                return True
            self._emit(window, contents)
        if result.is_purge():
            self._state.clear()
        self._register_cleanup_timer(window)
        return True

    def _merging_element(self, merging: MergingWindowSet, element, timestamp, windows) -> list[bool]:
        handled = []
        for window in windows:
            actual = merging.add_window(window, self._merge)
            if self._window_late(actual):
                merging.retire_window(actual)
                handled.append(False)
                continue
            handled.append(self._element(actual, merging.state_window(actual), element, timestamp))
        return handled

    def _merge(self, result, merged: list, state_window, merged_state_windows: list) -> None:
        """Flink's merge callback: the trigger merges its state and timers, the merged windows' triggers and
        cleanup timers go, and their contents fold into the result's state window."""
        if self.assigner.is_event_time and result.max_timestamp() + self.allowed_lateness <= self.watermark():
            raise ValueError(f"merging made the end of event-time window {result} earlier than the watermark "
                             f"{self.watermark()}: a session gap cannot shrink (check the dynamic gap extractor)")
        if not self.assigner.is_event_time and result.max_timestamp() <= self.processing_time():
            raise ValueError(f"merging made the end of processing-time window {result} earlier than the "
                             f"processing time {self.processing_time()}")
        tctx = self._trigger_ctx
        tctx.window, tctx.merged = result, merged
        self.trigger.on_merge(result, tctx)
        tctx.merged = []
        for window in merged:
            tctx.window = window
            self.trigger.clear(window, tctx)
            self._delete_cleanup_timer(window)
        self._state.merge_namespaces(state_window.namespace, [w.namespace for w in merged_state_windows])

    # -- firing and cleanup ------------------------------------------------------------------------------------
    def _contents(self) -> Any:
        value = self._state.get()
        return None if value is None or value == [] and self.contents.kind == "list" else value

    def _emit(self, window, contents) -> None:
        """Run the window's function on its contents (Flink's ``emitWindowContents``)."""
        context = ProcessWindowContext(self, window)
        if self.evictor is not None:
            self._emit_evicting(window, contents, context)
            return
        if self.kind == "process":
            rows = self.window_function.process(self.ctx.get_current_key(), context, contents)
        elif self.window_function is not None:
            rows = self.window_function.process(self.ctx.get_current_key(), context, [contents])
        else:
            rows = [contents]
        if rows is not None:
            self._out.extend(rows)

    def _emit_evicting(self, window, contents: list, context) -> None:
        column = self.timestamp_column
        pairs = [(e.get(column) if column else None, e) for e in contents]
        self.evictor.evict_before(pairs, window)
        values = [e for _, e in pairs]
        if self.kind == "process":
            rows = self.window_function.process(self.ctx.get_current_key(), context, values)
        elif values:
            result = self._fold(values)
            rows = (self.window_function.process(self.ctx.get_current_key(), context, [result])
                    if self.window_function is not None else [result])
        else:
            rows = None
        if rows is not None:
            self._out.extend(rows)
        self.evictor.evict_after(pairs, window)
        self._state.update([e for _, e in pairs])  # the evicted elements leave the window's state

    def _fold(self, values: list) -> Any:
        if self.kind == "reduce":
            return functools.reduce(self.function, values)
        fn: AggregateFunction = self.function
        acc = fn.create_accumulator()
        for value in values:
            acc = fn.add(value, acc)
        return fn.get_result(acc)

    def _clear_all(self, window, merging: MergingWindowSet | None) -> None:
        self._state.clear()
        self._trigger_ctx.window = window
        self.trigger.clear(window, self._trigger_ctx)
        if self.window_function is not None:
            self.window_function.clear(ProcessWindowContext(self, window))
        if merging is not None:
            merging.retire_window(window)

    def _cleanup_time(self, window) -> int:
        if not self.assigner.is_event_time:
            return window.max_timestamp()
        cleanup = window.max_timestamp() + self.allowed_lateness
        return cleanup if cleanup <= MAX_TIMESTAMP else MAX_TIMESTAMP

    def _register_cleanup_timer(self, window) -> None:
        self._cleanup_timer(window, "register")

    def _delete_cleanup_timer(self, window) -> None:
        self._cleanup_timer(window, "delete")

    def _cleanup_timer(self, window, verb: str) -> None:
        cleanup = self._cleanup_time(window)
        if cleanup == MAX_TIMESTAMP:
            return  # no timer for the end of time
        domain = TimeDomain.EVENT_TIME if self.assigner.is_event_time else TimeDomain.PROCESSING_TIME
        service = self.ctx.timer_service()
        (service.register_timer if verb == "register" else service.delete_timer)(domain, cleanup, window.namespace)

    def _window_late(self, window) -> bool:
        return self.assigner.is_event_time and self._cleanup_time(window) <= self.watermark()

    def _element_late(self, timestamp) -> bool:
        return (self.assigner.is_event_time and timestamp is not None
                and timestamp + self.allowed_lateness <= self.watermark())

    # -- what the parts share ----------------------------------------------------------------------------------
    def watermark(self) -> int:
        """The operator's current event-time watermark."""
        return self.ctx.current_watermark()

    def processing_time(self) -> int:
        """The current processing time of the microbatch."""
        return self.ctx.current_processing_time()

    def handle(self, descriptor: StateDescriptor):
        """The operator's handle of a state (its contents, a trigger's, the merging window set), made once."""
        handle = self._handles.get(descriptor.name)
        if handle is None:
            handle = self._handles[descriptor.name] = self.runtime_ctx.get_keyed_state(descriptor)
        return handle

    def _merging_set(self) -> MergingWindowSet:
        self._merging_state.set_current_namespace("")
        return MergingWindowSet(self.assigner, self._merging_state)
