"""Windows, after Flink's own tests (``WindowOperatorTest``, ``MergingWindowSetTest``, the assigners' tests): the
same elements, watermarks and expected firings, run by a subtask as a run runs it (``run_partition``, no Spark).

Flink's harness feeds elements and watermarks one by one; here a microbatch's elements meet the watermark before
it, W(m-1), and its timers fire at W(m) after them, so each Flink ``processWatermark(w)`` is the end of a
microbatch whose watermark is ``w``. A "restore" is a second run that reads the state the first one wrote.
"""
from __future__ import annotations

from datetime import timedelta

import pytest

from state_store import (
    AggregateFunction,
    ColumnAggregate,
    ConfigError,
    ContinuousEventTimeTrigger,
    CountEvictor,
    CountTrigger,
    Dataflow,
    EventTimeSessionWindows,
    FileSource,
    GlobalWindows,
    OutputTag,
    ProcessingTimeSessionWindows,
    ProcessWindowFunction,
    PurgingTrigger,
    SlidingEventTimeWindows,
    TimeEvictor,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    Types,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from state_store.windows.assigners import window_start_with_offset
from state_store.windows.merging import MergingWindowSet
from tests.support.windows import CLICK, STRATEGY, TIMED, Harness, S, Session, sum_of, windowed, write_window_clicks

SESSION = Types.ROW_NAMED(["k", "sum", "start", "end"], [Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG()])
LATE = OutputTag("late", CLICK)


def sums(out) -> list[tuple]:
    return sorted((batch, row["k"], row["v"]) for batch, row in out)


# -- assigners -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("timestamp, offset, size, start", [
    (0, 0, 5000, 0), (4999, 0, 5000, 0), (5000, 0, 5000, 5000), (-1, 0, 5000, -5000), (-5000, 0, 5000, -5000),
    (-5001, 0, 5000, -10000), (100, 100, 5000, 100), (99, 100, 5000, -4900), (7, -3, 5, 7), (8, -3, 5, 7),
    (-8, 3, 5, -12)])
def test_window_start_with_offset_is_flinks_for_positive_and_negative_timestamps(timestamp, offset, size, start):
    assert window_start_with_offset(timestamp, offset, size) == start


def test_tumbling_sliding_and_session_assigners_give_flinks_windows():
    assert TumblingEventTimeWindows.of(5000).assign_windows({}, 0, 0) == [TimeWindow(0, 5000)]
    assert TumblingEventTimeWindows.of(5000).assign_windows({}, -1, 0) == [TimeWindow(-5000, 0)]
    assert TumblingEventTimeWindows.of(timedelta(seconds=5), timedelta(seconds=1)).assign_windows(
        {}, 4999, 0) == [TimeWindow(1000, 6000)]
    # SlidingEventTimeWindowsTest: size 5 s, slide 1 s: five windows, the latest first
    assert SlidingEventTimeWindows.of(5000, 1000).assign_windows({}, 0, 0) == [
        TimeWindow(0, 5000), TimeWindow(-1000, 4000), TimeWindow(-2000, 3000), TimeWindow(-3000, 2000),
        TimeWindow(-4000, 1000)]
    assert SlidingEventTimeWindows.of(5000, 1000, 500).assign_windows({}, 5499, 0)[0] == TimeWindow(4500, 9500)
    assert EventTimeSessionWindows.with_gap(5000).assign_windows({}, 12, 0) == [TimeWindow(12, 5012)]
    dynamic = EventTimeSessionWindows.with_dynamic_gap(lambda e: e["v"] * 1000)
    assert dynamic.assign_windows({"v": 3}, 12, 0) == [TimeWindow(12, 3012)]
    with pytest.raises(ValueError, match="Dynamic session time gap must satisfy 0 < gap"):
        dynamic.assign_windows({"v": 0}, 12, 0)
    assert TumblingProcessingTimeWindows.of(5000).assign_windows({}, None, 7000) == [TimeWindow(5000, 10000)]
    assert TimeWindow(0, 5000).max_timestamp() == 4999


@pytest.mark.parametrize("make, message", [
    (lambda: TumblingEventTimeWindows.of(5000, 5000), "abs\\(offset\\) < size"),
    (lambda: TumblingEventTimeWindows.of(0), "size > 0"),
    (lambda: SlidingEventTimeWindows.of(5000, 1000, 1000), "abs\\(offset\\) < slide"),
    (lambda: SlidingEventTimeWindows.of(0, 1000), "size > 0"),
    (lambda: EventTimeSessionWindows.with_gap(0), "0 < gap"),
    (lambda: TumblingEventTimeWindows.of("5s"), "timedelta"),
    (lambda: TumblingEventTimeWindows.of(2**63), "beyond a 64-bit long"),
    (lambda: SlidingEventTimeWindows.of(2**64, 1000), "beyond a 64-bit long"),
    (lambda: CountTrigger.of(0), "at least 1"),
])
def test_bad_window_parameters_are_refused_naming_flinks_rule(make, message):
    with pytest.raises(ConfigError, match=message):
        make()


