"""``WindowedStream``: what ``Dataflow.key_by(k).window(assigner)`` gives, in the manner of Flink's.

    (Dataflow.from_source(source, job_id="clicks", watermark_strategy=WatermarkStrategy
         .for_bounded_out_of_orderness(timedelta(seconds=5)).with_timestamp_column("ts"))
     .key_by("country")
     .window(TumblingEventTimeWindows.of(timedelta(minutes=1)))
     .allowed_lateness(timedelta(seconds=30))
     .side_output_late_data(LATE)
     .aggregate(CountClicks(), accumulator_type=Types.LONG(), uid="per-minute", output_type=PER_MINUTE)
     .sink_to("sinks/clicks_per_minute"))

``trigger``, ``evictor``, ``allowed_lateness`` and ``side_output_late_data`` set up the window; ``reduce``,
``aggregate`` and ``process`` end it as an operator of the dataflow with its uid, parallelism and output type.
"""
from __future__ import annotations

from typing import Any

from ..descriptors import AggregateFunction
from ..errors import ConfigError
from ..side_outputs import OutputTag
from ..types import RowTypeInfo, Types
from ..watermarks import millis
from .assigners import WindowAssigner
from .functions import Evictor, ProcessWindowFunction
from .operator import WindowOperator
from .triggers import Trigger


class WindowedStream:
    """A keyed stream with a window assigner (see the module docstring)."""

    def __init__(self, keyed, assigner: WindowAssigner, fields: dict, timestamp_column: str | None):
        if not isinstance(assigner, WindowAssigner):
            raise ConfigError(f"window(...) takes a window assigner (TumblingEventTimeWindows.of(...), ...), got "
                              f"{assigner!r}")
        self._keyed, self._assigner, self._fields, self._column = keyed, assigner, fields, timestamp_column
        self._trigger: Trigger = assigner.default_trigger()
        self._evictor: Evictor | None = None
        self._lateness, self._late_tag = 0, None

    def trigger(self, trigger: Trigger) -> "WindowedStream":
        """When windows fire (the assigner's default otherwise: at the watermark for event time)."""
        if not isinstance(trigger, Trigger):
            raise ConfigError(f"trigger(...) takes a state_store.windows.Trigger, got {trigger!r}")
        if self._assigner.merging and not trigger.can_merge():
            raise ConfigError(f"{type(trigger).__name__} cannot merge windows, and {type(self._assigner).__name__} "
                              f"merges them (sessions): give a trigger whose can_merge() is True")
        self._trigger = trigger
        return self

    def evictor(self, evictor: Evictor) -> "WindowedStream":
        """Remove elements of a firing window before (or after) its function runs; the window keeps its elements."""
        if not isinstance(evictor, Evictor):
            raise ConfigError(f"evictor(...) takes CountEvictor.of(n) or TimeEvictor.of(d), got {evictor!r}")
        self._evictor = evictor
        return self

    def allowed_lateness(self, lateness) -> "WindowedStream":
        """Keep a window's state this long after the watermark passes its end: a late element in that time fires
        it again (event time only)."""
        lateness = millis(lateness, "allowed_lateness")
        if lateness < 0:
            raise ConfigError(f"allowed_lateness must not be negative, got {lateness} ms")
        if lateness and not self._assigner.is_event_time:
            raise ConfigError("allowed_lateness applies to event-time windows only (Flink's rule)")
        self._lateness = lateness
        return self

    def side_output_late_data(self, tag: OutputTag) -> "WindowedStream":
        """Send elements too late for every window they belong to to ``tag`` (the stream's row type) instead of
        dropping them."""
        if not isinstance(tag, OutputTag):
            raise ConfigError(f"side_output_late_data takes an OutputTag, got {tag!r}")
        if tag.type_info.fields != self._fields:
            raise ConfigError(f"the late data tag {tag.name!r} holds {tag.type_info} but the stream's rows are "
                              f"{Types.ROW_NAMED(list(self._fields), list(self._fields.values()))}: declare the tag "
                              f"with the stream's columns")
        self._late_tag = tag
        return self

    # -- the window's function -------------------------------------------------------------------------------
    def reduce(self, function, window_function: ProcessWindowFunction | None = None, *, uid: str,
               output_type: RowTypeInfo | None = None, **options: Any):
        """Fold the window's elements with ``function(a, b)`` as they arrive; a firing emits the folded row, or
        runs ``window_function`` on it (then give ``output_type``)."""
        if not callable(function):
            raise ConfigError(f"reduce(...) takes a function (a, b) -> row, got {function!r}")
        if output_type is None and window_function is None:
            output_type = self._row_type()
        return self._operator("reduce", function, window_function, uid, output_type, None, options)

    def aggregate(self, function: AggregateFunction, window_function: ProcessWindowFunction | None = None, *,
                  accumulator_type, uid: str, output_type: RowTypeInfo, **options: Any):
        """Keep the window as an ``AggregateFunction``'s accumulator (``accumulator_type``) as elements arrive; a
        firing emits its result row, or runs ``window_function`` on it."""
        if not isinstance(function, AggregateFunction):
            raise ConfigError(f"aggregate(...) takes a state_store.AggregateFunction, got {function!r}")
        return self._operator("aggregate", function, window_function, uid, output_type, accumulator_type, options)

    def process(self, window_function: ProcessWindowFunction, *, uid: str, output_type: RowTypeInfo,
                **options: Any):
        """Keep the window's elements; a firing runs ``window_function.process(key, context, elements)``."""
        return self._operator("process", None, window_function, uid, output_type, None, options)

    def _row_type(self) -> RowTypeInfo:
        return Types.ROW_NAMED(list(self._fields), list(self._fields.values()))

    def _operator(self, kind, function, window_function, uid, output_type, accumulator_type, options):
        if window_function is not None and not isinstance(window_function, ProcessWindowFunction):
            raise ConfigError(f"{kind}(...) takes a state_store.windows.ProcessWindowFunction as its window "
                              f"function, got {window_function!r}")
        if kind == "process" and window_function is None:
            raise ConfigError("process(...) takes a ProcessWindowFunction")
        operator = WindowOperator(
            assigner=self._assigner, trigger=self._trigger, kind=kind, function=function,
            window_function=window_function, element_type=self._row_type(), accumulator_type=accumulator_type,
            allowed_lateness=self._lateness, late_tag=self._late_tag, evictor=self._evictor,
            timestamp_column=self._column)
        side_outputs = list(options.pop("side_outputs", None) or [])
        if self._late_tag is not None and self._late_tag not in side_outputs:
            side_outputs.append(self._late_tag)
        return self._keyed.process(operator, uid=uid, output_type=output_type, side_outputs=side_outputs, **options)
