"""``ConnectedStreams``: what ``a.connect(b)`` gives, in the manner of Flink's.

    (Dataflow.from_source(orders, job_id="paid", watermark_strategy=BY_TS)
     .connect(Dataflow.from_source(payments, job_id="paid", watermark_strategy=BY_TS))
     .key_by("order_id", "order_id")
     .process(Match(), uid="match", output_type=PAID)
     .sink_to("sinks/paid"))

The two streams are two sources of one job, each with its own offsets (pinned in every microbatch's plan) and
watermark strategy; the operator's watermark is the least of the two. A two-input operator is the job's first
operator; what follows it is a chain as ever.
"""
from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ..functions import KeyedCoProcessFunction
from ..types import RowTypeInfo


class ConnectedStreams:
    """Two streams of one job, to be keyed (``key_by(key1, key2)``) and processed by a ``KeyedCoProcessFunction``."""

    def __init__(self, first, second, keyed: bool = False):
        self._first, self._second, self._keyed = first, second, keyed

    def key_by(self, key1: str, key2: str) -> "ConnectedStreams":
        """Key the first stream by column ``key1`` and the second by ``key2`` (of one type): records of both with
        the same key meet the same keyed state and timers."""
        return ConnectedStreams(self._first.key_by(key1), self._second.key_by(key2), keyed=True)

    def process(self, function: KeyedCoProcessFunction, *, uid: str, output_type: RowTypeInfo, **options: Any):
        """Apply ``function`` (``process_element1`` / ``process_element2`` / ``on_timer``) as operator ``uid``; the
        stream after it is what it emits (``output_type``). ``options``: parallelism, max_parallelism,
        side_outputs, as ``Dataflow.process``."""
        if not self._keyed:
            raise ConfigError(f"process(uid={uid!r}) on connected streams needs their keys: "
                              f"a.connect(b).key_by(key_a, key_b).process(...)")
        if not isinstance(function, KeyedCoProcessFunction):
            raise ConfigError(f"connected streams take a state_store.KeyedCoProcessFunction (process_element1, "
                              f"process_element2), got {type(function).__name__}")
        return self._first.two_input_process(self._second, function, uid=uid, output_type=output_type, **options)
