"""The user contract: write a keyed function the way a Flink user writes a KeyedProcessFunction.

    class CountPerKey(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG(), 0))

        def process(self, key, records, ctx):
            self.count.update(self.count.value() + len(records))
            yield {"key": key, "count": self.count.value()}

``process`` is called once per key per microbatch with that key's records
(dicts, in source order unless the job sets ``order_by``) and yields output
rows (dicts matching the job's ``output_type``). State handles registered in
``open`` are scoped to the key being processed.

Lifecycle, per subtask and run: for every microbatch of the run, in order,
``initialize_state`` (operator and raw state as the last snapshot left them;
the first time, followed by ``open``, as in Flink), then
``process_broadcast_element`` for each broadcast record, ``process`` for each
key, ``on_timer`` for each timer due (docs/writing/time.md), and ``snapshot_state``;
``close`` at the end. The
function object lives for the subtask's whole run: its fields persist across
the run's microbatches, not across runs; state persists across runs.
"""
from __future__ import annotations

import abc
from typing import Any, Iterable

from .errors import ConfigError
from .key_groups import KeyGroupRange
from .side_outputs import OutputTag
from .state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
    qualified_name,
)
from .state.handles import AggregatingState, ListState, MapState, ReducingState, ValueState
from .state.operator import BroadcastState, OperatorStateStore
from .state.store import KeyedStateStore
from .state.ttl.handles import create_state_and_wrap_with_ttl_if_enabled
from .timers import TimeDomain, TimerService
from .watermarks import MIN_WATERMARK


class RuntimeContext:
    """Given to ``open``: registers keyed state and tells where this subtask stands.

    Example::

        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG(), 0))
            self.recent = ctx.get_list_state(ListStateDescriptor("recent", Types.STRING()))
            self.per_page = ctx.get_map_state(MapStateDescriptor("per_page", Types.STRING(), Types.LONG()))
            self.subtask = ctx.get_index_of_this_subtask()   # in [0, ctx.get_number_of_parallel_subtasks())
    """

    def __init__(self, uid: str, store: KeyedStateStore, subtask: int, parallelism: int, max_parallelism: int):
        self._uid, self._store = uid, store
        self._subtask, self._parallelism, self._max_parallelism = subtask, parallelism, max_parallelism
        self.descriptors: dict[str, StateDescriptor] = {}

    def _register(self, descriptor: StateDescriptor, expected: type):
        if not isinstance(descriptor, expected):
            raise TypeError(f"expected a {expected.__name__}, got {descriptor!r}")
        qname = qualified_name(self._uid, descriptor.name)
        known = self.descriptors.get(qname)
        if known is not None and known.schema() != descriptor.schema():
            raise ValueError(f"state {descriptor.name!r} is registered twice with different kinds or types")
        self.descriptors[qname] = descriptor
        return create_state_and_wrap_with_ttl_if_enabled(self._store, qname, descriptor)

    def get_keyed_state(self, descriptor: StateDescriptor):
        """The handle of any kind of keyed state ``descriptor`` declares (its TTL wrapper when the descriptor has
        TTL), scoped to the key being processed; ``get_state``, ``get_list_state`` ... name the kind."""
        return self._register(descriptor, StateDescriptor)

    def get_state(self, descriptor: ValueStateDescriptor) -> ValueState:
        """A ValueState handle (its TTL wrapper when the descriptor has TTL), scoped to the key
        being processed."""
        return self._register(descriptor, ValueStateDescriptor)

    def get_list_state(self, descriptor: ListStateDescriptor) -> ListState:
        """A ListState handle (its TTL wrapper when the descriptor has TTL), scoped to the key
        being processed."""
        return self._register(descriptor, ListStateDescriptor)

    def get_map_state(self, descriptor: MapStateDescriptor) -> MapState:
        """A MapState handle (its TTL wrapper when the descriptor has TTL), scoped to the key
        being processed."""
        return self._register(descriptor, MapStateDescriptor)

    def get_reducing_state(self, descriptor: ReducingStateDescriptor) -> ReducingState:
        """A ReducingState handle (its TTL wrapper when the descriptor has TTL), scoped to the key
        being processed."""
        return self._register(descriptor, ReducingStateDescriptor)

    def get_aggregating_state(self, descriptor: AggregatingStateDescriptor) -> AggregatingState:
        """An AggregatingState handle (its TTL wrapper when the descriptor has TTL), scoped to the key
        being processed."""
        return self._register(descriptor, AggregatingStateDescriptor)

    def get_index_of_this_subtask(self) -> int:
        """This subtask's index, in [0, parallelism)."""
        return self._subtask

    def get_number_of_parallel_subtasks(self) -> int:
        """The job's parallelism."""
        return self._parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        """The job's max parallelism (its number of key groups)."""
        return self._max_parallelism


