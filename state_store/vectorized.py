"""The vectorised keyed function: one call per subtask and microbatch, over Arrow tables.

    class RunningCountSum(VectorizedKeyedFunction):
        def open(self, ctx):
            ctx.get_state(ValueStateDescriptor("acc", ACC))   # declares the state (and its type) as usual

        def process_batch(self, records, state, ctx):
            ...                                               # a fold over columns: pyarrow, numpy, pandas
            return output, new_state

``records`` holds the subtask's records of one microbatch (the source's
columns), sorted by key, each key's records in the order ``process`` would get
them. ``state`` has one row per key of ``records``, in the same order: a ``key``
column of the job's key type and one column per keyed state, named as its
descriptor: a ValueState's typed as it declares, a ListState's a list of its
elements, a MapState's an Arrow map of its user keys to its values; null where
the key has no value (an empty list or map also clears it on the way back).
``process_batch`` returns ``(output, new_state)``: the output rows (the
columns of the job's ``output_type``) and the values to store, a ``key`` column
(keys of ``state`` only, each once) and any of the state columns; a null
removes the key's value (``ValueState.clear``), a key or a state column left
out keeps its value. Either may be None. With ``batch_format = "pandas"`` the
two tables come as pandas DataFrames and DataFrames may be returned.

Values are read from and written to the state table column-wise
(``json_columns``), in the stored format of the per-record path, so
checkpoints, savepoints, rescale, the State Processor API and exactly-once
are the per-record path's, and a job can move between the two paths through a
savepoint. Supported: ValueState (with TTL: every touched key's value is
read at the call, so an expired one is null (or given once, under
ReturnExpiredIfNotCleanedUp) and removed, and a read restamps as the TTL
config says; a write stamps its expiry), ListState and MapState (without TTL;
a map's entries are stored one by one, and only those that change are
written), side outputs (``ctx.output``), operator state, raw state. Refused
with a clear error: reducing and aggregating state, lists and maps with TTL,
``on_timer`` (timers fire in ``on_timer_batch``), broadcast sources.
"""
from __future__ import annotations

import abc
from typing import Any

from typing_extensions import override

from .errors import ConfigError
from .functions import KeyedProcessFunction, MicrobatchTime, RuntimeContext
from .types import TypeInfo

BATCH_FORMATS = ("arrow", "pandas")


class BatchContext(MicrobatchTime):
    """Given to ``process_batch``: the microbatch, its processing time and watermark, the subtask, and
    ``key_offsets``: a numpy array of ``len(state) + 1`` offsets, state row ``i``'s records being
    ``records[key_offsets[i]:key_offsets[i + 1]]`` (e.g. ``np.add.reduceat(amounts, key_offsets[:-1])`` sums them
    per key; Arrow's ``group_by`` does not keep the keys' order)."""

    def __init__(self, batch_id: int, timestamp: int, watermark: int, subtask: int, key_type: TypeInfo,
                 key_offsets=None):
        self.batch_id, self._timestamp, self._watermark = batch_id, timestamp, watermark
        self.subtask, self.key_type, self.key_offsets = subtask, key_type, key_offsets
        self.side_tables: list[tuple] = []  # (tag, rows) of each ``output`` call, written after process_batch
        self.timers = None  # the run's ``(domain, delete, keys, timestamps)`` for the timer calls below

    def register_event_time_timers(self, keys, timestamps) -> None:
        """Register an event-time timer for each key of ``keys`` (values of the ``state`` table's ``key`` column,
        an Arrow array or a list) at the timestamp beside it in ``timestamps`` (epoch ms): Flink's
        ``registerEventTimeTimer`` for a column of keys; a timer registered twice is kept once. Each fires in
        ``on_timer_batch`` once the watermark reaches it.

        Example: ``ctx.register_event_time_timers(state["key"], pc.add(last_seen, GAP))``
        """
        self._timer_call(0, False, keys, timestamps)

    def register_processing_time_timers(self, keys, timestamps) -> None:
        """As ``register_event_time_timers``, firing once a microbatch's processing time reaches it."""
        self._timer_call(1, False, keys, timestamps)

    def delete_event_time_timers(self, keys, timestamps) -> None:
        """Delete the event-time timer of each key at the timestamp beside it, where there is one."""
        self._timer_call(0, True, keys, timestamps)

    def delete_processing_time_timers(self, keys, timestamps) -> None:
        """Delete the processing-time timer of each key at the timestamp beside it, where there is one."""
        self._timer_call(1, True, keys, timestamps)

    def _timer_call(self, domain: int, delete: bool, keys, timestamps) -> None:
        if self.timers is None:
            raise RuntimeError("timers exist only in a run's process_batch or on_timer_batch")
        self.timers(domain, delete, keys, timestamps)

    def output(self, tag, rows) -> None:
        """Send ``rows`` (an Arrow table or record batch, or a pandas DataFrame, of the tag's columns) to side
        output ``tag``, one the job declares (``side_outputs=[tag]``), as a whole table: no call per row.

        Example: ``ctx.output(BIG, records.filter(pc.greater(records["amount"], 900)))``
        """
        self.side_tables.append((tag, rows))

    def current_watermark(self) -> int:
        """The event-time watermark while this microbatch's records are processed (the previous one's)."""
        return self._watermark


