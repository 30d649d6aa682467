"""Two inputs (README "Two inputs and joins"): ``Dataflow.connect`` for a ``KeyedCoProcessFunction``, and Flink's
interval join, run by an operator that buffers each side in keyed state and clears it by timers. No Spark here."""
from .connected import ConnectedStreams
from .interval import IntervalJoin, IntervalJoinOperator, ProcessJoinContext, ProcessJoinFunction

__all__ = ["ConnectedStreams", "IntervalJoin", "IntervalJoinOperator", "ProcessJoinContext", "ProcessJoinFunction"]