class MicrobatchTime:
    """What every context says of the microbatch's processing time (its ``_timestamp``)."""

    _timestamp: int

    def timestamp(self) -> int:
        """Processing time of this microbatch, in epoch milliseconds."""
        return self._timestamp

    def current_processing_time(self) -> int:
        """The same as ``timestamp()``: processing time is the microbatch's, fixed in its plan."""
        return self._timestamp


class Context(MicrobatchTime):
    """Given to ``process`` with each key: the key, the microbatch (``batch_id``) and its processing time, the
    timer service, side outputs, broadcast state (read-only).

    Example::

        def process(self, key, records, ctx):
            for r in records:
                if r["ts"] <= ctx.current_watermark():   # late: to the side output LATE (an OutputTag)
                    ctx.output(LATE, {"k": key, "ts": r["ts"]})
                else:
                    ctx.timer_service().register_event_time_timer(r["ts"] + 60_000)
    """

    def __init__(self, store: KeyedStateStore, operator_store: OperatorStateStore, batch_id: int, timestamp: int,
                 timer_service: TimerService | None = None, output=None, stats=None):
        self._store, self._operator_store = store, operator_store
        self.batch_id, self._timestamp = batch_id, timestamp
        self._timer_service, self._output, self._stats = timer_service, output, stats
        self.current_key: Any = None

    def count_late_dropped(self) -> None:
        """Count an element dropped as too late for every window it belongs to (what a window operator calls;
        Flink's ``numLateRecordsDropped``): the run's microbatch line says how many."""
        if self._stats is not None:
            self._stats.late_dropped += 1

    def current_watermark(self) -> int:
        """The event-time watermark: the previous microbatch's while records are processed (docs/writing/time.md)."""
        return self.timer_service().current_watermark()

    def timer_service(self) -> TimerService:
        """Register and delete timers of the current key; read processing time and the watermark."""
        if self._timer_service is None:
            raise RuntimeError("the timer service exists only in a run's process() and on_timer()")
        return self._timer_service

    def output(self, tag: OutputTag, row: dict) -> None:
        """Emit ``row`` to the side output ``tag`` (declared in the job's ``side_outputs``)."""
        if self._output is None:
            raise RuntimeError("side outputs exist only in a run")
        self._output(tag, row)

    def get_current_key(self) -> Any:
        """The key being processed, of the job's key type."""
        return self.current_key

    def current_key_group(self) -> int:
        """The key group of the key being processed."""
        return self._store.current_key_group

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> BroadcastState:
        """The broadcast state, read-only here (Flink's ReadOnlyContext)."""
        return self._operator_store.get_broadcast_state(descriptor)


class OnTimerContext(Context):
    """Given to ``on_timer``: as ``Context``, and the timer's timestamp and time domain; keyed state is the
    timer's key's.

    Example::

        def on_timer(self, timestamp, ctx):   # timestamp == ctx.timestamp(), the timer's
            if ctx.time_domain() == TimeDomain.EVENT_TIME:
                yield {"k": ctx.get_current_key(), "count": self.count.value()}
                ctx.timer_service().register_event_time_timer(timestamp + 60_000)   # again in a minute
    """

    time_domain_: TimeDomain = TimeDomain.EVENT_TIME
    timer_timestamp: int = 0
    timer_namespace: str = ""  # the timer's namespace ('' but for a window operator's timers)

    def timestamp(self) -> int:
        """The timestamp of the timer firing."""
        return self.timer_timestamp

    def time_domain(self) -> TimeDomain:
        """``TimeDomain.EVENT_TIME`` or ``TimeDomain.PROCESSING_TIME``: the clock of the timer firing."""
        return self.time_domain_


