"""Jobs of several keyed operators (docs/writing/dataflows.md), built in the manner of Flink's ``DataStream`` API.

    job = (Dataflow.from_source(FileSource(...), job_id="sessions")
           .key_by("user")
           .process(Sessionize(), uid="sessions", output_type=SESSION)
           .key_by("country")
           .process(CountSessions(), uid="per-country", output_type=COUNTS, parallelism=3)
           .sink_to("sinks/sessions_per_country"))

``sink_to`` gives a ``JobSpec`` for one operator (the one-operator job, as it always was) and a ``Job`` for
several. ``Dataflow.graph(branch, ...)`` makes one job of several branches of one stream, each ending in its own
sink (fan-out); a two-input operator later in a dataflow joins two branches of one stream. In a ``Job``
every operator is a ``JobSpec`` of its own: its uid, function, key, parallelism, max parallelism, output type and
side outputs, its own state tables; the first reads the job's source, each next one what the operators before it
emitted (``sources.EdgeSource``), each branch's end writes its sink. One run takes every pending
microbatch through every operator in turn, and one checkpoint pins all their state at the same microbatch.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from typing_extensions import override

from .errors import ConfigError
from .functions import (
    BroadcastProcessFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessContext,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    MapFunction,
    NonKeyedBroadcastContext,
    ProcessContext,
    ProcessFunction,
    ReadOnlyBroadcastContext,
    RecordFunction,
)
from .graph import Job, as_job
from .job import SHARE_KEY, Input, InputRole, JobSpec, check_job_id, check_one_job, further_input_name
from .joins import ConnectedStreams, IntervalJoin, JoinedStreams
from .joins.broadcast import BroadcastConnectedStream, BroadcastStream
from .keys import check_key, component_types, key_columns
from .sinks import Sink
from .sources import EdgeSource
from .sources.query import QuerySource
from .state.backend import DEFAULT_BACKEND
from .tables.operators import UpdatingOperators
from .types import RowTypeInfo, TypeInfo, Types
from .vectorized import VectorizedKeyedFunction, as_table
from .watermarks import WatermarkStrategy
from .windows.stream import WindowedStream


class _WithoutKeyedState:
    """A non-keyed operator's RuntimeContext: what it tells of the subtask; keyed state is refused."""

    def __init__(self, ctx):
        self._ctx = ctx

    def __getattr__(self, name: str):
        if name.startswith("get_") and name.endswith("_state"):
            raise ConfigError(f"a non-keyed operator ({name} in open) has no keyed state: key the stream with "
                              f".key_by(column).process(...) for that, or keep operator state in initialize_state")
        return getattr(self._ctx, name)


class RecordOperator(KeyedProcessFunction):
    """A ``MapFunction``, ``FlatMapFunction`` or ``FilterFunction`` as the operator a run knows: a keyed function
    whose keys are the subtasks (``job.SHARE_KEY``), called once a subtask and microbatch with its share."""

    def __init__(self, function: RecordFunction):
        self.function = function
        # records: (input, record)
        self.two_inputs = isinstance(function, (CoMapFunction, CoFlatMapFunction, CoProcessFunction))

    @override
    def initialize_state(self, ctx) -> None:
        self.function.initialize_state(ctx)

    @override
    def open(self, ctx) -> None:
        self.function.open(_WithoutKeyedState(ctx))

    @override
    def process(self, key, records, ctx):
        f = self.function
        if isinstance(f, CoMapFunction):
            return [f.map1(r) if side == 1 else f.map2(r) for side, r in records]
        if isinstance(f, CoProcessFunction):
            co = CoProcessContext(ctx)
            return [row for side, r in records
                    for row in ((f.process_element1 if side == 1 else f.process_element2)(r, co) or ())]
        if isinstance(f, CoFlatMapFunction):
            return [row for side, r in records for row in ((f.flat_map1 if side == 1 else f.flat_map2)(r) or ())]
        if isinstance(f, (ProcessFunction, BroadcastProcessFunction)):
            context = (ReadOnlyBroadcastContext if isinstance(f, BroadcastProcessFunction) else ProcessContext)(ctx)
            return [row for r in records for row in (f.process_element(r, context) or ())]
        if isinstance(f, MapFunction):
            return [f.map(r) for r in records]
        if isinstance(f, FilterFunction):
            return [r for r in records if f.filter(r)]
        return [row for r in records for row in (f.flat_map(r) or ())]

    @override
    def snapshot_state(self, ctx) -> None:
        self.function.snapshot_state(ctx)

    @override
    def close(self) -> None:
        self.function.close()


class BroadcastRecordOperator(RecordOperator, KeyedBroadcastProcessFunction):
    """A ``BroadcastProcessFunction`` as the operator a run knows: a ``RecordOperator`` that a run hands the
    broadcast records too (before the microbatch's others, on every subtask), without keyed state to apply to."""

    applies_to_keyed_state = False

    @override
    def process_broadcast_element(self, value, ctx):
        return self.function.process_broadcast_element(value, NonKeyedBroadcastContext(ctx))


