"""Timers, the watermark as a function sees it, side outputs and apply_to_keyed_state, in the subtasks of a run
(no Spark), after Flink's own tests of them (``InternalTimerServiceImplTest``, ``KeyedProcessOperatorTest``,
``KeyedBroadcastProcessFunction``'s ``applyToKeyedState``).

Runs build exchange frames with the helpers of ``tests.support.frames``. A stored timer is a keyed row of state
``<uid>.__timers_event__`` or ``<uid>.__timers_processing__`` whose ``user_key`` and ``value`` are the timestamp as
text and whose ``expiry`` column is the timestamp; a fired or deleted stored timer is written back as a keyed row
with value None.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from state_store.functions import Context, KeyedBroadcastProcessFunction, KeyedProcessFunction
from state_store.records.stats import MicrobatchStats, WrittenFile
from state_store.side_outputs import OutputTag
from state_store.state.descriptors import ValueStateDescriptor
from state_store.state.store import KeyedStateStore
from state_store.subtask.reader import run_partition
from state_store.subtask.run_files import SINK, SINK_MICROBATCH, OutputTable, RunOutputs
from state_store.subtask.runner import RunPlan, UserFunctionError
from state_store.timers import SubtaskTimers, TimeDomain, TimerService, is_timer_state, timer_state_names
from state_store.types import Types
from state_store.watermarks import MIN_WATERMARK
from tests.support.frames import (
    MAX_PARALLELISM,
    PARALLELISM,
    RULES,
    Journal,
    broadcast,
    frame,
    keyed_row,
    marker,
    record,
    run_outputs,
)

EVENT, PROCESSING = "op.__timers_event__", "op.__timers_processing__"  # the timers of operator uid "op"
LONG, STRING = Types.LONG(), Types.STRING()


# -- running subtasks -------------------------------------------------------------------------------------------
@dataclass
class Result:
    """What a run wrote and returned: sink rows, keyed rows, side output rows, stats."""

    out: list[tuple] = field(default_factory=list)  # (batch_id, subtask, row)
    keyed: list[dict] = field(default_factory=list)  # every keyed table row, with batch_id and key_group
    sides: dict[str, list[dict]] = field(default_factory=dict)  # table name -> rows (with _microbatch)
    stats: list[MicrobatchStats] = field(default_factory=list)  # subtask 0's, microbatch by microbatch
    stats_by_subtask: dict[int, list[MicrobatchStats]] = field(default_factory=dict)

    def rows(self, hook=None, batch_id=None) -> list[dict]:
        return [r for b, _, r in self.out
                if (hook is None or r.get("hook") == hook) and batch_id in (None, b)]

    def fired(self) -> list[tuple]:
        """(batch_id, key, timestamp, domain) of every on_timer call, in order."""
        return [(b, r["key"], r["ts"], r["domain"]) for b, _, r in self.out if r.get("hook") == "on_timer"]

    def timer_rows(self) -> list[tuple]:
        """(batch_id, state_name, key_group, key, user_key, value, expiry) of every timer row written."""
        return [(r["batch_id"], r["state_name"], r["key_group"], r["key"], r["user_key"], r["value"], r["expiry"])
                for r in self.keyed if is_timer_state(r["state_name"])]

    def state_rows(self) -> list[tuple]:
        """(batch_id, state_name, key_group, key, value) of every keyed row that is not a timer."""
        return [(r["batch_id"], r["state_name"], r["key_group"], r["key"], r["value"])
                for r in self.keyed if not is_timer_state(r["state_name"])]

    def stat(self, batch_id, subtask=0) -> MicrobatchStats:
        (found,) = [s for s in self.stats_by_subtask[subtask] if s.batch_id == batch_id]
        return found


def run(function, *rows, microbatches=((1, 1_000, MIN_WATERMARK),), start_watermark=MIN_WATERMARK,
        side_outputs=(), all_keyed_state=False, key_type=STRING) -> Result:
    """Run ``function`` (operator uid "op") over the frame of ``rows`` as ``run_partition`` does."""
    with tempfile.TemporaryDirectory() as directory:
        base = run_outputs(Path(directory))
        tables = dict(base.tables)
        for tag in side_outputs:  # as run.outputs.side_outputs places them: a sink-like table per tag
            tables[tag.table] = OutputTable(tag.table, str(Path(directory) / f"side_{tag.name}"),
                                            tag.type_info.spark_schema_ddl() + f", {SINK_MICROBATCH} bigint", (),
                                            None, SINK_MICROBATCH)
        outputs = RunOutputs(base.token, tables)
        plan = RunPlan("op", function, key_type, function.OUT, PARALLELISM, MAX_PARALLELISM, False,
                       list(microbatches), outputs, start_watermark=start_watermark,
                       side_outputs={t.name: t.type_info for t in side_outputs}, all_keyed_state=all_keyed_state)
        with_broadcast = any(r.get("brecord") is not None for r in rows)
        batches = run_partition(plan, iter(frame(*rows, with_broadcast=with_broadcast)))
        returned = [r for batch in batches for r in batch.to_pylist()]
        result = Result()
        for row in returned:
            if row["kind"] == "stat":
                result.stats_by_subtask.setdefault(row["subtask"], []).append(MicrobatchStats.from_json(row["payload"]))
                continue
            info = WrittenFile.from_json(row["payload"])
            table = outputs.tables[info.table]
            read = pq.read_table(Path(table.directory) / info.path).to_pylist()
            if info.table == SINK:
                result.out += [(r.pop(SINK_MICROBATCH), row["subtask"], r) for r in read]
            elif info.table == "keyed":
                partition = {k: int(v) if k == "key_group" else v for k, v in info.partition.items()}
                result.keyed += [{**partition, **r} for r in read]
            else:
                result.sides.setdefault(info.table, []).extend(read)
        result.stats = result.stats_by_subtask.get(0, [])
        result.out.sort(key=lambda o: o[0])  # stable: a subtask's rows stay in the order it wrote them
        result.keyed.sort(key=lambda r: (r["batch_id"], r["state_name"], r["key_group"], r["key"],
                                         r["user_key"] or ""))
        return result


def stored_timer(key, timestamp, key_group=1, domain="e", subtask=0) -> dict:
    """A timer of the keyed table, as a run loads it."""
    name = EVENT if domain == "e" else PROCESSING
    return keyed_row(subtask, name, key, key_group, str(timestamp), user_key=str(timestamp)) | {"expiry": timestamp}


def timer_row(batch_id, key, timestamp, key_group=1, domain="e", removed=False) -> tuple:
    """A timer row as Result.timer_rows gives it: registered, or (``removed``) fired or deleted."""
    name = EVENT if domain == "e" else PROCESSING
    text = str(timestamp)
    return (batch_id, name, key_group, key, text, None if removed else text, None if removed else timestamp)


# -- functions ------------------------------------------------------------------------------------------------
CALLS = Types.ROW_NAMED(["hook", "key", "ts", "ctx_ts", "watermark", "now", "domain"],
                        [STRING, STRING, LONG, LONG, LONG, LONG, STRING])


def command(service: TimerService, text: str) -> None:
    """``e+100`` registers an event-time timer at 100, ``e-100`` deletes it; ``p+``/``p-`` processing time."""
    domain, op, timestamp = text[0], text[1], int(text[2:])
    if domain == "e":
        (service.register_event_time_timer if op == "+" else service.delete_event_time_timer)(timestamp)
    else:
        (service.register_processing_time_timer if op == "+" else service.delete_processing_time_timer)(timestamp)


class Timers(KeyedProcessFunction):
    """Each record's ``v`` is a command (``command``); ``then[ts]`` are the commands on_timer runs when the
    timer at ``ts`` fires. Every call is logged as an output row."""

    OUT = CALLS

    def __init__(self, then=None):
        self.then = then or {}

    def process(self, key, records, ctx):
        for r in records:
            if r["v"]:
                command(ctx.timer_service(), r["v"])
        yield {"hook": "process", "key": str(key), "ts": None, "ctx_ts": ctx.timestamp(),
               "watermark": ctx.current_watermark(), "now": ctx.timer_service().current_processing_time(),
               "domain": None}

    def on_timer(self, timestamp, ctx):
        for text in self.then.get(timestamp, ()):
            command(ctx.timer_service(), text)
        yield {"hook": "on_timer", "key": str(ctx.get_current_key()), "ts": timestamp, "ctx_ts": ctx.timestamp(),
               "watermark": ctx.current_watermark(), "now": ctx.current_processing_time(),
               "domain": ctx.time_domain().name}


def E(timestamp):
    return f"e+{timestamp}"


# -- the timer state ------------------------------------------------------------------------------------------
def test_timer_state_names_are_the_operators_uid_qualified_and_recognised_as_timers():
    assert timer_state_names("op") == {TimeDomain.EVENT_TIME: EVENT, TimeDomain.PROCESSING_TIME: PROCESSING}
    assert is_timer_state(EVENT) and is_timer_state(PROCESSING)
    assert not is_timer_state("op.count") and not is_timer_state("op.__raw_keyed__")


def test_a_registered_timer_is_written_as_a_keyed_row_and_removed_when_it_fires():
    result = run(Timers(), marker(0), record(0, 1, "a", E(150)),
                 microbatches=[(1, 1_000, 100), (2, 2_000, 150)])
    assert result.timer_rows() == [timer_row(1, "a", 150), timer_row(2, "a", 150, removed=True)]
    assert result.fired() == [(2, "a", 150, "EVENT_TIME")]
    assert result.stat(1).entries_delta == {EVENT: 1} and result.stat(2).entries_delta == {EVENT: -1}


# -- de-duplication (InternalTimerServiceImplTest#testSetAndFireEventTimeTimers: one timer per key and time) ----
@pytest.mark.parametrize("domain, clocks", [
    ("e", [(1, 1_000, 0), (2, 1_000, 100)]),  # event time: the watermark reaches 100 in microbatch 2
    ("p", [(1, 0, MIN_WATERMARK), (2, 100, MIN_WATERMARK)]),  # processing time reaches 100 in microbatch 2
])
def test_registering_the_same_timer_twice_in_one_microbatch_keeps_one_which_fires_once(domain, clocks):
    result = run(Timers(), marker(0), record(0, 1, "a", f"{domain}+100"), record(0, 1, "a", f"{domain}+100"),
                 microbatches=clocks)
    name = "EVENT_TIME" if domain == "e" else "PROCESSING_TIME"
    assert result.fired() == [(2, "a", 100, name)]
    assert result.timer_rows() == [timer_row(1, "a", 100, domain=domain),
                                   timer_row(2, "a", 100, domain=domain, removed=True)]


def test_registering_the_same_timer_in_two_microbatches_keeps_one_which_fires_once():
    result = run(Timers(), marker(0), record(0, 1, "a", E(100)), record(0, 2, "a", E(100)),
                 microbatches=[(1, 0, 0), (2, 0, 50), (3, 0, 100), (4, 0, 500)])
    assert result.fired() == [(3, "a", 100, "EVENT_TIME")]
    assert result.timer_rows() == [timer_row(1, "a", 100), timer_row(3, "a", 100, removed=True)]


def test_registering_a_stored_timer_again_writes_nothing_and_it_fires_once():
    result = run(Timers(), marker(0), stored_timer("a", 100), record(0, 1, "a", E(100)),
                 microbatches=[(1, 0, 50), (2, 0, 100)])
    assert result.fired() == [(2, "a", 100, "EVENT_TIME")]
    assert result.timer_rows() == [timer_row(2, "a", 100, removed=True)]


def test_timers_differing_only_in_key_or_in_domain_are_distinct():
    result = run(Timers(), marker(0), record(0, 1, "a", E(100)), record(0, 1, "a", "p+100"),
                 record(0, 1, "b", E(100)), microbatches=[(1, 0, 0), (2, 100, 100)])
    assert result.fired() == [(2, "a", 100, "EVENT_TIME"), (2, "b", 100, "EVENT_TIME"),
                              (2, "a", 100, "PROCESSING_TIME")]
    assert result.stat(2).timers_fired == 3


# -- delete (InternalTimerServiceImplTest#testDeleteEventTimeTimers, #testDeleteProcessingTimeTimers) ----------
def test_a_timer_registered_and_deleted_in_one_microbatch_never_fires_and_writes_no_row():
    result = run(Timers(), marker(0), record(0, 1, "a", E(100)), record(0, 1, "a", "e-100"),
                 record(0, 1, "a", "p+100"), record(0, 1, "a", "p-100"), microbatches=[(1, 500, 500)])
    assert result.fired() == []
    assert result.timer_rows() == []
    assert result.stat(1).entries_delta == {}


def test_a_timer_deleted_in_a_later_microbatch_never_fires_and_its_row_is_removed():
    result = run(Timers(), marker(0), record(0, 1, "a", E(100)), record(0, 2, "a", "e-100"),
                 microbatches=[(1, 0, 50), (2, 0, 60), (3, 0, 1_000)])
    assert result.fired() == []
    assert result.timer_rows() == [timer_row(1, "a", 100), timer_row(2, "a", 100, removed=True)]


@pytest.mark.parametrize("domain", ["e", "p"])
def test_deleting_a_stored_timer_stops_it_firing_and_writes_a_removal_row(domain):
    result = run(Timers(), marker(0), stored_timer("a", 100, domain=domain), record(0, 1, "a", f"{domain}-100"),
                 microbatches=[(1, 1_000, 1_000)])
    assert result.fired() == []
    assert result.timer_rows() == [timer_row(1, "a", 100, domain=domain, removed=True)]
    assert (result.stat(1).timers_in, result.stat(1).timers_fired) == (1, 0)


def test_deleting_a_timer_of_the_other_domain_or_time_or_one_never_registered_changes_nothing():
    result = run(Timers(), marker(0), stored_timer("a", 100), record(0, 1, "a", "p-100"),
                 record(0, 1, "a", "e-101"), record(0, 1, "b", "e-100", key_group=2), microbatches=[(1, 0, 100)])
    assert result.fired() == [(1, "a", 100, "EVENT_TIME")]
    assert result.timer_rows() == [timer_row(1, "a", 100, removed=True)]


def test_a_stored_timer_deleted_and_registered_again_in_one_microbatch_stays_and_fires_once():
    result = run(Timers(), marker(0), stored_timer("a", 100), record(0, 1, "a", "e-100"), record(0, 1, "a", E(100)),
                 microbatches=[(1, 0, 50), (2, 0, 100)])
    assert result.timer_rows() == [timer_row(2, "a", 100, removed=True)]  # nothing written in microbatch 1
    assert result.fired() == [(2, "a", 100, "EVENT_TIME")]


# -- firing order and the watermark (KeyedProcessOperatorTest#testTimestampAndWatermarkQuerying) ---------------
def test_timers_due_in_one_advance_fire_in_timestamp_order_then_key_group_then_key_text():
    result = run(Timers(), marker(0),
                 stored_timer("b", 30, key_group=2), stored_timer("a", 20, key_group=3),
                 stored_timer("k9", 20, key_group=1), stored_timer("k10", 20, key_group=1),
                 stored_timer("c", 10, key_group=3),
                 record(0, 1, "z", E(20), key_group=0),  # registered while processing: takes its place too
                 microbatches=[(1, 0, 100)])
    assert [(k, ts) for _, k, ts, _ in result.fired()] == [
        ("c", 10), ("z", 20), ("k10", 20), ("k9", 20), ("a", 20), ("b", 30)]  # "k10" < "k9" as text


def test_event_time_timers_fire_at_or_below_the_microbatchs_watermark_and_not_one_ms_above():
    result = run(Timers(), marker(0), record(0, 1, "a", E(99)), record(0, 1, "a", E(100)), record(0, 1, "a", E(101)),
                 microbatches=[(1, 0, 100), (2, 0, 100), (3, 0, 101)])
    assert result.fired() == [(1, "a", 99, "EVENT_TIME"), (1, "a", 100, "EVENT_TIME"), (3, "a", 101, "EVENT_TIME")]
    assert [(s.batch_id, s.timers_fired) for s in result.stats] == [(1, 2), (2, 0), (3, 1)]


def test_process_sees_the_previous_microbatchs_watermark_and_on_timer_sees_this_ones():
    result = run(Timers(), marker(0), record(0, 1, "a", E(40)), record(0, 2, "a", E(70)), record(0, 3, "a", ""),
                 microbatches=[(1, 1_000, 50), (2, 2_000, 80), (3, 3_000, 80)], start_watermark=10)
    assert [(r["watermark"], r["ctx_ts"], r["now"]) for r in result.rows("process")] == [
        (10, 1_000, 1_000), (50, 2_000, 2_000), (80, 3_000, 3_000)]
    assert [(r["ts"], r["watermark"], r["ctx_ts"], r["now"]) for r in result.rows("on_timer")] == [
        (40, 50, 40, 1_000), (70, 80, 70, 2_000)]


def test_without_a_start_watermark_the_first_microbatch_processes_at_long_min_value():
    result = run(Timers(), marker(0), record(0, 1, "a", E(MIN_WATERMARK)), microbatches=[(1, 0, MIN_WATERMARK)])
    assert [r["watermark"] for r in result.rows("process")] == [-(1 << 63)]
    assert result.fired() == [(1, "a", MIN_WATERMARK, "EVENT_TIME")]  # ts == W fires, even at Long.MIN_VALUE


def test_a_timer_registered_behind_the_watermark_fires_at_the_end_of_its_microbatch_even_if_it_stands():
    # Lakestate's rule: every microbatch ends with an advance to W(m), also when W(m) == W(m-1). (Flink fires
    # such a late timer on the next watermark its operator receives, and only an increase is forwarded.)
    result = run(Timers(), marker(0), record(0, 2, "a", E(50)), microbatches=[(1, 0, 100), (2, 0, 100)])
    assert result.fired() == [(2, "a", 50, "EVENT_TIME")]
    assert result.timer_rows() == []


def test_a_broadcast_element_sees_the_previous_microbatchs_watermark():
    class Watermarks(KeyedBroadcastProcessFunction):
        OUT = CALLS

        def process_broadcast_element(self, value, ctx):
            yield {"hook": "broadcast", "key": value["rule"], "watermark": ctx.current_watermark(),
                   "ctx_ts": ctx.timestamp()}

        def process(self, key, records, ctx):
            return None

    result = run(Watermarks(), marker(0), broadcast(0, 1, "r1", 0), broadcast(0, 2, "r2", 0),
                 microbatches=[(1, 1_000, 50), (2, 2_000, 80)], start_watermark=10)
    assert [(r["key"], r["watermark"], r["ctx_ts"]) for r in result.rows("broadcast")] == [
        ("r1", 10, 1_000), ("r2", 50, 2_000)]


# -- registering in on_timer (InternalTimerServiceImpl#advanceWatermark's loop) --------------------------------
def test_a_timer_registered_in_on_timer_at_or_below_the_watermark_fires_in_the_same_advance():
    then = {50: [E(40), E(80), E(100), E(101)]}
    result = run(Timers(then), marker(0), record(0, 1, "a", E(50)),
                 microbatches=[(1, 0, 100), (2, 0, 100), (3, 0, 200)])
    assert result.fired() == [(1, "a", 50, "EVENT_TIME"), (1, "a", 40, "EVENT_TIME"), (1, "a", 80, "EVENT_TIME"),
                              (1, "a", 100, "EVENT_TIME"), (3, "a", 101, "EVENT_TIME")]
    assert result.stat(1).timers_fired == 4
    # Registered and fired within microbatch 1: no rows; 101 is written, then removed when it fires.
    assert result.timer_rows() == [timer_row(1, "a", 101), timer_row(3, "a", 101, removed=True)]


def test_a_timer_deleted_in_on_timer_before_it_is_due_does_not_fire():
    then = {50: ["e-60"]}
    result = run(Timers(then), marker(0), record(0, 1, "a", E(50)), record(0, 1, "a", E(60)),
                 microbatches=[(1, 0, 100)])
    assert result.fired() == [(1, "a", 50, "EVENT_TIME")]
    assert result.timer_rows() == []


def test_processing_and_event_time_timers_registered_in_each_others_on_timer_fire_in_the_same_advance():
    then = {1_500: [E(60)], 60: ["p+1800"]}
    result = run(Timers(then), marker(0), record(0, 1, "a", "p+1500"),
                 microbatches=[(1, 1_000, 0), (2, 2_000, 100)])
    assert result.fired() == [(2, "a", 1_500, "PROCESSING_TIME"), (2, "a", 60, "EVENT_TIME"),
                              (2, "a", 1_800, "PROCESSING_TIME")]


# -- processing time (InternalTimerServiceImplTest#testSetAndFireProcessingTimeTimers) --------------------------
def test_processing_time_timers_fire_when_the_microbatchs_processing_time_reaches_them():
    result = run(Timers({1_500: ["p+1800", "p+2001"]}), marker(0), record(0, 1, "a", "p+2000"),
                 record(0, 1, "a", "p+1500"), microbatches=[(1, 1_000, 5_000), (2, 2_000, 5_000), (3, 2_001, 5_000)])
    fired = result.rows("on_timer")
    assert [(b["ts"], b["ctx_ts"], b["now"], b["domain"]) for b in fired] == [
        (1_500, 1_500, 2_000, "PROCESSING_TIME"), (1_800, 1_800, 2_000, "PROCESSING_TIME"),
        (2_000, 2_000, 2_000, "PROCESSING_TIME"), (2_001, 2_001, 2_001, "PROCESSING_TIME")]
    assert [(s.batch_id, s.timers_fired) for s in result.stats] == [(1, 0), (2, 3), (3, 1)]
    # The watermark is 5000 throughout: it does not fire processing-time timers.
    assert result.timer_rows() == [timer_row(1, "a", 1_500, domain="p"), timer_row(1, "a", 2_000, domain="p"),
                                   timer_row(2, "a", 1_500, domain="p", removed=True),
                                   timer_row(2, "a", 2_000, domain="p", removed=True),
                                   timer_row(2, "a", 2_001, domain="p"),
                                   timer_row(3, "a", 2_001, domain="p", removed=True)]


def test_event_time_timers_do_not_fire_on_processing_time_alone():
    result = run(Timers(), marker(0), record(0, 1, "a", E(100)),
                 microbatches=[(1, 1_000, 50), (2, 10**12, 50)])
    assert result.fired() == []
    assert result.timer_rows() == [timer_row(1, "a", 100)]


# -- keyed state in on_timer (KeyedProcessOperatorTest#testEventTimeTimerWithState) ----------------------------
class LastValue(KeyedProcessFunction):
    """Keeps each key's last record and registers a timer at 100; on_timer emits the key's value, then
    overwrites (key "a") or clears (other keys) it."""

    OUT = Types.ROW_NAMED(["key", "key_group", "value"], [STRING, Types.INT(), STRING])

    def open(self, ctx):
        self.last = ctx.get_state(ValueStateDescriptor("last", STRING))

    def process(self, key, records, ctx):
        self.last.update(records[-1]["v"])
        ctx.timer_service().register_event_time_timer(100)

    def on_timer(self, timestamp, ctx):
        yield {"key": str(ctx.get_current_key()), "key_group": ctx.current_key_group(), "value": self.last.value()}
        if ctx.get_current_key() in ("a", 1):
            self.last.update("after timer")
        else:
            self.last.clear()


def test_keyed_state_in_on_timer_is_the_timers_keys_and_keys_with_only_a_due_timer_are_called():
    result = run(LastValue(), marker(0),
                 keyed_row(0, "op.last", "c", 3, '"stored c"'), stored_timer("c", 90, key_group=3),
                 record(0, 1, "a", "a1"), record(0, 1, "a", "a2"), record(0, 1, "b", "b1", key_group=2),
                 microbatches=[(1, 0, 100)])
    assert [r for _, _, r in result.out] == [{"key": "c", "key_group": 3, "value": "stored c"},
                                            {"key": "a", "key_group": 1, "value": "a2"},
                                            {"key": "b", "key_group": 2, "value": "b1"}]
    # What on_timer wrote is flushed with the microbatch; "b" was created and cleared in it: no row.
    assert result.state_rows() == [(1, "op.last", 1, "a", '"after timer"'), (1, "op.last", 3, "c", None)]


def test_on_timer_gets_the_key_in_the_declared_key_type():
    result = run(LastValue(), marker(0), record(0, 1, "1", "x"), key_type=LONG, microbatches=[(1, 0, 100)])
    assert [r for _, _, r in result.out] == [{"key": "1", "key_group": 1, "value": "x"}]
    assert result.state_rows() == [(1, "op.last", 1, "1", '"after timer"')]  # the int key 1 took the "a" branch


def test_a_subtask_with_only_a_due_stored_timer_calls_on_timer_for_its_key():
    result = run(Timers(), marker(0), marker(1), stored_timer("x", 100, key_group=5, subtask=1),
                 microbatches=[(1, 0, 99), (2, 0, 100)])
    assert [(b, s, r["key"], r["ts"]) for b, s, r in result.out] == [(2, 1, "x", 100)]
    assert result.timer_rows() == [timer_row(2, "x", 100, key_group=5, removed=True)]
    assert [(s.batch_id, s.keys, s.timers_in, s.timers_fired) for s in result.stats_by_subtask[1]] == [
        (1, 0, 1, 0), (2, 0, 0, 1)]


class FailsOnTimer(Timers):
    def on_timer(self, timestamp, ctx):
        raise ValueError(f"boom at {timestamp}")


def test_an_error_in_on_timer_names_the_hook_the_timers_key_and_the_microbatch():
    with pytest.raises(UserFunctionError) as err:
        run(FailsOnTimer(), marker(0), record(0, 1, "a", E(100)), microbatches=[(1, 0, 50), (2, 0, 100)])
    message = str(err.value)
    assert "on_timer() raised ValueError: boom at 100" in message and "key 'a' of microbatch 2" in message


class WritesBroadcastStateInOnTimer(KeyedBroadcastProcessFunction):
    OUT = CALLS

    def process_broadcast_element(self, value, ctx):
        return None

    def process(self, key, records, ctx):
        ctx.timer_service().register_event_time_timer(1)

    def on_timer(self, timestamp, ctx):
        ctx.get_broadcast_state(RULES).put("x", 1)


def test_broadcast_state_is_read_only_in_on_timer_as_in_flinks_on_timer_context():
    with pytest.raises(UserFunctionError, match="on_timer.*read-only"):
        run(WritesBroadcastStateInOnTimer(), marker(0), record(0, 1, "a", ""), microbatches=[(1, 0, 1)])


# -- stats ----------------------------------------------------------------------------------------------------
def test_stored_timers_count_in_the_first_microbatchs_timers_in_and_firings_per_microbatch():
    result = run(Timers(), marker(0), stored_timer("a", 100), stored_timer("a", 200),
                 stored_timer("b", 1_500, key_group=2, domain="p"), record(0, 2, "c", E(150), key_group=3),
                 microbatches=[(1, 1_000, 100), (2, 2_000, 200), (3, 3_000, 300)])
    assert [(s.batch_id, s.timers_in, s.timers_fired) for s in result.stats] == [(1, 3, 1), (2, 0, 3), (3, 0, 0)]
    assert result.fired() == [(1, "a", 100, "EVENT_TIME"), (2, "c", 150, "EVENT_TIME"), (2, "a", 200, "EVENT_TIME"),
                              (2, "b", 1_500, "PROCESSING_TIME")]


# -- errors ---------------------------------------------------------------------------------------------------
class StashesTheTimerService(KeyedBroadcastProcessFunction):
    """Keeps the timer service of process() and registers a timer with it in ``hook``."""

    OUT = CALLS

    def __init__(self, hook):
        self.hook, self.service = hook, None

    def _use(self, hook):
        if hook == self.hook and self.service is not None:
            self.service.register_event_time_timer(5)

    def initialize_state(self, ctx):
        self._use("initialize_state")

    def process_broadcast_element(self, value, ctx):
        self._use("process_broadcast_element")

    def process(self, key, records, ctx):
        self.service = ctx.timer_service()

    def snapshot_state(self, ctx):
        self._use("snapshot_state")

    def close(self):
        self._use("close")


@pytest.mark.parametrize("hook", ["snapshot_state", "initialize_state", "process_broadcast_element", "close"])
def test_the_timer_service_outside_a_key_raises_saying_timers_belong_to_a_key(hook):
    with pytest.raises(UserFunctionError, match=f"{hook}\\(\\) raised RuntimeError: timers belong to a key"):
        run(StashesTheTimerService(hook), marker(0), record(0, 1, "a", ""), broadcast(0, 2, "r", 0),
            microbatches=[(1, 0, 0), (2, 0, 0)])


def test_the_timer_service_is_not_offered_where_no_key_is_processed():
    store = KeyedStateStore()
    service = TimerService(SubtaskTimers("op"), store)
    with pytest.raises(RuntimeError, match="timers belong to a key"):
        service.register_processing_time_timer(5)
    with pytest.raises(RuntimeError, match="only in a run"):
        Context(store, None, 1, 0).timer_service()


@pytest.mark.parametrize("bad", [1.5, "100", True, None])
@pytest.mark.parametrize("method", ["register_event_time_timer", "register_processing_time_timer",
                                    "delete_event_time_timer", "delete_processing_time_timer"])
def test_a_timestamp_that_is_not_an_int_raises_type_error(method, bad):
    store = KeyedStateStore()
    store.set_current_key("a", 1)
    timers = SubtaskTimers("op")
    with pytest.raises(TypeError, match="epoch milliseconds"):
        getattr(TimerService(timers, store), method)(bad)
    assert timers.flush().changes() == []


def test_a_non_int_timestamp_in_process_is_a_user_function_error_caused_by_type_error():
    class FloatTimer(KeyedProcessFunction):
        OUT = CALLS

        def process(self, key, records, ctx):
            ctx.timer_service().register_event_time_timer(100.0)

    with pytest.raises(UserFunctionError, match="process\\(\\) raised TypeError") as err:
        run(FloatTimer(), marker(0), record(0, 1, "a", ""))
    assert isinstance(err.value.__cause__, TypeError) and "'a'" in str(err.value)


@pytest.mark.parametrize("name", ["__timers_event__", "__timers_processing__"])
def test_a_keyed_state_cannot_be_named_like_the_timers(name):
    with pytest.raises(ValueError, match="reserved"):
        ValueStateDescriptor(name, LONG)


@pytest.mark.parametrize("timestamp", [1 << 63, -(1 << 63) - 1])
@pytest.mark.parametrize("method", ["register_event_time_timer", "register_processing_time_timer"])
def test_a_timestamp_outside_a_java_long_is_refused_where_it_is_registered(method, timestamp):
    store = KeyedStateStore()
    store.set_current_key("a", 1)
    with pytest.raises((TypeError, ValueError)):
        getattr(TimerService(SubtaskTimers("op"), store), method)(timestamp)


def test_a_run_registering_a_timer_beyond_a_java_long_fails_naming_process_and_the_key():
    with pytest.raises(UserFunctionError, match="process\\(\\).*'a'"):
        run(Timers(), marker(0), record(0, 1, "a", E(1 << 63)), microbatches=[(1, 0, 0)])


# -- side outputs (KeyedProcessOperatorTest: side outputs of process and onTimer) -------------------------------
LATE = OutputTag("late", Types.ROW_NAMED(["key", "ts"], [STRING, LONG]))
OTHER = OutputTag("other", Types.ROW_NAMED(["n"], [LONG]))


class SideOutputs(KeyedBroadcastProcessFunction):
    """Writes to LATE from process_broadcast_element, process and on_timer; ``bad`` is what process passes to
    ctx.output instead, when set."""

    OUT = CALLS

    def __init__(self, bad=None):
        self.bad = bad

    def process_broadcast_element(self, value, ctx):
        ctx.output(LATE, {"key": value["rule"], "ts": value["limit"]})

    def process(self, key, records, ctx):
        if self.bad is not None:
            ctx.output(*self.bad)
        ctx.output(LATE, {"key": key, "ts": len(records)})
        ctx.timer_service().register_event_time_timer(7)

    def on_timer(self, timestamp, ctx):
        ctx.output(LATE, {"key": f"timer {ctx.get_current_key()}", "ts": timestamp})


def test_side_output_rows_are_written_to_the_tags_table_with_their_microbatch():
    result = run(SideOutputs(), marker(0), broadcast(0, 1, "rule", 11), record(0, 1, "a", ""), record(0, 1, "a", ""),
                 record(0, 2, "b", "", key_group=2), side_outputs=[LATE, OTHER],
                 microbatches=[(1, 0, 0), (2, 0, 10)])
    assert result.sides == {"side:late": [
        {"key": "rule", "ts": 11, SINK_MICROBATCH: 1}, {"key": "a", "ts": 2, SINK_MICROBATCH: 1},
        {"key": "b", "ts": 1, SINK_MICROBATCH: 2}, {"key": "timer a", "ts": 7, SINK_MICROBATCH: 2},
        {"key": "timer b", "ts": 7, SINK_MICROBATCH: 2}]}  # no file for "other": it got no row
    assert [(s.batch_id, s.side_out) for s in result.stats] == [(1, 2), (2, 3)]
    assert result.out == []


@pytest.mark.parametrize("tag", [OutputTag("undeclared", LATE.type_info), "late", None])
def test_an_undeclared_side_output_is_a_user_function_error_naming_the_fix(tag):
    with pytest.raises(UserFunctionError, match=r"declares no such side output; add it to JobSpec\(side_outputs"):
        run(SideOutputs(bad=(tag, {"key": "a", "ts": 1})), marker(0), record(0, 1, "a", ""), side_outputs=[LATE])


def test_an_object_named_like_a_declared_tag_is_not_an_output_tag():
    fake = SimpleNamespace(name="late", table="side:late", type_info=LATE.type_info)
    with pytest.raises(UserFunctionError, match="declares no such side output"):
        run(SideOutputs(bad=(fake, {"key": "a", "ts": 1})), marker(0), record(0, 1, "a", ""), side_outputs=[LATE])


@pytest.mark.parametrize("row", [{"key": "a", "ts": "one"}, {"key": "a", "ts": 1, "extra": 2}, None, ["a", 1]])
def test_a_side_output_row_not_matching_its_tags_type_is_a_user_function_error(row):
    with pytest.raises(UserFunctionError, match="a row of side output 'late' does not match its type"):
        run(SideOutputs(bad=(LATE, row)), marker(0), record(0, 1, "a", ""), side_outputs=[LATE])


# -- apply_to_keyed_state (KeyedBroadcastProcessFunction.Context#applyToKeyedState) -----------------------------
COUNT = ValueStateDescriptor("count", LONG, 0)


class AddToEveryCount(KeyedBroadcastProcessFunction):
    """A broadcast element adds its ``limit`` to every key's count (and clears key "drop"); process emits the
    count it reads."""

    OUT = Types.ROW_NAMED(["key", "count"], [STRING, LONG])

    def __init__(self, journal):
        self.journal = journal

    def open(self, ctx):
        self.count = ctx.get_state(COUNT)

    def process_broadcast_element(self, value, ctx):
        def add(key, state):
            self.journal.append((value["rule"], key, state.value()))
            if key == "drop":
                state.clear()
            else:
                state.update(state.value() + value["limit"])

        ctx.apply_to_keyed_state(COUNT, add)

    def process(self, key, records, ctx):
        self.count.update(self.count.value() + len(records))
        yield {"key": key, "count": self.count.value()}


def test_apply_to_keyed_state_visits_every_key_with_the_state_in_key_group_then_key_order_and_writes_through():
    journal = Journal()
    result = run(AddToEveryCount(journal), marker(0),
                 keyed_row(0, "op.count", "b", 2, "5"), keyed_row(0, "op.count", "z", 1, "1"),
                 keyed_row(0, "op.count", "a", 1, "2"), keyed_row(0, "op.count", "drop", 3, "9"),
                 keyed_row(0, "op.other", "q", 0, "7"),  # another state only: not visited
                 broadcast(0, 1, "r1", 100), record(0, 1, "a", "x"),
                 record(0, 1, "new", "x", key_group=0),  # created in microbatch 1: visited in microbatch 2
                 broadcast(0, 2, "r2", 1000),
                 microbatches=[(1, 0, 0), (2, 0, 0)], all_keyed_state=True)
    assert journal == [("r1", "a", 2), ("r1", "z", 1), ("r1", "b", 5), ("r1", "drop", 9),
                       ("r2", "new", 1), ("r2", "a", 103), ("r2", "z", 101), ("r2", "b", 105)]
    assert [r for _, _, r in result.out] == [{"key": "new", "count": 1}, {"key": "a", "count": 103}]
    assert result.state_rows() == [
        (1, "op.count", 0, "new", "1"), (1, "op.count", 1, "a", "103"), (1, "op.count", 1, "z", "101"),
        (1, "op.count", 2, "b", "105"), (1, "op.count", 3, "drop", None),
        (2, "op.count", 0, "new", "1001"), (2, "op.count", 1, "a", "1103"), (2, "op.count", 1, "z", "1101"),
        (2, "op.count", 2, "b", "1105")]


def test_apply_to_keyed_state_without_all_keyed_state_loaded_is_a_user_function_error():
    with pytest.raises(UserFunctionError, match="apply_to_keyed_state needs every key's state") as err:
        run(AddToEveryCount(Journal()), marker(0), keyed_row(0, "op.count", "a", 1, "2"), broadcast(0, 1, "r", 1))
    assert "applies_to_keyed_state = True" in str(err.value)