class BroadcastContext(MicrobatchTime):
    """Given to ``process_broadcast_element``: broadcast state is writable here, side outputs are open, and
    ``apply_to_keyed_state`` reaches every key of a keyed state on this subtask.

    Example::

        def process_broadcast_element(self, limit, ctx):
            ctx.get_broadcast_state(LIMITS).put(limit["country"], limit["limit"])
            ctx.apply_to_keyed_state(TOTAL, lambda user_id, total: total.clear())   # every user's total restarts
            ctx.output(LIMIT_CHANGES, limit)
    """

    def __init__(self, operator_store: OperatorStateStore, batch_id: int, timestamp: int, output=None,
                 apply=None, watermark: int | None = None):
        self._operator_store, self.batch_id, self._timestamp = operator_store, batch_id, timestamp
        self._output, self._apply, self._watermark = output, apply, watermark

    def current_watermark(self) -> int:
        """The event-time watermark (the previous microbatch's)."""
        return self._watermark if self._watermark is not None else MIN_WATERMARK

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> BroadcastState:
        """The broadcast state, writable."""
        return self._operator_store.get_broadcast_state(descriptor)

    def output(self, tag: OutputTag, row: dict) -> None:
        """Emit ``row`` to the side output ``tag``."""
        if self._output is None:
            raise RuntimeError("side outputs exist only in a run")
        self._output(tag, row)

    def apply_to_keyed_state(self, descriptor: StateDescriptor, function) -> None:
        """Call ``function(key, state)`` for every key of this subtask that has an entry of the keyed state
        ``descriptor`` (Flink's ``applyToKeyedState``); ``state`` is that key's handle, writable. It reads every
        entry of that state in the subtask's key groups (docs/writing/time.md)."""
        if self._apply is None:
            raise RuntimeError("apply_to_keyed_state exists only in a run's process_broadcast_element()")
        self._apply(descriptor, function)


class FunctionInitializationContext:
    """Given to ``initialize_state``: operator state and the raw state written last time.

    Example::

        def initialize_state(self, ctx):   # before every microbatch
            store = ctx.get_operator_state_store()
            self.checkpointed = store.get_list_state(ListStateDescriptor("buffered", RECORD))
            self.emitted = int(ctx.raw_operator_state() or b"0")   # the last snapshot_state's bytes; None at first
    """

    def __init__(self, operator_store: OperatorStateStore, raw_keyed: dict[int, bytes], key_group_range: KeyGroupRange,
                 restored: bool, subtask: int):
        self._operator_store, self._raw_keyed = operator_store, raw_keyed
        self.key_group_range, self._restored, self.subtask = key_group_range, restored, subtask

    def is_restored(self) -> bool:
        """True when this run continues from a checkpoint or savepoint."""
        return self._restored

    def get_operator_state_store(self) -> OperatorStateStore:
        """Where operator list, union list and broadcast state are registered."""
        return self._operator_store

    def raw_operator_state(self) -> bytes | None:
        """The bytes this subtask wrote with ``write_raw_operator_state``, or None."""
        return self._operator_store.raw()

    def raw_keyed_state(self, key_group: int) -> bytes | None:
        """The bytes written for ``key_group`` with ``write_raw_keyed_state``, or None."""
        if key_group not in self.key_group_range:
            raise ValueError(f"key group {key_group} is not owned by this subtask ({self.key_group_range})")
        return self._raw_keyed.get(key_group)