class VectorizedRecordOperator(RecordOperator, VectorizedKeyedFunction):
    """A ``MapFunction`` with a ``map_batch`` as the operator a run knows: keyed by subtask as a
    ``RecordOperator`` is, on the vectorised path, so a subtask's records of a microbatch reach ``map_batch`` as
    one Arrow table and its rows go to the sink as one (no Python object per record)."""

    call_names = {"process_batch": "map_batch"}

    @override
    def process_batch(self, records, state, ctx):
        output = as_table(self.function.map_batch(records), "map_batch's output")
        if output.num_rows != records.num_rows:
            raise ConfigError(f"map_batch returned {output.num_rows} rows for {records.num_rows} records; a map gives "
                              f"one row per record, in their order (a FlatMapFunction gives any number)")
        return output, None


def record_operator(function: RecordFunction) -> RecordOperator:
    """The operator a run knows for a non-keyed function."""
    if isinstance(function, BroadcastProcessFunction):
        return BroadcastRecordOperator(function)
    if isinstance(function, MapFunction) and callable(getattr(function, "map_batch", None)):
        return VectorizedRecordOperator(function)
    return RecordOperator(function)


class _ToSink(MapFunction):
    """The operator ``Dataflow.graph`` adds where a stream is both written to a sink and read further: it
    forwards each record to the sink, so a replay (which leaves out what a sink already committed) still feeds
    the operators after it every record."""

    def map(self, record):
        return record


def _same_operator(a: JobSpec, b: JobSpec) -> bool:
    """Whether two branches' operators of one uid are one operator (the same step of a shared stream): all of
    their definitions but the sink each branch ends in."""
    return all(getattr(a, f.name) == getattr(b, f.name) for f in fields(a) if f.name != "sink")


def _graph(ends: tuple) -> Job:
    """``Dataflow.graph``: the branches' operators merged by uid, each after those it reads."""
    if not ends:
        raise ConfigError("Dataflow.graph(...) takes the branches of a job, each ended by sink_to(...)")
    branches = []
    for end in ends:
        if not isinstance(end, (JobSpec, Job)):
            raise ConfigError(f"Dataflow.graph(...) takes what sink_to(...) returns, got {type(end).__name__}")
        branches.append((as_job(end).operators, end.sink))
    job_ids = sorted({ops[0].job_id for ops, _ in branches})
    if len(job_ids) > 1:
        raise ConfigError(f"Dataflow.graph(...): the branches belong to jobs {job_ids}; one job's branches start "
                          f"from one Dataflow.from_source(...)")
    main_sink, merged, sinks = branches[0][1], {}, {}
    for ops, sink in branches:
        if ops[0].uid != branches[0][0][0].uid:
            raise ConfigError(f"Dataflow.graph(...): a branch starts at operator {ops[0].uid!r}, another at "
                              f"{branches[0][0][0].uid!r}; every branch starts from the job's first operator")
        for op in ops:
            known = merged.get(op.uid)
            if known is not None and not _same_operator(known, op):
                raise ConfigError(f"operator uid {op.uid!r} is given to two different operators; give each "
                                  f"operator its own uid")
            merged.setdefault(op.uid, op)
        last = ops[-1]
        if last.uid in sinks:
            raise ConfigError(f"two branches end at operator {last.uid!r} (sinks {sinks[last.uid]!r} and {sink!r}); "
                              f"a stream is written to one sink")
        if any(i.upstream == last.uid and getattr(i.source, "output", None) is None
               for other, _ in branches for o in other for i in o.inputs):
            # the stream is also read further on: an operator that forwards it writes the sink
            uid = f"{last.uid}-to-sink"
            last = merged[uid] = replace(
                last, function=RecordOperator(_ToSink()), uid=uid, key=SHARE_KEY, key_type=Types.INT(),
                source=EdgeSource(last.uid, last.output_type), side_outputs=[], order_by=[], max_parallelism=None,
                watermark_strategy=None, broadcast_source=None, further_inputs=())
        sinks[last.uid] = sink
    operators = [replace(op, sink=main_sink) for op in merged.values()]
    if len(branches) == 1 and len(operators) == 1:
        return operators[0].validate()
    return Job(operators, sinks).validate()


def _further_inputs(others: tuple, key: str, role: InputRole = InputRole.KEYED) -> dict:
    """A two-input operator's (or a union's) step options for its inputs after the first, the streams ``others``:
    JobSpec's ``further_inputs``, each another source of the job or (later in a dataflow) what another branch's
    last operator emits, numbered from 2 (``further_input_name`` names them)."""
    inputs = []
    for index, other in enumerate(others, start=2):
        name = further_input_name(index)
        if other._steps:
            edge = projected(_edge(other._steps[-1], other._pending_side()), other._pending_select())
            inputs.append(Input(name, edge, key, None, role, index))
        else:
            inputs.append(Input(name, projected(other._source, other._pending_select()), key,
                                other._settings["watermark_strategy"], role, index))
    return {"further_inputs": tuple(inputs)}


def _edge(last: _Step, side) -> EdgeSource:
    """What operator ``last`` emits, or its side output ``side`` (an OutputTag; None: its rows)."""
    return (EdgeSource(last.uid, last.output_type) if side is None
            else EdgeSource(last.uid, side.type_info, output=side.name))


def projected(source, projection: tuple | None):
    """``source`` with ``select_expr``'s ``projection`` (where, columns, row type, functions) applied as it is read:
    an edge's own, or a ``QuerySource`` of a source (None: ``source`` as it is)."""
    if projection is None:
        return source
    where, columns, row_type, functions = projection
    if isinstance(source, EdgeSource):
        return replace(source, where=where, columns=columns, row_type=row_type, functions=functions)
    return QuerySource(source, where, columns, row_type, functions)