def test_an_element_without_event_time_is_an_error_naming_the_fix():
    with pytest.raises(ValueError, match="no event time"):
        TumblingEventTimeWindows.of(5000).assign_windows({}, None, 0)


# -- MergingWindowSetTest --------------------------------------------------------------------------------------
class _ListState:
    def __init__(self):
        self.rows = []

    def get(self):
        return list(self.rows)

    def update(self, rows):
        self.rows = list(rows)


class _Merges(list):
    def __call__(self, result, merged, state_window, merged_state_windows):
        self.append((result, sorted(merged), state_window, sorted(merged_state_windows)))


def test_merging_window_set_merges_incrementally_keeping_the_first_state_window():
    state, merges = _ListState(), _Merges()
    windows = MergingWindowSet(EventTimeSessionWindows.with_gap(3), state)
    assert windows.add_window(TimeWindow(0, 4), merges) == TimeWindow(0, 4) and not merges
    assert windows.state_window(TimeWindow(0, 4)) == TimeWindow(0, 4)
    assert windows.add_window(TimeWindow(0, 4), merges) == TimeWindow(0, 4) and not merges  # identical
    assert windows.add_window(TimeWindow(3, 5), merges) == TimeWindow(0, 5)
    assert merges.pop() == (TimeWindow(0, 5), [TimeWindow(0, 4)], TimeWindow(0, 4), [])
    assert windows.add_window(TimeWindow(4, 6), merges) == TimeWindow(0, 6)
    assert merges.pop() == (TimeWindow(0, 6), [TimeWindow(0, 5)], TimeWindow(0, 4), [])
    assert windows.add_window(TimeWindow(1, 2), merges) == TimeWindow(0, 6) and not merges  # inside: no merge
    assert windows.state_window(TimeWindow(0, 6)) == TimeWindow(0, 4)
    # a separate window, then one that bridges the two: their state windows merge into the first's
    assert windows.add_window(TimeWindow(10, 13), merges) == TimeWindow(10, 13) and not merges
    assert windows.add_window(TimeWindow(5, 11), merges) == TimeWindow(0, 13)
    assert merges.pop() == (TimeWindow(0, 13), [TimeWindow(0, 6), TimeWindow(10, 13)], TimeWindow(0, 4),
                            [TimeWindow(10, 13)])
    assert windows.mapping == {TimeWindow(0, 13): TimeWindow(0, 4)}
    windows.persist()
    assert state.rows == [{"window": "0:13", "state_window": "0:4"}]
    assert MergingWindowSet(EventTimeSessionWindows.with_gap(3), state).mapping == windows.mapping
    windows.retire_window(TimeWindow(0, 13))
    with pytest.raises(RuntimeError, match="not in the in-flight window set"):
        windows.retire_window(TimeWindow(0, 13))


# -- WindowOperatorTest ----------------------------------------------------------------------------------------
FLINK_ELEMENTS = [("key2", 1, 3999), ("key2", 1, 3000), ("key1", 1, 20), ("key1", 1, 0), ("key1", 1, 999),
                  ("key2", 1, 1998), ("key2", 1, 1999), ("key2", 1, 1000)]


def test_sliding_event_time_windows_fire_at_the_watermark_across_a_restore_as_flinks(tmp_path):
    """testSlidingEventTimeWindowsReduce: size 3 s, slide 1 s, the elements out of order."""
    harness = Harness(windowed(tmp_path, SlidingEventTimeWindows.of(3000, 1000)))
    first = harness.feed((999, FLINK_ELEMENTS), (1999, []), (2999, []))
    assert sums(first) == [(1, "key1", 3), (2, "key1", 3), (2, "key2", 3), (3, "key1", 3), (3, "key2", 3)]
    then = harness.feed((3999, []), (4999, []), (5999, []), (6999, []), (7999, []))
    assert sums(then) == [(4, "key2", 5), (5, "key2", 2), (6, "key2", 2)]
    assert harness.open_windows() == set() and not [s for s in harness.state if "timers" in s[0]]


