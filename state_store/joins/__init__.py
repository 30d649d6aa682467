"""Two inputs (docs/writing/joins.md): ``Dataflow.connect`` for a ``KeyedCoProcessFunction``, and Flink's
interval join, run by an operator that buffers each side in keyed state and clears it by timers, and Flink's window
join and co-group, run by a window operator. No Spark here."""
from .connected import ConnectedStreams
from .interval import IntervalJoin, IntervalJoinOperator, ProcessJoinContext, ProcessJoinFunction
from .window_join import CoGroupFunction, JoinedStreams, JoinFunction, WindowJoinOperator

__all__ = ["ConnectedStreams", "IntervalJoin", "IntervalJoinOperator", "ProcessJoinContext", "ProcessJoinFunction",
           "CoGroupFunction", "JoinedStreams", "JoinFunction", "WindowJoinOperator"]
