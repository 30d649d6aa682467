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
from ..functions import CoFlatMapFunction, CoMapFunction, CoProcessFunction, KeyedCoProcessFunction
from ..types import RowTypeInfo


class ConnectedStreams:
    """Two streams of one job, to be keyed (``key_by(key1, key2)``) and processed by a ``KeyedCoProcessFunction``."""

    def __init__(self, first, second, keyed: bool = False):
        self._first, self._second, self._keyed = first, second, keyed

    def key_by(self, key1: str, key2: str) -> "ConnectedStreams":
        """Key the first stream by column ``key1`` and the second by ``key2`` (of one type): records of both with
        the same key meet the same keyed state and timers."""
        return ConnectedStreams(self._first.key_by(key1), self._second.key_by(key2), keyed=True)

    def map(self, function: CoMapFunction, *, output_type: RowTypeInfo, uid: str | None = None, **options: Any):
        """One row per record of either stream (a ``CoMapFunction``: ``map1`` / ``map2``), as a non-keyed
        operator: stateless, or with operator state (then give it a ``uid``). ``options``: parallelism,
        max_parallelism."""
        return self._co(CoMapFunction, "map", function, uid, output_type, options)

    def flat_map(self, function: CoFlatMapFunction, *, output_type: RowTypeInfo, uid: str | None = None,
                 **options: Any):
        """Any number of rows per record of either stream (a ``CoFlatMapFunction``), as ``map``."""
        return self._co(CoFlatMapFunction, "flat_map", function, uid, output_type, options)

    def _co(self, expected: type, verb: str, function, uid, output_type, options):
        self._check(False, expected, verb, function, uid)
        return self._first.two_input_map(self._second, function, uid=uid, output_type=output_type, **options)

    def process(self, function: KeyedCoProcessFunction | CoProcessFunction, *, uid: str, output_type: RowTypeInfo,
                **options: Any):
        """Apply ``function`` (``process_element1`` / ``process_element2`` / ``on_timer``) as operator ``uid``; the
        stream after it is what it emits (``output_type``). Keyed connected streams take a
        ``KeyedCoProcessFunction``, unkeyed ones a ``CoProcessFunction`` (no timers, operator state). ``options``:
        parallelism, max_parallelism, side_outputs, as ``Dataflow.process``."""
        if not self._keyed and isinstance(function, CoProcessFunction):
            return self._first.two_input_map(self._second, function, uid=uid, output_type=output_type, **options)
        self._check(True, KeyedCoProcessFunction, "process", function, uid)
        return self._first.two_input_process(self._second, function, uid=uid, output_type=output_type, **options)

    def _check(self, keyed: bool, expected: type, verb: str, function, uid) -> None:
        if keyed and not self._keyed:
            raise ConfigError(f"process(uid={uid!r}) on connected streams needs their keys: "
                              f"a.connect(b).key_by(key_a, key_b).process(...)")
        if self._keyed and not keyed:
            raise ConfigError(f"{verb}(...) on keyed connected streams: a keyed two-input operator is a "
                              f"KeyedCoProcessFunction (.process(...)); {verb} before key_by")
        if not isinstance(function, expected):
            raise ConfigError(f"connected streams' {verb}(...) takes a state_store.{expected.__name__}, got "
                              f"{type(function).__name__}")
