"""The watermark a job's strategy gives each microbatch, the clock a restore starts from, and the validation of a
job's time settings (no Spark): after Flink's ``BoundedOutOfOrdernessWatermarks`` and FLINK-5601."""
from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from types import SimpleNamespace

import pytest

from state_store import ConfigError, FileSource, JobSpec, KeyedProcessFunction, OutputTag, Types, WatermarkStrategy
from state_store.watermarks import MIN_WATERMARK, EventClock

SECOND = 1_000


# -- WatermarkStrategy.advance ---------------------------------------------------------------------------------
def bounded(seconds=5):
    return WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=seconds)).with_timestamp_column("ts")


def test_the_watermark_is_the_largest_event_time_minus_the_bound_minus_one_ms():
    clock = bounded().advance(EventClock(), 100_000, 7)
    assert clock == EventClock(watermark=100_000 - 5_000 - 1, max_event_time=100_000, input_ms=7)


def test_the_watermark_is_the_largest_event_time_seen_so_far_not_the_microbatchs():
    strategy = bounded()
    first = strategy.advance(EventClock(), 100_000, 1)
    later = strategy.advance(first, 60_000, 2)  # an out-of-order microbatch: event time stands
    assert later == EventClock(94_999, 100_000, 2)
    assert strategy.advance(later, 100_002, 3) == EventClock(95_001, 100_002, 3)


def test_the_watermark_never_goes_down_even_from_a_restored_clock_ahead_of_the_records():
    restored = EventClock(watermark=500_000, max_event_time=None, input_ms=None)
    assert bounded().advance(restored, 100_000, 1) == EventClock(500_000, 100_000, 1)


def test_with_no_watermark_yet_the_clock_starts_at_long_min_value():
    assert EventClock() == EventClock(-(1 << 63), None, None) and MIN_WATERMARK == -(1 << 63)


def test_monotonous_timestamps_are_a_bound_of_zero():
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column("ts")
    assert strategy.bound_ms == 0
    assert strategy.advance(EventClock(), 1_000, 0).watermark == 999


def test_an_int_bound_is_milliseconds():
    assert WatermarkStrategy.for_bounded_out_of_orderness(250).bound_ms == 250
    assert WatermarkStrategy.for_bounded_out_of_orderness(timedelta(minutes=2)).bound_ms == 120_000


def test_without_records_and_without_idleness_the_clock_does_not_move():
    strategy = bounded()
    clock = strategy.advance(EventClock(), 100_000, 1_000)
    assert strategy.advance(clock, None, 10**12) == clock
    assert strategy.advance(EventClock(), None, 10**12) == EventClock()


def test_with_idleness_alone_never_raises_the_watermark_of_an_idle_source_as_flink():
    """Issue 37 #10: Flink's WatermarksWithIdleness marks a split idle so the others' least can move; with no
    data anywhere, the watermark stands, so no timer fires and no window closes that Flink would keep."""
    strategy = bounded().with_idleness(timedelta(seconds=10))
    clock = strategy.advance(EventClock(), 100_000, 1_000)
    assert strategy.advance(clock, None, 10**12) == clock
    splits = strategy.advance_splits(EventClock(), P[:2], {"t:0": 100_000, "t:1": 90_000}, 0)
    assert strategy.advance_splits(splits, P[:2], {}, 10**9).watermark == splits.watermark == 84_999


def test_after_idle_advance_without_records_event_time_advances_with_processing_time():
    # W = max(W, max_event_time + (now - last input's processing time - idleness) - bound - 1), once positive
    strategy = bounded().with_idle_advance(timedelta(seconds=10))
    clock = strategy.advance(EventClock(), 100_000, 1_000)
    assert clock.watermark == 94_999
    assert strategy.advance(clock, None, 11_000) == clock  # idle exactly the timeout: not yet
    assert strategy.advance(clock, None, 11_001) == EventClock(95_000, 100_000, 1_000)
    assert strategy.advance(clock, None, 31_000) == EventClock(114_999, 100_000, 1_000)
    # Not cumulative: from the advanced clock, the same processing time gives the same watermark.
    advanced = strategy.advance(clock, None, 31_000)
    assert strategy.advance(advanced, None, 31_000) == advanced
    # Records again: their event time counts from now on, the watermark never goes down.
    assert strategy.advance(advanced, 105_000, 32_000) == EventClock(114_999, 105_000, 32_000)