def test_one_run_of_n_microbatches_equals_n_runs_of_one_in_output_and_state(tmp_path):
    """Sessions with lateness (merges, late firings, cleanup) over four microbatches: in one run, and run by run
    (each restoring what the last wrote)."""
    spec = windowed(tmp_path, EventTimeSessionWindows.with_gap(3000), build=lambda s: s.allowed_lateness(2000)
                    .side_output_late_data(LATE).process(Session(), uid="op", output_type=SESSION))
    batches = [(999, [("a", 1, 0), ("b", 1, 500), ("a", 2, 5000)]), (8999, [("a", 4, 2500), ("b", 1, 9000)]),
               (9500, [("a", 8, 100), ("b", 2, 3000)]), (20000, [("a", 16, 30), ("b", 4, 19000)])]
    together, apart = Harness(spec), Harness(spec)
    out = together.feed(*batches)
    assert out == [r for b in batches for r in apart.feed(b)]
    assert together.state == apart.state
    assert together.sides == apart.sides == [("late", 3, {"k": "b", "v": 2, "ts": 3000})]
    # a's three sessions merged into [0, 8000), fired at its end and again for each element within lateness
    assert sorted((b, tuple(r.values())) for b, r in out) == [
        (2, ("a", 7, 0, 8000)), (2, ("b", 1, 500, 3500)), (3, ("a", 15, 0, 8000)), (4, ("a", 31, 0, 8000)),
        (4, ("b", 1, 9000, 12000))]


def test_tumbling_event_time_windows_fire_once_the_watermark_passes_their_end(tmp_path):
    """testTumblingEventTimeWindowsReduce: size 3 s."""
    harness = Harness(windowed(tmp_path, TumblingEventTimeWindows.of(3000)))
    assert sums(harness.feed((999, FLINK_ELEMENTS), (1999, []), (2999, []))) == [(3, "key1", 3), (3, "key2", 3)]
    assert harness.open_windows() == {"3000:6000"}
    assert sums(harness.feed((3999, []), (4999, []), (5999, []))) == [(6, "key2", 2)]


def test_session_windows_merge_across_a_restore_and_fire_as_flinks(tmp_path):
    """testSessionWindows: gap 3 s, a ProcessWindowFunction summing each session."""
    spec = windowed(tmp_path, EventTimeSessionWindows.with_gap(3000),
                    build=lambda s: s.process(Session(), uid="op", output_type=SESSION))
    harness = Harness(spec)
    assert harness.feed((-1, [("key2", 1, 0), ("key2", 2, 1000), ("key2", 3, 2500), ("key1", 1, 10),
                              ("key1", 2, 1000)])) == []
    out = harness.feed((12000, [("key1", 3, 2500), ("key2", 4, 5501), ("key2", 5, 6000), ("key2", 5, 6000),
                                ("key2", 6, 6050)]))
    assert sorted(tuple(row.values()) for _, row in out) == sorted(
        [("key1", 6, 10, 5500), ("key2", 6, 0, 5500), ("key2", 20, 5501, 9050)])
    out = harness.feed((17999, [("key2", 10, 15000), ("key2", 20, 15000)]))
    assert [tuple(row.values()) for _, row in out] == [("key2", 30, 15000, 18000)]
    assert harness.open_windows() == set()
    assert not [s for s in harness.state if s[0] == "op.merging-window-set"]


def test_a_session_merge_moves_the_contents_of_both_sessions_into_one_state_window(tmp_path):
    spec = windowed(tmp_path, EventTimeSessionWindows.with_gap(3000), build=lambda s: s.allowed_lateness(1000)
                    .process(Session(), uid="op", output_type=SESSION))
    harness = Harness(spec)
    harness.feed((-1, [("a", 1, 0), ("a", 2, 5000)]))
    assert harness.open_windows() == {"0:3000", "5000:8000"}
    harness.feed((-1, [("a", 4, 2500)]))  # bridges the two: one session [0, 8000) kept in the first's namespace
    assert harness.open_windows() == {"0:3000"}
    timers = {(ns, value) for (name, _, ns, _), (value, _) in harness.state.items() if "timers" in name}
    # the merged sessions' trigger and cleanup timers went; the new one's came
    assert timers == {("0:8000", "7999"), ("0:8000", "8999")}
    assert [tuple(r.values()) for _, r in harness.feed((8999, []))] == [("a", 7, 0, 8000)]
    assert harness.state == {}


