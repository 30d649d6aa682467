"""Flink's interval join (``IntervalJoinOperator``): each record of one keyed stream joined with every record of
the other of the same key whose event time lies within ``[lower, upper]`` of its own.

    (impressions.key_by("ad")
     .interval_join(clicks.key_by("ad"))
     .between(timedelta(0), timedelta(minutes=10))       # a click 0..10 minutes after its impression
     .process(ClickThrough(), uid="click-through", output_type=CLICK_THROUGH)
     .sink_to("sinks/click_through"))

As Flink's operator: each side is buffered in keyed ``MapState`` (event time -> that time's records, state
``left-buffer`` / ``right-buffer``); a new record is buffered, then joined with the other side's buffered records in
range, oldest first; a timer at the last time the other side could still match it (namespace ``left`` /
``right``) removes its time's records. A record behind the watermark is late: dropped and counted in the run's
microbatch line. ``lower_bound_exclusive()`` / ``upper_bound_exclusive()`` make a bound exclusive (``lower + 1``
/ ``upper - 1``: times are milliseconds). In this model a record meets the watermark before its microbatch and
the cleanup timers fire after the microbatch's records, so the pairs are those Flink's operator emits. No Spark
here.
"""
from __future__ import annotations

from typing import Any, Iterable

from typing_extensions import override

from ..errors import ConfigError
from ..functions import KeyedCoProcessFunction
from ..side_outputs import OutputTag
from ..state.descriptors import MapStateDescriptor
from ..timers import TimeDomain
from ..types import RowTypeInfo, Types
from ..watermarks import MIN_WATERMARK, millis

LEFT_BUFFER, RIGHT_BUFFER = "left-buffer", "right-buffer"
LEFT, RIGHT = "left", "right"  # the cleanup timers' namespaces


class ProcessJoinContext:
    """What ``ProcessJoinFunction.process_element`` gets beside the pair: both records' event times, the pair's
    (the larger: Flink's result timestamp), and side outputs."""

    def __init__(self, ctx, left_timestamp: int, right_timestamp: int):
        self._ctx, self._left, self._right = ctx, left_timestamp, right_timestamp

    def left_timestamp(self) -> int:
        """The left record's event time (epoch milliseconds)."""
        return self._left

    def right_timestamp(self) -> int:
        """The right record's event time (epoch milliseconds)."""
        return self._right

    def timestamp(self) -> int:
        """The pair's event time: the later of the two (Flink's ``getTimestamp``)."""
        return max(self._left, self._right)

    def output(self, tag: OutputTag, row: dict) -> None:
        """Emit ``row`` to side output ``tag`` (declared in the operator's ``side_outputs``)."""
        self._ctx.output(tag, row)


class ProcessJoinFunction:
    """Flink's ``ProcessJoinFunction``: ``process_element(left, right, ctx)`` returns (or yields) the rows of one
    joined pair; ``open(ctx)`` and ``close()`` run once a run, as a keyed function's."""

    def open(self, ctx) -> None:
        """Register keyed state from descriptors (``ctx`` is a keyed function's ``RuntimeContext``); runs once per
        subtask and run, before any pair. Does nothing unless overridden."""
        pass

    def process_element(self, left: dict, right: dict, ctx: ProcessJoinContext) -> Iterable[dict] | None:
        """Called for each joined pair of one key: a ``left`` and a ``right`` record, the right's event time
        within ``[lower, upper]`` of the left's, once the second of the two arrives (a new record meets the other
        side's buffered ones oldest first). Returns (or yields) the output rows, or None; ``ctx`` gives both
        event times and side outputs."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what ``open`` acquired; runs once per subtask at the end of a run. Does nothing unless
        overridden."""
        pass


class IntervalJoinOperator(KeyedCoProcessFunction):
    """The interval join as a two-input keyed function (see the module docstring); built by ``IntervalJoin``."""

    def __init__(self, *, lower: int, upper: int, lower_inclusive: bool, upper_inclusive: bool,
                 function: ProcessJoinFunction, left_type: RowTypeInfo, right_type: RowTypeInfo, left_column: str,
                 right_column: str, late_tags: tuple = (None, None)):
        self.lower = lower if lower_inclusive else lower + 1
        self.upper = upper if upper_inclusive else upper - 1
        if self.lower > self.upper:
            raise ConfigError(f"an interval join's bounds must satisfy lower <= upper (with exclusive bounds moved in "
                              f"by 1 ms): got [{self.lower}, {self.upper}] ms")
        self.function, self.columns, self.late_tags = function, (left_column, right_column), late_tags
        self.buffers = (MapStateDescriptor(LEFT_BUFFER, Types.LONG(), Types.LIST(left_type)),
                        MapStateDescriptor(RIGHT_BUFFER, Types.LONG(), Types.LIST(right_type)))

    @override
    def open(self, ctx) -> None:
        self._left, self._right = (ctx.get_map_state(d) for d in self.buffers)
        self.function.open(ctx)

    @override
    def close(self) -> None:
        self.function.close()

    @override
    def process_element1(self, value: dict, ctx) -> list[dict]:
        return self._element(value, ctx, True)

    @override
    def process_element2(self, value: dict, ctx) -> list[dict]:
        return self._element(value, ctx, False)

    def _element(self, value: dict, ctx, left: bool) -> list[dict]:
        """Flink's ``processElement``: late, or buffered and joined with the other side in range, then the
        cleanup timer registered."""
        column = self.columns[0 if left else 1]
        timestamp = value.get(column)
        if timestamp is None:
            raise ValueError(f"a record of the interval join's {'left' if left else 'right'} input has no event time "
                             f"(column {column!r} is null): give every record a timestamp")
        watermark = ctx.current_watermark()
        if watermark != MIN_WATERMARK and timestamp < watermark:
            tag = self.late_tags[0 if left else 1]
            if tag is None:
                ctx.count_late_dropped()
            else:
                ctx.output(tag, value)
            return []
        ours, other = (self._left, self._right) if left else (self._right, self._left)
        low, high = (self.lower, self.upper) if left else (-self.upper, -self.lower)
        bucket = ours.get(timestamp) or []
        bucket.append(value)
        ours.put(timestamp, bucket)
        out: list[dict] = []
        for other_time, elements in sorted(other.items()):
            if other_time < timestamp + low or other_time > timestamp + high:
                continue
            for element in elements:
                if left:
                    out.extend(self._pair(value, element, timestamp, other_time, ctx))
                else:
                    out.extend(self._pair(element, value, other_time, timestamp, ctx))
        cleanup = timestamp + high if high > 0 else timestamp
        ctx.timer_service().register_timer(TimeDomain.EVENT_TIME, cleanup, LEFT if left else RIGHT)
        return out

    def _pair(self, left: dict, right: dict, left_time: int, right_time: int, ctx) -> list[dict]:
        rows = self.function.process_element(left, right, ProcessJoinContext(ctx, left_time, right_time))
        return [] if rows is None else list(rows)

    def on_timer(self, timestamp: int, ctx) -> None:
        """A buffer's cleanup: the time's records can match nothing the other side may still bring."""
        if ctx.timer_namespace == LEFT:
            self._left.remove(timestamp if self.upper <= 0 else timestamp - self.upper)
        else:
            self._right.remove(timestamp + self.lower if self.lower <= 0 else timestamp)


