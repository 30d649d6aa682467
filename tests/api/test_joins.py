"""Two inputs: the interval join after Flink's ``IntervalJoinOperatorTest`` (the same bounds, elements, watermarks
and expected pairs and buffers) and a ``KeyedCoProcessFunction`` after ``KeyedCoProcessOperatorTest``, run by a
subtask as a run runs it (``run_partition``, no Spark).

Flink's harness feeds elements and each input's watermark one by one; here a microbatch's elements of both inputs
meet the operator's watermark before it, W(m-1) (the least of the inputs'), and its timers fire at W(m) after them.
"""
from __future__ import annotations

import pytest

from state_store import (
    CoFlatMapFunction,
    CoGroupFunction,
    CoMapFunction,
    ConfigError,
    CoProcessFunction,
    Dataflow,
    FileSource,
    FilterFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    ListStateDescriptor,
    OutputTag,
    ProcessJoinFunction,
    Types,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from state_store.errors import RestoreError
from state_store.job import InputRole
from state_store.subtask.exchange import PHASE_RECORD, RECORD, RECORD2, SIDE_KEYED
from state_store.watermarks import MIN_WATERMARK
from tests.support.frames import OUT, marker, run, stats
from tests.support.joins import BY_AT, BY_TS, LEFT, OUT_ROW, PAIR, RIGHT, Count, Latest, Matched, Pairs
from tests.support.windows import Harness as WindowHarness


def streams(tmp_path, job_id="j"):
    for name in ("left", "right"):
        (tmp_path / name).mkdir(exist_ok=True)
    return (Dataflow.from_source(FileSource(str(tmp_path / "left"), "json", LEFT), job_id=job_id,
                                 watermark_strategy=BY_TS),
            Dataflow.from_source(FileSource(str(tmp_path / "right"), "json", RIGHT), job_id=job_id,
                                 watermark_strategy=BY_AT))


def interval(tmp_path, lower, upper, lower_inclusive=True, upper_inclusive=True, late=None):
    left, right = streams(tmp_path)
    joined = left.key_by("k").interval_join(right.key_by("key")).between(lower, upper)
    if not lower_inclusive:
        joined = joined.lower_bound_exclusive()
    if not upper_inclusive:
        joined = joined.upper_bound_exclusive()
    if late is not None:
        joined = joined.side_output_left_late_data(late[0]).side_output_right_late_data(late[1])
    return joined.process(Pairs(), uid="op", output_type=PAIR).sink_to("sinks/j")


class Harness(WindowHarness):
    """Microbatches through a subtask, as runs: ``feed(*microbatches)`` runs ``(watermark, [(input, time), ...])``
    (elements of key "k"; input 1 left, 2 right); the next ``feed`` restores from what the last one wrote."""

    def __init__(self, spec):
        super().__init__(spec)
        self.late_dropped = 0

    def feed(self, *microbatches) -> list[tuple]:
        rows, plan = [], []
        for watermark, elements in microbatches:
            self.batch += 1
            plan.append((self.batch, self.batch * 1_000, watermark))
            for side, ts in elements:
                record = {"k": "k", "ts": ts, "who": "lhs"} if side == 1 else {"key": "k", "at": ts, "who": "rhs"}
                rows.append({"subtask": 0, "phase": PHASE_RECORD, "batch_id": self.batch, "side": SIDE_KEYED,
                             "key": "k", "key_group": 1, "input": side, (RECORD if side == 1 else RECORD2): record})
        result = self.run(rows, plan, record_type=LEFT.arrow_type(), record2_type=RIGHT.arrow_type())
        self.late_dropped += sum(counters["late_dropped"] for _, _, counters in stats(result))
        self.sides += [(r["kind"].partition(":")[2], r[OUT]["ts"] if "ts" in r[OUT] else r[OUT]["at"])
                       for r in result if r["kind"].startswith("side:")]
        return [(r[OUT]["left"], r[OUT]["right"]) for r in result if r["kind"] == "out"]

    def buffer(self, side: str) -> set[int]:
        """The times of the buffered records of one side ("left" / "right")."""
        return {int(user_key) for (name, _, _, user_key) in self.state if name == f"op.{side}-buffer"}


def elements_then_watermarks(lhs_faster: bool):
    """Flink's ``processElementsAndWatermarks(1, 4)``: one input's elements 1..4, each followed by its
    watermark, then the other's. The operator's watermark is the least of the two: none until the second input's
    first watermark, then that input's."""
    first, second = (1, 2) if lhs_faster else (2, 1)
    return [(MIN_WATERMARK, [(first, t) for t in range(1, 5)])] + [(t, [(second, t)]) for t in range(1, 5)]


@pytest.mark.parametrize("lhs_faster", [True, False], ids=["lhs-faster", "rhs-faster"])
@pytest.mark.parametrize("lower, lower_inclusive, upper, upper_inclusive, pairs", [
    (1, True, 3, False, {(1, 2), (1, 3), (2, 3), (2, 4), (3, 4)}),  # testImplementationMirrorsCorrectly
    (-3, False, -1, True, {(2, 1), (3, 1), (3, 2), (4, 2), (4, 3)}),  # ... and mirrored
    (-2, True, -1, True, {(2, 1), (3, 1), (3, 2), (4, 2), (4, 3)}),
    (-1, True, 1, True, {(1, 1), (1, 2), (2, 1), (2, 2), (2, 3), (3, 2), (3, 3), (3, 4), (4, 3), (4, 4)}),
    (1, True, 2, True, {(1, 2), (1, 3), (2, 3), (2, 4), (3, 4)}),
    (-3, False, -1, False, {(3, 1), (4, 2)}),
    (-1, False, 1, False, {(1, 1), (2, 2), (3, 3), (4, 4)}),
    (1, False, 3, False, {(1, 3), (2, 4)}),
])
def test_interval_join_pairs_are_flinks_for_every_kind_of_bound(tmp_path, lhs_faster, lower, lower_inclusive, upper,
                                                                upper_inclusive, pairs):
    harness = Harness(interval(tmp_path, lower, upper, lower_inclusive, upper_inclusive))
    out = harness.feed(*elements_then_watermarks(lhs_faster))
    assert len(out) == len(pairs) and set(out) == pairs and harness.late_dropped == 0
    once = Harness(interval(tmp_path, lower, upper, lower_inclusive, upper_inclusive))
    assert [p for m in elements_then_watermarks(lhs_faster) for p in once.feed(m)] == out  # N runs == 1 run


@pytest.mark.parametrize("lower, lower_inclusive, upper, upper_inclusive, kept", [
    (-1, True, 0, True, [({2, 3, 4, 5}, {1, 2, 3, 4, 5}), ({5}, {4, 5})]),  # testStateCleanupNegative...
    (-2, False, 1, False, [({2, 3, 4, 5}, {1, 2, 3, 4, 5}), ({5}, {4, 5})]),
    (0, True, 1, True, [({1, 2, 3, 4, 5}, {2, 3, 4, 5}), ({4, 5}, {5})]),  # testStateCleanupPositive...
    (-1, False, 2, False, [({1, 2, 3, 4, 5}, {2, 3, 4, 5}), ({4, 5}, {5})]),
])
def test_each_buffer_is_cleaned_by_its_timers_as_flinks(tmp_path, lower, lower_inclusive, upper, upper_inclusive,
                                                        kept):
    harness = Harness(interval(tmp_path, lower, upper, lower_inclusive, upper_inclusive))
    harness.feed((1, [(1, t) for t in range(1, 6)] + [(2, t) for t in range(1, 6)]))
    assert (harness.buffer("left"), harness.buffer("right")) == kept[0]
    harness.feed((4, []))
    assert (harness.buffer("left"), harness.buffer("right")) == kept[1]
    harness.feed((6, []))
    assert harness.buffer("left") == harness.buffer("right") == set()
    assert not harness.state, "a timer or a buffer left behind"


def test_late_records_are_dropped_and_counted_or_sent_to_their_sides_late_output(tmp_path):
    """testDiscardsLateData and testLateData: behind the watermark, a record joins nothing."""
    harness = Harness(interval(tmp_path, -1, 1))
    first = harness.feed((3, [(1, 1), (2, 1), (1, 2), (2, 2), (1, 3), (2, 3)]))
    later = harness.feed((5, [(1, 1), (1, 4), (2, 4), (1, 5), (2, 5)]))
    assert set(first + later) == {(1, 1), (1, 2), (2, 1), (2, 2), (2, 3), (3, 2), (3, 3), (3, 4), (4, 3), (4, 4),
                                  (4, 5), (5, 4), (5, 5)} and len(first + later) == 13
    assert harness.late_dropped == 1
    tags = (OutputTag("left_late", LEFT), OutputTag("right_late", RIGHT))
    harness = Harness(interval(tmp_path, -1, 1, late=tags))
    out = harness.feed((3, [(1, 3), (2, 3)])) + harness.feed((5, [(1, 4), (2, 4), (1, 1), (2, 2), (1, 5), (2, 5)]))
    assert set(out) == {(3, 3), (3, 4), (4, 3), (4, 4), (4, 5), (5, 4), (5, 5)}
    assert sorted(harness.sides) == [("left_late", 1), ("right_late", 2)] and harness.late_dropped == 0


def test_a_restored_join_matches_records_across_the_restore(tmp_path):
    """testRestoreFromSnapshot: a run of three microbatches, then a run restored from its state."""
    harness = Harness(interval(tmp_path, -1, 1))
    out = harness.feed((1, [(1, 1), (2, 1)]), (2, [(1, 2), (2, 2)]), (3, [(1, 3), (2, 3)]))
    assert set(out) == {(1, 1), (1, 2), (2, 1), (2, 2), (2, 3), (3, 2), (3, 3)}
    assert set(harness.feed((4, [(1, 4), (2, 4)]))) == {(3, 4), (4, 3), (4, 4)}


def test_a_record_without_event_time_and_wrong_bounds_are_refused(tmp_path):
    harness = Harness(interval(tmp_path, 0, 0))
    with pytest.raises(Exception, match="has no event time"):
        harness.feed((MIN_WATERMARK, [(1, None)]))
    with pytest.raises(ConfigError, match="lower <= upper"):
        interval(tmp_path, 2, 1)
    with pytest.raises(ConfigError, match="lower <= upper"):
        interval(tmp_path, 1, 1, lower_inclusive=False)
    left, right = streams(tmp_path)
    with pytest.raises(ConfigError, match="needs its bounds first"):
        left.key_by("k").interval_join(right.key_by("key")).process(Pairs(), uid="op", output_type=PAIR)
    with pytest.raises(ConfigError, match="give both the same job_id"):
        left.key_by("k").interval_join(streams(tmp_path, job_id="other")[1].key_by("key"))
    with pytest.raises(ConfigError, match="joins keyed streams"):
        left.key_by("k").interval_join(right)
    with pytest.raises(ConfigError, match="late data tag 'late' holds"):
        left.key_by("k").interval_join(right.key_by("key")).between(0, 1).side_output_left_late_data(
            OutputTag("late", RIGHT))


def co_process(tmp_path):
    left, right = streams(tmp_path)
    return left.connect(right).key_by("k", "key").process(Latest(), uid="op", output_type=OUT_ROW).sink_to("sinks/j")


def test_a_keyed_co_process_function_shares_state_and_timers_between_its_inputs(tmp_path):
    spec = co_process(tmp_path)
    assert spec.inputs[1].key == "key" and spec.inputs[1].source is not None
    result = run(spec.function, marker(0),
                 *[{"subtask": 0, "phase": PHASE_RECORD, "batch_id": 1, "side": SIDE_KEYED, "key": "k",
                    "key_group": 1, "input": side, (RECORD if side == 1 else RECORD2): record}
                   for side, record in [(2, {"key": "k", "at": 5, "who": "rhs"}),
                                        (1, {"k": "k", "ts": 7, "who": "lhs"}),
                                        (2, {"key": "k", "at": 9, "who": "rhs"})]],
                 output_type=OUT_ROW, microbatches=[(1, 1_000, 15), (2, 2_000, 20)], record_type=LEFT.arrow_type(),
                 record2_type=RIGHT.arrow_type())
    # a key's records of the first input come first in its microbatch; the timers (15 of rhs@5, 17 of lhs@7, 19 of
    # rhs@9) fire after the microbatch's records, 15 at its W = 15, the others at the next one's W = 20
    assert [r[OUT]["what"] for r in result if r["kind"] == "out"] == [
        "1:lhs@7 saw None", "2:rhs@5 saw 1:7", "2:rhs@9 saw 2:5", "timer 15 saw 2:9", "timer 17 saw 2:9",
        "timer 19 saw 2:9"]


def test_connected_streams_are_checked_where_the_job_is_defined(tmp_path):
    left, right = streams(tmp_path)
    with pytest.raises(ConfigError, match="needs their keys"):
        left.connect(right).process(Latest(), uid="op", output_type=OUT_ROW)
    with pytest.raises(ConfigError, match="takes a state_store.KeyedCoProcessFunction"):
        left.connect(right).key_by("k", "key").process(Pairs(), uid="op", output_type=OUT_ROW)
    with pytest.raises(ConfigError, match="takes unkeyed streams"):
        left.key_by("k").connect(right)
    mistyped = Dataflow.from_source(FileSource(str(tmp_path / "right"), "json", Types.ROW_NAMED(
        ["key", "at"], [Types.LONG(), Types.LONG()])), job_id="j", watermark_strategy=BY_AT)
    with pytest.raises(ConfigError, match="key them by columns of the same types"):
        left.connect(mistyped).key_by("k", "key").process(Latest(), uid="op", output_type=OUT_ROW)
    no_time = Dataflow.from_source(FileSource(str(tmp_path / "right"), "json", RIGHT), job_id="j")
    with pytest.raises(ConfigError, match="give both inputs a watermark_strategy, or neither"):
        left.connect(no_time).key_by("k", "key").process(Latest(), uid="op", output_type=OUT_ROW).sink_to("s/j")
    # A source read by a later operator: second, with the job's event time, of the job's own
    passed = left.filter(NotLate(), uid="pass")
    with pytest.raises(ConfigError, match=r"reads a source as its second input, whose watermark_strategy the job's "
                                          r"event time needs: give it one"):
        passed.connect(no_time).key_by("k", "key").process(Latest(), uid="op", output_type=OUT_ROW).sink_to("s/j")
    with pytest.raises(ConfigError, match=r"put the processed stream first \(processed.connect\(source\)\)"):
        right.connect(passed)
    with pytest.raises(ConfigError, match="one job"):
        passed.connect(streams(tmp_path, job_id="other")[1])
    later = passed.connect(right).key_by("k", "key").process(Latest(), uid="op", output_type=OUT_ROW).sink_to("s/j")
    assert [(i.name, i.upstream) for i in later.planned_inputs()] == [("main", None), ("op:second", None)]


# -- a run -------------------------------------------------------------------------------------------------------
class Impression(ProcessJoinFunction):
    def process_element(self, left, right, ctx):
        yield {"ad": left["k"], "shown": left["ts"], "clicked": right["at"]}


CLICK_THROUGH = Types.ROW_NAMED(["ad", "shown", "clicked"], [Types.STRING(), Types.LONG(), Types.LONG()])


def click_through(lake, later: bool = False, uid: str = "ctr"):
    """Impressions (left: k, ts) joined with the clicks (right: key, at) 0..10 s after them, per ad; the clicks
    with a watermark of their own, 500 ms out of order. ``later``: the impressions pass an operator first, so the
    join reads the clicks' source as a later operator (issue 61, item 2)."""
    left = Dataflow.from_source(FileSource(str(lake.events), "json", LEFT, max_files_per_batch=1), job_id="ctr",
                                watermark_strategy=BY_TS)
    if later:
        left = left.filter(NotLate(), uid="shown")
    right = Dataflow.from_source(FileSource(str(lake.rules), "json", RIGHT, max_files_per_batch=1), job_id="ctr",
                                 watermark_strategy=WatermarkStrategy.for_bounded_out_of_orderness(500)
                                 .with_timestamp_column("at"))
    return (left.key_by("k").interval_join(right.key_by("key")).between(0, 10_000)
            .process(Impression(), uid=uid, output_type=CLICK_THROUGH).sink_to("sinks/ctr"))


@pytest.mark.spark
@pytest.mark.parametrize("later", [False, True], ids=["first-operator", "later-operator"])
def test_an_interval_join_of_two_sources_keeps_each_ones_offsets_the_least_watermark_and_replays_a_crash(spark, lake,
                                                                                                         later):
    """Two file sources, a file of each a microbatch: the operator's watermark is the least of theirs (each by its
    own strategy's bound), late records
    of either are dropped and counted, each source's offsets are pinned; a crash after the sink write of the second
    microbatch replays it; a savepoint restored at parallelism 3 joins a click with an impression of before it.
    The same when the join is a later operator (the impressions pass a filter first) that reads the clicks' source
    itself: one plan fixes both sources' ranges, and the job's watermark is the least of both."""
    from state_store.catalog.job_store import JobStore
    from state_store.delta.points import StatePoint
    from state_store.ops.restore import restore_job
    from state_store.ops.savepoint import take_savepoint
    from state_store.run.runtime import FaultInjector, InjectedFault
    from tests.support.helpers import run as run_job

    def impressions(name, *rows):
        lake.write_events(name, [{"k": k, "ts": ts, "who": "i"} for k, ts in rows])

    def clicks(name, *rows):
        lake.write_rules(name, [{"key": k, "at": at, "who": "c"} for k, at in rows])

    impressions("000.json", ("a", 1000), ("b", 2000), ("a", 30_000))
    clicks("000.json", ("a", 5000), ("b", 1500))  # W = min(30 s - 1, 5 s - 500 ms - 1)
    impressions("001.json", ("b", 6000), ("a", 3000))  # a@3 s is late
    clicks("001.json", ("a", 35_000), ("b", 12_000), ("a", 4000))  # a@4 s is late; b@12 s is 10 s after b@2 s
    spec = click_through(lake, later)
    first = run_job(spark, spec, lake, max_microbatches=1)
    assert first.batches[0].records_in == (3 if later else 5)  # the first operator's records
    assert first.records_in == first.summary("ctr")["records_in"] == 5  # the job's: both sources
    with pytest.raises(InjectedFault):
        run_job(spark, spec, lake, faults=FaultInjector("after_sink_write", batch_id=1))
    second = run_job(spark, spec, lake)
    assert second.late_dropped == {"ctr": 2}
    store = JobStore(lake.settings.job_dir("ctr"))
    checkpoint = store.latest_checkpoint()
    assert store.read_plan(0).watermark == 4499 and store.read_plan(1).watermark == 29_999
    assert sorted(checkpoint.source_offsets) == (["ctr:second", "main"] if later else ["main", "second"])

    savepoint = take_savepoint(spark, lake.settings, "ctr", say=lambda line: None)
    if later:  # the clicks' offsets are kept by the join's uid: renamed, it would read them again
        with pytest.raises(RestoreError, match=r"operator 'joined' reads a source whose offsets .* keeps under its "
                                               r"old uid 'ctr'.* keep its uid 'ctr'"):
            restore_job(spark, lake.settings, click_through(lake, later, uid="joined"), StatePoint(savepoint),
                        uid_map={"ctr": "joined"}, say=lambda line: None)
    restore_job(spark, lake.settings, spec, StatePoint(savepoint), parallelism=3, say=lambda line: None)
    impressions("002.json", ("c", 40_000))
    clicks("002.json", ("a", 40_000), ("c", 41_000))  # a@30 s is still buffered: its cleanup is at 40 s
    run_job(spark, spec, lake)
    rows = spark.read.format("delta").load(str(lake.settings.in_warehouse(spec.sink, "sink")))
    assert sorted((r["ad"], r["shown"], r["clicked"], r["_microbatch"]) for r in rows.collect()) == [
        ("a", 1000, 5000, 0), ("a", 30_000, 35_000, 1), ("a", 30_000, 40_000, 2), ("b", 2000, 12_000, 1),
        ("b", 6000, 12_000, 1), ("c", 40_000, 41_000, 2)]
    # The Lakestate page draws the job's graph: both sources into the operator, the operator into the sink
    from state_store.provider.reader import job_overview
    from state_store.provider.views import job_section

    job = job_overview(lake.settings, "ctr", {"spec": spec.describe(), "entrypoint": "tests"})
    first_input = [(f"files {lake.events.resolve()} (json)", "shown"), ("operator shown", "ctr (input 1)")
                   ] if later else [
        (f"files {lake.events.resolve()} (json)", "ctr (input 1)")]
    assert job.edges == [*first_input, (f"files {lake.rules.resolve()} (json)", "ctr (input 2)"),
                         ("ctr", "sink sinks/ctr")]
    assert "Graph: where records flow" in job_section(job) and job.latest.parallelism == 3


# -- union -----------------------------------------------------------------------------------------------------
class Seen(KeyedProcessFunction):
    def process(self, key, records, ctx):
        yield {"k": key, "what": ",".join(f"{r['who']}@{r['ts']}" for r in records)}


def test_a_union_hands_one_keyed_function_the_records_of_both_streams_the_first_streams_first(tmp_path):
    left, _ = streams(tmp_path)
    (tmp_path / "more").mkdir()
    more = Dataflow.from_source(FileSource(str(tmp_path / "more"), "json", LEFT), job_id="j", watermark_strategy=BY_TS)
    spec = left.union(more).key_by("k").process(Seen(), uid="op", output_type=OUT_ROW).sink_to("sinks/j")
    assert (spec.inputs[1].role, spec.inputs[1].key, spec.inputs[1].watermark_strategy) == (InputRole.UNION, "k",
                                                                                             BY_TS)
    rows = [{"subtask": 0, "phase": PHASE_RECORD, "batch_id": 1, "side": SIDE_KEYED, "key": "k", "key_group": 1,
             "input": side, RECORD: {"k": "k", "ts": ts, "who": who}}
            for side, ts, who in [(2, 1, "more"), (1, 2, "left"), (2, 3, "more"), (1, 0, "left")]]
    result = run(spec.function, marker(0), *rows, output_type=OUT_ROW, record_type=LEFT.arrow_type())
    assert [r[OUT]["what"] for r in result if r["kind"] == "out"] == ["left@2,left@0,more@1,more@3"]
    with pytest.raises(ConfigError, match="a union is read by a keyed operator"):
        left.union(more).filter(NotLate())
    with pytest.raises(ConfigError, match="takes streams of the same declared columns"):
        left.union(streams(tmp_path)[1])
    with pytest.raises(ConfigError, match="give both a watermark_strategy, or neither"):
        left.union(Dataflow.from_source(FileSource(str(tmp_path / "more"), "json", LEFT), job_id="j"))
    with pytest.raises(ConfigError, match="is a union not yet read by an operator"):
        left.union(more).connect(streams(tmp_path)[1])
    processed = left.key_by("k").process(Seen(), uid="seen", output_type=OUT_ROW)
    with pytest.raises(ConfigError, match=r"put the processed stream first \(processed.union\(source\)\)"):
        more.union(processed)


class NotLate(FilterFunction):
    def filter(self, record):
        return True


@pytest.mark.spark
def test_a_union_of_two_sources_counts_both_and_pins_each_ones_offsets(spark, lake):
    from state_store.catalog.job_store import JobStore
    from tests.support.helpers import run as run_job

    def stream(folder):
        return Dataflow.from_source(FileSource(str(folder), "json", LEFT, max_files_per_batch=1), job_id="both",
                                    watermark_strategy=BY_TS)

    lake.write_events("000.json", [{"k": "a", "ts": 1, "who": "web"}, {"k": "b", "ts": 2, "who": "web"}])
    lake.write_rules("000.json", [{"k": "a", "ts": 3, "who": "app"}])
    lake.write_rules("001.json", [{"k": "b", "ts": 9, "who": "app"}])  # the first source has no second file
    spec = (stream(lake.events).union(stream(lake.rules)).key_by("k").process(Count(), uid="count", output_type=OUT_ROW)
            .filter(NotLate(), uid="after").sink_to("sinks/both"))  # a chain follows a two-input operator
    run_job(spark, spec, lake)
    rows = spark.read.format("delta").load(str(lake.settings.in_warehouse(spec.sink, "sink")))
    assert sorted((r["k"], r["what"], r["_microbatch"]) for r in rows.collect()) == [
        ("a", "2 by 3", 0), ("b", "1 by 2", 0), ("b", "2 by 9", 1)]
    store = JobStore(lake.settings.job_dir("both"))
    # W(0) = least of 2 and 3, less 1; W(1): the first source has no new record, so its 2 still holds it
    assert [store.read_plan(b).watermark for b in (0, 1)] == [1, 1]
    checkpoint = store.latest_checkpoint()
    assert sorted(checkpoint.source_offsets) == ["main", "second"] and checkpoint.of_operator("after").batch_id == 1


@pytest.mark.spark
@pytest.mark.parametrize("later", [False, True], ids=["first-operator", "later-operator"])
def test_a_union_of_three_sources_counts_all_pins_each_ones_offsets_replays_a_crash_and_restores_rescaled(
        spark, tmp_path, later):
    """Flink's UnionITCase of three streams (issue 61): ``a.union(b, c)`` hands one keyed function every stream's
    records, each source planned and pinned on its own (offsets "main", "second", "input3") and the watermark the
    least of the three; a crash at a fault point replays to the clean run's sink and state, and a savepoint
    restores into the job at another parallelism on the other backend, going on as the original does. The same
    when the first stream passes an operator first, so the union is a later operator reading two sources itself
    (their offsets "count:second", "count:input3")."""
    from state_store.catalog.job_store import JobStore
    from state_store.delta.points import StatePoint
    from state_store.ops.restore import restore_job
    from state_store.ops.savepoint import take_savepoint
    from state_store.run.runtime import FaultInjector, InjectedFault
    from tests.support.helpers import run as run_job
    from tests.support.helpers import sink_rows, state_at_latest_checkpoint
    from tests.support.lake import Lake

    inputs = {"web": [[("a", 1), ("b", 2)], [("a", 7)]], "app": [[("a", 3)], [("b", 9), ("c", 4)]],
              "kiosk": [[("c", 5)], [("c", 6)], [("a", 11)]]}

    def lake_of(name: str) -> Lake:
        lake = Lake(tmp_path / name)
        for source, files in inputs.items():
            (lake.inputs / source).mkdir(exist_ok=True)
            for i, rows in enumerate(files):
                (lake.inputs / source / f"{i:03}.json").write_text("".join(
                    f'{{"k": "{k}", "ts": {ts}, "who": "{source}"}}\n' for k, ts in rows))
        return lake

    def job(lake: Lake, job_id: str = "three", **overrides):
        web, app, kiosk = (Dataflow.from_source(FileSource(str(lake.inputs / n), "json", LEFT, max_files_per_batch=1),
                                                job_id=job_id, watermark_strategy=BY_TS) for n in inputs)
        if later:
            web = web.filter(NotLate(), uid="web-in")
        spec = (web.union(app, kiosk).key_by("k").process(Count(), uid="count", output_type=OUT_ROW)
                .sink_to(f"sinks/{job_id}"))
        return spec.with_overrides(**overrides)

    clean = lake_of("clean")
    spec = job(clean)
    web, app = (Dataflow.from_source(FileSource(str(clean.inputs / n), "json", LEFT), job_id="three",
                                     watermark_strategy=BY_TS) for n in ("web", "app"))
    with pytest.raises(ConfigError, match="takes each stream once"):
        web.union(app, app)
    with pytest.raises(ConfigError, match="takes at least one other stream"):
        web.union()
    union = spec.operator("count") if later else spec
    assert [(i.name, i.role, i.index) for i in union.inputs] == [
        ("main", InputRole.KEYED, 1), ("second", InputRole.UNION, 2), ("input3", InputRole.UNION, 3)]
    assert union.describe()["further_sources"] == [FileSource(str(clean.inputs / "kiosk"), "json", LEFT,
                                                              max_files_per_batch=1).describe()]
    run_job(spark, spec, clean)
    rows = sorted((r["_microbatch"], r["k"], r["what"]) for r in spark.read.format("delta").load(
        str(clean.settings.in_warehouse(spec.sink, "sink"))).collect())
    assert rows == [(0, "a", "2 by 3"), (0, "b", "1 by 2"), (0, "c", "1 by 5"),
                    (1, "a", "3 by 7"), (1, "b", "2 by 9"), (1, "c", "3 by 6"), (2, "a", "4 by 11")]
    store = JobStore(clean.settings.job_dir("three"))
    assert sorted(store.latest_checkpoint().source_offsets) == (
        ["count:input3", "count:second", "main"] if later else ["input3", "main", "second"])
    # The least of the three streams' largest event times, less 1 (web's 7 holds microbatch 2 back)
    assert [store.read_plan(b).watermark for b in (0, 1, 2)] == [1, 5, 6]

    crashed = lake_of("crashed")
    with pytest.raises(InjectedFault):
        run_job(spark, job(crashed), crashed, faults=FaultInjector("after_sink_write", batch_id=1))
    run_job(spark, job(crashed), crashed)
    assert sink_rows(spark, crashed, job(crashed)) == sink_rows(spark, clean, spec)
    assert state_at_latest_checkpoint(spark, crashed, job(crashed)) == state_at_latest_checkpoint(spark, clean, spec)

    # A savepoint after microbatch 0 restored at parallelism 3 on the hashmap backend goes on as the clean run.
    early = lake_of("early")
    run_job(spark, job(early), early, max_microbatches=1)
    saved = take_savepoint(spark, early.settings, "three", say=lambda line: None)
    restore_job(spark, early.settings, job(early, "copy"), StatePoint(saved), parallelism=3, backend="hashmap",
                say=lambda line: None)
    run_job(spark, job(early, "copy"), early)
    copied = sorted((r["_microbatch"], r["k"], r["what"]) for r in spark.read.format("delta").load(
        str(early.settings.in_warehouse("sinks/copy", "sink"))).collect())
    assert copied == [r for r in rows if r[0] >= 1]
    assert JobStore(early.settings.job_dir("copy")).latest_checkpoint().parallelism == 3


class BothSides(KeyedCoProcessFunction):
    """Each input's records, with what the key's state saw last (one state for both inputs)."""

    def open(self, ctx):
        self.seen = ctx.get_state(ValueStateDescriptor("seen", Types.STRING()))

    def process_element1(self, value, ctx):
        yield {"k": ctx.get_current_key(), "what": f"all {value['what']} after {self.seen.value()}"}
        self.seen.update("all")

    def process_element2(self, value, ctx):
        yield {"k": ctx.get_current_key(), "what": f"a {value['what']} after {self.seen.value()}"}
        self.seen.update("a")


def diamond(folder):
    """A stream's counts, and its counts of key "a" alone (a filter), joined again by a keyed co-process."""
    counted = (Dataflow.from_source(FileSource(str(folder), "json", LEFT, max_files_per_batch=1), job_id="diamond")
               .key_by("k").process(Count(), uid="count", output_type=OUT_ROW))
    only_a = counted.filter(OnlyA(), uid="only-a")
    return counted.connect(only_a).key_by("k", "k").process(BothSides(), uid="both", output_type=OUT_ROW)


def test_a_two_input_operator_after_others_joins_two_branches_of_one_stream(tmp_path):
    (tmp_path / "in").mkdir()
    spec = diamond(tmp_path / "in").sink_to("sinks/d")
    assert spec.uids == ["count", "only-a", "both"] and spec.sinks == {"both": "sinks/d"}
    assert (spec.operator("both").source.upstream, spec.operator("both").inputs[1].upstream) == ("count",
                                                                                                    "only-a")
    assert spec.inputs_of("both") == ["count", "only-a"]
    # a union of two branches, keyed and processed
    counted = (Dataflow.from_source(FileSource(str(tmp_path / "in"), "json", LEFT), job_id="u")
               .key_by("k").process(Count(), uid="count", output_type=OUT_ROW))
    union = (counted.filter(OnlyA(), uid="a").union(counted.filter(NotLate(), uid="all")).key_by("k")
             .process(Seen(), uid="seen", output_type=OUT_ROW).sink_to("sinks/u"))
    assert union.uids == ["count", "a", "all", "seen"] and union.operator("seen").inputs[1].role is InputRole.UNION
    assert union.operator("seen").inputs[1].upstream == "all"


@pytest.mark.spark
def test_a_two_input_operator_after_others_runs_in_spark_with_one_keyed_state(spark, lake):
    from tests.support.helpers import run as run_job

    lake.write_events("000.json", [{"k": "a", "ts": 1, "who": "x"}, {"k": "b", "ts": 2, "who": "x"}])
    lake.write_events("001.json", [{"k": "a", "ts": 5, "who": "x"}])
    spec = diamond(lake.events).sink_to("sinks/diamond")
    run_job(spark, spec, lake)
    rows = spark.read.format("delta").load(str(lake.settings.in_warehouse(spec.sink, "sink")))
    assert sorted((r["_microbatch"], r["k"], r["what"]) for r in rows.collect()) == [
        (0, "a", "a 1 by 1 after all"), (0, "a", "all 1 by 1 after None"), (0, "b", "all 1 by 2 after None"),
        (1, "a", "a 2 by 5 after all"), (1, "a", "all 2 by 5 after a")]


@pytest.mark.spark
def test_the_demos_click_through_join_gives_what_pandas_gives(spark, lake):
    from demo.click_through import dataflow, expected, write
    from state_store.catalog.job_store import JobStore
    from tests.support.helpers import run as run_job

    impressions, clicks = lake.inputs / "impressions", lake.inputs / "ad-clicks"
    write(impressions, clicks, files=3, impressions=300, users=20, ads=4)
    spec = dataflow(impressions, clicks)
    run_job(spark, spec, lake)
    store = JobStore(lake.settings.job_dir(spec.job_id))
    watermarks = [store.read_plan(m).watermark for m in range(3)]
    rows = spark.read.format("delta").load(str(lake.settings.in_warehouse(spec.sink, "sink"))).drop("_microbatch")
    found = sorted(tuple(r) for r in rows.collect())
    assert found == expected(impressions, clicks, watermarks) and len(found) > 20


class Grouped(CoGroupFunction):
    def co_group(self, lefts, rights):
        key = (lefts or [{"k": None}])[0]["k"] or rights[0]["key"]
        yield {"k": key,
               "what": f"F:{','.join(str(r['ts']) for r in lefts)} S:{','.join(str(r['at']) for r in rights)}"}


def window_joined(tmp_path, verb, function):
    from state_store import TumblingEventTimeWindows

    left, right = streams(tmp_path)
    return (getattr(left, verb)(right).where("k").equal_to("key").window(TumblingEventTimeWindows.of(3))
            .apply(function, uid="op", output_type=OUT_ROW).sink_to("sinks/j"))


# Flink's CoGroupJoinITCase: ("a", 0..2), ("b", 3..5), ("a", 6..8) against ("a", 0), ("a", 1), ("b", 3), ("c", 6..8)
FIRST = [("a", t) for t in (0, 1, 2)] + [("b", t) for t in (3, 4, 5)] + [("a", t) for t in (6, 7, 8)]
SECOND = [("a", 0), ("a", 1), ("b", 3)] + [("c", t) for t in (6, 7, 8)]


def run_pairs(spec, microbatches):
    """``microbatches``: (watermark, first's (key, time) records, second's), through one run."""
    rows, plan = [], []
    for m, (watermark, first, second) in enumerate(microbatches, start=1):
        plan.append((m, m * 1_000, watermark))
        rows += [{"subtask": 0, "phase": PHASE_RECORD, "batch_id": m, "side": SIDE_KEYED, "key": k, "key_group": 1,
                  "input": 1, RECORD: {"k": k, "ts": t, "who": "first"}} for k, t in first]
        rows += [{"subtask": 0, "phase": PHASE_RECORD, "batch_id": m, "side": SIDE_KEYED, "key": k, "key_group": 1,
                  "input": 2, RECORD2: {"key": k, "at": t, "who": "second"}} for k, t in second]
    result = run(spec.function, marker(0), *rows, output_type=OUT_ROW, microbatches=plan,
                 record_type=LEFT.arrow_type(), record2_type=RIGHT.arrow_type())
    return [(r[OUT]["k"], r[OUT]["what"]) for r in result if r["kind"] == "out"]


def test_a_window_join_pairs_each_keys_records_of_one_window_as_flinks(tmp_path):
    spec = window_joined(tmp_path, "join", Matched())
    once = run_pairs(spec, [(100, FIRST, SECOND)])
    assert sorted(once) == [("a", "0-0"), ("a", "0-1"), ("a", "1-0"), ("a", "1-1"), ("a", "2-0"), ("a", "2-1"),
                            ("b", "3-3"), ("b", "4-3"), ("b", "5-3")]
    # the same records in two microbatches, the first window firing at the first one's watermark
    assert sorted(run_pairs(spec, [(2, FIRST[:3], SECOND[:2]), (100, FIRST[3:], SECOND[2:])])) == sorted(once)


def test_a_co_group_gives_every_keys_window_with_the_records_of_each_side(tmp_path):
    out = run_pairs(window_joined(tmp_path, "co_group", Grouped()), [(100, FIRST, SECOND)])
    assert sorted(out) == [("a", "F:0,1,2 S:0,1"), ("a", "F:6,7,8 S:"), ("b", "F:3,4,5 S:3"), ("c", "F: S:6,7,8")]


class OnlyA(FilterFunction):
    def filter(self, record):
        return record["k"] == "a"


@pytest.mark.spark
def test_a_window_join_in_spark_fans_out_to_two_sinks(spark, lake):
    """CoGroupJoinITCase's records in two microbatches of two sources, window-joined by Spark, then a graph: the
    pairs written to one sink and read further by a filter into another (through the operator that forwards
    them to their sink)."""
    from state_store import TumblingEventTimeWindows
    from tests.support.helpers import run as run_job

    for m, (first, second) in enumerate([(FIRST[:3], SECOND[:2]), (FIRST[3:], SECOND[2:])]):
        lake.write_events(f"{m:03d}.json", [{"k": k, "ts": t, "who": "first"} for k, t in first])
        lake.write_rules(f"{m:03d}.json", [{"key": k, "at": t, "who": "second"} for k, t in second])
    left, right = (Dataflow.from_source(FileSource(str(folder), "json", schema, max_files_per_batch=1),
                                        job_id="wj", watermark_strategy=strategy)
                   for folder, schema, strategy in ((lake.events, LEFT, BY_TS), (lake.rules, RIGHT, BY_AT)))
    pairs = (left.join(right).where("k").equal_to("key").window(TumblingEventTimeWindows.of(3))
             .apply(Matched(), uid="pairs", output_type=OUT_ROW))
    spec = Dataflow.graph(pairs.sink_to("sinks/pairs"), pairs.filter(OnlyA(), uid="only-a").sink_to("sinks/a"))
    assert spec.uids == ["pairs", "pairs-to-sink", "only-a"]
    run_job(spark, spec, lake)

    def rows(sink):
        table = spark.read.format("delta").load(str(lake.settings.in_warehouse(sink, "sink")))
        return sorted((r["k"], r["what"], r["_microbatch"]) for r in table.collect())

    # W(0) = 0 (the least of 2 and 1, less 1) fires nothing; W(1) = 7 fires [0, 3) and [3, 6); [6, 9) stays open
    pairs_found = rows("sinks/pairs")
    assert {m for _, _, m in pairs_found} == {1}
    assert [(k, w) for k, w, _ in pairs_found] == [("a", "0-0"), ("a", "0-1"), ("a", "1-0"), ("a", "1-1"),
                                                  ("a", "2-0"), ("a", "2-1"), ("b", "3-3"), ("b", "4-3"),
                                                  ("b", "5-3")]
    assert rows("sinks/a") == [r for r in pairs_found if r[0] == "a"]


def test_a_window_join_is_checked_where_it_is_defined(tmp_path):
    from state_store import TumblingEventTimeWindows

    left, right = streams(tmp_path)
    with pytest.raises(ConfigError, match="needs both keys"):
        left.join(right).where("k").window(TumblingEventTimeWindows.of(3)).apply(Matched(), uid="op",
                                                                                  output_type=OUT_ROW)
    with pytest.raises(ConfigError, match="needs its windows first"):
        left.join(right).where("k").equal_to("key").apply(Matched(), uid="op", output_type=OUT_ROW)
    with pytest.raises(ConfigError, match="apply takes a state_store.CoGroupFunction"):
        left.co_group(right).where("k").equal_to("key").window(TumblingEventTimeWindows.of(3)).apply(
            Matched(), uid="op", output_type=OUT_ROW)
    untimed = Dataflow.from_source(FileSource(str(tmp_path / "right"), "json", RIGHT), job_id="j")
    with pytest.raises(ConfigError, match="needs both streams' event time"):
        left.join(untimed).where("k").equal_to("key").window(TumblingEventTimeWindows.of(3))


# -- non-keyed connected streams ------------------------------------------------------------------------------------
class Tagged(CoMapFunction):
    """Flink's CoStreamMapTest: each input's records mapped by its own method; a count per input in operator state
    (list state, as a CheckpointedFunction's)."""

    def initialize_state(self, ctx):
        self.seen = ctx.get_operator_state_store().get_list_state(ListStateDescriptor("seen", Types.LONG()))

    def map1(self, record):
        self._count(0)
        return {"k": record["k"], "what": f"first {record['ts']}"}

    def map2(self, record):
        self._count(1)
        return {"k": record["key"], "what": f"second {record['at']}"}

    def _count(self, side):
        counts = list(self.seen.get()) or [0, 0]
        counts[side] += 1
        self.seen.update(counts)


class Both(CoFlatMapFunction):
    def flat_map1(self, record):
        yield {"k": record["k"], "what": "1"}
        yield {"k": record["k"], "what": "1 again"}

    def flat_map2(self, record):
        return None


def test_co_map_and_co_flat_map_take_each_inputs_records_with_operator_state(tmp_path):
    left, right = streams(tmp_path)
    spec = left.connect(right).map(Tagged(), output_type=OUT_ROW, uid="tagged").sink_to("sinks/j")
    assert (spec.inputs[1].key, spec.function.two_inputs) == ("__share__", True)
    rows = [{"subtask": 0, "phase": PHASE_RECORD, "batch_id": 1, "side": SIDE_KEYED, "key": "0", "key_group": 0,
             "input": side, (RECORD if side == 1 else RECORD2): record}
            for side, record in [(2, {"key": "b", "at": 5, "who": "r"}), (1, {"k": "a", "ts": 7, "who": "l"})]]
    result = run(spec.function, marker(0), *rows, output_type=OUT_ROW, key_type=Types.INT(),
                 record_type=LEFT.arrow_type(), record2_type=RIGHT.arrow_type())
    assert [r[OUT]["what"] for r in result if r["kind"] == "out"] == ["first 7", "second 5"]
    # the harness runs every function as uid "op"
    assert [(r["state_name"], r["value"]) for r in result if r["kind"] == "o"] == [("op.seen", "[1,1]")]
    flat = left.connect(right).flat_map(Both(), output_type=OUT_ROW).sink_to("sinks/j")
    result = run(flat.function, marker(0), *rows, output_type=OUT_ROW, key_type=Types.INT(),
                 record_type=LEFT.arrow_type(), record2_type=RIGHT.arrow_type())
    assert [r[OUT]["what"] for r in result if r["kind"] == "out"] == ["1", "1 again"]
    with pytest.raises(ConfigError, match="takes a state_store.CoFlatMapFunction"):
        left.connect(right).flat_map(Tagged(), output_type=OUT_ROW)
    with pytest.raises(ConfigError, match="a keyed two-input operator is a KeyedCoProcessFunction"):
        left.connect(right).key_by("k", "key").map(Tagged(), output_type=OUT_ROW)


NEGATIVE = OutputTag("negative", RIGHT)


class WatermarkAndTime(CoProcessFunction):
    """After Flink's ``CoProcessOperatorTest``: each record with the operator's watermark and processing time; the
    second input's records at a negative time go to a side output instead."""

    def process_element1(self, value, ctx):
        yield {"k": value["k"], "what": f"1:{value['ts']} WM:{ctx.current_watermark()} TS:{ctx.timestamp()}"}

    def process_element2(self, value, ctx):
        if value["at"] < 0:
            ctx.output(NEGATIVE, value)
            return None
        return [{"k": value["key"], "what": f"2:{value['at']} WM:{ctx.current_watermark()} TS:{ctx.timestamp()}"}]


class TaggedOrNegative(CoProcessFunction):
    """``Tagged`` as a ``CoProcessFunction``, the second input's records at a negative time to a side output."""

    initialize_state, _count = Tagged.initialize_state, Tagged._count

    def process_element1(self, value, ctx):
        return [Tagged.map1(self, value)]

    def process_element2(self, value, ctx):
        if value["at"] < 0:
            ctx.output(NEGATIVE, value)
            return None
        return [Tagged.map2(self, value)]


class WantsATimer(CoProcessFunction):
    def process_element1(self, value, ctx):
        ctx.timer_service()

    def process_element2(self, value, ctx):
        return None


def test_a_co_process_function_without_keys_sees_the_watermark_time_and_side_outputs_but_no_timers(tmp_path):
    left, right = streams(tmp_path)
    spec = (left.connect(right).process(WatermarkAndTime(), uid="co", output_type=OUT_ROW, side_outputs=[NEGATIVE])
            .sink_to("sinks/j"))
    assert (spec.inputs[1].key, spec.function.two_inputs, spec.side_outputs) == ("__share__", True, [NEGATIVE])
    rows = [{"subtask": 0, "phase": PHASE_RECORD, "batch_id": 1, "side": SIDE_KEYED, "key": "0", "key_group": 0,
             "input": side, (RECORD if side == 1 else RECORD2): record}
            for side, record in [(2, {"key": "b", "at": 5, "who": "r"}), (1, {"k": "a", "ts": 7, "who": "l"}),
                                 (2, {"key": "c", "at": -1, "who": "r"})]]
    kinds = dict(output_type=OUT_ROW, key_type=Types.INT(), record_type=LEFT.arrow_type(),
                 record2_type=RIGHT.arrow_type(), microbatches=[(1, 1_000, 4)], start_watermark=3)
    result = run(spec.function, marker(0), *rows, side_outputs=[NEGATIVE], **kinds)
    assert [r[OUT]["what"] for r in result if r["kind"] == "out"] == ["1:7 WM:3 TS:1000", "2:5 WM:3 TS:1000"]
    assert [r[OUT]["key"] for r in result if r["kind"] == NEGATIVE.table] == ["c"]
    timer = left.connect(right).process(WantsATimer(), uid="t", output_type=OUT_ROW).sink_to("sinks/j")
    with pytest.raises(Exception, match="has no timers"):
        run(timer.function, marker(0), *rows, **kinds)


@pytest.mark.spark
def test_a_co_process_function_reads_two_sources_without_keys_with_operator_state_and_a_side_output(spark, lake):
    """A ``CoProcessFunction`` doing ``Tagged``'s map (operator state) with a side output, run by Spark (the
    co-map and co-flat-map take the same path: their unit test above)."""
    from state_store.catalog.job_store import JobStore
    from tests.support.helpers import run as run_job

    lake.write_events("000.json", [{"k": "a", "ts": 1, "who": "web"}, {"k": "c", "ts": 3, "who": "web"}])
    lake.write_rules("000.json", [{"key": "b", "at": 2, "who": "app"}, {"key": "z", "at": -4, "who": "app"}])
    left = Dataflow.from_source(FileSource(str(lake.events), "json", LEFT), job_id="co")
    right = Dataflow.from_source(FileSource(str(lake.rules), "json", RIGHT), job_id="co")
    spec = (left.connect(right).process(TaggedOrNegative(), output_type=OUT_ROW, uid="tagged",
                                        side_outputs=[NEGATIVE]).sink_to("sinks/co"))
    run_job(spark, spec, lake)
    rows = spark.read.format("delta").load(str(lake.settings.in_warehouse(spec.sink, "sink")))
    assert sorted((r["k"], r["what"]) for r in rows.collect()) == [("a", "first 1"), ("b", "second 2"),
                                                                  ("c", "first 3")]
    negative = spark.read.format("delta").load(str(lake.settings.sink(spec.side_output_sink(NEGATIVE))))
    assert [(r["key"], r["at"]) for r in negative.collect()] == [("z", -4)]
    checkpoint = JobStore(lake.settings.job_dir("co")).latest_checkpoint()
    assert sorted(checkpoint.source_offsets) == ["main", "second"] and checkpoint.entries["tagged.seen"] > 0