def test_late_elements_go_to_the_side_output_or_are_dropped_and_allowed_lateness_fires_again(tmp_path):
    """testSideOutputDueToLatenessTumbling / testLateness: windows of 2 s, allowed lateness 500 ms."""
    spec = windowed(tmp_path, TumblingEventTimeWindows.of(2000), build=lambda s: s.allowed_lateness(500)
                    .side_output_late_data(LATE).reduce(sum_of, uid="op"))
    harness = Harness(spec)
    assert sums(harness.feed((1999, [("k", 1, 500), ("k", 1, 1500)]))) == [(1, "k", 2)]
    # W = 1999: window [0, 2000) is past its end, within lateness (cleanup at 2499): fires again with all three
    assert sums(harness.feed((2300, [("k", 1, 1700)]))) == [(2, "k", 3)]
    assert harness.sides == []
    # W = 2300 < 2499: still in lateness. Then W = 2499 cleans it up; an element for it after that is late.
    assert sums(harness.feed((2499, [("k", 1, 1800)]))) == [(3, "k", 4)]
    assert harness.open_windows() == set()
    assert harness.feed((3000, [("k", 1, 1900), ("k", 1, 2100)])) == []
    assert [(tag, row["ts"]) for tag, _, row in harness.sides] == [("late", 1900)]
    # without a late tag a late element is dropped
    dropping = Harness(windowed(tmp_path, TumblingEventTimeWindows.of(2000)))
    dropping.feed((1999, [("k", 1, 500)]))
    assert dropping.feed((5000, [("k", 1, 600)])) == [] and dropping.sides == []
    assert dropping.late_dropped == 1 and harness.late_dropped == 0  # the run's line counts the dropped ones


class Counting(AggregateFunction):
    def create_accumulator(self):
        return {"n": 0, "total": 0}

    def add(self, value, acc):
        return {"n": acc["n"] + 1, "total": acc["total"] + value["v"]}

    def get_result(self, acc):
        return {"k": "", "sum": acc["total"], "start": acc["n"], "end": 0}

    def merge(self, a, b):
        return {"n": a["n"] + b["n"], "total": a["total"] + b["total"]}


ACC = Types.ROW_NAMED(["n", "total"], [Types.LONG(), Types.LONG()])


class WithWindow(ProcessWindowFunction):
    """Incremental aggregate + the window's metadata: the pre-aggregated result, keyed and windowed."""

    def process(self, key, context, elements):
        (result,) = elements
        yield {**result, "k": key, "start": context.window().start, "end": context.window().end}


def test_aggregate_with_a_process_window_function_gets_the_one_result_and_the_window(tmp_path):
    spec = windowed(tmp_path, EventTimeSessionWindows.with_gap(1000), build=lambda s: s.aggregate(
        Counting(), WithWindow(), accumulator_type=ACC, uid="op", output_type=SESSION))
    harness = Harness(spec)
    out = harness.feed((-1, [("a", 5, 0), ("a", 7, 900), ("b", 1, 0)]), (5000, [("a", 1, 1500)]))
    assert sorted(tuple(r.values()) for _, r in out) == [("a", 13, 0, 2500), ("b", 1, 0, 1000)]


def test_global_windows_with_a_purging_count_trigger_fire_every_nth_element(tmp_path):
    """testCountTrigger: GlobalWindows, PurgingTrigger.of(CountTrigger.of(4))."""
    spec = windowed(tmp_path, GlobalWindows.create(),
                    build=lambda s: s.trigger(PurgingTrigger.of(CountTrigger.of(4))).reduce(sum_of, uid="op"))
    harness = Harness(spec)
    out = harness.feed((-1, [("k", 1, 0)] * 3 + [("j", 1, 0)] * 2), (-1, [("k", 10, 0)] * 2))
    assert sums(out) == [(2, "k", 13)]
    assert sums(harness.feed((-1, [("k", 1, 0)] * 2 + [("j", 1, 0)] * 2))) == [(3, "j", 4)]
    assert sums(harness.feed((-1, [("k", 1, 0)] * 4))) == [(4, "k", 13)]  # 10 + 1 + 1 kept, then the fourth
    assert harness.open_windows() == {"global"}  # k: the 3 elements since its last fire


def test_a_count_trigger_without_purging_fires_the_whole_window_again(tmp_path):
    spec = windowed(tmp_path, GlobalWindows.create(),
                    build=lambda s: s.trigger(CountTrigger.of(2)).reduce(sum_of, uid="op"))
    harness = Harness(spec)
    assert sums(harness.feed((-1, [("k", 1, 0)] * 5))) == [(1, "k", 2), (1, "k", 4)]