class FunctionSnapshotContext:
    """Given to ``snapshot_state`` at the end of every microbatch: raw state written here replaces all
    raw state this subtask wrote before (what is not written again is gone).

    Example::

        def snapshot_state(self, ctx):   # after every microbatch
            self.checkpointed.update(self.buffered)
            ctx.write_raw_operator_state(str(self.emitted).encode())   # ctx.raw_operator_state() next time
    """

    def __init__(self, operator_store: OperatorStateStore, key_group_range: KeyGroupRange, batch_id: int):
        self._operator_store, self.key_group_range, self.batch_id = operator_store, key_group_range, batch_id
        self.raw_keyed: dict[int, bytes | None] = {}

    def write_raw_operator_state(self, data: bytes | None) -> None:
        """This subtask's raw operator state as of this snapshot."""
        if data is not None and not isinstance(data, (bytes, bytearray)):
            raise TypeError("raw operator state is bytes")
        self._operator_store.set_raw(None if data is None else bytes(data))

    def write_raw_keyed_state(self, key_group: int, data: bytes | None) -> None:
        """The raw keyed state of one of this subtask's key groups as of this snapshot."""
        if key_group not in self.key_group_range:
            raise ValueError(f"key group {key_group} is not owned by this subtask ({self.key_group_range})")
        if data is not None and not isinstance(data, (bytes, bytearray)):
            raise TypeError("raw keyed state is bytes")
        self.raw_keyed[key_group] = None if data is None else bytes(data)


class KeyedProcessFunction(abc.ABC):
    """Subclass and implement ``process``; the other hooks are optional.

    A subclass without ``process`` cannot be instantiated, so the mistake shows
    where the job is defined, not inside an executor.

    Example::

        class CountClicks(KeyedProcessFunction):
            def open(self, ctx):
                self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG(), 0))

            def process(self, user, clicks, ctx):
                self.count.update(self.count.value() + len(clicks))
                yield {"user": user, "clicks": self.count.value()}
    """

    def initialize_state(self, ctx: FunctionInitializationContext) -> None:
        """Register operator state and read raw state (Flink's CheckpointedFunction); runs on every
        subtask before every microbatch. Returns nothing."""

    def open(self, ctx: RuntimeContext) -> None:
        """Register keyed state from descriptors; runs once per subtask and run, after the first
        ``initialize_state``. Returns nothing."""

    @abc.abstractmethod
    def process(self, key: Any, records: list[dict], ctx: Context) -> Iterable[dict] | None:
        """Handle one key's records of a microbatch; return (or yield) output rows, or None."""

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterable[dict] | None:
        """A timer of the current key fired (``ctx.time_domain()`` says which clock): return (or yield) output
        rows, or None. Keyed state is the timer's key's; timers may be registered or deleted here."""

    def snapshot_state(self, ctx: FunctionSnapshotContext) -> None:
        """Write raw state, or adjust operator state; runs on every subtask after every microbatch,
        with or without records. Returns nothing."""

    def close(self) -> None:
        """Release what open acquired; runs once per subtask at the end of a run. Returns nothing."""


class KeyedBroadcastProcessFunction(KeyedProcessFunction):
    """A keyed function connected to a broadcast stream (e.g. rules).

    ``applies_to_keyed_state``: whether ``process_broadcast_element`` calls ``ctx.apply_to_keyed_state`` (a run
    with broadcast records then loads every keyed entry of its subtasks); None, the default, tells it from that
    method's own code. Set it to True when the call is made through another function."""

    applies_to_keyed_state: bool | None = None

    @abc.abstractmethod
    def process_broadcast_element(self, value: dict, ctx: BroadcastContext) -> Iterable[dict] | None:
        """Handle one broadcast record on every subtask, before the keyed records of the same
        microbatch; broadcast state is writable here. Return (or yield) output rows, or None."""


