"""Windows (docs/writing/windows.md): Flink's window assigners, triggers, evictors and window functions, run by a
window operator that keeps each window as keyed state in the window's namespace. No Spark here."""
from .assigners import (
    EventTimeSessionWindows,
    GlobalWindow,
    GlobalWindows,
    ProcessingTimeSessionWindows,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowAssigner,
)
from .columns import ColumnAggregate
from .functions import CountEvictor, Evictor, ProcessWindowContext, ProcessWindowFunction, TimeEvictor
from .stream import WindowedStream
from .triggers import (
    ContinuousEventTimeTrigger,
    CountTrigger,
    EventTimeTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    Trigger,
    TriggerContext,
    TriggerResult,
)

__all__ = [
    "ColumnAggregate",
    "EventTimeSessionWindows", "GlobalWindow", "GlobalWindows", "ProcessingTimeSessionWindows",
    "SlidingEventTimeWindows", "SlidingProcessingTimeWindows", "TimeWindow", "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows", "WindowAssigner", "CountEvictor", "Evictor", "ProcessWindowContext",
    "ProcessWindowFunction", "TimeEvictor", "WindowedStream", "ContinuousEventTimeTrigger", "CountTrigger",
    "EventTimeTrigger", "ProcessingTimeTrigger", "PurgingTrigger", "Trigger", "TriggerContext", "TriggerResult",
]
