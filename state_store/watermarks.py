"""Event time: a job's watermark strategy, and the watermark it gives each microbatch (docs/writing/time.md).

    JobSpec(..., watermark_strategy=WatermarkStrategy
            .for_bounded_out_of_orderness(timedelta(seconds=5)).with_timestamp_column("ts"))

The watermark is pinned in each microbatch's plan, so a replay and every subtask see the same one. After
microbatch m it is (Flink's ``BoundedOutOfOrdernessWatermarks``)::

    W(m) = max(W(m-1), max event time of the microbatches <= m  -  bound  -  1 ms)

A source of concurrent splits (a Kafka topic's partitions) gives each split its own largest event time, and
the watermark is the least of them, as Flink's per-split watermarks combine (``advance_splits``)::

    W(m) = max(W(m-1), min over active splits s of (max event time of s up to m)  -  bound  -  1 ms)

A split that has had no record yet holds the watermark back (Flink's too); with ``with_idleness`` (Flink's
``WatermarksWithIdleness``), a split without records for the idle timeout is left out of the least, and a
source whose every split is idle does not raise the watermark. ``with_idle_advance`` is Lakestate's own: on
top of that, once the whole source is idle, event time advances with processing time.

``EventClock`` is what carries from one microbatch to the next: the watermark, the largest event time seen,
the processing time of the last microbatch with input (for ``with_idleness``) and, per split, the same two.
It survives restores as the union list state ``__source__.watermark``: on restore, at any parallelism, every
field starts from the minimum of all restored entries (FLINK-5601). No Spark here.
"""
from __future__ import annotations

import abc
import json
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Callable

from .errors import ConfigError

MIN_WATERMARK = -(1 << 63)  # Long.MIN_VALUE: no watermark yet (Flink's)
MAX_WATERMARK = (1 << 63) - 1  # Long.MAX_VALUE: the end of event time, at the end of a bounded input (Flink's)
WATERMARK_STATE = "__source__.watermark"  # the union list operator state holding each subtask's EventClock


def millis(span, what: str) -> int:
    """``span`` (a ``timedelta``, or milliseconds as an int) in milliseconds; a ConfigError naming ``what``, also
    for a span no 64-bit long holds (Flink's are Java longs: its timers, and so a window's end, stop there)."""
    if isinstance(span, timedelta):
        span = int(span / timedelta(milliseconds=1))
    elif not isinstance(span, int) or isinstance(span, bool):
        raise ConfigError(f"{what} must be a datetime.timedelta (or milliseconds as an int), got {span!r}")
    if not -(2**63) <= span < 2**63:
        raise ConfigError(f"{what} is {span} ms, beyond a 64-bit long (Flink's Long.MAX_VALUE, {2**63 - 1} ms); "
                          f"give a span below it")
    return span


