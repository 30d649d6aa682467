"""A subtask of a run, in the Spark executors: ``SubtaskRunner`` runs the user function over one subtask's state
and records (its keyed store, timers, operator state and outputs) as ``reader`` hands them over, and writes what
the subtask emitted and changed (``run_files``). Pure Python, no Spark: it runs, and is tested, without a JVM.
"""
from __future__ import annotations

import copy
import operator
import resource
from dataclasses import dataclass, field

from ..errors import StoredValueError
from ..functions import (
    BroadcastContext,
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    OnTimerContext,
    RuntimeContext,
)
from ..key_groups import compute_key_group_range_for_operator_index
from ..keys import decode_key, key_decoder
from ..records.layout import KeyedRow
from ..records.stats import MicrobatchStats
from ..registered_states import registered_states
from ..side_outputs import SIDE_PREFIX, OutputTag
from ..state.descriptors import qualified_name
from ..state.operator import UNION, OperatorStateStore
from ..state.store import KeyedStateStore
from ..state.ttl.handles import create_state_and_wrap_with_ttl_if_enabled
from ..timers import SubtaskTimers, TimeDomain, TimerService
from ..types import RowTypeInfo, TypeInfo, Types
from ..vectorized import EXECUTOR_NAMES, VectorizedKeyedFunction
from ..watermarks import MIN_WATERMARK
from .exchange import (
    KIND_FILE,
    KIND_STAT,
    RESULT_DDL,
)
from .run_files import RunOutputs, SubtaskFiles, arrow_schema
from .vectorized_run import VectorizedRun
from .window_run import WindowRun

# The executors of vectorised functions, by the name each function gives (``VectorizedKeyedFunction.executor``).
EXECUTORS = dict(zip(EXECUTOR_NAMES, (VectorizedRun, WindowRun), strict=True))

RAW_KEYED = "__raw_keyed__"
_BYTES = Types.BYTES()
_NO_KEY = object()  # a group key no record has (a null key included)


class UserFunctionError(RuntimeError):
    """The user's function raised or returned something invalid; says where."""


@dataclass
class RunPlan:
    """Everything a subtask needs besides its data; shipped to the executors with the UDF."""

    uid: str
    function: KeyedProcessFunction
    key_type: TypeInfo
    output_type: RowTypeInfo
    parallelism: int
    max_parallelism: int
    restored: bool
    microbatches: list[tuple]  # (batch_id, processing timestamp[, watermark after it: default none]), in order
    outputs: RunOutputs  # where the subtasks write the sink rows and state changes
    start_watermark: int = MIN_WATERMARK  # the watermark before the run's first microbatch
    side_outputs: dict[str, RowTypeInfo] = field(default_factory=dict)  # tag name -> row type
    all_keyed_state: bool = False  # every keyed entry of the subtasks loaded (for apply_to_keyed_state)
    order_by: tuple = ()  # the job's ``order_by``: a vectorised subtask orders its records by it (``record_order``)
    key_columns: tuple = ()  # ``keys.record_key_columns`` of a one-input operator's key: its key from a record


class ResultRows:
    """What a subtask returns besides its files: a stat row per microbatch and a row per file written."""

    def __init__(self):
        self.rows: list[tuple] = []

    def add(self, kind: str, batch_id: int | None, subtask: int, payload: str) -> None:
        self.rows.append((kind, batch_id, subtask, payload))

    def take(self) -> list:
        import pyarrow as pa

        if not self.rows:
            return []
        schema = arrow_schema(RESULT_DDL)
        columns = list(zip(*self.rows))
        self.rows = []
        return [pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, schema)],
                                           schema=schema)]