class IntervalJoin:
    """``left.interval_join(right)``: give it ``between(lower, upper)``."""

    def __init__(self, left, right, left_type: RowTypeInfo, right_type: RowTypeInfo, left_column: str,
                 right_column: str):
        self._left, self._right = left, right
        self._types, self._columns = (left_type, right_type), (left_column, right_column)
        self._bounds: tuple[int, int] | None = None
        self._inclusive = (True, True)
        self._late: list = [None, None]

    def between(self, lower, upper) -> "IntervalJoin":
        """Join a left record at time t with the right records in ``[t + lower, t + upper]`` (``timedelta``s or
        milliseconds, either may be negative)."""
        lower, upper = millis(lower, "between's lower bound"), millis(upper, "between's upper bound")
        if lower > upper:
            raise ConfigError(f"between(lower, upper) needs lower <= upper, got {lower} ms > {upper} ms")
        self._bounds = (lower, upper)
        return self

    def lower_bound_exclusive(self) -> "IntervalJoin":
        """Leave the lower bound out of the interval: ``(t + lower, t + upper]`` (Flink's ``lowerBoundExclusive``)."""
        self._inclusive = (False, self._inclusive[1])
        return self

    def upper_bound_exclusive(self) -> "IntervalJoin":
        """Leave the upper bound out of the interval: ``[t + lower, t + upper)`` (Flink's ``upperBoundExclusive``)."""
        self._inclusive = (self._inclusive[0], False)
        return self

    def side_output_left_late_data(self, tag: OutputTag) -> "IntervalJoin":
        """Send late records of the left input to ``tag`` (the left stream's row type) instead of dropping them."""
        return self._late_tag(0, tag)

    def side_output_right_late_data(self, tag: OutputTag) -> "IntervalJoin":
        """Send late records of the right input to ``tag`` (the right stream's row type) instead of dropping them."""
        return self._late_tag(1, tag)

    def _late_tag(self, side: int, tag: OutputTag) -> "IntervalJoin":
        if not isinstance(tag, OutputTag):
            raise ConfigError(f"a late data side output takes an OutputTag, got {tag!r}")
        if tag.type_info.fields != self._types[side].fields:
            raise ConfigError(f"the late data tag {tag.name!r} holds {tag.type_info} but the "
                              f"{('left', 'right')[side]} stream's rows are {self._types[side]}: declare the tag with "
                              f"that stream's columns")
        self._late[side] = tag
        return self

    def process(self, function: ProcessJoinFunction, *, uid: str, output_type: RowTypeInfo, **options: Any):
        """Run ``function.process_element(left, right, ctx)`` on each joined pair, as operator ``uid`` emitting
        ``output_type`` rows. ``options``: parallelism, max_parallelism, side_outputs, as ``Dataflow.process``."""
        if self._bounds is None:
            raise ConfigError(f"interval_join(...).process(uid={uid!r}) needs its bounds first: "
                              f".between(lower, upper)")
        if not isinstance(function, ProcessJoinFunction):
            raise ConfigError(f"an interval join's process(...) takes a state_store.ProcessJoinFunction, got "
                              f"{type(function).__name__}")
        operator = IntervalJoinOperator(
            lower=self._bounds[0], upper=self._bounds[1], lower_inclusive=self._inclusive[0],
            upper_inclusive=self._inclusive[1], function=function, left_type=self._types[0],
            right_type=self._types[1], left_column=self._columns[0], right_column=self._columns[1],
            late_tags=tuple(self._late))
        side_outputs = list(options.pop("side_outputs", None) or [])
        side_outputs += [t for t in self._late if t is not None and t not in side_outputs]
        return self._left.two_input_process(self._right, operator, uid=uid, output_type=output_type,
                                            side_outputs=side_outputs, **options)