@dataclass(frozen=True)
class WatermarkStrategy:
    """Flink's ``WatermarkStrategy``: ``for_bounded_out_of_orderness(timedelta)`` or
    ``for_monotonous_timestamps()``, then ``with_timestamp_column(name)`` (the records' event time, epoch ms in
    a LONG or INT column) and optionally ``with_idleness(timedelta)``.

    Example::

        strategy = (WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=5))
                    .with_timestamp_column("ts")
                    .with_idleness(timedelta(minutes=1)))   # a Kafka partition quiet for a minute holds nothing back
        spec = JobSpec(..., order_by=["ts"], watermark_strategy=strategy)
    """

    bound_ms: int = 0
    timestamp_column: str | None = None
    idleness_ms: int | None = None
    idle_advance: bool = False  # Lakestate's own rule (``with_idle_advance``), not Flink's
    generator: Callable[[], "WatermarkGenerator"] | None = None  # ``for_generator``'s factory
    alignment_group: str | None = None  # ``with_watermark_alignment``'s group and drift
    max_drift_ms: int | None = None

    @staticmethod
    def for_generator(factory: Callable[[], "WatermarkGenerator"]) -> "WatermarkStrategy":
        """Flink's ``WatermarkStrategy.forGenerator``: the watermark is what a ``WatermarkGenerator`` made by
        ``factory`` (its class, or a function of no arguments) emits, called per record (``on_event``, in the
        source's order) and once a microbatch (``on_periodic_emit``) as each microbatch is planned; the plan
        pins the watermark, so every replay sees the same one. Then ``with_timestamp_column(name)``.

        Example: ``WatermarkStrategy.for_generator(PunctuatedOnMarker).with_timestamp_column("ts")``
        """
        if not callable(factory):
            raise ConfigError(f"for_generator takes a WatermarkGenerator class (or a function making one), got "
                              f"{factory!r}")
        return WatermarkStrategy(generator=factory)

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness) -> "WatermarkStrategy":
        """Records at most ``max_out_of_orderness`` (a ``timedelta``, or milliseconds as an int) late: the
        watermark trails the largest event time seen by that bound and 1 ms. Raises ConfigError for a negative
        bound or another type.

        Example: ``WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=5)).with_timestamp_column("ts")``
        """
        bound = millis(max_out_of_orderness, "for_bounded_out_of_orderness's bound")
        if bound < 0:
            raise ConfigError(f"for_bounded_out_of_orderness's bound must not be negative, got {bound} ms")
        return WatermarkStrategy(bound)

    @staticmethod
    def for_monotonous_timestamps() -> "WatermarkStrategy":
        """Timestamps that never decrease: a bound of 0 (the watermark trails the largest by 1 ms)."""
        return WatermarkStrategy(0)

    def with_timestamp_column(self, column: str) -> "WatermarkStrategy":
        """The source column holding each record's event time (epoch milliseconds)."""
        if not isinstance(column, str) or not column:
            raise ConfigError(f"with_timestamp_column takes a column name, got {column!r}")
        return replace(self, timestamp_column=column)

    def with_idleness(self, idle_timeout) -> "WatermarkStrategy":
        """Flink's ``withIdleness``: a split (a Kafka partition) without records for ``idle_timeout`` of
        processing time is left out of the least over the splits, so the others can move the watermark. It
        never raises the watermark by itself: a source whose every split is idle holds it where it is."""
        idle = millis(idle_timeout, "with_idleness's timeout")
        if idle <= 0:
            raise ConfigError(f"with_idleness's timeout must be positive, got {idle} ms")
        return replace(self, idleness_ms=idle)

    def with_idle_advance(self, idle_timeout) -> "WatermarkStrategy":
        """Lakestate's own rule, not Flink's (docs/flink.md, "Lakestate's own rules"): ``with_idleness``, and once the
        whole source has had no records for ``idle_timeout`` of processing time, event time advances with
        processing time, so event-time timers fire and windows close on a source that went quiet."""
        idle = millis(idle_timeout, "with_idle_advance's timeout")
        if idle <= 0:
            raise ConfigError(f"with_idle_advance's timeout must be positive, got {idle} ms")
        return replace(self, idleness_ms=idle, idle_advance=True)

    def with_watermark_alignment(self, group: str, max_drift, update_interval=None) -> "WatermarkStrategy":
        """Flink's ``withWatermarkAlignment`` (FLIP-182): the job's sources whose strategies name ``group`` keep
        within ``max_drift`` (a ``timedelta``, or milliseconds) of each other's watermarks. As each microbatch is
        planned, a source whose watermark is past the group's least (over its sources that are not idle) plus
        ``max_drift`` reads nothing in it, until the others catch up; while paused it is not counted idle. The
        microbatch is the update interval, so ``update_interval`` is refused: plan smaller microbatches
        (``max_files_per_batch``, KafkaSource's ``max_records_per_microbatch``) to align more finely.

        Example: ``BY_TS.with_watermark_alignment("clicks", timedelta(minutes=1))``
        """
        if not isinstance(group, str) or not group:
            raise ConfigError(f"with_watermark_alignment takes a group name (a non-empty string), got {group!r}")
        drift = millis(max_drift, "with_watermark_alignment's max_drift")
        if drift < 0:
            raise ConfigError(f"with_watermark_alignment's max_drift must not be negative, got {drift} ms")
        if update_interval is not None:
            raise ConfigError("with_watermark_alignment(..., update_interval): sources align once per microbatch "
                              "here, as it is planned; leave update_interval out and bound the microbatch instead "
                              "(FileSource's max_files_per_batch, KafkaSource's max_records_per_microbatch)")
        return replace(self, alignment_group=group, max_drift_ms=drift)

    def input_watermark(self, clock: "EventClock", name: str, processing_time: int) -> int | None:
        """Input ``name``'s own watermark at ``processing_time`` from a clock of several inputs' splits
        (``advance_splits``'s, named ``<name>`` or ``<name>/<split>``): the least over its active splits of their
        largest event time less the bound and 1 ms; no watermark yet while a split has had no record (and before
        any microbatch); None when every split is idle (with ``with_idleness``), as Flink leaves an idle source
        out of its alignment group."""
        own = [v for s, v in (clock.splits or {}).items() if s == name or s.startswith(f"{name}/")]
        active = [v for v in own if self.idleness_ms is None or processing_time - v[1] <= self.idleness_ms]
        if own and not active:
            return None
        if not own or any(seen is None for seen, _ in active):
            return MIN_WATERMARK
        return min(seen - self.bound_ms - 1 for seen, _ in active)

    def describe(self) -> dict:
        """What the catalog records of this strategy: its bound, timestamp column, idle timeout and whether it
        advances when idle."""
        described = {"bound_ms": self.bound_ms, "timestamp_column": self.timestamp_column,
                     "idleness_ms": self.idleness_ms, "idle_advance": self.idle_advance}
        if self.generator is not None:
            described["generator"] = f"{self.generator.__module__}.{self.generator.__qualname__}"
        if self.alignment_group is not None:
            described["alignment"] = {"group": self.alignment_group, "max_drift_ms": self.max_drift_ms}
        return described

    def advance(self, clock: "EventClock", max_event_time: int | None, processing_time: int,
                has_input: bool | None = None) -> "EventClock":
        """The clock after a microbatch whose records' largest event time is ``max_event_time`` (None: no
        records, or, with ``has_input``, records whose timestamps are all null: input all the same, so the
        source is not idle) and whose processing time is ``processing_time``."""
        if max_event_time is None and has_input:
            return EventClock(clock.watermark, clock.max_event_time, processing_time)
        if max_event_time is not None:
            seen = max_event_time if clock.max_event_time is None else max(clock.max_event_time, max_event_time)
            watermark = max(clock.watermark, seen - self.bound_ms - 1)
            return EventClock(watermark, seen, processing_time)
        watermark = clock.watermark
        if self.idle_advance and clock.max_event_time is not None and clock.input_ms is not None:
            idle_for = processing_time - clock.input_ms - self.idleness_ms
            if idle_for > 0:  # idle: event time moves on with processing time
                watermark = max(watermark, clock.max_event_time + idle_for - self.bound_ms - 1)
        return EventClock(watermark, clock.max_event_time, clock.input_ms)

    def advance_splits(self, clock: "EventClock", splits: list[str], latest: dict[str, int | None],
                       processing_time: int, strategies: dict[str, "WatermarkStrategy"] | None = None,
                       paused: frozenset[str] = frozenset()) -> "EventClock":
        """The clock after a microbatch of a source of concurrent ``splits`` (every split the source reads now)
        in which the splits in ``latest`` had records, of largest event time ``latest[s]`` (None: timestamps
        all null). The watermark is the least over the active splits of their largest event time, minus the
        bound and 1 ms; a split with no record yet holds it at no watermark; with ``with_idleness`` a split
        without records for longer than the timeout (since its last records, or since it was first seen) is
        left out. When every split is idle, the source is: ``advance``'s rule on the whole source (the watermark
        stands, unless ``with_idle_advance``). ``strategies`` gives a split the strategy of its own input (its
        bound and idleness; default this one): a two-input operator's watermark is then the least of its active
        inputs' own watermarks, as Flink's ``processWatermark1/2`` and ``IndexedCombinedWatermarkStatus`` combine
        them. A split in ``paused`` (its input held back by watermark alignment) is not idle while paused, as
        Flink pauses its activity clock."""
        now, old = processing_time, clock.splits or {}
        strategy = (strategies or {}).get
        state = {}
        for split in splits:
            seen, last_input = old.get(split, [None, now])
            if split in latest:
                if latest[split] is not None:
                    seen = latest[split] if seen is None else max(seen, latest[split])
                last_input = now
            elif split in paused:
                last_input = now
            state[split] = [seen, last_input]
        known = [v[0] for v in state.values() if v[0] is not None] + (
            [clock.max_event_time] if clock.max_event_time is not None else [])
        seen_all = max(known) if known else None
        input_ms = now if latest else clock.input_ms
        own = {split: strategy(split, self) for split in state}
        active = [(v, own[s]) for s, v in state.items()
                  if own[s].idleness_ms is None or now - v[1] <= own[s].idleness_ms]
        if active or (not own and self.idleness_ms is None):
            least = MIN_WATERMARK if not active or any(v[0] is None for v, _ in active) else \
                min(v[0] - o.bound_ms - 1 for v, o in active)
            return EventClock(max(clock.watermark, least), seen_all, input_ms, state)
        whole = self.advance(EventClock(clock.watermark, seen_all, input_ms), None, now)  # every split idle
        return EventClock(whole.watermark, seen_all, input_ms, state)


