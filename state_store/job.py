"""A stateful job's definition (JobSpec) and its validation."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from .errors import ConfigError
from .functions import KeyedBroadcastProcessFunction, KeyedProcessFunction
from .key_groups import check_parallelism, compute_default_max_parallelism
from .keys import check_declared_key, check_key, component_types, is_composite, key_columns
from .side_outputs import OutputTag, side_output_sink
from .sinks import Sink, check_sink, sink_name
from .sources import EdgeSource, Source
from .state.backend import DEFAULT_BACKEND, backend_kind
from .state.descriptors import check_state_name
from .types import RowTypeInfo, TypeInfo
from .vectorized import check_job as check_vectorized
from .watermarks import WatermarkStrategy

# The key of a non-keyed operator (``dataflow``): not a column; each record goes to a subtask by its content.
SHARE_KEY = "__share__"
_JOB_ID = re.compile(r"[a-z0-9][a-z0-9_\-]{0,63}")  # fullmatch: "$" would let a trailing newline in


def check_job_id(job_id: str) -> str:
    """``job_id`` when it is a valid job id (its folder's name in the warehouse); ConfigError naming the rule."""
    if not isinstance(job_id, str) or not _JOB_ID.fullmatch(job_id):
        raise ConfigError(
            f"job id {job_id!r} is not valid: use 1-64 lower-case letters, digits, '_' or '-', "
            "starting with a letter or digit"
        )
    return job_id


def check_one_job(first: str, second: str, verb: str) -> None:
    """Two streams an operator reads belong to one job: a ConfigError naming both ids and the fix otherwise."""
    if first != second:
        raise ConfigError(f"{verb}: the streams belong to jobs {first!r} and {second!r}; two inputs of one job: "
                          f"give both the same job_id")


def further_input_name(index: int) -> str:
    """The name of an operator's input ``index`` (from 2: a two-input operator's second, or a union's further
    streams) in the plans and checkpoints: "second" (as every earlier release names it), then "input3", ..."""
    return "second" if index == 2 else f"input{index}"


def later_source_name(uid: str, name: str) -> str:
    """The name in the plans and checkpoints of input ``name`` of a dataflow's later operator ``uid`` when it
    reads a source (``Job.planned_inputs``): "click-through:second"."""
    return f"{uid}:{name}"


class InputRole(Enum):
    """What an operator does with an input's records: keys them (``KEYED``: each record to its key's subtask, or
    by its content for a non-keyed operator), sends each to every subtask first (``BROADCAST``: a
    ``KeyedBroadcastProcessFunction``'s broadcast side), or takes them as the first input's own (``UNION``: a
    union's further stream, of the first's columns, keyed alike)."""

    KEYED = "keyed"
    BROADCAST = "broadcast"
    UNION = "union"


@dataclass(frozen=True)
class Input:
    """One input of an operator: what it reads (a source, or an upstream operator's output as an
    ``EdgeSource``), the column its records are keyed by (``SHARE_KEY``: a non-keyed operator's; None for a
    broadcast input), its watermark strategy (None: no event time, or one that flows down from upstream), its
    ``role``, and ``index``, the number a two-input function's ``process_element1/2`` sees (None for a
    one-input operator's records and broadcast ones). ``name`` names its offsets in the plans and checkpoints
    ("main", "second", "broadcast")."""

    name: str
    source: Source
    key: str | None
    watermark_strategy: WatermarkStrategy | None
    role: InputRole
    index: int | None = None

    @property
    def upstream(self) -> str | None:
        """The uid of the operator whose output this input is (inside a dataflow), None for a source."""
        return self.source.upstream if isinstance(self.source, EdgeSource) else None

    @property
    def field(self) -> str:
        """The ``JobSpec`` field that gives it: ``source``, ``second_source`` or ``broadcast_source``."""
        return "source" if self.name == "main" else f"{self.name}_source"

    @property
    def what(self) -> str:
        """How a run's error names this input's records."""
        return "the source" if self.name == "main" else f"the {self.name} input's source"


def _positive(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


@dataclass
class JobSpec:
    """Everything that defines a stateful job.

    ``key`` is the column records are keyed by, of ``key_type`` (a STRING, LONG, INT, BOOLEAN, DATE, TIMESTAMP,
    DECIMAL, BYTES or a row of them), or a list of columns, a composite key (``key=["user", "device"]``,
    ``key_type=[Types.STRING(), Types.STRING()]``). ``output_type`` declares the rows ``process`` yields; they are
    appended to the Delta table ``sink`` (a path inside the warehouse).

    Example::

        spec = JobSpec(job_id="first-job", function=CountClicks(), key="user", key_type=Types.STRING(),
                       source=FileSource("input/first-clicks", "json", CLICK), output_type=COUNT,
                       sink="sinks/first_job", parallelism=2)
        spec.validate()                               # ConfigError naming the first problem; else the spec
        wider = spec.with_overrides(parallelism=4)    # a copy, validated when run

    :param job_id: the job's id: 1-64 lower-case letters, digits, ``_`` or ``-``; its folder in the warehouse.
    :param function: the ``KeyedProcessFunction`` (or a subclass: broadcast, co-process, vectorised) it runs.
    :param source: what it reads: a ``FileSource``, ``DeltaSource``, ``KafkaSource`` or a ``Source`` of your own.
    :param key: the column records are keyed by, or a list of them (a composite key: the function's key is a
        tuple of their values, in order).
    :param key_type: that column's type (``Types.STRING()``, ``LONG()``, ``INT()``, ``BOOLEAN()``, ``DATE()``,
        ``TIMESTAMP()``, ``DECIMAL(p, s)``, ``BYTES()`` or a ``ROW_NAMED`` of them); for a composite key, a list
        of the columns' types (or the ``ROW_NAMED`` of the columns).
    :param output_type: the rows ``process`` yields, ``Types.ROW_NAMED([...], [...])``.
    :param sink: where they go: a Delta table, as a path inside the warehouse or a ``DeltaSink``, or a ``Sink``
        of your own (``state_store.sinks.Sink``).
    :param uid: the operator's uid: its state's names and a savepoint's part are by it (Flink's ``uid``).
    :param broadcast_source: a second source whose records every subtask sees first (a
        ``KeyedBroadcastProcessFunction``'s broadcast state).
    :param parallelism: the number of subtasks.
    :param max_parallelism: the number of key groups, the bound of every rescale; default Flink's for
        ``parallelism``.
    :param backend: where state is kept between runs: ``delta`` (incremental), ``hashmap`` (full snapshots),
        ``memory`` (this process only).
    :param checkpoint_interval: a checkpoint every this many microbatches.
    :param num_retained: how many checkpoints are kept (the latest ones).
    :param order_by: columns that order a key's records in a microbatch (after their source order).
    :param watermark_strategy: event time: its timestamp column, bound and idleness (docs/writing/time.md).
    :param side_outputs: the ``OutputTag`` s the function may emit to, each a table beside the sink.
    :param further_inputs: the inputs after ``source`` (``Input`` s, set by ``Dataflow``): a two-input
        operator's second (``connect``, the joins) or a union's further stream.
    """

    job_id: str
    function: KeyedProcessFunction
    source: Source  # a FileSource, DeltaSource or KafkaSource; an EdgeSource inside a dataflow (``dataflow``)
    key: str | tuple[str, ...]
    key_type: TypeInfo
    output_type: RowTypeInfo
    sink: str | Sink
    uid: str = "main"
    broadcast_source: Source | None = None
    parallelism: int = 2
    max_parallelism: int | None = None
    backend: str = DEFAULT_BACKEND
    checkpoint_interval: int = 1
    num_retained: int = 3
    order_by: list[str] = field(default_factory=list)
    watermark_strategy: WatermarkStrategy | None = None
    side_outputs: list[OutputTag] = field(default_factory=list)
    further_inputs: tuple[Input, ...] = ()

    @property
    def inputs(self) -> tuple[Input, ...]:
        """The operator's inputs, in the order its records come within a key and microbatch: the first (its
        ``source``), a two-input or union operator's second, and a broadcast input (whose records come before
        every keyed one)."""
        first = 1 if self.further_inputs else None
        inputs = [Input("main", self.source, self.key, self.watermark_strategy, InputRole.KEYED, first),
                  *self.further_inputs]
        if self.broadcast_source is not None:
            inputs.append(Input("broadcast", self.broadcast_source, None, None, InputRole.BROADCAST))
        return tuple(inputs)

    @property
    def effective_max_parallelism(self) -> int:
        """``max_parallelism``, or when unset Flink's default for ``parallelism``
        (``compute_default_max_parallelism``): the number of key groups."""
        return self.max_parallelism or compute_default_max_parallelism(self.parallelism)

    def side_output_sink(self, tag: OutputTag | str) -> str:
        """Where side output ``tag``'s table is (a warehouse path, next to the sink)."""
        return side_output_sink(sink_name(self.sink), tag if isinstance(tag, str) else tag.name)

    def tables(self) -> list[tuple[str, str]]:
        """(who writes it, warehouse path) of every table the job writes: its sink, then each side output's."""
        return [(f"the sink of operator {self.uid!r}", sink_name(self.sink))] + [
            (f"side output {t.name!r} of operator {self.uid!r}", self.side_output_sink(t)) for t in self.side_outputs]

    def with_overrides(self, **changes: Any) -> "JobSpec":
        """A copy with ``changes`` applied (validated when run)."""
        return replace(self, **changes)

    def validate(self) -> "JobSpec":
        """Raise ConfigError naming the first problem and its fix; return self when usable."""
        check_job_id(self.job_id)
        check_sink(self.sink)
        try:
            check_state_name(self.uid, "operator uid")
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if not isinstance(self.function, KeyedProcessFunction):
            raise ConfigError("function must be an instance of a state_store.KeyedProcessFunction subclass")
        check_vectorized(self)
        if self.broadcast_source is not None and not isinstance(self.function, KeyedBroadcastProcessFunction):
            raise ConfigError("a job with a broadcast_source needs a KeyedBroadcastProcessFunction (or, on a stream "
                              "that is not keyed, a BroadcastProcessFunction) as its first operator")
        if self.key != SHARE_KEY:
            self.key, self.key_type = check_key(self.key, self.key_type)
        self._validate_further_inputs()
        for name in ("parallelism", "checkpoint_interval", "num_retained"):
            _positive(name, getattr(self, name))
        if self.max_parallelism is not None:
            _positive("max_parallelism", self.max_parallelism)
        try:
            check_parallelism(self.parallelism, self.effective_max_parallelism)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        backend_kind(self.backend)
        if not isinstance(self.output_type, RowTypeInfo):
            raise ConfigError("output_type must be declared with Types.ROW_NAMED([...], [...])")
        try:
            self.output_type.spark_schema_ddl()
        except TypeError as e:
            raise ConfigError(f"output_type: {e}") from None
        for input_ in self.inputs:
            if not isinstance(input_.source, Source):
                raise ConfigError(f"{input_.field} must be a FileSource, a DeltaSource or a KafkaSource (or a "
                                  f"subclass of state_store.sources.Source)")
            input_.source.validate(input_.field)
        declared = self.source.declared_fields()
        if declared is not None and self.key != SHARE_KEY:
            check_declared_key(declared, self.key, self.key_type, "")
            missing = [c for c in self.order_by if c not in declared]
            if missing:
                raise ConfigError(f"order_by columns {missing} are not in the source schema")
        self._validate_time()
        self._validate_dead_letters()
        return self

    def _validate_further_inputs(self) -> None:
        """A KeyedCoProcessFunction has a second input, a union one or more further streams, and only they have
        further inputs (each with its source, a key of the job's key type and a watermark strategy if the first
        has one, its own: the operator's watermark is the least of all)."""
        two = getattr(self.function, "two_inputs", False)  # a KeyedCoProcessFunction, or a CoMap/CoFlatMap's operator
        further = self.further_inputs
        if not isinstance(further, tuple) or not all(isinstance(i, Input) for i in further):
            raise ConfigError("further_inputs is a tuple of state_store.job.Input (Dataflow sets it: a.connect(b), "
                              "a.union(b, ...))")
        union = bool(further) and all(i.role is InputRole.UNION for i in further)
        if union and two:
            raise ConfigError("a union of streams needs a function of one input; a KeyedCoProcessFunction "
                              "takes connected streams: a.connect(b).key_by(k1, k2)")
        if not union and (len(further) > 1 or two != bool(further)):
            raise ConfigError(f"{type(self.function).__name__} is a KeyedCoProcessFunction: connect a second input "
                              f"(a.connect(b).key_by(key_a, key_b))" if two else
                              "a job with further inputs needs a KeyedCoProcessFunction (process_element1/2) of "
                              "one second input, or a union of streams (a.union(b, ...))")
        if further and self.broadcast_source is not None:
            raise ConfigError("a KeyedCoProcessFunction or a union takes no broadcast_source")
        for input_ in further:
            self._validate_further_input(input_)

    def _validate_further_input(self, input_: Input) -> None:
        key, strategy, which = input_.key, input_.watermark_strategy, f"the {input_.name} input's"
        declared = input_.source.declared_fields()
        if key != SHARE_KEY and key is not None:
            if len(key_columns(key)) != len(component_types(self.key, self.key_type)):
                raise ConfigError(f"{which} key {list(key_columns(key))} has not as many columns as the first "
                                  f"input's {list(key_columns(self.key))}: key both inputs alike")
            check_declared_key(declared, key, self.key_type, which + " ")
        if any(getattr(s, "generator", None) is not None for s in (self.watermark_strategy, strategy)):
            raise ConfigError("a WatermarkStrategy.for_generator serves an operator of one input with event time; "
                              "give a union's or a two-input operator's inputs for_bounded_out_of_orderness(...)")
        later = self.inputs[0].upstream is not None  # a dataflow's later operator: its job's event time flows down
        if not later and (self.watermark_strategy is None) != (strategy is None):
            raise ConfigError("a two-input operator's watermark is the least of its inputs': give both inputs a "
                              "watermark_strategy, or neither")
        if strategy is not None and strategy.timestamp_column is None:
            raise ConfigError(f"{which} watermark_strategy has no timestamp column: add "
                              ".with_timestamp_column('<column of epoch milliseconds>')")
        if strategy is not None and declared is not None and strategy.timestamp_column not in declared:
            raise ConfigError(f"{which} watermark timestamp column {strategy.timestamp_column!r} is not in "
                              f"its source schema {list(declared)}")

    def _validate_dead_letters(self) -> None:
        """A source's dead-letter side output (``KafkaSource(on_malformed=...)``) is one of the job's side
        outputs: its table, commit and Asset are those of any side output."""
        for input_ in self.inputs:
            tag = getattr(input_.source, "dead_letter_tag", None)
            if tag is not None and tag not in self.side_outputs:
                raise ConfigError(f"{input_.field}: on_malformed sends poison records to side output {tag.name!r}, "
                                  f"which the job does not declare; add it: JobSpec(side_outputs=[..., {tag!r}])")

    def _validate_time(self) -> None:
        """The watermark strategy's timestamp column and the side outputs (docs/writing/time.md)."""
        strategy = self.watermark_strategy
        if strategy is not None:
            if not isinstance(strategy, WatermarkStrategy):
                raise ConfigError("watermark_strategy must be a state_store.WatermarkStrategy, e.g. WatermarkStrategy"
                                  ".for_bounded_out_of_orderness(timedelta(seconds=5)).with_timestamp_column('ts')")
            column = strategy.timestamp_column
            if column is None:
                raise ConfigError("watermark_strategy has no timestamp column: add .with_timestamp_column('<column "
                                  "of epoch milliseconds>')")
            declared = self.source.declared_fields()
            if declared is not None:
                if column not in declared:
                    raise ConfigError(f"watermark_strategy's timestamp column {column!r} is not in the source "
                                      f"schema {list(declared)}; fix with_timestamp_column")
                if declared[column].name not in ("LONG", "INT"):
                    raise ConfigError(f"watermark_strategy's timestamp column {column!r} is {declared[column].name}; "
                                      f"it must hold epoch milliseconds as LONG (or INT)")
        if not isinstance(self.side_outputs, (list, tuple)) or not all(
                isinstance(t, OutputTag) for t in self.side_outputs):
            raise ConfigError("side_outputs must be a list of state_store.OutputTag")
        names = [t.name for t in self.side_outputs]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError(f"side output {twice[0]!r} is declared twice; give each OutputTag its own name")
        for tag in self.side_outputs:
            try:
                tag.type_info.spark_schema_ddl()
            except TypeError as e:
                raise ConfigError(f"side output {tag.name!r}: {e}") from None

    def _described_inputs(self) -> dict:
        """The catalog record's fields of a second input, as every earlier release records them: its source, its
        key, and whether it is a union's; a union of more streams adds the later ones' sources, in their order
        (``further_sources``: inputs 3, 4, ...)."""
        if not self.further_inputs:
            return {}
        second, *later = self.further_inputs
        second_key = list(second.key) if is_composite(second.key) else second.key
        described = {"second_source": second.source.describe(), "second_key": second_key,
                     "union_inputs": second.role is InputRole.UNION}
        if later:
            described["further_sources"] = [i.source.describe() for i in later]
        return described

    def describe(self) -> dict:
        """What the catalog records of this definition."""
        return {
            "job_id": self.job_id,
            "uid": self.uid,
            "function": f"{type(self.function).__module__}.{type(self.function).__qualname__}",
            "source": self.source.describe(),
            "broadcast_source": self.broadcast_source.describe() if self.broadcast_source else None,
            **self._described_inputs(),
            "key": list(self.key) if is_composite(self.key) else self.key,
            "key_type": self.key_type.to_schema(),
            "output_type": self.output_type.to_schema(),
            "sink": sink_name(self.sink),
            "parallelism": self.parallelism,
            "max_parallelism": self.effective_max_parallelism,
            "backend": self.backend,
            "checkpoint_interval": self.checkpoint_interval,
            "num_retained": self.num_retained,
            "watermark_strategy": self.watermark_strategy.describe() if self.watermark_strategy else None,
            "side_outputs": {t.name: self.side_output_sink(t) for t in self.side_outputs},
        }