def test_a_continuous_event_time_trigger_fires_every_interval_and_at_the_end(tmp_path):
    spec = windowed(tmp_path, TumblingEventTimeWindows.of(10_000), build=lambda s: s.trigger(
        ContinuousEventTimeTrigger.of(3000)).reduce(sum_of, uid="op"))
    harness = Harness(spec)
    out = harness.feed((2999, [("k", 1, 100)]), (5999, [("k", 1, 3500)]), (9999, [("k", 1, 9000)]))
    # the first fire time is 3000 (the element's time rounded down to the interval, plus it): then 6000, 9000, and
    # the window's end, 9999
    assert sums(out) == [(2, "k", 2), (3, "k", 3), (3, "k", 3), (3, "k", 3)]
    assert harness.open_windows() == set()


def test_count_and_time_evictors_remove_elements_before_the_function_and_from_the_window(tmp_path):
    counted = Harness(windowed(tmp_path, GlobalWindows.create(), build=lambda s: s.trigger(
        CountTrigger.of(3)).evictor(CountEvictor.of(2)).reduce(sum_of, uid="op")))
    assert sums(counted.feed((-1, [("k", 1, 0), ("k", 10, 0), ("k", 100, 0)]), (-1, [("k", 1000, 0)] * 3))) == [
        (1, "k", 110), (2, "k", 2000)]
    timed = Harness(windowed(tmp_path, TumblingEventTimeWindows.of(10_000), build=lambda s: s.evictor(
        TimeEvictor.of(1000)).reduce(sum_of, uid="op")))
    assert sums(timed.feed((9999, [("k", 1, 100), ("k", 10, 8999), ("k", 100, 9500)]))) == [(1, "k", 110)]


def test_processing_time_windows_fire_when_a_microbatchs_processing_time_passes_their_end(tmp_path):
    spec = windowed(tmp_path, TumblingProcessingTimeWindows.of(2000))
    harness = Harness(spec)
    assert harness.feed((-1, [("k", 1, 0)], 500), (-1, [("k", 2, 0)], 1500)) == []
    assert sums(harness.feed((-1, [("k", 4, 0)], 2500))) == [(3, "k", 3)]  # [0, 2000) fired at 2500 > 1999
    assert sums(harness.feed((-1, [], 4000))) == [(4, "k", 4)]


def test_dynamic_gap_and_processing_time_sessions_merge_as_event_time_ones_do(tmp_path):
    dynamic = Harness(windowed(tmp_path, EventTimeSessionWindows.with_dynamic_gap(lambda e: e["v"] * 1000),
                               build=lambda s: s.process(Session(), uid="op", output_type=SESSION)))
    # a@0 with a 1 s gap and a@2000 with 3 s: apart; a@900 with 2 s ([900, 2900)) bridges them
    out = dynamic.feed((-1, [("a", 1, 0), ("a", 3, 2000)]), (10_000, [("a", 2, 900)]))
    assert [(b, tuple(r.values())) for b, r in out] == [(2, ("a", 6, 0, 5000))]
    processing = Harness(windowed(tmp_path, ProcessingTimeSessionWindows.with_gap(1000),
                                  build=lambda s: s.process(Session(), uid="op", output_type=SESSION)))
    out = processing.feed((-1, [("a", 1, 0)], 1000), (-1, [("a", 2, 0)], 1500), (-1, [], 2499), (-1, [], 2500),
                          (-1, [("a", 4, 0)], 2600), (-1, [], 4000))
    assert [(b, tuple(r.values())) for b, r in out] == [(3, ("a", 3, 1000, 2500)), (6, ("a", 4, 2600, 3600))]


class PerWindowCount(ProcessWindowFunction):
    FIRES = ValueStateDescriptor("fires", Types.LONG())

    def process(self, key, context, elements):
        fires = context.window_state().get_state(self.FIRES)
        fires.update((fires.value() or 0) + 1)
        total = context.global_state().get_state(self.FIRES)
        total.update((total.value() or 0) + 1)
        yield {"k": key, "sum": fires.value(), "start": total.value(), "end": context.window().end}

    def clear(self, context):
        context.window_state().get_state(self.FIRES).clear()


def test_window_state_is_per_window_and_cleared_with_it_while_global_state_is_per_key(tmp_path):
    spec = windowed(tmp_path, TumblingEventTimeWindows.of(1000), build=lambda s: s.allowed_lateness(5000)
                    .process(PerWindowCount(), uid="op", output_type=SESSION))
    harness = Harness(spec)
    out = harness.feed((999, [("k", 1, 0)]), (1999, [("k", 1, 10), ("k", 1, 1500)]))
    assert [tuple(r.values()) for _, r in out] == [("k", 1, 1, 1000), ("k", 2, 2, 1000), ("k", 1, 3, 2000)]
    harness.feed((9000, []))
    assert {(name, ns) for name, _, ns, _ in harness.state} == {("op.fires", "")}