class WatermarkOutput:
    """What a ``WatermarkGenerator`` emits to (Flink's ``WatermarkOutput``): ``emit_watermark(ts)``; a watermark
    never goes back, so one below what the generator emitted before is an error naming it."""

    def __init__(self, generator: "WatermarkGenerator"):
        self._generator, self.emitted = generator, None

    def emit_watermark(self, watermark: int) -> None:
        """The watermark is now ``watermark`` (epoch ms): no record at or before it is still to come."""
        if not isinstance(watermark, int) or isinstance(watermark, bool):
            raise ConfigError(f"{type(self._generator).__name__} emitted watermark {watermark!r}; a watermark is "
                              f"epoch milliseconds as an int")
        if self.emitted is not None and watermark < self.emitted:
            raise ConfigError(f"{type(self._generator).__name__} emitted watermark {watermark} after {self.emitted}: "
                              f"a watermark never goes back in time; emit the largest so far (max(...))")
        self.emitted = watermark

    def mark_idle(self) -> None:
        """Flink's ``markIdle``: nothing to do here, the watermark stands until the generator emits again."""

    def mark_active(self) -> None:
        """Flink's ``markActive``: nothing to do here (see ``mark_idle``)."""


class WatermarkGenerator(abc.ABC):
    """Flink's ``WatermarkGenerator``, for ``WatermarkStrategy.for_generator``: ``on_event`` is called with each
    record of a microbatch and its event time, in the source's order, then ``on_periodic_emit`` once for the
    microbatch; either may emit a watermark to ``output``. One generator serves every microbatch a run plans;
    a new run starts a new one (as Flink's after a restore), from the watermark the job had.

    Example::

        class PunctuatedOnMarker(WatermarkGenerator):
            def on_event(self, event, event_timestamp, output):
                if event["marker"]:
                    output.emit_watermark(event_timestamp)   # a marker record says: nothing earlier is to come
    """

    @abc.abstractmethod
    def on_event(self, event: dict, event_timestamp: int, output: WatermarkOutput) -> None:
        """A record (a dict of its columns) and its event time."""

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        """Once a microbatch, after its records (Flink's periodic emit); by default it emits nothing."""
        return None


