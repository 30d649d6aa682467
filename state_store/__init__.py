"""Lakestate: Flink's keyed and operator state for PySpark microbatches, kept in Delta Lake.

The whole user surface is importable from here; see ``state_store.functions``
for the contract of a keyed function, ``state_store.vectorized`` for the
vectorised one (one call per subtask and microbatch over Arrow tables).
"""
from .dataflow import Dataflow
from .errors import ConfigError, InputError, JobLocked, JobNotFound, LakestateError, RestoreError
from .functions import (
    BroadcastProcessFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    MapFunction,
    OnTimerContext,
    ProcessFunction,
)
from .graph import Job
from .job import JobSpec
from .joins import CoGroupFunction, JoinFunction, ProcessJoinContext, ProcessJoinFunction
from .settings import Settings
from .side_outputs import OutputTag
from .sinks import Sink
from .sources import DeltaSource, FileSource, KafkaSource
from .sql.compile import SqlJob, SqlTable
from .sql.functions import udf
from .state.descriptors import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from .state.handles import AggregatingState, ListState, MapState, ReducingState, ValueState
from .state.operator import BroadcastState, OperatorListState
from .state.ttl import StateTtlConfig
from .tables.changelog import RowKind
from .timers import TimeDomain, TimerService
from .types import StateMigrationError, Types
from .vectorized import BatchContext, VectorizedKeyedFunction
from .watermarks import WatermarkGenerator, WatermarkOutput, WatermarkStrategy
from .windows import (
    ColumnAggregate,
    ContinuousEventTimeTrigger,
    CountEvictor,
    CountTrigger,
    EventTimeSessionWindows,
    EventTimeTrigger,
    GlobalWindows,
    ProcessingTimeSessionWindows,
    ProcessingTimeTrigger,
    ProcessWindowFunction,
    PurgingTrigger,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeEvictor,
    TimeWindow,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)

__all__ = [
    "Job", "Dataflow", "MapFunction", "FlatMapFunction", "FilterFunction", "AggregateFunction",
    "AggregatingStateDescriptor", "ListStateDescriptor", "MapStateDescriptor", "ReducingStateDescriptor",
    "StateTtlConfig", "ValueStateDescriptor", "ConfigError", "InputError", "JobLocked", "JobNotFound",
    "LakestateError", "RestoreError", "KeyedBroadcastProcessFunction", "KeyedCoProcessFunction",
    "KeyedProcessFunction", "JobSpec", "Settings",
    "DeltaSource", "FileSource", "KafkaSource", "Sink", "StateMigrationError", "Types", "OnTimerContext", "OutputTag",
    "TimeDomain", "TimerService", "WatermarkStrategy", "WatermarkGenerator", "WatermarkOutput", "BatchContext",
    "VectorizedKeyedFunction",
    # updating results (docs/writing/updating.md); UpsertDeltaSink too, loaded when asked for
    "RowKind",
    # SQL jobs (docs/writing/sql.md)
    "SqlJob", "SqlTable", "udf",
    # the state handles' types, for annotations (``self.count: ValueState``)
    "ValueState", "ListState", "MapState", "ReducingState", "AggregatingState", "OperatorListState", "BroadcastState",
    # two inputs (docs/writing/joins.md)
    "CoFlatMapFunction", "CoProcessFunction", "CoGroupFunction", "CoMapFunction", "JoinFunction", "ProcessJoinContext",
    "ProcessJoinFunction",
    # a stream that is not keyed (docs/writing/dataflows.md, docs/writing/operator-state.md)
    "ProcessFunction", "BroadcastProcessFunction",
    # windows (docs/writing/windows.md)
    "ColumnAggregate", "ContinuousEventTimeTrigger", "CountEvictor", "CountTrigger", "EventTimeSessionWindows",
    "EventTimeTrigger", "GlobalWindows", "ProcessingTimeSessionWindows", "ProcessingTimeTrigger",
    "ProcessWindowFunction", "PurgingTrigger", "SlidingEventTimeWindows", "SlidingProcessingTimeWindows", "TimeEvictor",
    "TimeWindow", "Trigger", "TriggerResult", "TumblingEventTimeWindows", "TumblingProcessingTimeWindows",
]


def __getattr__(name: str):
    """The State Processor API (``SavepointReader``, ``SavepointWriter``), ``DeltaSink`` and ``UpsertDeltaSink``
    from here too, loaded
    when first asked for (PEP 562): they import the Delta wing (the State Processor pyspark), and an executor or a
    DAG parse imports this package without them."""
    if name in ("SavepointReader", "SavepointWriter"):
        from .ops import state_processor

        return getattr(state_processor, name)
    if name == "DeltaSink":
        from .delta.sink import DeltaSink

        return DeltaSink
    if name == "UpsertDeltaSink":
        from .delta.upsert_sink import UpsertDeltaSink

        return UpsertDeltaSink
    raise AttributeError(f"module 'state_store' has no attribute {name!r}")