@pytest.mark.parametrize("build, message", [
    (lambda s: s.trigger(CountTrigger.of(2)).allowed_lateness(-1), "must not be negative"),
    (lambda s: s.side_output_late_data(OutputTag("late", SESSION)), "the stream's columns"),
    (lambda s: s.process(object(), uid="op", output_type=SESSION), "ProcessWindowFunction"),
    (lambda s: s.aggregate(sum_of, accumulator_type=ACC, uid="op", output_type=SESSION), "AggregateFunction"),
])
def test_a_bad_window_set_up_is_refused_naming_the_fix(tmp_path, build, message):
    with pytest.raises(ConfigError, match=message):
        windowed(tmp_path, TumblingEventTimeWindows.of(1000), build=build)


def test_an_event_time_window_without_a_watermark_or_a_timestamp_column_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="needs a watermark"):
        windowed(tmp_path, TumblingEventTimeWindows.of(1000), strategy=None)
    with pytest.raises(ConfigError, match="no column 'when'"):
        windowed(tmp_path, TumblingEventTimeWindows.of(1000), strategy=WatermarkStrategy.for_monotonous_timestamps()
                 .with_timestamp_column("when"))
    with pytest.raises(ConfigError, match="cannot merge windows"):
        windowed(tmp_path, EventTimeSessionWindows.with_gap(1000),
                 build=lambda s: s.trigger(PurgingTrigger.of(_NoMerge())))


class _NoMerge(CountTrigger):
    def __init__(self):
        super().__init__(1)

    def can_merge(self):
        return False


PER_WINDOW = Types.ROW_NAMED(["k", "end", "clicks", "ts"], [Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG()])
SESSION_OF_WINDOWS = Types.ROW_NAMED(["k", "start", "end", "windows", "clicks"],
                                     [Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG(), Types.LONG()])
LATE_CLICK = OutputTag("late", TIMED)


class CountOf(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, acc):
        return acc + 1

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return a + b


class EndOfWindow(ProcessWindowFunction):
    """The count of a window with its end, and its event time as Flink gives a window's result: max_timestamp()."""

    def process(self, key, context, elements):
        w = context.window()
        yield {"k": key, "end": w.end, "clicks": elements[0], "ts": w.max_timestamp()}


class SessionOfWindows(ProcessWindowFunction):
    def process(self, key, context, elements):
        w = context.window()
        yield {"k": key, "start": w.start, "end": w.end, "windows": len(elements),
               "clicks": sum(e["clicks"] for e in elements)}


def windows_job(lake, job_id="windows"):
    """Clicks per key per 10 s (5 s of allowed lateness, late clicks to a side output), then sessions of those
    windows' results by their event time (a 30 s gap): a window operator in the second operator of a dataflow."""
    return (Dataflow.from_source(FileSource(str(lake.events), "json", TIMED, max_files_per_batch=1), job_id=job_id,
                                 watermark_strategy=STRATEGY)
            .key_by("k").window(TumblingEventTimeWindows.of(10 * S)).allowed_lateness(5 * S)
            .side_output_late_data(LATE_CLICK)
            .aggregate(CountOf(), EndOfWindow(), accumulator_type=Types.LONG(), uid="per-10s", output_type=PER_WINDOW)
            .key_by("k").window(EventTimeSessionWindows.with_gap(30 * S))
            .process(SessionOfWindows(), uid="sessions", output_type=SESSION_OF_WINDOWS)
            .sink_to("sinks/windows"))


