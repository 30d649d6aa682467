"""Flink's window join and co-group: two streams' records of one key and one window, joined when the window fires.

    (orders.join(payments).where("order_id").equal_to("order_id")
     .window(TumblingEventTimeWindows.of(timedelta(minutes=1)))
     .apply(Paid(), uid="paid", output_type=PAID)                 # Paid.join(order, payment) -> row
     .sink_to("sinks/paid"))

``co_group(...)`` instead of ``join(...)`` hands ``CoGroupFunction.co_group(lefts, rights)`` every record of the
window of each side, also when one side has none. As Flink builds them (``CoGroupedStreams``: the two inputs
tagged and unioned, then windowed), the two inputs are one two-input operator whose records, tagged with their
input, go to a window operator keeping each window's records (``window-contents``, a list of ``{ts, input,
left, right}``); its firing pairs them. Everything a window has, this has: event or processing time, the
assigner's default trigger, lateness rules (a late record is dropped and counted). No Spark here.
"""
from __future__ import annotations

from typing import Any, Iterable

from typing_extensions import override

from ..errors import ConfigError
from ..functions import KeyedCoProcessFunction
from ..types import RowTypeInfo, Types
from ..windows.assigners import WindowAssigner
from ..windows.functions import ProcessWindowFunction
from ..windows.operator import WindowOperator


class JoinFunction:
    """Flink's ``JoinFunction``: ``join(left, right)`` returns the row of one pair of a window (or None, or
    several rows as a list or generator)."""

    def join(self, left: dict, right: dict) -> dict | Iterable[dict] | None:
        """Called, when a window fires, for each pair of its records of one key: ``left`` from the first stream,
        ``right`` from the second. Returns the pair's output row (a dict), several rows (a list or generator), or
        None for none."""
        raise NotImplementedError


class CoGroupFunction:
    """Flink's ``CoGroupFunction``: ``co_group(lefts, rights)`` yields the rows of one key's window from the
    records of each side in it (either list may be empty)."""

    def co_group(self, lefts: list[dict], rights: list[dict]) -> Iterable[dict] | None:
        """Called once per key when its window fires, with the window's records of the first stream (``lefts``)
        and of the second (``rights``), either possibly empty. Returns (or yields) the output rows, or None."""
        raise NotImplementedError


class _Pairs(ProcessWindowFunction):
    """The window's records split by input, handed to the join or co-group function."""

    def __init__(self, function, window_columns: tuple[str, str] | None = None):
        self.function, self.window_columns = function, window_columns

    def process(self, key, context, elements):
        if self.window_columns is None:
            yield from self._rows(elements)
            return
        start, end = self.window_columns
        window = context.window()
        for row in self._rows(elements):
            yield {**row, start: window.start, end: window.end}

    def _rows(self, elements):
        lefts = [e["left"] for e in elements if e["input"] == 1]
        rights = [e["right"] for e in elements if e["input"] == 2]
        if isinstance(self.function, CoGroupFunction):
            yield from self.function.co_group(lefts, rights) or ()
            return
        for left in lefts:
            for right in rights:
                rows = self.function.join(left, right)
                if isinstance(rows, dict):
                    yield rows
                elif rows is not None:
                    yield from rows


class WindowJoinOperator(KeyedCoProcessFunction):
    """A window join or co-group as a two-input keyed function: each record tagged with its input and handed to a
    window operator (see the module docstring)."""

    def __init__(self, window: WindowOperator, columns: tuple[str | None, str | None]):
        self.window, self.columns = window, columns

    @override
    def open(self, ctx) -> None:
        self.window.open(ctx)

    @override
    def close(self) -> None:
        self.window.close()

    @override
    def process(self, key: Any, records: list, ctx) -> list[dict]:
        columns = self.columns
        tagged = [{"ts": None if columns[side - 1] is None else value.get(columns[side - 1]), "input": side,
                   "left": value if side == 1 else None, "right": value if side == 2 else None}
                  for side, value in records]
        return self.window.process(key, tagged, ctx)

    @override
    def on_timer(self, timestamp: int, ctx) -> list[dict]:
        return self.window.on_timer(timestamp, ctx)


class JoinedStreams:
    """``a.join(b)`` or ``a.co_group(b)``: ``.where(key_a).equal_to(key_b).window(assigner).apply(function, ...)``."""

    def __init__(self, first, second, types: tuple[RowTypeInfo, RowTypeInfo], columns: tuple, co_group: bool):
        self._first, self._second, self._types, self._columns, self._co_group = first, second, types, columns, co_group
        self._keys: tuple[str | None, str | None] = (None, None)
        self._assigner: WindowAssigner | None = None

    def where(self, key: str) -> "JoinedStreams":
        """The first stream's key column."""
        self._keys = (key, self._keys[1])
        return self

    def equal_to(self, key: str) -> "JoinedStreams":
        """The second stream's key column (of the first's type)."""
        self._keys = (self._keys[0], key)
        return self

    def window(self, assigner: WindowAssigner) -> "JoinedStreams":
        """The windows the records of a key meet in (``TumblingEventTimeWindows.of(...)``, sliding, sessions ...)."""
        if not isinstance(assigner, WindowAssigner):
            raise ConfigError(f"window(...) takes a window assigner, got {assigner!r}")
        if assigner.is_event_time and None in self._columns:
            raise ConfigError("an event-time window join needs both streams' event time: give both a "
                              "watermark_strategy (Dataflow.from_source(..., watermark_strategy=...))")
        self._assigner = assigner
        return self

    def apply(self, function, *, uid: str, output_type: RowTypeInfo, window_columns: tuple[str, str] | None = None,
              **options: Any):
        """Run ``function`` (a ``JoinFunction`` for ``join``, a ``CoGroupFunction`` for ``co_group``) on each window
        as it fires, as operator ``uid`` emitting ``output_type`` rows; ``options`` as ``Dataflow.process``'s.
        ``window_columns`` (start, end): each row also gets its window's bounds under these names (Flink SQL's
        window join's ``window_start`` and ``window_end``)."""
        verb = "co_group" if self._co_group else "join"
        if None in self._keys:
            raise ConfigError(f"{verb}(...) needs both keys: .where(key_a).equal_to(key_b)")
        if self._assigner is None:
            raise ConfigError(f"{verb}(...).apply(uid={uid!r}) needs its windows first: .window(assigner)")
        wanted = CoGroupFunction if self._co_group else JoinFunction
        if not isinstance(function, wanted):
            raise ConfigError(f"{verb}(...).apply takes a state_store.{wanted.__name__}, got {type(function).__name__}")
        element = Types.ROW_NAMED(["ts", "input", "left", "right"],
                                  [Types.LONG(), Types.INT(), self._types[0], self._types[1]])
        window = WindowOperator(assigner=self._assigner, trigger=self._assigner.default_trigger(), kind="process",
                                function=None, window_function=_Pairs(function, window_columns), element_type=element,
                                timestamp_column="ts" if self._assigner.is_event_time else None)
        operator = WindowJoinOperator(window, self._columns)
        return self._first.key_by(self._keys[0]).two_input_process(
            self._second.key_by(self._keys[1]), operator, uid=uid, output_type=output_type, **options)