class KeyedCoProcessFunction(KeyedProcessFunction):
    """Flink's ``KeyedCoProcessFunction``: two keyed inputs (``a.connect(b).key_by(key_a, key_b)``) sharing one
    keyed state and one set of timers per key. ``process_element1`` handles a record of the first input,
    ``process_element2`` one of the second; each returns (or yields) output rows, or None. Within a microbatch a
    key's records of the first input come before those of the second, each input's in its source order.

        class Match(KeyedCoProcessFunction):
            def open(self, ctx):
                self.order = ctx.get_state(ValueStateDescriptor("order", ORDER))

            def process_element1(self, order, ctx):
                self.order.update(order)

            def process_element2(self, payment, ctx):
                order = self.order.value()
                if order is not None:
                    yield {"order_id": payment["order_id"], "amount": order["amount"], "paid": payment["paid"]}
    """

    def process_element1(self, value: dict, ctx: Context) -> Iterable[dict] | None:
        """One record of the first input: return (or yield) output rows, or None."""
        raise NotImplementedError(f"{type(self).__name__} has no process_element1")

    def process_element2(self, value: dict, ctx: Context) -> Iterable[dict] | None:
        """One record of the second input: return (or yield) output rows, or None."""
        raise NotImplementedError(f"{type(self).__name__} has no process_element2")

    two_inputs = True  # its records are ``(input, record)`` pairs (``JobSpec`` checks it has a second input)

    def process(self, key: Any, records: list, ctx: Context) -> list[dict]:
        """The run's call: ``records`` are ``(input, record)`` pairs (input 1 or 2), each handed to its method."""
        out: list[dict] = []
        first, second = self.process_element1, self.process_element2
        for side, record in records:
            rows = (first if side == 1 else second)(record, ctx)
            if rows is not None:
                out.extend(rows)
        return out


class RecordFunction(abc.ABC):
    """A function of a non-keyed stream (``dataflow``): ``MapFunction``, ``FlatMapFunction``, ``FilterFunction``.

    Stateless, or with operator state (Flink's CheckpointedFunction): register it in ``initialize_state``
    (``ctx.get_operator_state_store()``), adjust it in ``snapshot_state``; both run on every subtask around every
    microbatch, as for a keyed function. No keyed state and no timers: key the stream first for those. A
    subtask gets a share of the records, the same share whatever runs the microbatches are grouped in.
    """

    def initialize_state(self, ctx: FunctionInitializationContext) -> None:
        """Register operator state and read raw operator state; before every microbatch. Returns nothing."""

    def open(self, ctx: RuntimeContext) -> None:
        """Once per subtask and run, after the first ``initialize_state``. Returns nothing."""

    def snapshot_state(self, ctx: FunctionSnapshotContext) -> None:
        """Write raw operator state, or adjust operator state; after every microbatch. Returns nothing."""

    def close(self) -> None:
        """At the end of a run. Returns nothing."""


class MapFunction(RecordFunction):
    """One output row per record: ``map(record) -> dict``.

    A MapFunction may also define ``map_batch(records) -> table``, the same map over a subtask's records of one
    microbatch at once: ``records`` a ``pyarrow.Table`` of the stream's columns, in the order ``map`` would see
    them; the result a table (or pandas DataFrame) of the output rows in the same order, one per record, of the
    step's ``output_type`` (columns cast to it, or refused naming the column). Lakestate then calls
    ``map_batch``, not ``map``, on the vectorised path: no Python call per record."""

    @abc.abstractmethod
    def map(self, record: dict) -> dict:
        """The output row of ``record``."""


class FlatMapFunction(RecordFunction):
    """Any number of output rows per record: ``flat_map(record) -> iterable of dicts``."""

    @abc.abstractmethod
    def flat_map(self, record: dict) -> Iterable[dict] | None:
        """Return (or yield) the output rows of ``record``, or None."""


class FilterFunction(RecordFunction):
    """Keeps the records ``filter(record)`` is true for, unchanged."""

    @abc.abstractmethod
    def filter(self, record: dict) -> bool:
        """Whether ``record`` goes on."""


class CoMapFunction(RecordFunction):
    """Flink's ``CoMapFunction``, on connected streams that are not keyed (``a.connect(b).map(...)``): one output
    row per record of either input, ``map1`` for the first's, ``map2`` for the second's; operator state as any
    ``RecordFunction``'s."""

    @abc.abstractmethod
    def map1(self, record: dict) -> dict:
        """The output row of a record of the first input."""

    @abc.abstractmethod
    def map2(self, record: dict) -> dict:
        """The output row of a record of the second input."""