def test_a_dataflow_of_two_window_operators_fires_each_window_once_across_a_restore_at_another_parallelism(spark, lake):
    """Two microbatches; a savepoint (its open windows read by the State Processor); restored at parallelism 3 on
    the other backend; the third microbatch, crashed once after its sink write and run again: the sink and the late
    side output are those of the elements' windows, each fired once. (One run of N == N runs of one: the unit
    test above.)"""
    from state_store.delta.points import StatePoint
    from state_store.ops.restore import restore_job
    from state_store.ops.savepoint import take_savepoint
    from state_store.ops.state_processor import SavepointReader
    from state_store.run.runtime import FaultInjector, InjectedFault
    from tests.support.helpers import run as run_job

    write_window_clicks(lake)
    spec = windows_job(lake)
    run_job(spark, spec, lake, max_microbatches=2)
    savepoint = take_savepoint(spark, lake.settings, spec.job_id, say=lambda line: None)
    reader = SavepointReader(spark, StatePoint(savepoint))
    open_windows = sorted((r["key"], r["namespace"], r["value"]) for r in reader.keyed_state(
        "window-contents", uid="per-10s").collect())
    assert open_windows == [("b", "20000:30000", 1)]  # a's windows and b's first were cleaned up at W = 25 s - 1
    restore_job(spark, lake.settings, spec, StatePoint(savepoint), parallelism={"per-10s": 3, "sessions": 3},
                backend="hashmap", say=lambda line: None)
    with pytest.raises(InjectedFault):  # the sink written, the state not: the rerun replays the microbatch
        run_job(spark, spec, lake, faults=FaultInjector("after_sink_write", batch_id=2))
    run_job(spark, spec, lake)
    sessions = spark.read.format("delta").load(str(lake.settings.in_warehouse(spec.sink, "sink")))
    # a: [0, 10 s) fired at W = 12 s (2 clicks) and again for the late click at 8 s (3), [10 s, 20 s) (1);
    # b: [0, 10 s) and [20 s, 30 s); all closed by the 100 s click's watermark. c's window stays open.
    assert sorted(tuple(r) for r in sessions.collect()) == [("a", 9999, 49999, 3, 6, 2), ("b", 9999, 59999, 2, 2, 2)]
    late = spark.read.format("delta").load(str(lake.settings.in_warehouse(spec.side_output_sink(LATE_CLICK),
                                                                           "sink")))
    assert [(r["k"], r["ts"], r["_microbatch"]) for r in late.collect()] == [("a", 1 * S, 2)]
    # The Lakestate page: each window operator's open windows (c's [100 s, 110 s); its result is not out yet)
    from state_store.provider.reader import job_overview
    from state_store.provider.views import job_section

    job = job_overview(lake.settings, spec.job_id, {"spec": spec.describe(), "entrypoint": "tests"})
    assert [(o["uid"], o["parallelism"], o["open_windows"]) for o in job.operators] == [("per-10s", 3, 1),
                                                                                        ("sessions", 3, 0)]
    assert "<th class='num'>open windows</th>" in job_section(job)


class AllOfWindow(ProcessWindowFunction):
    """A window_all's window: the one key it sees, the window's start and how many elements it holds."""

    def process(self, key, context, elements):
        yield {"key": key, "start": context.window().start, "n": len(list(elements))}


ALL_OF_WINDOW = Types.ROW_NAMED(["key", "start", "n"], [Types.INT(), Types.LONG(), Types.LONG()])


def all_windows_job(lake, job_id: str = "all"):
    """Every click's 10-second window over the whole stream, in two jobs: counted on the vectorised path, and kept
    and counted per record by a ProcessWindowFunction."""
    def stream(job: str):
        return Dataflow.from_source(FileSource(str(lake.events), "json", TIMED, max_files_per_batch=1), job_id=job,
                                    watermark_strategy=STRATEGY)
    ten = TumblingEventTimeWindows.of(10 * S)
    counted = stream(job_id).window_all(ten).aggregate(ColumnAggregate(n="count(*)"), uid="counted")
    kept = stream(f"{job_id}-kept").window_all(ten).process(AllOfWindow(), uid="kept", output_type=ALL_OF_WINDOW)
    return counted.sink_to(f"sinks/{job_id}"), kept.sink_to(f"sinks/{job_id}-kept")