def test_idle_advance_does_not_advance_a_clock_that_has_seen_no_record():
    strategy = bounded().with_idle_advance(timedelta(seconds=1))
    assert strategy.advance(EventClock(), None, 10**12) == EventClock()


def test_the_builders_keep_each_others_settings_in_any_order():
    a = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=3)).with_idleness(
        timedelta(seconds=9)).with_timestamp_column("event_ts")
    b = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=3)).with_timestamp_column(
        "event_ts").with_idleness(timedelta(seconds=9))
    assert a == b
    assert a.describe() == {"bound_ms": 3_000, "timestamp_column": "event_ts", "idleness_ms": 9_000,
                            "idle_advance": False}
    assert a.with_idle_advance(timedelta(seconds=4)).with_timestamp_column("ts").describe() == {
        "bound_ms": 3_000, "timestamp_column": "ts", "idleness_ms": 4_000, "idle_advance": True}
    assert a.with_watermark_alignment("g", timedelta(seconds=2)).describe()["alignment"] == {
        "group": "g", "max_drift_ms": 2_000}


@pytest.mark.parametrize("make, message", [
    (lambda: WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=-1)), "must not be negative"),
    (lambda: WatermarkStrategy.for_bounded_out_of_orderness(-1), "must not be negative"),
    (lambda: WatermarkStrategy.for_bounded_out_of_orderness(5.0), "timedelta"),
    (lambda: WatermarkStrategy.for_bounded_out_of_orderness("5s"), "timedelta"),
    (lambda: WatermarkStrategy.for_bounded_out_of_orderness(True), "timedelta"),
    (lambda: WatermarkStrategy.for_bounded_out_of_orderness(None), "timedelta"),
    (lambda: bounded().with_idleness(timedelta(0)), "must be positive"),
    (lambda: bounded().with_idleness(timedelta(seconds=-3)), "must be positive"),
    (lambda: bounded().with_idleness(0), "must be positive"),
    (lambda: bounded().with_idleness(1.5), "timedelta"),
    (lambda: bounded().with_idle_advance(timedelta(0)), "with_idle_advance's timeout must be positive"),
    (lambda: WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column(""), "column name"),
    (lambda: WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column(None), "column name"),
    (lambda: bounded().with_watermark_alignment("", 5), "a group name"),
    (lambda: bounded().with_watermark_alignment("g", -5), "max_drift must not be negative"),
    (lambda: bounded().with_watermark_alignment("g", 5, timedelta(seconds=1)), "align once per microbatch"),
])
def test_bad_strategy_settings_raise_config_error(make, message):
    with pytest.raises(ConfigError, match=message):
        make()


# -- EventClock.restored (the union list state __source__.watermark) ---------------------------------------------
def test_a_clock_survives_its_union_list_entry():
    clock = EventClock(94_999, 100_000, 1_000)
    assert json.loads(clock.to_entry()) == [{"watermark": 94_999, "max_event_time": 100_000, "input_ms": 1_000}]
    assert EventClock.restored([clock.to_entry()]) == clock
    assert EventClock.restored([clock.to_entry()] * 3) == clock  # every subtask's entry is the same clock


def test_a_restore_takes_each_fields_minimum_over_every_element_of_every_entry():
    entries = [json.dumps([{"watermark": 50, "max_event_time": 900, "input_ms": 30},
                           {"watermark": 70, "max_event_time": 800, "input_ms": 40}]),
               json.dumps([{"watermark": 60, "max_event_time": 850, "input_ms": 20}])]
    assert EventClock.restored(entries) == EventClock(50, 800, 20)  # each minimum from a different element


def test_a_restore_with_a_field_unknown_in_any_element_leaves_it_unknown():
    entries = [EventClock(50, 900, 30).to_entry(), EventClock(60, None, 10).to_entry()]
    assert EventClock.restored(entries) == EventClock(50, None, 10)