class CoFlatMapFunction(RecordFunction):
    """Flink's ``CoFlatMapFunction``: any number of rows per record of either input (``flat_map1`` /
    ``flat_map2`` return or yield them, or None)."""

    @abc.abstractmethod
    def flat_map1(self, record: dict) -> Iterable[dict] | None:
        """The output rows of a record of the first input."""

    @abc.abstractmethod
    def flat_map2(self, record: dict) -> Iterable[dict] | None:
        """The output rows of a record of the second input."""


class CoProcessFunction(RecordFunction):
    """Flink's ``CoProcessFunction``, on connected streams that are not keyed (``a.connect(b).process(...)``):
    ``process_element1`` for a record of the first input, ``process_element2`` for one of the second, each
    returning or yielding output rows (or None), with side outputs through ``ctx.output(tag, row)``; operator state
    as any ``RecordFunction``'s. No timers (Flink allows them only on keyed streams): key the streams for those.

    Example::

        class Tag(CoProcessFunction):
            def process_element1(self, order, ctx):
                yield {"id": order["id"], "from": "orders"}

            def process_element2(self, payment, ctx):
                if payment["amount"] < 0:
                    ctx.output(REFUNDS, payment)
    """

    @abc.abstractmethod
    def process_element1(self, value: dict, ctx: "CoProcessContext") -> Iterable[dict] | None:
        """The output rows of a record of the first input."""

    @abc.abstractmethod
    def process_element2(self, value: dict, ctx: "CoProcessContext") -> Iterable[dict] | None:
        """The output rows of a record of the second input."""


class ProcessFunction(RecordFunction):
    """Flink's ``ProcessFunction``, on a stream that is not keyed (``stream.process(function, uid=...)``):
    ``process_element(value, ctx)`` returns or yields the output rows of each record (or None), with side outputs
    through ``ctx.output(tag, row)``, the microbatch's processing time and the operator's watermark; operator state
    as any ``RecordFunction``'s. No keyed state and no timers (Flink allows them only on keyed streams): key the
    stream for those.

    Example::

        class Split(ProcessFunction):
            def process_element(self, click, ctx):
                if click["ts"] <= ctx.current_watermark():
                    ctx.output(LATE, click)
                else:
                    yield click
    """

    @abc.abstractmethod
    def process_element(self, value: dict, ctx: "ProcessContext") -> Iterable[dict] | None:
        """The output rows of a record."""


class BroadcastProcessFunction(RecordFunction):
    """Flink's ``BroadcastProcessFunction``: a stream that is not keyed, connected to a broadcast stream (the
    job's ``broadcast_source``, read by its first operator): ``process_broadcast_element(value, ctx)`` runs on
    every subtask for each broadcast record, before the microbatch's other records, and may write broadcast state
    (``ctx.get_broadcast_state(descriptor)``); ``process_element(value, ctx)`` handles each record of the stream,
    reading broadcast state (read-only here) and emitting rows, or side outputs through ``ctx.output``. No keyed
    state, no timers and no ``apply_to_keyed_state`` (Flink's has none): key the stream and use a
    ``KeyedBroadcastProcessFunction`` for those.

    Example::

        class OverLimit(BroadcastProcessFunction):
            def process_broadcast_element(self, limit, ctx):
                ctx.get_broadcast_state(LIMITS).put(limit["country"], limit["limit"])

            def process_element(self, purchase, ctx):
                limit = ctx.get_broadcast_state(LIMITS).get(purchase["country"])
                if limit is not None and purchase["amount"] > limit:
                    yield purchase
    """

    @abc.abstractmethod
    def process_element(self, value: dict, ctx: "ReadOnlyBroadcastContext") -> Iterable[dict] | None:
        """The output rows of a record of the stream."""

    @abc.abstractmethod
    def process_broadcast_element(self, value: dict, ctx: "BroadcastContext") -> Iterable[dict] | None:
        """Handle one broadcast record on every subtask; broadcast state is writable here."""