def test_window_all_windows_the_whole_stream_in_one_operator_replays_a_crash_and_restores_on_the_other_backend(
        spark, tmp_path):
    """Flink's windowAll (issue 61, item 4 in part): every record in one operator's windows at parallelism 1, the
    vectorised ColumnAggregate and the per-record ProcessWindowFunction alike (which sees the one key, 0); late
    records are dropped as a keyed window drops them; a crash after the sink write replays to the clean run, and a
    savepoint restored on the hashmap backend goes on as the clean run."""
    from state_store.delta.points import StatePoint
    from state_store.ops.restore import restore_job
    from state_store.ops.savepoint import take_savepoint
    from state_store.run.runtime import FaultInjector, InjectedFault
    from tests.support.helpers import run as run_job
    from tests.support.helpers import sink_rows
    from tests.support.lake import Lake

    def rows(lake, spec):
        table = spark.read.format("delta").load(str(lake.settings.in_warehouse(spec.sink, "sink")))
        return sorted(tuple(r) for r in table.collect())

    clean = Lake(tmp_path / "clean")
    write_window_clicks(clean)
    counted, kept = all_windows_job(clean)
    assert (counted.parallelism, kept.parallelism) == (1, 1) and list(counted.output_type.fields) == [
        "window_start", "window_end", "n"]
    for spec in (counted, kept):
        run_job(spark, spec, clean)
    # [0, 10 s) fires at W = 12 s - 1 (a 0, a 3 s, b 4 s), [10 s, 20 s) at 25 s - 1, [20 s, 30 s) at 100 s - 1;
    # a's 8 s and 1 s clicks come after their window fired: dropped
    assert rows(clean, counted) == [(0, 10 * S, 3, 0), (10 * S, 20 * S, 1, 1), (20 * S, 30 * S, 1, 2)]
    assert rows(clean, kept) == [(0, 0, 3, 0), (0, 10 * S, 1, 1), (0, 20 * S, 1, 2)]
    with pytest.raises(ConfigError, match=r"window_all\(...\)'s operator runs at parallelism 1"):
        Dataflow.from_source(FileSource(str(clean.events), "json", TIMED), job_id="all",
                             watermark_strategy=STRATEGY).window_all(TumblingEventTimeWindows.of(10 * S)).process(
            AllOfWindow(), uid="kept", output_type=ALL_OF_WINDOW, parallelism=2)

    crashed = Lake(tmp_path / "crashed")
    write_window_clicks(crashed)
    for spec in all_windows_job(crashed):
        with pytest.raises(InjectedFault):
            run_job(spark, spec, crashed, faults=FaultInjector("after_sink_write", batch_id=1))
        run_job(spark, spec, crashed)
    assert [sink_rows(spark, crashed, s) for s in all_windows_job(crashed)] == [
        sink_rows(spark, clean, s) for s in (counted, kept)]

    moved = Lake(tmp_path / "moved")
    write_window_clicks(moved)
    for spec in all_windows_job(moved):
        run_job(spark, spec, moved, max_microbatches=1)
        saved = take_savepoint(spark, moved.settings, spec.job_id, say=lambda line: None)
        restore_job(spark, moved.settings, spec, StatePoint(saved), backend="hashmap", say=lambda line: None)
        run_job(spark, spec, moved)
    assert [rows(moved, s) for s in all_windows_job(moved)] == [rows(clean, counted), rows(clean, kept)]


def test_the_demos_clicks_per_minute_job_counts_each_closed_minute_as_pandas_does(spark, lake):
    from demo.clicks_per_minute import dataflow, expected
    from demo.sessions_per_country import BOUND_MS, read_clicks, write_clicks
    from tests.support.helpers import run as run_job

    clicks_dir = lake.inputs / "country-clicks"
    write_clicks(clicks_dir, files=3, events=300, users=40)
    spec = dataflow(clicks_dir)
    run_job(spark, spec, lake)
    clicks = read_clicks(clicks_dir)
    rows = spark.read.format("delta").load(str(lake.settings.in_warehouse(spec.sink, "sink"))).drop("_microbatch")
    assert sorted(tuple(r) for r in rows.collect()) == expected(clicks, int(clicks["ts"].max()) - BOUND_MS - 1)
    assert len({r["minute"] for r in rows.collect()}) == 2  # minutes 0 and 1 closed; minute 2 still open


def test_the_demos_busy_users_job_counts_per_user_minute_and_recounts_busy_ones_as_pandas_does(spark, lake):
    """demo/busy_users.py: a window keyed by (country, user_id), and its side output of busy user-minutes keyed
    by country and counted further in the same job."""
    from demo.busy_users import dataflow, expected
    from demo.sessions_per_country import BOUND_MS, read_clicks, write_clicks
    from tests.support.helpers import run as run_job

    clicks_dir = lake.inputs / "country-clicks"
    write_clicks(clicks_dir, files=3, events=300, users=40)
    job = dataflow(clicks_dir)
    run_job(spark, job, lake)
    clicks = read_clicks(clicks_dir)
    minutes, busy = expected(clicks, int(clicks["ts"].max()) - BOUND_MS - 1)

    def rows(sink):
        return spark.read.format("delta").load(str(lake.settings.sink(sink))).toPandas()

    got = rows("sinks/user_minutes").drop(columns="_microbatch")
    assert sorted(tuple(r) for r in got.itertuples(index=False)) == minutes
    latest = rows("sinks/busy_per_country").sort_values("_microbatch").groupby("country").tail(1)
    assert dict(zip(latest["country"], latest["busy_user_minutes"])) == busy and 0 < sum(busy.values()) < len(minutes)