def _shown_key(key) -> "str | list[str]":
    """A key as the user wrote it: its column, or the list of a composite key's."""
    return key if isinstance(key, str) else list(key)


@dataclass(frozen=True)
class _Step:
    function: Any
    uid: str
    key: "str | tuple[str, ...]"
    key_type: TypeInfo
    output_type: RowTypeInfo
    options: dict
    joined: tuple = ()  # the branches (each a tuple of steps of the same stream) its further inputs read, if any
    reads: Any = None  # the OutputTag of the step before it whose side output it reads (``get_side_output``)
    projection: tuple | None = None  # Spark SQL on what it reads (``select_expr``): (where, columns, type, functions)


class Dataflow(UpdatingOperators):
    """A stream being built: ``Dataflow.from_source(source, job_id=...)``, then ``key_by`` / ``process`` pairs and
    non-keyed ``map`` / ``flat_map`` / ``filter`` operators, then ``sink_to``. Each call returns a new builder;
    nothing is checked until ``sink_to``, which checks all.

    Example::

        spec = (Dataflow.from_source(FileSource("input/purchases", "json", PURCHASE), job_id="spend")
                .key_by("user_id").process(UserTotal(), uid="user-totals", output_type=USER_TOTAL, parallelism=2)
                .key_by("country").process(CountryTotal(), uid="country-totals", output_type=COUNTRY_TOTAL)
                .sink_to("sinks/country_spend"))   # a Job of the two operators, validated
    """

    def __init__(self, source, settings: dict, steps: tuple[_Step, ...] = (), key: tuple | None = None):
        self._source, self._settings, self._steps, self._key = source, settings, steps, key

    @classmethod
    def from_source(cls, source, *, job_id: str, backend: str = DEFAULT_BACKEND, checkpoint_interval: int = 1,
                    num_retained: int = 3, watermark_strategy: WatermarkStrategy | None = None,
                    broadcast_source=None) -> "Dataflow":
        """Start a job reading ``source`` (a FileSource, DeltaSource or KafkaSource). ``watermark_strategy`` and
        ``broadcast_source`` belong to the first operator; the watermark flows down to the others.

        Example: ``Dataflow.from_source(FileSource("in", "parquet", SCHEMA), job_id="clicks")``

        :param source: what the job reads (a ``Source``).
        :param job_id: the job's id, as ``JobSpec``'s.
        :param backend: the state backend of every operator (``delta``, ``hashmap``, ``memory``).
        :param checkpoint_interval: a checkpoint every this many microbatches.
        :param num_retained: how many checkpoints are kept.
        :param watermark_strategy: the source's event time (the first operator's; it flows down).
        :param broadcast_source: records every subtask of the first operator sees first.
        """
        check_job_id(job_id)
        return cls(source, {"job_id": job_id, "backend": backend, "checkpoint_interval": checkpoint_interval,
                            "num_retained": num_retained, "watermark_strategy": watermark_strategy,
                            "broadcast_source": broadcast_source})

    @staticmethod
    def graph(*branches: JobSpec | Job) -> JobSpec | Job:
        """One job of several branches (each a stream of this job ended by ``sink_to``), as Flink runs every sink
        of an environment: a stream read by several operators (fan-out) is computed once, and each branch writes
        its own sink. The first branch's sink is the job's own (its side outputs are tables beside it).

        Example::

            sessions = Dataflow.from_source(src, job_id="web").key_by("user").process(Sessionize(), uid="s", ...)
            job = Dataflow.graph(sessions.key_by("country").process(Count(), uid="per-country", ...)
                                         .sink_to("sinks/per_country"),
                                 sessions.filter(Long(), uid="long").sink_to("sinks/long_sessions"))
        """
        return _graph(branches)

    @property
    def key_column(self) -> tuple[str, TypeInfo] | None:
        """The keyed stream's key column and its type (None before ``key_by``)."""
        return self._key

    def _fields(self) -> dict | None:
        """The columns of the stream here: the source's, the last operator's output, or its side output's."""
        select, side = self._pending_select(), self._pending_side()
        if select is not None:
            return select[2].fields
        if side is not None:
            return side.type_info.fields
        return self._steps[-1].output_type.fields if self._steps else self._source.declared_fields()

    def key_by(self, key: "str | list[str]", key_type: "TypeInfo | list[TypeInfo] | None" = None) -> "Dataflow":
        """Key the stream by column ``key``, or by several (a composite key: ``key_by(["user", "device"])``, whose
        functions see a key that is the tuple of the columns' values). The key's type is read from the stream's
        declared columns, or given (``key_type``: a type, or a list of them for a composite key): STRING, LONG,
        INT, BOOLEAN, DATE, TIMESTAMP, DECIMAL, BYTES or a row of them. Must be followed by ``process`` (or
        ``window``).

        Example: ``.key_by("user")``, ``.key_by(["user", "device"])``

        :param key: the column to key by, or a list of them.
        :param key_type: its type (a list of types for a list of columns), when the stream does not declare its
            columns.
        """
        shown = f"key_by({key!r})"
        if self._key is not None:
            raise ConfigError(f"{shown} follows key_by({_shown_key(self._key[0])!r}): a keyed stream needs "
                              f".process(...) before it is keyed again")
        fields = self._fields()
        if key_type is None:
            if fields is None:
                raise ConfigError(f"{shown}: the source does not declare its columns; give the key's type, "
                                  f"key_by({key!r}, Types.STRING())")
            columns = key_columns(key) if isinstance(key, (str, list, tuple)) else ()
            missing = [c for c in columns if c not in fields]
            if missing:
                raise ConfigError(f"{shown}: the stream has no column {missing[0]!r} (columns: {list(fields)})")
            key_type = [fields[c] for c in columns] if isinstance(key, (list, tuple)) else fields.get(key)
        return Dataflow(self._source, self._settings, self._steps, check_key(key, key_type, shown))

    def process(self, function, *, uid: str, output_type: RowTypeInfo, parallelism: int = 2,
                max_parallelism: int | None = None, order_by: list[str] | None = None,
                side_outputs: list | None = None) -> "Dataflow":
        """Apply a keyed function (a ``KeyedProcessFunction``) to the keyed stream, as operator ``uid`` with its
        own parallelism and max parallelism; the stream after it is what it emits (``output_type``).

        Example: ``.process(Sessionize(), uid="sessions", output_type=SESSION, parallelism=2)``

        :param function: the ``KeyedProcessFunction``.
        :param uid: the operator's uid (its state's names, its part of a savepoint).
        :param output_type: the rows it emits, ``Types.ROW_NAMED([...], [...])``.
        :param parallelism: its number of subtasks.
        :param max_parallelism: its number of key groups (default: Flink's for ``parallelism``).
        :param order_by: columns that order a key's records in a microbatch.
        :param side_outputs: the ``OutputTag`` s it may emit to, each a table beside the sink.
        """
        if self._key is None and isinstance(function, BroadcastProcessFunction):
            if self._pending_broadcast() is None and (self._steps or self._settings["broadcast_source"] is None):
                raise ConfigError(f"process(uid={uid!r}): a BroadcastProcessFunction reads a broadcast stream: "
                                  f"stream.connect(rules.broadcast(DESCRIPTOR)).process(...)")
            return self._record_step("process", function, BroadcastProcessFunction, uid, output_type,
                                     {"parallelism": parallelism, "max_parallelism": max_parallelism,
                                      "side_outputs": side_outputs})
        if self._key is None and isinstance(function, ProcessFunction):  # Flink's ProcessFunction, not keyed
            return self._record_step("process", function, ProcessFunction, uid, output_type,
                                     {"parallelism": parallelism, "max_parallelism": max_parallelism,
                                      "side_outputs": side_outputs})
        if self._key is None:
            raise ConfigError(f"process(uid={uid!r}) needs a keyed stream: call .key_by(column) before it, or "
                              f"give it a ProcessFunction (process_element) for a stream that is not keyed")
        options = {"parallelism": parallelism, "max_parallelism": max_parallelism,
                   "order_by": list(order_by or []), "side_outputs": list(side_outputs or [])}
        joined, union = (), self._pending_union()
        if union is not None:  # the union's further streams
            options.update(_further_inputs(union, self._key[0], InputRole.UNION))
            joined = tuple(other._steps for other in union if other._steps)
        options, joined = self._broadcast_options(options, joined)
        step = _Step(function, uid, self._key[0], self._key[1], output_type, options, joined)
        return self._then(step)

    def window(self, assigner, *, timestamp_column: str | None = None) -> WindowedStream:
        """Window the keyed stream (docs/writing/windows.md): ``assigner`` puts each record in windows
        (``TumblingEventTimeWindows.of(size)``, ``SlidingEventTimeWindows.of(size, slide)``,
        ``EventTimeSessionWindows.with_gap(gap)``, their processing-time twins, ``GlobalWindows.create()``); end it
        with ``.reduce``, ``.aggregate`` or ``.process``. A record's event time is its ``timestamp_column``: by
        default the column of the job's watermark strategy.

        Example: ``.key_by("user").window(TumblingEventTimeWindows.of(timedelta(minutes=1)))``
        """
        if self._key is None:
            raise ConfigError("window(...) needs a keyed stream: call .key_by(column) before it")
        fields = self._fields()
        if fields is None:
            raise ConfigError("window(...): the source does not declare its columns, and a window keeps its "
                              "records in state: declare the source's schema")
        strategy = self._settings["watermark_strategy"]
        if getattr(assigner, "is_event_time", False):
            if strategy is None:
                raise ConfigError("an event-time window needs a watermark to fire: give the dataflow a "
                                  "watermark_strategy (WatermarkStrategy.for_bounded_out_of_orderness(...)"
                                  ".with_timestamp_column(...)), or use a processing-time assigner")
            timestamp_column = timestamp_column or strategy.timestamp_column
            if timestamp_column not in fields:
                raise ConfigError(f"window(...): the stream has no column {timestamp_column!r} for event time "
                                  f"(columns: {list(fields)}); emit it upstream or give window(..., "
                                  f"timestamp_column=...)")
        elif timestamp_column is not None and timestamp_column not in fields:
            raise ConfigError(f"window(...): the stream has no column {timestamp_column!r} (columns: {list(fields)})")
        return WindowedStream(self, assigner, fields, timestamp_column)

    def window_all(self, assigner, *, timestamp_column: str | None = None) -> WindowedStream:
        """Window the whole stream, not keyed (Flink's ``windowAll``, an ``AllWindowedStream``): every record goes
        to the windows of one operator of parallelism 1, ended as a keyed window is (``.reduce``, ``.aggregate``,
        ``.process``; a ``ProcessWindowFunction`` sees the one key, 0). Its checkpoints, savepoints, replays and
        restores are a keyed window's of that one key.

        Example: ``clicks.window_all(TumblingEventTimeWindows.of(timedelta(minutes=1))).aggregate(
        ColumnAggregate(n="count(*)"), uid="clicks-per-minute")``
        """
        if self._key is not None:
            raise ConfigError(f"window_all(...) windows a stream that is not keyed; the stream is keyed by "
                              f"{self._key[0]!r}: window it with .window(...), or window_all before key_by")
        return Dataflow(self._source, self._settings, self._steps, (SHARE_KEY, Types.INT())).window(
            assigner, timestamp_column=timestamp_column)

    # -- two inputs (docs/writing/joins.md) ---------------------------------------------------------------
    def connect(self, other: "Dataflow") -> ConnectedStreams:
        """Connect this stream and ``other`` (another source of the same job, from ``Dataflow.from_source`` with
        its own watermark strategy) for a two-input operator: ``.key_by(key1, key2).process(
        KeyedCoProcessFunction)``. The operator's watermark is the least of the two inputs'.

        Example: ``orders.connect(payments).key_by("order_id", "order_id").process(Match(), uid="match", ...)``

        ``other`` may be a ``BroadcastStream`` (``rules.broadcast(DESCRIPTOR)``, Flink's spelling of a
        ``broadcast_source``): this stream, keyed or not, then goes to a ``KeyedBroadcastProcessFunction`` or a
        ``BroadcastProcessFunction`` (``.connect(rules.broadcast(LIMITS)).process(...)``).
        """
        if isinstance(other, BroadcastStream):
            return BroadcastConnectedStream(self, other)
        self._check_second_input(other, "connect", keyed=False)
        return ConnectedStreams(self, other)

    def broadcast(self, *descriptors) -> BroadcastStream:
        """This source as a broadcast stream (Flink's ``broadcast(MapStateDescriptor...)``), to ``connect`` a
        stream of the same job to: every subtask of the operator sees each of its records, before the
        microbatch's others, and keeps them in the broadcast states ``descriptors`` declare.

        Example: ``purchases.key_by("user_id").connect(limits.broadcast(LIMITS)).process(SpendLimit(), ...)``
        """
        return BroadcastStream(self, descriptors)

    def union(self, *others: "Dataflow") -> "Dataflow":
        """This stream and ``others`` (each another source of the same job, or another branch of its stream, of
        the same columns, with its own offsets and watermark strategy) as one stream, to be keyed:
        ``a.union(b, c).key_by(k).process(...)`` (or ``.window(...)``), as Flink's ``union`` of N streams. A key's
        records come in the order of the streams in a microbatch: this stream's, then each other's in turn.

        Example: ``web.union(app, kiosk).key_by("user").process(Sessionize(), uid="sessions", output_type=SESSION)``
        """
        if not others:
            raise ConfigError("union(...) takes at least one other stream: a.union(b[, c, ...])")
        mine = self._fields()
        for other in others:
            self._check_second_input(other, "union", keyed=False)
            theirs = other._fields()
            if mine is None or theirs is None or list(mine.items()) != list(theirs.items()):
                raise ConfigError(f"union(...) takes streams of the same declared columns, got "
                                  f"{mine and list(mine)} and {theirs and list(theirs)}; map one onto the other's "
                                  f"columns in its source")
            if (self._settings["watermark_strategy"] is None) != (other._settings["watermark_strategy"] is None):
                raise ConfigError("union(...): a union's watermark is the least of its streams': give both a "
                                  "watermark_strategy, or neither (of more streams: each, or none)")
        if len({id(o) for o in (self, *others)}) <= len(others):
            raise ConfigError("union(...) takes each stream once; a stream unioned with itself would read its "
                              "records twice")
        return Dataflow(self._source, {**self._settings, "union": (others, len(self._steps))}, self._steps, self._key)

    def get_side_output(self, tag) -> "Dataflow":
        """The rows the last operator emits to side output ``tag`` (one it declares in ``side_outputs``), as a
        stream that goes on like any other (Flink's ``getSideOutput``): map, key, window, join and process it,
        exactly once as every edge. A side output read so goes to the operators that read it, not to a table of
        its own; one nobody reads still goes to its table beside the sink.

        Example::

            counted = clicks.key_by("user").window(TumblingEventTimeWindows.of(minute)).allowed_lateness(0) \
                .side_output_late_data(LATE).aggregate(ColumnAggregate(n="count(*)"), uid="per-minute")
            late = counted.get_side_output(LATE).key_by("user").process(CountLate(), uid="late", ...)
        """
        if not self._steps:
            raise ConfigError("get_side_output(...) reads an operator's side output: call it on what "
                              ".process(...) (or a window, join or map) returns")
        if self._key is not None or self._pending_union() is not None or self._pending_side() is not None:
            raise ConfigError("get_side_output(...) is read from an operator's output, before key_by, union or "
                              "another get_side_output")
        last = self._steps[-1]
        declared = list(last.options.get("side_outputs") or [])
        if tag not in declared:
            raise ConfigError(f"get_side_output({tag!r}): operator {last.uid!r} declares side outputs "
                              f"{[t.name for t in declared]}; add the tag to its side_outputs=[...]")
        return Dataflow(self._source, {**self._settings, "side": (tag, len(self._steps))}, self._steps, None)

    def _pending_side(self):
        """The side output ``get_side_output`` picked, until the operator that reads it is added."""
        side = self._settings.get("side")
        return side[0] if side is not None and side[1] == len(self._steps) else None

    def _then(self, step: _Step) -> "Dataflow":
        """This stream with operator ``step`` added: it reads the side output picked, if one was."""
        side, select = self._pending_side(), self._pending_select()
        if side is not None:
            step = replace(step, reads=side)
        if select is not None:
            step = replace(step, projection=select)
        return Dataflow(self._source, self._settings, self._steps + (step,))

    def _pending_select(self) -> tuple | None:
        """The Spark SQL ``select_expr`` put on the stream, until the operator that reads it is added."""
        select = self._settings.get("select")
        return select[0] if select is not None and select[1] == len(self._steps) else None

    def _pending_broadcast(self) -> "Dataflow | None":
        """The stream broadcast to the next operator after others (``connect(rules.broadcast(...))``), until it is
        added."""
        marked = self._settings.get("later_broadcast")
        return marked[0] if marked is not None and marked[1] == len(self._steps) else None

    def _broadcast_options(self, options: dict, joined: tuple = ()) -> tuple[dict, tuple]:
        """``options`` and ``joined`` of the next step, with its broadcast input when one is pending: a source
        of the job, or what a branch's last operator emits (that branch then read before it)."""
        rules = self._pending_broadcast()
        if rules is None:
            return options, joined
        if not rules._steps:
            return {**options, "broadcast_source": rules._source}, joined
        edge = _edge(rules._steps[-1], rules._pending_side())
        return {**options, "broadcast_source": edge}, (*joined, rules._steps)

    def _pending_union(self) -> "tuple[Dataflow, ...] | None":
        """The streams ``union`` joined to this one, until the keyed operator that reads them is added."""
        union = self._settings.get("union")
        return union[0] if union is not None and union[1] == len(self._steps) else None

    def interval_join(self, other: "Dataflow") -> IntervalJoin:
        """Join this keyed stream with ``other`` (keyed by a column of the same type): each record with the other
        side's records of its key within ``.between(lower, upper)`` of its event time, as Flink's interval join.

        Example: ``impressions.key_by("ad").interval_join(clicks.key_by("ad")).between(0, timedelta(minutes=10))``
        """
        self._check_second_input(other, "interval_join", keyed=True)
        strategies = (self._settings["watermark_strategy"], other._settings["watermark_strategy"])
        if None in strategies:
            raise ConfigError("an interval join works in event time: give both streams a watermark_strategy "
                              "(Dataflow.from_source(..., watermark_strategy=...))")
        return IntervalJoin(self, other, self._row_type(), other._row_type(), strategies[0].timestamp_column,
                            strategies[1].timestamp_column)

    def join(self, other: "Dataflow") -> JoinedStreams:
        """Join this stream with ``other`` per key and window, as Flink's window join: ``.where(key_a).equal_to(
        key_b).window(assigner).apply(JoinFunction)`` joins every pair of a key's records of one window when it
        fires.

        Example: ``orders.join(payments).where("id").equal_to("order_id").window(TumblingEventTimeWindows.of(m))``
        """
        return self._windowed_pair(other, "join")

    def co_group(self, other: "Dataflow") -> JoinedStreams:
        """As ``join``, with a ``CoGroupFunction`` given all of a key's records of a window from each side."""
        return self._windowed_pair(other, "co_group")

    def _windowed_pair(self, other: "Dataflow", verb: str) -> JoinedStreams:
        self._check_second_input(other, verb, keyed=False)
        strategies = (self._settings["watermark_strategy"], other._settings["watermark_strategy"])
        columns = tuple(None if s is None else s.timestamp_column for s in strategies)
        return JoinedStreams(self, other, (self._row_type(), other._row_type()), columns, verb == "co_group")

    def _check_second_input(self, other: "Dataflow", verb: str, keyed: bool) -> None:
        if not isinstance(other, Dataflow):
            raise ConfigError(f"{verb}(...) takes a Dataflow (Dataflow.from_source(...)), got {type(other).__name__}")
        for which, stream in (("this stream", self), ("the other stream", other)):
            if stream._pending_union() is not None:
                raise ConfigError(f"{verb}(...): {which} is a union not yet read by an operator; key it and "
                                  f"process it first")
            if keyed and stream._key is None:
                raise ConfigError(f"{verb}(...) joins keyed streams: key {which} with .key_by(column) first")
            if not keyed and stream._key is not None:
                raise ConfigError(f"{verb}(...) takes unkeyed streams; key them after: a.connect(b).key_by(k1, k2)")
        mine, theirs = self._steps, other._steps
        if theirs and not mine:
            raise ConfigError(f"{verb}(...): a source's stream is read by a later operator as its second input: put "
                              f"the processed stream first (processed.{verb}(source))")
        if mine and theirs and mine[0] is not theirs[0]:
            raise ConfigError(f"{verb}(...) after operators joins two branches of one stream (each from the same "
                              f"first operator), or a branch and a source of the job (Dataflow.from_source(...) "
                              f"not yet processed)")
        check_one_job(self._settings["job_id"], other._settings["job_id"], f"{verb}(...)")
        if other._settings["broadcast_source"] is not None or (
                not mine and self._settings["broadcast_source"] is not None):
            raise ConfigError(f"{verb}(...): a two-input operator takes no broadcast_source")

    def _row_type(self) -> RowTypeInfo:
        fields = self._fields()
        if fields is None:
            raise ConfigError("a two-input operator keeps its records in state: declare the source's schema")
        return Types.ROW_NAMED(list(fields), list(fields.values()))

    def two_input_map(self, other: "Dataflow", function, *, uid: str | None, output_type: RowTypeInfo,
                      parallelism: int = 2, max_parallelism: int | None = None,
                      side_outputs: list | None = None) -> "Dataflow":
        """The non-keyed two-input operator ``function`` (a ``CoMapFunction``, ``CoFlatMapFunction`` or
        ``CoProcessFunction``) over this stream and ``other``: each record to the subtask its content hashes to
        (what ``ConnectedStreams.map``, ``flat_map`` and an unkeyed ``process`` end in)."""
        uid = uid or f"co-map-{len(self._steps) + 1}"
        options = {"parallelism": parallelism, "max_parallelism": max_parallelism, "order_by": [],
                   "side_outputs": list(side_outputs or []), **_further_inputs((other,), SHARE_KEY)}
        step = _Step(RecordOperator(function), uid, SHARE_KEY, Types.INT(), output_type, options,
                     (other._steps,) if other._steps else ())
        return self._then(step)

    def two_input_process(self, other: "Dataflow", function, *, uid: str, output_type: RowTypeInfo,
                          parallelism: int = 2, max_parallelism: int | None = None,
                          side_outputs: list | None = None) -> "Dataflow":
        """The two-input operator ``function`` (a ``KeyedCoProcessFunction``) over this keyed stream and keyed
        ``other`` (what ``ConnectedStreams.process`` and ``IntervalJoin.process`` end in)."""
        (key, key_type), (key2, key_type2) = self._key, other._key
        types, types2 = component_types(key, key_type), component_types(key2, key_type2)
        if types != types2:
            raise ConfigError(f"the two inputs are keyed by {_shown_key(key)!r} ({[t.name for t in types]}) and "
                              f"{_shown_key(key2)!r} ({[t.name for t in types2]}): key them by columns of the same "
                              f"types, in the same order")
        options = {"parallelism": parallelism, "max_parallelism": max_parallelism, "order_by": [],
                   "side_outputs": list(side_outputs or []), **_further_inputs((other,), key2)}
        step = _Step(function, uid, key, key_type, output_type, options, (other._steps,) if other._steps else ())
        return self._then(step)

    def _record_step(self, kind: str, function, expected: type, uid: str | None, output_type, options: dict
                     ) -> "Dataflow":
        if self._key is not None:
            raise ConfigError(f"{kind}(...) follows key_by({self._key[0]!r}): a keyed stream takes .process(...); "
                              f"{kind} the stream before keying it, or after the process")
        if not isinstance(function, expected):
            raise ConfigError(f"{kind}(...) takes a state_store.{expected.__name__}, got {type(function).__name__}")
        if self._pending_union() is not None:
            raise ConfigError(f"{kind}(...) after union(...): a union is read by a keyed operator; key it first "
                              f"(.key_by(column).process(...)), then {kind}")
        uid = uid or f"{kind}-{len(self._steps) + 1}"
        if output_type is None:  # a filter's rows are the stream's
            fields = self._fields()
            if fields is None:
                raise ConfigError(f"{kind}(uid={uid!r}): the source does not declare its columns; give output_type")
            output_type = Types.ROW_NAMED(list(fields), list(fields.values()))
        options = {"parallelism": options.get("parallelism", 2), "max_parallelism": options.get("max_parallelism"),
                   "order_by": [], "side_outputs": list(options.get("side_outputs") or [])}
        options, joined = self._broadcast_options(options)
        step = _Step(record_operator(function), uid, SHARE_KEY, Types.INT(), output_type, options, joined)
        return self._then(step)

    def map(self, function: MapFunction, *, output_type: RowTypeInfo, uid: str | None = None, parallelism: int = 2,
            max_parallelism: int | None = None) -> "Dataflow":
        """One row per record (a ``MapFunction``), as a non-keyed operator: stateless, or with operator state
        (then give it a ``uid`` of its own, as for any stateful operator).

        Example: ``.map(Enrich(), output_type=ENRICHED)``

        :param function: the ``MapFunction``.
        :param output_type: the rows it returns.
        :param uid: the operator's uid (default: one from the step's place; give one when it keeps state).
        :param parallelism: its number of subtasks.
        :param max_parallelism: its operator state's bound of every rescale.
        """
        return self._record_step("map", function, MapFunction, uid, output_type,
                                 {"parallelism": parallelism, "max_parallelism": max_parallelism})

    def flat_map(self, function: FlatMapFunction, *, output_type: RowTypeInfo, uid: str | None = None,
                 parallelism: int = 2, max_parallelism: int | None = None) -> "Dataflow":
        """Any number of rows per record (a ``FlatMapFunction``), as a non-keyed operator (see ``map``).

        Example: ``.flat_map(Dedupe(), output_type=CLICK, uid="dedupe")``
        """
        return self._record_step("flat_map", function, FlatMapFunction, uid, output_type,
                                 {"parallelism": parallelism, "max_parallelism": max_parallelism})

    def filter(self, function: FilterFunction, *, uid: str | None = None, parallelism: int = 2,
               max_parallelism: int | None = None) -> "Dataflow":
        """The records a ``FilterFunction`` keeps, unchanged, as a non-keyed operator (see ``map``).

        Example: ``.filter(NotABot())``
        """
        return self._record_step("filter", function, FilterFunction, uid, None,
                                 {"parallelism": parallelism, "max_parallelism": max_parallelism})

    def select_expr(self, columns: dict, *, output_type: RowTypeInfo, where: str | None = None,
                    functions: tuple = ()) -> "Dataflow":
        """The stream's rows as Spark SQL makes them, between an operator (or the source) and the next (Spark's
        ``where`` and ``selectExpr``): those ``where`` keeps, as ``columns`` (name -> a Spark SQL expression over
        the stream's columns) of ``output_type``. Spark evaluates both as the next operator reads the rows, so
        scalar expressions keep Spark SQL's semantics (nulls, casts, overflow); each row keeps its place. It is
        no operator of its own: the SQL layer's filters and computed columns over an operator's rows.

        ``functions``: the Python functions the expressions call, (name, function, Spark type) each.

        Example: ``.select_expr({"user": "user", "big": "amount > 100"}, output_type=FLAGGED, where="amount > 0")``
        """
        if self._key is not None or self._pending_union() is not None or self._pending_select() is not None:
            raise ConfigError("select_expr(...) takes a stream before key_by, union or another select_expr")
        if not isinstance(output_type, RowTypeInfo) or list(output_type.fields) != list(columns):
            raise ConfigError(f"select_expr(...): output_type is Types.ROW_NAMED of its columns {list(columns)}, "
                              f"in that order")
        select = (where, tuple(columns.items()), output_type, tuple(functions))
        return Dataflow(self._source, {**self._settings, "select": (select, len(self._steps))}, self._steps, None)

    def sink_to(self, sink: str | Sink) -> JobSpec | Job:
        """End the job in ``sink`` (a Delta table: a path inside the warehouse, or a ``DeltaSink``): a ``JobSpec``
        for one operator, a ``Job`` for several, validated.

        Example: ``.sink_to("sinks/sessions_per_country")``

        :param sink: where the last operator's rows go: a Delta table, as a path inside the warehouse or a
            ``DeltaSink``, or a ``Sink`` of your own (``state_store.sinks.Sink``).
        """
        if self._key is not None:
            raise ConfigError(f"the stream is keyed by {self._key[0]!r} but not processed: add .process(...) "
                              f"before sink_to")
        if self._pending_select() is not None:  # the rows as Spark computes them, forwarded to the sink
            return self.map(_ToSink(), output_type=self._pending_select()[2],
                            uid=f"select-{len(self._steps) + 1}").sink_to(sink)
        if not self._steps:
            raise ConfigError("a dataflow needs at least one operator: .key_by(...).process(...) before sink_to")
        if self._pending_side() is not None:
            raise ConfigError(f"sink_to(...) right after get_side_output({self._pending_side()!r}): a side output "
                              f"nobody reads goes to its own table already; process it first (.map, .key_by(...)"
                              f".process, a window) to sink what comes of it")
        if isinstance(sink, Sink):
            sink.check_rows(self._steps[-1].output_type, f"operator {self._steps[-1].uid!r}'s output")
        settings = dict(self._settings)
        watermarks, broadcast = settings.pop("watermark_strategy"), settings.pop("broadcast_source")
        settings.pop("union", None)  # in the operator's options (``process``)
        settings.pop("side", None)  # in the steps that read it (``_then``)
        settings.pop("select", None)  # in the steps that read it (``_then``)
        settings.pop("later_broadcast", None)  # in the step that reads it (``_broadcast_options``)
        operators: dict[str, JobSpec] = {}
        steps: dict[str, _Step] = {}
        chain = True  # each operator reads the one before it

        def add(branch: tuple) -> None:
            nonlocal chain
            for i, step in enumerate(branch):
                for joined in step.joined:
                    add(joined)  # the further inputs' branches first: an operator comes after what it reads
                known = steps.get(step.uid)
                if known is step:
                    continue
                if known is not None:
                    raise ConfigError(f"operator uid {step.uid!r} is given twice; give each operator its own uid")
                before = branch[i - 1] if i else None
                chain = chain and (before is None or list(steps)[-1] == before.uid) and not step.joined
                source = projected(self._source if before is None else _edge(before, step.reads), step.projection)
                steps[step.uid] = step
                options = dict(step.options)
                own_broadcast = options.pop("broadcast_source", None)  # a later operator's (``_broadcast_options``)
                operators[step.uid] = JobSpec(
                    function=step.function, source=source, key=step.key, key_type=step.key_type,
                    output_type=step.output_type, sink=sink, uid=step.uid, **settings, **options,
                    watermark_strategy=watermarks if before is None else None,
                    broadcast_source=broadcast if before is None else own_broadcast)

        add(self._steps)
        ops = list(operators.values())
        if len(ops) == 1:
            return ops[0].validate()
        return Job(ops, None if chain else {ops[-1].uid: sink}).validate()

