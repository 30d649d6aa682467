"""Flink's broadcast spelling: ``rules.broadcast(DESCRIPTOR)`` gives a ``BroadcastStream``, and a stream (keyed or
not) ``connect``-ed to it a ``BroadcastConnectedStream`` whose ``process`` takes a ``KeyedBroadcastProcessFunction``
(a keyed stream) or a ``BroadcastProcessFunction`` (one that is not)::

    (Dataflow.from_source(purchases, job_id="spend-limits")
     .key_by("user_id")
     .connect(Dataflow.from_source(limits, job_id="spend-limits").broadcast(LIMITS))
     .process(SpendLimit(), uid="spend", output_type=ALERT)
     .sink_to("sinks/spend_alerts"))

Connected to a stream before any operator, it is the job's ``broadcast_source``, read by its first operator;
connected to a stream after operators, it is the next operator's (a source of the job, planned with the others,
or what an operator of the same graph emits, its rows or a side output). Every subtask sees each broadcast
record before the microbatch's other records. The descriptors name the broadcast state the function keeps (each
a ``MapStateDescriptor``), as Flink's.
"""
from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ..job import check_one_job
from ..state.descriptors import MapStateDescriptor
from ..types import RowTypeInfo


class BroadcastStream:
    """What ``stream.broadcast(*descriptors)`` gives: a source of the job whose records every subtask of the
    operator it is connected to sees, and the broadcast states they fill."""

    def __init__(self, stream, descriptors: tuple):
        if not descriptors or not all(isinstance(d, MapStateDescriptor) for d in descriptors):
            raise ConfigError(f"broadcast(...) takes the broadcast state's descriptors, each a MapStateDescriptor "
                              f"(Flink's broadcast(MapStateDescriptor...)), got {list(descriptors)!r}")
        if stream._key is not None or stream._pending_union() is not None:
            raise ConfigError("broadcast(...) takes a stream that is not keyed: a source's "
                              "(Dataflow.from_source(rules, ...).broadcast(DESCRIPTOR)) or an operator's output; "
                              "broadcast it before key_by or union")
        if not stream._steps and stream._settings["watermark_strategy"] is not None:
            raise ConfigError("broadcast(...): a broadcast stream's event time does not move the operator's "
                              "watermark here; give its Dataflow.from_source(...) no watermark_strategy")
        self.stream, self.descriptors = stream, tuple(descriptors)


class BroadcastConnectedStream:
    """A stream ``connect``-ed to a ``BroadcastStream``: ``process`` makes the operator that reads both."""

    def __init__(self, stream, broadcast: BroadcastStream):
        self._stream, self._broadcast = stream, broadcast

    def process(self, function, *, uid: str, output_type: RowTypeInfo, **options: Any):
        """Apply ``function`` as operator ``uid``: a ``KeyedBroadcastProcessFunction`` on a keyed stream, a
        ``BroadcastProcessFunction`` on one that is not. ``options`` as ``Dataflow.process`` (parallelism,
        max_parallelism, order_by, side_outputs)."""
        stream, rules = self._stream, self._broadcast.stream
        check_one_job(stream._settings["job_id"], rules._settings["job_id"], "connect(...broadcast(...))")
        if stream._steps:  # a later operator's broadcast input: a source of the job, or a branch of its graph
            if rules._steps and rules._steps[0] is not stream._steps[0]:
                raise ConfigError(f"process(uid={uid!r}): the broadcast stream and the stream it is connected to "
                                  f"are branches of two graphs; broadcast a source or a branch of this one")
            marked = {**stream._settings, "later_broadcast": (rules, len(stream._steps))}
            return type(stream)(stream._source, marked, stream._steps, stream._key).process(
                function, uid=uid, output_type=output_type, **options)
        if rules._steps:
            raise ConfigError(f"process(uid={uid!r}): a stream of operators is broadcast to a later operator; this "
                              f"stream is the job's source, read by its first operator: broadcast a source to it, "
                              f"or process this stream first")
        if stream._settings["broadcast_source"] is not None:
            raise ConfigError("connect(...broadcast(...)): the stream already has a broadcast_source; a job's first "
                              "operator reads one broadcast stream")
        settings = {**stream._settings, "broadcast_source": rules._source}
        return type(stream)(stream._source, settings, stream._steps, stream._key).process(  # a Dataflow
            function, uid=uid, output_type=output_type, **options)