def generated_clock(generation: "GeneratorRun", clock: "EventClock", events: list[tuple[dict, int]],
                    processing_time: int, has_input: bool) -> "EventClock":
    """The clock after a microbatch whose records (with their event times, in the source's order) went through
    a run's generator: the watermark the larger of the last and what it emitted."""
    output = generation.output
    for event, timestamp in events:
        generation.generator.on_event(event, timestamp, output)
    generation.generator.on_periodic_emit(output)
    seen = [t for _, t in events] + ([clock.max_event_time] if clock.max_event_time is not None else [])
    watermark = clock.watermark if output.emitted is None else max(clock.watermark, output.emitted)
    return EventClock(watermark, max(seen) if seen else None, processing_time if has_input else clock.input_ms)


class GeneratorRun:
    """A run's generator of one input (made by the strategy's factory) and its output."""

    def __init__(self, strategy: WatermarkStrategy):
        generator: Any = strategy.generator()
        if not isinstance(generator, WatermarkGenerator):
            raise ConfigError(f"for_generator's factory made {generator!r}, not a state_store.WatermarkGenerator")
        self.generator, self.output = generator, WatermarkOutput(generator)


@dataclass(frozen=True)
class EventClock:
    """Where event time stands after a microbatch: the watermark, the largest event time seen (None: none yet)
    and the processing time of the last microbatch that had records (None: none yet)."""

    watermark: int = MIN_WATERMARK
    max_event_time: int | None = None
    input_ms: int | None = None
    splits: dict[str, list] | None = None  # split -> [its max event time or None, its last input (ms)]

    def to_dict(self) -> dict:
        """This clock as a plan and a checkpoint record it."""
        out = {"watermark": self.watermark, "max_event_time": self.max_event_time, "input_ms": self.input_ms}
        if self.splits is not None:
            out["splits"] = {s: list(v) for s, v in sorted(self.splits.items())}
        return out

    @classmethod
    def from_dict(cls, data: dict | None) -> "EventClock":
        """The clock ``to_dict`` recorded; no event time yet for None."""
        if not data:
            return cls()
        splits = data.get("splits")
        return cls(int(data["watermark"]), data.get("max_event_time"), data.get("input_ms"),
                   None if splits is None else {s: list(v) for s, v in splits.items()})

    def to_entry(self) -> str:
        """One subtask's entry of the union list state: a list of one element, this clock."""
        return json.dumps([self.to_dict()], sort_keys=True)

    @classmethod
    def restored(cls, entries: list[str]) -> "EventClock":
        """The clock a restore starts from: each field the minimum over every element of every subtask's entry
        of the union list state (FLINK-5601: no timer fires twice and none is lost, whatever the new
        parallelism); a job without the state starts with no watermark."""
        clocks = [cls.from_dict(d) for text in entries if text for d in json.loads(text)]
        if not clocks:
            return cls()

        def least(values):
            known = [v for v in values if v is not None]
            return min(known) if len(known) == len(values) else None

        splits = None
        if any(c.splits is not None for c in clocks):  # per split, the same minimum over the clocks that have it
            names = sorted({s for c in clocks for s in c.splits or {}})
            have = {s: [c.splits[s] for c in clocks if c.splits and s in c.splits] for s in names}
            splits = {s: [least([v[0] for v in vs]), min(v[1] for v in vs)] for s, vs in have.items()}
        return cls(min(c.watermark for c in clocks), least([c.max_event_time for c in clocks]),
                   least([c.input_ms for c in clocks]), splits)


# Where event time stands before any microbatch (the runs' default start clock); shared, since an EventClock is frozen.
NO_EVENT_TIME = EventClock()