@pytest.mark.parametrize("entries", [[], [""], ["[]"], ["[]", ""]])
def test_a_restore_without_any_clock_starts_with_no_watermark(entries):
    assert EventClock.restored(entries) == EventClock(MIN_WATERMARK, None, None)


# -- WatermarkStrategy.advance_splits: a Kafka topic's partitions -------------------------------------------------
P = ["t:0", "t:1", "t:2"]


def test_the_watermark_of_split_input_is_the_least_of_the_splits_largest_event_times():
    clock = bounded().advance_splits(EventClock(), P, {"t:0": 100_000, "t:1": 80_000, "t:2": 90_000}, 7)
    assert clock.watermark == 80_000 - 5_000 - 1 and clock.max_event_time == 100_000
    later = bounded().advance_splits(clock, P, {"t:1": 120_000}, 8)  # t:1 moves past t:2: t:2 holds it now
    assert later.watermark == 90_000 - 5_001
    assert later.splits == {"t:0": [100_000, 7], "t:1": [120_000, 8], "t:2": [90_000, 7]}
    assert bounded().advance_splits(later, P, {"t:2": 10}, 9).watermark == later.watermark  # never back


def test_two_inputs_each_keep_their_own_strategy_and_the_watermark_is_the_least_of_the_active_ones():
    """Flink's ``processWatermark1/2``: each input's watermark by its own bound, the operator's the least of the
    inputs' (89 here, not the 99 one bound for both gave); an input idle by its own ``with_idleness`` is left out
    (``IndexedCombinedWatermarkStatus``) while the other, without idleness, never is."""
    first = WatermarkStrategy.for_bounded_out_of_orderness(0)
    second = WatermarkStrategy.for_bounded_out_of_orderness(10).with_idleness(timedelta(seconds=10))
    own = {"main": first, "second": second}
    clock = first.advance_splits(EventClock(), ["main", "second"], {"main": 100, "second": 100}, 0, own)
    assert clock.watermark == 89
    held = first.advance_splits(clock, ["main", "second"], {"main": 500}, 10_000, own)
    assert held.watermark == 89  # the second input is quiet, but not idle yet: it holds the watermark
    moved = first.advance_splits(held, ["main", "second"], {"main": 600}, 10_001, own)
    assert moved.watermark == 599  # idle for more than its 10 s: left out; the first's own bound alone
    quiet = first.advance_splits(moved, ["main", "second"], {"second": 200}, 20_000, own)
    assert quiet.watermark == 599  # back, at 200 - 10 - 1; never down. The first input, without idleness,
    assert first.advance_splits(quiet, ["main", "second"], {"second": 9_000}, 10**9, own).watermark == 599  # holds


def test_watermark_alignment_pauses_an_input_past_its_groups_least_plus_the_drift_until_the_others_catch_up():
    """Flink's watermark alignment (FLIP-182, after ``SourceCoordinatorAlignmentTest``), once a microbatch: an
    input whose own watermark is past the least of its group's by more than ``max_drift`` reads nothing; an input
    with no record yet holds the group back; one idle by its ``with_idleness`` is left out; while paused an input
    is never idle; an input of another group, or of none, is not held."""
    from state_store.job import Input, InputRole
    from state_store.run.planning import _aligned_out

    def input_(name, strategy):
        return Input(name, None, "k", strategy, InputRole.KEYED)

    said = []
    fast, slow = (bounded(0).with_watermark_alignment("g", 100).with_idleness(timedelta(seconds=10)) for _ in "ab")
    ungrouped = bounded(0)
    inputs = [input_("main", fast), input_("second", slow), input_("input3", ungrouped)]
    ctx = SimpleNamespace(spec=SimpleNamespace(inputs=inputs), planned_inputs=inputs, say=said.append)
    own = {"main": fast, "second": slow, "input3": ungrouped}
    names = list(own)

    def step(clock, latest, now, paused=frozenset()):
        return fast.advance_splits(clock, names, latest, now, own, paused)

    assert _aligned_out(ctx, 0, EventClock(), 0) == frozenset()  # no watermark anywhere yet
    first = step(EventClock(), {"main": 1_000, "input3": 9_000}, 0)  # second has had no record: none yet
    assert _aligned_out(ctx, 1, first, 1) == {"main"}
    assert said == ["microbatch 1: input 'main' paused by watermark alignment: its watermark 999 is past group "
                    "'g''s least, none yet, by more than 100 ms"]
    caught = step(first, {"second": 950}, 2, frozenset({"main"}))  # 949 + 100 >= 999: main reads again
    assert _aligned_out(ctx, 2, caught, 2) == frozenset()
    ahead = step(caught, {"main": 2_000}, 3)
    assert _aligned_out(ctx, 3, ahead, 3) == {"main"}
    held = step(ahead, {}, 30_000, frozenset({"main"}))  # paused for 27 s: not idle; second, quiet 28 s, is
    assert held.splits["main"][1] == 30_000 and _aligned_out(ctx, 4, held, 30_000) == frozenset()