# The subtask executors of vectorised functions (``subtask/runner.EXECUTORS``), by the names functions give.
EXECUTOR_NAMES = ("batches", "windows")


class VectorizedKeyedFunction(KeyedProcessFunction):
    """Subclass and implement ``process_batch``; ``open``, ``initialize_state``, ``snapshot_state`` and
    ``close`` are the KeyedProcessFunction's. Keyed state is declared in ``open`` with ``ctx.get_state`` (its
    handle is not used: values come and go as the ``state`` tables)."""

    batch_format = "arrow"  # or "pandas": tables in and out as pandas DataFrames
    # The subtask executor that calls it (``subtask/runner.EXECUTORS``): "batches", a call per microbatch
    # (``vectorized_run``), or "windows" (``window_run``).
    executor = "batches"
    # What errors call a batch call of this function (a ``MapFunction``'s ``map_batch``, run as ``process_batch``).
    call_names: dict[str, str] = {}

    @override
    def process(self, key: Any, records: list, ctx) -> None:
        raise TypeError(f"{type(self).__name__} is a VectorizedKeyedFunction: Lakestate calls its process_batch, "
                        f"once per subtask and microbatch, never process")

    @abc.abstractmethod
    def process_batch(self, records, state, ctx: BatchContext):
        """Fold one microbatch of one subtask: ``records`` (sorted by key) and ``state`` (a row per key: ``key``
        and a column per keyed state, null where absent) in; ``(output rows, new state rows)`` out, either None.
        In ``new_state`` a null removes a value; keys and columns left out keep theirs."""

    def on_timer_batch(self, timers, state, ctx: BatchContext):
        """The timers of one subtask that fired after a microbatch (Flink's ``onTimer``, once for all of them):
        ``timers`` has ``key``, ``timestamp`` and ``time_domain`` (0 event time, 1 processing time), a key's timers
        together, each key's in the order they fired (timestamp); ``state`` a row per key of ``timers`` as in
        ``process_batch``, and ``ctx.key_offsets`` where each key's timers start. Returns ``(output, new_state)``
        as ``process_batch``. Timers registered here at or below the clock fire in a call after it, in the same
        microbatch (Flink's ``advanceWatermark`` loop). ``ctx.current_watermark()`` is the watermark the timers
        fired at."""
        raise NotImplementedError(f"{type(self).__name__} registers timers but has no on_timer_batch")

    @property
    def has_batch_timers(self) -> bool:
        """Whether the function has timers: an ``on_timer_batch`` of its own."""
        return type(self).on_timer_batch is not VectorizedKeyedFunction.on_timer_batch


class VectorizedWindowAggregate(VectorizedKeyedFunction):
    """A tumbling or sliding event-time window of a ``ColumnAggregate`` on the vectorised path, built by
    ``WindowedStream.aggregate`` (not written by users): ``subtask/window_run.py`` runs it over Arrow tables with
    no Python call per record or window. ``contents`` is the AggregatingStateDescriptor the per-record window
    operator keeps its windows in (each window in its namespace ``"start:end"``, an event-time timer at its end - 1
    beside it), so either path restores the other's savepoints; ``aggregates`` the ColumnAggregate's (name, op,
    column) triples; ``columns`` the output row's columns; ``names`` an aggregate's output column, when not its
    name (``ColumnAggregate.named``)."""

    keeps_timers = True  # a window fires at its end's timer in a run that has no records of its key
    executor = "windows"  # subtask/window_run.py

    def __init__(self, *, size: int, slide: int, offset: int, timestamp_column: str, contents, aggregates: list,
                 key_name: str, columns: list[str], names: dict | None = None):
        self.size, self.slide, self.offset, self.timestamp_column = size, slide, offset, timestamp_column
        self.contents, self.aggregates, self.key_name, self.columns = contents, aggregates, key_name, columns
        self.names = dict(names or {})  # an aggregate's output column, when not its name

    @override
    def open(self, ctx) -> None:
        ctx.get_keyed_state(self.contents)  # declared, so the checkpoint records its type as the operator's

    @override
    def process_batch(self, records, state, ctx: BatchContext):
        raise TypeError("a window on the vectorised path is run by subtask/window_run.py, never process_batch")


