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

from ..errors import ConfigError
from ..job import SHARE_KEY
from ..side_outputs import OutputTag
from ..state.descriptors import AggregateFunction, AggregatingStateDescriptor
from ..types import RowTypeInfo, Types
from ..vectorized import VectorizedWindowAggregate
from ..watermarks import millis
from .assigners import SlidingEventTimeWindows, TumblingEventTimeWindows, WindowAssigner
from .columns import ColumnAggregate, WindowRow
from .functions import Evictor, ProcessWindowFunction
from .operator import CONTENTS, WindowOperator
from .ranking import END, START, WindowTopN, check_order
from .triggers import EventTimeTrigger, Trigger


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
                  uid: str, accumulator_type=None, output_type: RowTypeInfo | None = None,
                  vectorized: bool | None = None, **options: Any):
        """Keep the window as an ``AggregateFunction``'s accumulator (``accumulator_type``) as elements arrive; a
        firing emits its result row, or runs ``window_function`` on it. A ``ColumnAggregate`` needs neither type
        and emits the key, ``window_start``, ``window_end`` and its aggregates (``output_type`` may pick some);
        in a tumbling or sliding event-time window with the default trigger, no evictor, lateness or late tag it
        runs on the vectorised path (``vectorized``: None, where it can; True, or an error saying why not; False,
        never)."""
        if not isinstance(function, AggregateFunction):
            raise ConfigError(f"aggregate(...) takes a state_store.AggregateFunction, got {function!r}")
        if isinstance(function, ColumnAggregate):
            return self._columns(function, window_function, uid, output_type, vectorized, options)
        if vectorized:
            raise ConfigError("aggregate(..., vectorized=True) takes a ColumnAggregate (count, sum, min, max, avg, "
                              "last of columns); another AggregateFunction runs a Python call per record")
        if accumulator_type is None or output_type is None:
            raise ConfigError(f"aggregate({type(function).__name__}(), uid={uid!r}) needs accumulator_type= (the "
                              f"type of its accumulator) and output_type= (the rows it emits)")
        return self._operator("aggregate", function, window_function, uid, output_type, accumulator_type, options)

    def _columns(self, function: ColumnAggregate, window_function, uid, output_type, vectorized, options):
        """A ColumnAggregate's operator: on the vectorised path where it can run there (``vectorized``)."""
        key_name, key_type = self._keyed.key_column
        function.bind(self._fields, key_name, key_type)
        if window_function is not None:
            if output_type is None:
                raise ConfigError(f"aggregate(..., {type(window_function).__name__}(), uid={uid!r}) needs "
                                  f"output_type= (the rows the window function emits)")
        else:
            full = function.output_type()
            if key_name == SHARE_KEY:  # window_all: one key, not a column of the stream
                full = Types.ROW_NAMED([n for n in full.fields if n != key_name],
                                       [t for n, t in full.fields.items() if n != key_name])
            output_type = output_type or full
            wrong = [n for n, t in output_type.fields.items() if full.fields.get(n) != t]
            if wrong:
                raise ConfigError(f"aggregate(ColumnAggregate(...), uid={uid!r}): output_type's columns {wrong} "
                                  f"are not among the window's {full}; pick columns of it, or leave output_type out")
        why_not = "it has a window function" if window_function is not None else self._not_vectorized()
        if vectorized and why_not:
            raise ConfigError(f"aggregate(..., uid={uid!r}, vectorized=True): this window cannot run on the "
                              f"vectorised path: {why_not}; leave vectorized out to run it per record")
        contents = AggregatingStateDescriptor(CONTENTS, function, function.accumulator_type())
        if why_not or vectorized is False:
            window_function = window_function or WindowRow(key_name, list(output_type.fields))
            return self._operator("aggregate", function, window_function, uid, output_type,
                                  contents.type_info, options)
        assigner = self._assigner
        slide = getattr(assigner, "slide", assigner.size)
        operator = VectorizedWindowAggregate(
            size=assigner.size, slide=slide, offset=assigner.offset % slide, timestamp_column=self._column,
            contents=contents, aggregates=list(function.aggregates), key_name=key_name,
            columns=list(output_type.fields), names=function.names)
        return self._keyed.process(operator, uid=uid, output_type=output_type, **self._options(options))

    def _not_vectorized(self) -> str | None:
        """Why this window cannot run on the vectorised path, or None."""
        if type(self._assigner) not in (TumblingEventTimeWindows, SlidingEventTimeWindows):
            return f"{type(self._assigner).__name__} is not a tumbling or sliding event-time assigner"
        if type(self._trigger) is not EventTimeTrigger:
            return f"its trigger is {type(self._trigger).__name__}, not the default EventTimeTrigger"
        if self._evictor is not None:
            return "it has an evictor"
        if self._lateness:
            return "it has an allowed lateness"
        if self._late_tag is not None:
            return "it sends late data to a side output"
        return None

    def process(self, window_function: ProcessWindowFunction, *, uid: str, output_type: RowTypeInfo,
                **options: Any):
        """Keep the window's elements; a firing runs ``window_function.process(key, context, elements)``."""
        return self._operator("process", None, window_function, uid, output_type, None, options)

    def top_n(self, n: int, order_by, *, uid: str, rank_column: str | None = None, **options: Any):
        """Keep the first ``n`` rows of each key's window by ``order_by``, as Flink SQL's window Top-N
        (``ROW_NUMBER() OVER (PARTITION BY window_start, window_end, key ORDER BY ...) <= n``;
        docs/writing/updating.md): emitted once when the window fires, insert-only, each row with
        ``window_start``, ``window_end`` and (``rank_column``) its rank. ``order_by``: columns, each a name for
        ascending or ``(name, False)``; ties keep the order the rows came in. ``options`` as ``process``'s.

        Example: ``bids.key_by("category").window(TumblingEventTimeWindows.of(timedelta(minutes=10)))
        .top_n(3, [("price", False)], uid="top-bids", rank_column="rank")``
        """
        shown = f"top_n(uid={uid!r})"
        if any(c in self._fields for c in (START, END)):
            raise ConfigError(f"{shown}: the stream already has a column {START!r} or {END!r}, which the window's "
                              f"rows get; rename it before the window")
        function = WindowTopN(self._row_type(), n, check_order(n, order_by, self._fields, rank_column, shown),
                              rank_column)
        return self.process(function, uid=uid, output_type=function.output_type(), **options)

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
        return self._keyed.process(operator, uid=uid, output_type=output_type, side_outputs=side_outputs,
                                   **self._options(options))

    def _options(self, options: dict) -> dict:
        """The window operator's options: a ``window_all``'s runs at parallelism 1, as Flink's ``windowAll``."""
        if self._keyed.key_column[0] != SHARE_KEY:
            return options
        if options.get("parallelism", 1) != 1:
            raise ConfigError(f"window_all(...)'s operator runs at parallelism 1 (Flink's windowAll: one operator "
                              f"sees every record); leave parallelism={options['parallelism']} out")
        return {**options, "parallelism": 1}