def test_a_split_without_a_record_yet_holds_the_watermark_until_it_is_idle():
    strategy = bounded().with_idleness(timedelta(seconds=10))
    clock = strategy.advance_splits(EventClock(), P, {"t:0": 100_000, "t:1": 80_000}, 1_000)
    assert clock.watermark == MIN_WATERMARK  # t:2 has had nothing yet (Flink holds it too)
    assert strategy.advance_splits(clock, P, {"t:0": 101_000}, 11_000).watermark == MIN_WATERMARK  # 10 s: not yet
    idle = strategy.advance_splits(clock, P, {"t:0": 101_000, "t:1": 81_000}, 11_001)
    assert idle.watermark == 81_000 - 5_001  # t:2 left out
    assert bounded().advance_splits(clock, P, {"t:0": 101_000, "t:1": 81_000}, 10**9).watermark == MIN_WATERMARK
    back = strategy.advance_splits(idle, P, {"t:2": 70_000}, 11_002)  # records again: it counts again
    assert back.watermark == idle.watermark and back.splits["t:2"] == [70_000, 11_002]


def test_a_partition_added_joins_the_least_and_when_every_split_is_idle_the_source_is():
    strategy = bounded().with_idle_advance(timedelta(seconds=10))
    clock = strategy.advance_splits(EventClock(), P[:2], {"t:0": 100_000, "t:1": 90_000}, 0)
    assert clock.watermark == 84_999
    grown = strategy.advance_splits(clock, P, {"t:0": 110_000, "t:1": 100_000}, 1_000)
    assert grown.watermark == 84_999 and grown.splits["t:2"] == [None, 1_000]  # new: holds it
    assert strategy.advance_splits(grown, P, {}, 10_000).watermark == 84_999
    # Every split idle (t:0 and t:1 since 1 s, t:2 since it was seen at 1 s): event time moves on with processing
    # time from the last input, as for a source of one split.
    assert strategy.advance_splits(grown, P, {}, 21_000).watermark == 110_000 + 10_000 - 5_001


def test_a_clock_of_splits_survives_its_union_list_entry_and_a_restore_takes_each_splits_minimum():
    clock = EventClock(84_999, 110_000, 1_000, {"t:0": [110_000, 1_000], "t:1": [None, 0]})
    assert EventClock.restored([clock.to_entry()] * 2) == clock
    other = EventClock(80_000, 100_000, 900, {"t:0": [100_000, 2_000], "t:2": [5, 3]})
    assert EventClock.restored([clock.to_entry(), other.to_entry()]).splits == {
        "t:0": [100_000, 1_000], "t:1": [None, 0], "t:2": [5, 3]}


# -- JobSpec validation of a job's time settings (job._validate_time) ----------------------------------------------
class Nothing(KeyedProcessFunction):
    def process(self, key, records, ctx):
        return None


EVENTS = Types.ROW_NAMED(["k", "ts", "int_ts", "text_ts"], [Types.STRING(), Types.LONG(), Types.INT(), Types.STRING()])
OUT = Types.ROW_NAMED(["k"], [Types.STRING()])