class SubtaskRunner:
    """One subtask's run: restores its state, then runs every microbatch of the plan in order."""

    def __init__(self, plan: RunPlan, subtask: int, results: ResultRows):
        self.plan, self.subtask, self.results = plan, subtask, results
        self.files = SubtaskFiles(plan.outputs, subtask, plan.output_type.arrow_type(),
                                  {SIDE_PREFIX + n: t.arrow_type() for n, t in plan.side_outputs.items()})
        self.kg_range = compute_key_group_range_for_operator_index(plan.max_parallelism, plan.parallelism, subtask)
        self.store = KeyedStateStore()
        self.timers = SubtaskTimers(plan.uid)
        self._timer_names = set(self.timers.names.values())
        self.timer_service = TimerService(self.timers, self.store)
        self.watermark = plan.start_watermark  # W(m-1) while microbatch m's records are processed
        self.raw_keyed: dict[int, bytes] = {}
        self._own: dict[str, tuple[str, str]] = {}
        self._union: dict[str, list[tuple[int, str]]] = {}  # state -> (origin, value): in origin order when used
        self._raw_keyed_name = qualified_name(plan.uid, RAW_KEYED)
        self.function: KeyedProcessFunction | None = None
        self._index = -1  # position in plan.microbatches of the microbatch being processed
        self._open = False
        self._group_key: str | None = None
        self._group: list[dict] = []
        self._decode_key = key_decoder(plan.key_type)
        # A composite key of plain columns is its first record's values of them: no parse of its text a key
        self._record_key = operator.itemgetter(*plan.key_columns) if plan.key_columns else None
        self._to_arrow = plan.output_type.arrow_tuple_converter()  # sink rows are tuples (``SinkFiles``)
        self._out: list = []  # the microbatch's output rows not handed to the sink file yet (``drain``)
        self._reported = 0  # how many registered states the stat rows have reported
        # A VectorizedKeyedFunction's records are held as Arrow and processed by the executor it names.
        self.vectorized = (EXECUTORS[plan.function.executor](self)
                           if isinstance(plan.function, VectorizedKeyedFunction) else None)

    # -- restore -----------------------------------------------------------------------------------------
    def load_operator(self, state_name: str, mode: str, value: str, origin: int) -> None:
        if mode == UNION:
            self._union.setdefault(state_name, []).append((origin, value))
        if origin == self.subtask:
            self._own[state_name] = (mode, value)

    def load_keyed(self, state_name: str, key: str, namespace: str, user_key: str | None, key_group: int,
                   value: str, expiry: int | None) -> None:
        """A stored keyed entry: a timer (its timestamp is the ``expiry`` column) or state."""
        if state_name in self._timer_names:
            self.timers.load(state_name, key, key_group, namespace, expiry)
        else:
            self.store.load(state_name, key, namespace, user_key, key_group, value, expiry)

    def load_keyed_columns(self, *columns: list) -> None:
        """Stored keyed entries as columns (``STORED_KEYED_COLUMNS``): ``load_keyed`` for each, state (no timers)
        a column at a time."""
        if self._timer_names.isdisjoint(columns[0]):
            self.store.load_columns(*columns)
        else:
            for row in zip(*columns):
                self.load_keyed(*row)

    def load_raw_keyed(self, key_group: int, value: str) -> None:
        self.raw_keyed[key_group] = _BYTES.loads(value)

    # -- microbatches --------------------------------------------------------------------------------------
    batch_id: int | None = None  # of the microbatch being processed

    def _begin_next(self) -> None:
        plan = self.plan
        if self.function is None:
            self.function = copy.deepcopy(plan.function)
            union = {q: [v for _, v in sorted(parts, key=lambda p: p[0])] for q, parts in self._union.items()}
            self.operator_store = OperatorStateStore(plan.uid, self._own, union)
        self._index += 1
        batch_id, timestamp, watermark = (*plan.microbatches[self._index], MIN_WATERMARK)[:3]
        if self._index:
            self.watermark = (*plan.microbatches[self._index - 1], MIN_WATERMARK)[2]
        self.batch_id, self.next_watermark = batch_id, watermark
        self.stats = MicrobatchStats(batch_id, timers_in=self._timers_loaded() if self._index == 0 else 0)
        self._call("initialize_state", self.function.initialize_state, FunctionInitializationContext(
            self.operator_store, dict(self.raw_keyed), self.kg_range, plan.restored, self.subtask))
        if not self._open:
            self.runtime_ctx = RuntimeContext(plan.uid, self.store, self.subtask, plan.parallelism,
                                              plan.max_parallelism)
            self._call("open", self.function.open, self.runtime_ctx)
            self._open = True
        self.store.set_time(timestamp)
        self.timer_service.processing_time, self.timer_service.watermark = timestamp, self.watermark
        self.ctx = Context(self.store, self.operator_store, batch_id, timestamp, self.timer_service, self._output,
                           self.stats)
        self.timer_ctx = OnTimerContext(self.store, self.operator_store, batch_id, timestamp, self.timer_service,
                                        self._output)
        self.b_ctx = BroadcastContext(self.operator_store, batch_id, timestamp, self._output, self._apply,
                                      self.watermark)

    def _fire_timers(self) -> None:
        """After microbatch m's records: the timers due at W(m) and at its processing time, in timestamp order
        (ties: key group, then key), until none is due; a timer registered in ``on_timer`` at or below the
        clock fires in the same advance (Flink's ``advanceWatermark`` loop). Event time first, then processing
        time, again while either fires."""
        service, timers = self.timer_service, self.timers
        service.watermark = self.next_watermark
        clocks = ((TimeDomain.EVENT_TIME, self.next_watermark), (TimeDomain.PROCESSING_TIME, service.processing_time))
        fired = True
        while fired:
            fired = False
            for domain, now in clocks:
                while (timer := timers.pop_due(domain, now)) is not None:
                    self._on_timer(domain, timer)
                    fired = True

    def _on_timer(self, domain: TimeDomain, timer: tuple) -> None:
        timestamp, key_group, key, namespace = timer
        ctx, store = self.timer_ctx, self.store
        ctx.time_domain_, ctx.timer_timestamp, ctx.timer_namespace = domain, timestamp, namespace
        store.set_current_key(key, key_group)
        ctx.current_key = key if self._decode_key is None else self._decode_key(key)
        self.operator_store.read_only_broadcast = True
        self.stats.timers_fired += 1
        try:  # ``_call``, inlined: once per timer
            rows = self.function.on_timer(timestamp, ctx)
            if rows is not None and not isinstance(rows, (list, tuple)):
                rows = list(rows)
        except (UserFunctionError, StoredValueError):
            raise
        except Exception as e:  # reported with where it happened
            raise self._user_error("on_timer", e, key) from e
        if rows:
            self._emit(rows)
        store.current_key = None
        self.operator_store.read_only_broadcast = False

    def _end(self) -> None:
        self._process_group()
        if self.vectorized is not None:
            self.vectorized.run()
        if getattr(self.vectorized, "fires_timers", False):  # on_timer_batch: a call for a microbatch's timers
            self.timer_service.watermark = self.next_watermark
            self.vectorized.fire_timers(self.next_watermark)
            self.vectorized.flush()
        else:
            self._fire_timers()
        self.drain()
        batch_id, stats = self.batch_id, self.stats
        snapshot_ctx = FunctionSnapshotContext(self.operator_store, self.kg_range, batch_id)
        self._call("snapshot_state", self.function.snapshot_state, snapshot_ctx)
        changes = self.store.flush_columns().extend(self.timers.flush())
        self.files.keyed.add_columns(batch_id, changes.table_columns(batch_id))
        stats.count_writes(changes)
        self._write_raw_keyed(snapshot_ctx.raw_keyed)
        for change in self.operator_store.flush():
            self.files.operator.add_row(change.row(self.subtask, batch_id))
            stats.count_write(change.state_name, change.value, change.delta)
        stats.worker_peak_rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # this Python worker's peak
        # The states registered since the last report, also those registered only while processing (broadcast
        # state in process_broadcast_element), so the checkpoint records each one's type; usually none.
        registered = len(self.runtime_ctx.descriptors) + len(self.operator_store.descriptors())
        if registered != self._reported:
            stats.descriptors = registered_states(self.runtime_ctx, self.operator_store)
            self._reported = registered
        self.results.add(KIND_STAT, batch_id, self.subtask, stats.to_json())

    def _timers_loaded(self) -> int:
        """The stored timers the run gave this subtask: its timer store's (``BatchTimers`` on the vectorised path
        that fires them in batches, else ``SubtaskTimers``)."""
        batch = getattr(self.vectorized, "timers", None) if getattr(self.vectorized, "loads_timers", False) else None
        return (batch or self.timers).loaded

    def _write_raw_keyed(self, raw_keyed: dict[int, bytes | None]) -> None:
        """Raw keyed state is what this snapshot wrote: key groups it did not write again are dropped."""
        written = {kg: data for kg, data in raw_keyed.items() if data is not None}
        for key_group in sorted(set(written) | set(self.raw_keyed)):
            data, before = written.get(key_group), self.raw_keyed.get(key_group)
            if data != before:
                value = None if data is None else _BYTES.dumps(data)
                self.files.keyed.add_row(KeyedRow(self._raw_keyed_name, key_group, key="", namespace="",
                                                  user_key=None, value=value, expiry=None,
                                                  batch_id=self.batch_id))
                self.stats.count_write(self._raw_keyed_name, value, (data is not None) - (before is not None))
        self.raw_keyed = written

    def goto(self, batch_id: int) -> None:
        """Finish the microbatches before ``batch_id`` (with or without records) and begin it."""
        while self.batch_id != batch_id:
            if self._index >= 0:
                self._end()
            if self._index + 1 >= len(self.plan.microbatches):
                raise RuntimeError(f"records of microbatch {batch_id} are not in the run's plan")
            self._begin_next()

    def broadcast(self, batch_id: int, record: dict) -> None:
        self.goto(batch_id)
        if not isinstance(self.function, KeyedBroadcastProcessFunction):
            raise UserFunctionError("the job has a broadcast source but its function is not a "
                                    "KeyedBroadcastProcessFunction")
        self.stats.broadcast_in += 1
        self._emit(self._call("process_broadcast_element", self.function.process_broadcast_element, record,
                              self.b_ctx))

    def keyed(self, batch_id: int, key: str, key_group: int, record: dict) -> None:
        if key is None:
            raise UserFunctionError(f"a record has a null key (e.g. {record}); filter or fill null keys in the source")
        if self.batch_id != batch_id:
            self._process_group()
            self.goto(batch_id)
        if key != self._group_key:
            self._process_group()
            self._group_key, self._group_kg = key, key_group
        self._group.append(record)

    def records(self, batch_ids: list, keys: list, key_groups: list, records: list) -> None:
        """Rows of keyed records of this subtask, in frame order: ``keyed`` for each, with a record of the key
        and microbatch being grouped only appended (most of them)."""
        group_key, batch_id, append = _NO_KEY, self.batch_id, self._group.append
        if self._group_key is not None:
            group_key = self._group_key
        for record_batch, key, key_group, record in zip(batch_ids, keys, key_groups, records):
            if key == group_key and record_batch == batch_id:
                append(record)
            elif record_batch == batch_id and key is not None:  # the next key: ``keyed``, inlined
                self._process_group()
                self._group_key, self._group_kg, group_key = key, key_group, key
                self._group = [record]
                append = self._group.append
            else:
                self.keyed(record_batch, key, key_group, record)
                group_key, batch_id, append = self._group_key, self.batch_id, self._group.append

    def _process_group(self) -> None:
        key = self._group_key
        if key is None:
            return
        records, self._group_key, self._group = self._group, None, []
        store, ctx, stats = self.store, self.ctx, self.stats
        store.current_key, store.current_key_group = key, self._group_kg  # ``set_current_key``, inlined
        if self._record_key is not None:
            ctx.current_key = current = self._record_key(records[0])
        else:
            ctx.current_key = current = key if self._decode_key is None else self._decode_key(key)
        self.operator_store.read_only_broadcast = True
        stats.records_in += len(records)
        stats.keys += 1
        try:  # ``_call``, inlined: once per key
            rows = self.function.process(current, records, ctx)
            if rows is not None and not isinstance(rows, (list, tuple)):
                rows = list(rows)
        except (UserFunctionError, StoredValueError):
            raise
        except Exception as e:  # reported with where it happened
            raise self._user_error("process", e, key) from e
        if rows:
            self._emit(rows)
        store.current_key = None
        self.operator_store.read_only_broadcast = False

    def finish(self) -> None:
        """Run the microbatches left (a subtask runs every microbatch, with or without records), then close."""
        self._process_group()
        while self._index + 1 < len(self.plan.microbatches):
            if self._index >= 0:
                self._end()
            self._begin_next()
        if self._index >= 0:
            self._end()
        if self.function is not None:
            self._call("close", self.function.close)
        for info in self.files.close():
            self.results.add(KIND_FILE, None, self.subtask, info.to_json())

    # -- user calls ------------------------------------------------------------------------------------------
    def _call(self, hook: str, fn, *args, key: str | None = None):
        try:
            result = fn(*args)
            # A generator runs here, so its errors are reported with the key it was processing.
            return list(result) if result is not None and not isinstance(result, (list, tuple)) else result
        except (UserFunctionError, StoredValueError):
            raise
        except Exception as e:  # reported with where it happened
            raise self._user_error(hook, e, key) from e

    def _user_error(self, hook: str, e: Exception, key: str | None) -> UserFunctionError:
        where = f"key {key!r} of " if key is not None else ""
        microbatch = self.batch_id if self.batch_id is not None else "-"
        return UserFunctionError(f"{hook}() raised {type(e).__name__}: {e} (at {where}microbatch {microbatch}, "
                                 f"subtask {self.subtask})")

    def _output(self, tag: OutputTag, row: dict) -> None:
        """``ctx.output(tag, row)``: a row of side output ``tag``, checked against its declared type."""
        declared = self.plan.side_outputs.get(getattr(tag, "name", None))
        if not isinstance(tag, OutputTag) or declared is None:
            raise UserFunctionError(f"ctx.output({tag!r}, ...): the job declares no such side output; add it to "
                                    f"JobSpec(side_outputs=[...]) (declared: {sorted(self.plan.side_outputs)})")
        try:
            if row is None:
                raise TypeError("a row is None")
            value = declared.to_arrow(row)
        except (TypeError, ValueError) as e:
            raise UserFunctionError(f"a row of side output {tag.name!r} does not match its type: {e} (row {row!r}, "
                                    f"microbatch {self.batch_id})") from None
        self.files.sides[tag.table].add(self.batch_id, value)
        self.stats.side_out += 1
        self.stats.side_rows[tag.name] = self.stats.side_rows.get(tag.name, 0) + 1

    def _apply(self, descriptor, function) -> None:
        """``ctx.apply_to_keyed_state(descriptor, function)``: ``function(key, state)`` for every key of the
        subtask with an entry of that state (the run loaded them all: ``Frame``), in key group then key order."""
        if not self.plan.all_keyed_state:
            raise UserFunctionError(
                "apply_to_keyed_state needs every key's state, which this run did not load: Lakestate loads it "
                "when process_broadcast_element's own code calls apply_to_keyed_state; when it calls it through "
                "another function, set applies_to_keyed_state = True on the function's class")
        name = qualified_name(self.plan.uid, descriptor.name)
        handle = create_state_and_wrap_with_ttl_if_enabled(self.store, name, descriptor)
        for key, key_group in self.store.keys_of(name):
            self.store.set_current_key(key, key_group)
            self._call("apply_to_keyed_state", function, decode_key(self.plan.key_type, key), handle, key=key)
        self.store.current_key = None

    def _emit(self, rows) -> None:
        """Output rows of the microbatch, converted (and so checked) now: ``drain`` hands them to the sink file."""
        if not rows:
            return
        try:
            values = list(map(self._to_arrow, rows))
        except (TypeError, ValueError):
            values = None
        if values is None or None in values:  # a row that does not fit (or None): say which
            self._check_rows(rows)
        self._out += values

    def drain(self) -> None:
        """The microbatch's output rows so far to the sink file (at its end, and before the files are checked
        against their memory bound)."""
        if self._out:
            self.files.sink.add_rows(self.batch_id, self._out)
            self.stats.records_out += len(self._out)
            self._out = []

    def _check_rows(self, rows) -> None:
        to_arrow, batch_id = self._to_arrow, self.batch_id
        for row in rows:
            try:
                if row is None:
                    raise TypeError("a row is None")
                to_arrow(row)
            except (TypeError, ValueError) as e:
                raise UserFunctionError(f"an output row does not match the job's output_type: {e} (row {row!r}, "
                                        f"microbatch {batch_id})") from None