class ProcessContext(MicrobatchTime):
    """What a ``ProcessFunction`` is told: the microbatch's processing time, the operator's watermark, and side
    outputs; timers are refused (a stream that is not keyed has none)."""

    def __init__(self, ctx: Context):
        self._ctx, self._timestamp = ctx, ctx.timestamp()

    def current_watermark(self) -> int:
        """The operator's watermark as the microbatch started."""
        return self._ctx.current_watermark()

    def output(self, tag: OutputTag, row: dict) -> None:
        """Emit ``row`` to the side output ``tag`` (declared in ``process(..., side_outputs=[...])``)."""
        self._ctx.output(tag, row)

    def timer_service(self):
        """Refused: a non-keyed operator has no timers."""
        raise ConfigError("a ProcessFunction on a stream that is not keyed has no timers (as in Flink): key the "
                          "stream, stream.key_by(k).process(KeyedProcessFunction)")


class ReadOnlyBroadcastContext(ProcessContext):
    """What a ``BroadcastProcessFunction``'s ``process_element`` is told: a ``ProcessContext``, and the broadcast
    state, read-only (Flink's ``ReadOnlyContext``)."""

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> BroadcastState:
        """The broadcast state, read-only here."""
        return self._ctx.get_broadcast_state(descriptor)


class NonKeyedBroadcastContext:
    """What a ``BroadcastProcessFunction``'s ``process_broadcast_element`` is told: a ``BroadcastContext`` without
    ``apply_to_keyed_state`` (a stream that is not keyed has no keyed state)."""

    def __init__(self, ctx: BroadcastContext):
        self._ctx = ctx

    def __getattr__(self, name: str):
        return getattr(self._ctx, name)

    def apply_to_keyed_state(self, descriptor: StateDescriptor, function) -> None:
        """Refused: a stream that is not keyed has no keyed state."""
        raise ConfigError("a BroadcastProcessFunction on a stream that is not keyed has no keyed state to apply "
                          "to (as in Flink): key the stream, .key_by(k).process(KeyedBroadcastProcessFunction)")


class CoProcessContext(ProcessContext):
    """What a ``CoProcessFunction`` is told: the microbatch's processing time and watermark, its subtask, and side
    outputs; timers are refused.

    Example::

        def process_element2(self, payment, ctx):
            if payment["ts"] <= ctx.current_watermark():
                ctx.output(LATE_PAYMENTS, payment)
    """

    def current_watermark(self) -> int:
        """The operator's watermark as the microbatch started (the least of the two inputs')."""
        return self._ctx.current_watermark()

    def timer_service(self):
        """Refused: a non-keyed operator has no timers."""
        raise ConfigError("a CoProcessFunction on streams that are not keyed has no timers (as in Flink): key "
                          "both streams, a.connect(b).key_by(k1, k2).process(KeyedCoProcessFunction)")


def uses_timers(function: KeyedProcessFunction) -> bool:
    """Whether ``function`` has timers: an ``on_timer`` (or a vectorised ``on_timer_batch``) of its own, or timers
    it keeps itself (``keeps_timers``: a window on the vectorised path, whose windows' ends are event-time timers).
    A run then brings the keys of due timers to their subtasks, with or without records."""
    return (getattr(function, "keeps_timers", False) or getattr(function, "has_batch_timers", False)
            or type(function).on_timer is not KeyedProcessFunction.on_timer)


def _names(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names(const)
    return names


def applies_to_keyed_state(function: KeyedProcessFunction) -> bool:
    """Whether a run with broadcast records must load every keyed entry for ``apply_to_keyed_state``."""
    if not isinstance(function, KeyedBroadcastProcessFunction):
        return False
    flag = type(function).applies_to_keyed_state
    if flag is not None:
        return bool(flag)
    return "apply_to_keyed_state" in _names(type(function).process_broadcast_element.__code__)