def spec(tmp_path, **changes) -> JobSpec:
    return JobSpec("timed", Nothing(), FileSource(str(tmp_path), "json", EVENTS), "k", Types.STRING(), OUT,
                   "out/timed", **changes)


@pytest.mark.parametrize("column", ["ts", "int_ts"])
def test_a_strategy_on_a_long_or_int_column_of_the_source_is_accepted(tmp_path, column):
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column(column)
    job = spec(tmp_path, watermark_strategy=strategy, side_outputs=[OutputTag("late", OUT)]).validate()
    assert job.describe()["watermark_strategy"] == {"bound_ms": 0, "timestamp_column": column, "idleness_ms": None,
                                                     "idle_advance": False}
    assert job.describe()["side_outputs"] == {"late": "out/timed_late"}


@pytest.mark.parametrize("strategy, message", [
    (WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=5)),
     r"no timestamp column: add \.with_timestamp_column"),
    (bounded().with_timestamp_column("event_time"),
     r"'event_time' is not in the source schema .*with_timestamp_column"),
    (bounded().with_timestamp_column("text_ts"), "'text_ts' is STRING; it must hold epoch milliseconds as LONG"),
    ("ts", "must be a state_store.WatermarkStrategy"),
])
def test_a_strategy_the_source_cannot_give_is_refused(tmp_path, strategy, message):
    with pytest.raises(ConfigError, match=message):
        spec(tmp_path, watermark_strategy=strategy).validate()


def test_two_side_outputs_with_one_name_are_refused(tmp_path):
    tags = [OutputTag("late", OUT), OutputTag("early", OUT), OutputTag("late", EVENTS)]
    with pytest.raises(ConfigError, match="side output 'late' is declared twice"):
        spec(tmp_path, side_outputs=tags).validate()


@pytest.mark.parametrize("side_outputs", [["late"], OutputTag("late", OUT), [None]])
def test_side_outputs_must_be_a_list_of_output_tags(tmp_path, side_outputs):
    with pytest.raises(ConfigError, match="side_outputs must be a list of state_store.OutputTag"):
        spec(tmp_path, side_outputs=side_outputs).validate()


@pytest.mark.parametrize("name, type_info, message", [
    ("", OUT, "not valid"), ("a b", OUT, "not valid"), ("_late", OUT, "not valid"), ("x" * 65, OUT, "not valid"),
    ("late", Types.LONG(), "ROW_NAMED"),
])
def test_an_output_tag_needs_a_valid_name_and_a_row_type(name, type_info, message):
    with pytest.raises(ConfigError, match=message):
        OutputTag(name, type_info)


def test_records_whose_timestamps_are_all_null_are_input_so_idleness_does_not_move_the_watermark():
    from state_store.watermarks import EventClock, WatermarkStrategy

    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column("ts").with_idle_advance(1_000)
    clock = EventClock(99, 100, 0)
    busy = strategy.advance(clock, None, 10_000, has_input=True)
    assert busy == EventClock(99, 100, 10_000)  # records arrived: not idle, the watermark stands
    assert strategy.advance(clock, None, 10_000).watermark > 99  # no records at all: idle, it moves on


def test_every_source_kind_is_a_source_and_a_job_refuses_what_is_not_one(tmp_path):
    # The Source protocol (sources/base.py) is what JobSpec checks; a new source kind meets it, no list to edit.
    from state_store import DeltaSource, KafkaSource
    from state_store.sources import EdgeSource, Source

    kinds = [FileSource(str(tmp_path), "json", EVENTS), DeltaSource(str(tmp_path)),
             KafkaSource("localhost:9092", ["events"], schema=EVENTS), EdgeSource("upstream", EVENTS)]
    assert all(isinstance(kind, Source) for kind in kinds)

    class HalfASource(Source):  # what a run calls is abstract: a class that leaves some out is no source at all
        def describe(self):
            return {}

    with pytest.raises(TypeError, match="abstract"):
        HalfASource()
    for not_a_source in (str(tmp_path), {"path": str(tmp_path)}):
        with pytest.raises(ConfigError, match="source must be a FileSource, a DeltaSource or a KafkaSource"):
            replace(spec(tmp_path), source=not_a_source).validate()