def check_job(spec) -> None:
    """What a vectorised function cannot do yet, refused where the job is defined (``JobSpec.validate``)."""
    function = spec.function
    if not isinstance(function, VectorizedKeyedFunction):
        return
    name = type(function).__name__
    if function.batch_format not in BATCH_FORMATS:
        raise ConfigError(f"{name}.batch_format is {function.batch_format!r}; use one of {BATCH_FORMATS}")
    if function.executor not in EXECUTOR_NAMES:
        raise ConfigError(f"{name}.executor is {function.executor!r}; leave it out (a VectorizedKeyedFunction's "
                          f"is {VectorizedKeyedFunction.executor!r}) or use one of {EXECUTOR_NAMES}")
    if type(function).on_timer is not KeyedProcessFunction.on_timer:
        raise ConfigError(f"{name} defines on_timer, but a VectorizedKeyedFunction's timers fire in "
                          f"on_timer_batch(timers, state, ctx), once for a microbatch's timers; rename and "
                          f"vectorise it, or use a KeyedProcessFunction")
    if spec.broadcast_source is not None:
        raise ConfigError(f"{name} is a VectorizedKeyedFunction, which takes no broadcast_source; use a "
                          f"KeyedBroadcastProcessFunction")


BATCH_STATE_KINDS = ("value", "list", "map")


def batch_states(ctx: RuntimeContext, function) -> dict[str, Any]:
    """Qualified name -> descriptor of the states ``open`` declared: ValueState, ListState and MapState (the last
    two without TTL); any other is a ConfigError naming the state and the fix."""
    name = type(function).__name__
    for _qname, descriptor in ctx.descriptors.items():
        if descriptor.kind not in BATCH_STATE_KINDS:
            raise ConfigError(f"{name} declares {descriptor.kind} state {descriptor.name!r}, but a "
                              f"VectorizedKeyedFunction keeps ValueState, ListState and MapState; fold it into "
                              f"one of those (e.g. a ValueState of the aggregate) or use a KeyedProcessFunction")
        if descriptor.kind != "value" and descriptor.ttl_config is not None:
            raise ConfigError(f"{name} declares {descriptor.kind} state {descriptor.name!r} with TTL, which a "
                              f"VectorizedKeyedFunction keeps for ValueState only (a list's and a map's TTL is per "
                              f"element); drop its TTL, or use a KeyedProcessFunction")
    return dict(ctx.descriptors)


def state_column_type(descriptor):
    """The Arrow type of a state's column in ``process_batch``'s tables: the value's, a list of the elements',
    or a map of the user keys' to the values'."""
    import pyarrow as pa

    if descriptor.kind == "map":
        return pa.map_(descriptor.key_type.arrow_type(), descriptor.value_type.arrow_type())
    return descriptor.stored_type.arrow_type()


def as_table(table, what: str):
    """``table`` (an Arrow table, record batch or pandas DataFrame) as an Arrow table."""
    import pyarrow as pa

    if isinstance(table, pa.Table):
        return table
    if isinstance(table, pa.RecordBatch):
        return pa.Table.from_batches([table])
    if type(table).__module__.split(".")[0] != "pandas":
        raise ConfigError(f"{what} is a {type(table).__name__}; return a pyarrow.Table (or a pandas DataFrame)")
    return pa.Table.from_pandas(table, preserve_index=False)


def conform(table, fields: list, what: str, fix: str):
    """``table`` (an Arrow table, record batch or pandas DataFrame) with exactly the columns ``fields`` (pyarrow
    fields, in order) of their types, or a ConfigError naming the mismatch."""
    import pyarrow as pa

    table = as_table(table, what)
    names = [f.name for f in fields]
    missing, extra = [n for n in names if n not in table.column_names], [n for n in table.column_names
                                                                           if n not in names]
    if extra or missing:
        raise ConfigError(f"{what} has columns {table.column_names}: " + (f"{extra} are not declared; " if extra
                          else "") + (f"{missing} are missing; " if missing else "") + fix)
    columns = []
    for f in fields:
        column = table.column(f.name)
        try:
            columns.append(column if column.type == f.type else column.cast(f.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise ConfigError(f"{what}: column {f.name!r} is {column.type} but is declared {f.type} ({e}); cast it "
                              f"or change the declaration") from None
    return pa.table(columns, schema=pa.schema(fields))