# -- WatermarkStrategy.for_generator (Flink's WatermarkGenerator) --------------------------------------------
def test_a_generators_watermark_is_what_it_emits_per_record_and_per_microbatch_and_never_goes_back():
    """After Flink's WatermarkStrategyTest: a punctuated generator emits on marked records, a periodic one once a
    microbatch; the clock keeps the larger of the last watermark and what was emitted; one that goes back in
    time is refused naming it."""
    from state_store import WatermarkGenerator
    from state_store.watermarks import GeneratorRun, generated_clock

    class OnMarker(WatermarkGenerator):
        def on_event(self, event, event_timestamp, output):
            if event["marker"]:
                output.emit_watermark(event_timestamp)

    class Periodic(WatermarkGenerator):
        def __init__(self):
            self.largest = None

        def on_event(self, event, event_timestamp, output):
            self.largest = event_timestamp if self.largest is None else max(self.largest, event_timestamp)

        def on_periodic_emit(self, output):
            if self.largest is not None:
                output.emit_watermark(self.largest - 10)

    strategy = WatermarkStrategy.for_generator(OnMarker).with_timestamp_column("ts")
    assert strategy.describe()["generator"].endswith("OnMarker") and strategy.timestamp_column == "ts"
    run = GeneratorRun(strategy)
    first = generated_clock(run, EventClock(), [({"marker": False}, 5), ({"marker": True}, 3)], 1, True)
    assert first == EventClock(3, 5, 1)
    assert generated_clock(run, first, [({"marker": False}, 9)], 2, True) == EventClock(3, 9, 2)  # no marker
    assert generated_clock(run, first, [], 3, False) == EventClock(3, 5, 1)
    periodic = GeneratorRun(WatermarkStrategy.for_generator(Periodic).with_timestamp_column("ts"))
    assert generated_clock(periodic, EventClock(), [({}, 40), ({}, 25)], 1, True).watermark == 30
    with pytest.raises(ConfigError, match="OnMarker emitted watermark 2 after 3: a watermark never goes back"):
        generated_clock(run, first, [({"marker": True}, 2)], 4, True)
    with pytest.raises(ConfigError, match="for_generator takes a WatermarkGenerator class"):
        WatermarkStrategy.for_generator(42)
    with pytest.raises(ConfigError, match="not a state_store.WatermarkGenerator"):
        GeneratorRun(WatermarkStrategy.for_generator(dict))


def test_a_run_lists_its_next_ranges_for_their_event_times_only_where_the_source_reads_them_at_once(
        tmp_path, monkeypatch):
    from state_store.run.planning import prefetch_event_times
    from state_store.sources.query import QuerySource

    for i in range(3):
        (tmp_path / f"part-{i}.json").write_text(json.dumps({"k": "a", "ts": i, "int_ts": i, "text_ts": ""}) + "\n")
    files = FileSource(str(tmp_path), "json", EVENTS, max_files_per_batch=1)
    computed = QuerySource(files, None, (("k", "`k`"), ("ts", "`ts` + 1")), EVENTS, ())
    listed = []
    monkeypatch.setattr(FileSource, "next_offset", lambda self, spark, start: listed.append(start))
    ctx = SimpleNamespace(planned_inputs=[SimpleNamespace(name="main", source=files, watermark_strategy=bounded())],
                          spark=None, event_times={}, say=print)
    prefetch_event_times(ctx, {}, 3)  # its own column: each plan reads its range's (not listed here first)
    assert not files.batches_event_times("ts") and listed == []
    assert computed.batches_event_times("ts") and not computed.batches_event_times("k")
    ctx.planned_inputs[0].source = computed
    prefetch_event_times(ctx, {}, 3)  # a computed event time is listed (next_offset gives None here: no ranges)
    assert len(listed) == 1 and ctx.event_times == {}
