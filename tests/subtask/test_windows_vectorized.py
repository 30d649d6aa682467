"""Windows on the vectorised path (``ColumnAggregate`` in a tumbling or sliding event-time window), against the
per-record window operator on the same elements: the same rows in the same order, the same late counts and the
same stored entries (byte for byte: either path restores the other's state), in one run and across runs. No Spark
(``run_partition``, as ``tests/api/test_windows.py``)."""
from __future__ import annotations

import random

import pytest

from state_store import (
    AggregateFunction,
    ColumnAggregate,
    ConfigError,
    CountTrigger,
    EventTimeSessionWindows,
    OutputTag,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    Types,
)
from state_store.vectorized import VectorizedWindowAggregate
from tests.support.windows import CLICK, Harness, windowed

EVERY = dict(n="count(*)", nv="count(v)", total="sum(v)", lo="min(v)", hi="max(v)", mean="avg(v)", last="last(v)")


def pair(tmp_path, assigner, **aggregates):
    """A harness of the vectorised path and one of the per-record path, on the same window and aggregates."""
    def build(vectorized):
        return lambda s: s.aggregate(ColumnAggregate(**(aggregates or EVERY)), uid="op", vectorized=vectorized)

    vectorized = windowed(tmp_path, assigner, build=build(True))
    assert isinstance(vectorized.function, VectorizedWindowAggregate)
    return Harness(vectorized), Harness(windowed(tmp_path, assigner, build=build(False)))


def feed_both(vectorized: Harness, per_record: Harness, *microbatches) -> list:
    out = vectorized.feed(*microbatches)
    assert out == per_record.feed(*microbatches)
    assert vectorized.state == per_record.state
    assert vectorized.late_dropped == per_record.late_dropped
    return out


def test_a_tumbling_window_gives_every_aggregate_of_the_per_record_path_and_its_stored_entries(tmp_path):
    vectorized, per_record = pair(tmp_path, TumblingEventTimeWindows.of(3000))
    out = feed_both(vectorized, per_record, (2999, [("a", 1, 0), ("a", 2, 1000), ("b", 5, 2500), ("a", 3, 3500)]))
    assert out == [(1, {"k": "a", "window_start": 0, "window_end": 3000, "n": 2, "nv": 2, "total": 3, "lo": 1,
                        "hi": 2, "mean": 1.5, "last": 2}),
                   (1, {"k": "b", "window_start": 0, "window_end": 3000, "n": 1, "nv": 1, "total": 5, "lo": 5,
                        "hi": 5, "mean": 5.0, "last": 5})]
    assert vectorized.open_windows() == {"3000:6000"}  # a's second window, with its timer at 5999
    assert ("op.__timers_event__", "a", "3000:6000", "5999") in vectorized.state
    # late (0..2999 is past W=2999: dropped and counted), into the open window, a negative time; a window that
    # opens and fires in the same microbatch writes nothing
    out = feed_both(vectorized, per_record, (5999, [("a", 9, 100), ("a", None, 4000), ("c", 7, -10)]))
    assert vectorized.late_dropped == 2
    assert out == [(2, {"k": "a", "window_start": 3000, "window_end": 6000, "n": 2, "nv": 1, "total": 3, "lo": 3,
                        "hi": 3, "mean": 3.0, "last": None})]
    assert vectorized.state == {}


@pytest.mark.parametrize("assigner", [TumblingEventTimeWindows.of(1000, 300), SlidingEventTimeWindows.of(3000, 1000),
                                      SlidingEventTimeWindows.of(2500, 1000, -400)],
                         ids=["tumbling-offset", "sliding", "sliding-uneven"])
def test_random_elements_give_what_the_per_record_path_gives_in_any_cut_of_microbatches(tmp_path, assigner):
    rng = random.Random(39)
    microbatches, watermark = [], -3000
    for _ in range(6):
        elements = [(rng.choice("abcde"), rng.choice([None, *range(-5, 20)]), watermark + rng.randint(-2500, 4000))
                    for _ in range(rng.randint(0, 25))]
        watermark += rng.randint(0, 2500)
        microbatches.append((watermark, elements))
    vectorized, per_record = pair(tmp_path, assigner)
    together = [row for m in microbatches[:3] for row in feed_both(vectorized, per_record, m)]
    together += feed_both(vectorized, per_record, *microbatches[3:])
    once, _ = pair(tmp_path, assigner)
    assert once.feed(*microbatches) == together  # N runs of one microbatch == one run of N
    assert once.state == vectorized.state


@pytest.mark.parametrize("size, slide, offset", [(10, 10, 0), (10, 10, 3), (10, 5, 0), (10, 3, 1), (7, 2, -1)])
def test_window_assignment_has_one_rule_in_its_scalar_and_columnar_forms(size, slide, offset):
    from state_store.windows.assigners import window_starts

    stamps = [-23, -10, -1, 0, 1, 9, 10, 11, 99, 1_000_003]
    assigner = (TumblingEventTimeWindows.of(size, offset) if slide == size else
                SlidingEventTimeWindows.of(size, slide, offset))
    at, starts = window_starts(stamps, size, slide, offset)
    assert list(zip(at.tolist(), starts.tolist())) == [
        (i, w.start) for i, ts in enumerate(stamps) for w in assigner.assign_windows({}, ts, 0)]


def test_either_path_restores_the_others_windows(tmp_path):
    elements = [("a", 1, 0), ("a", 2, 1500), ("b", 3, 2000)]
    vectorized, per_record = pair(tmp_path, SlidingEventTimeWindows.of(2000, 1000))
    vectorized.feed((999, elements))
    per_record.feed((999, elements))
    vectorized.state, per_record.state = dict(per_record.state), dict(vectorized.state)  # swap the stored windows
    later = [(5000, [("a", 4, 2100)])]
    assert vectorized.feed(*later) == per_record.feed(*later)
    assert vectorized.state == per_record.state == {}


def test_what_cannot_run_on_the_vectorised_path_is_refused_or_runs_per_record(tmp_path):
    tumbling = TumblingEventTimeWindows.of(1000)
    with pytest.raises(ConfigError, match="sends late data to a side output; leave vectorized out"):
        windowed(tmp_path, tumbling, build=lambda s: s.side_output_late_data(OutputTag("late", CLICK)).aggregate(
            ColumnAggregate(n="count(*)"), uid="op", vectorized=True))
    for build in (lambda s: s.allowed_lateness(10).aggregate(ColumnAggregate(n="count(*)"), uid="op"),
                  lambda s: s.trigger(CountTrigger.of(2)).aggregate(ColumnAggregate(n="count(*)"), uid="op")):
        assert not isinstance(windowed(tmp_path, tumbling, build=build).function, VectorizedWindowAggregate)
    session = windowed(tmp_path, EventTimeSessionWindows.with_gap(10),
                       build=lambda s: s.aggregate(ColumnAggregate(n="count(*)"), uid="op"))
    assert not isinstance(session.function, VectorizedWindowAggregate)

    class Count(AggregateFunction):
        pass

    with pytest.raises(ConfigError, match="vectorized=True\\) takes a ColumnAggregate"):
        windowed(tmp_path, tumbling, build=lambda s: s.aggregate(Count(), uid="op", vectorized=True))
    with pytest.raises(ConfigError, match="needs accumulator_type= .* and output_type="):
        windowed(tmp_path, tumbling, build=lambda s: s.aggregate(Count(), uid="op"))


@pytest.mark.parametrize("aggregates, message", [
    ({}, "needs at least one aggregate"),
    ({"x": "median(v)"}, "op one of count, sum, min, max, avg, last"),
    ({"x": "sum(*)"}, "only count takes"),
    ({"x": "sum(k)"}, "'k' is STRING, not a number"),
    ({"x": "max(w)"}, "the stream has no column 'w'"),
    ({"k": "count(*)"}, "already has a column 'k'"),
])
def test_a_wrong_column_aggregate_is_refused_naming_it(tmp_path, aggregates, message):
    with pytest.raises(ConfigError, match=message):
        windowed(tmp_path, TumblingEventTimeWindows.of(1000),
                 build=lambda s: s.aggregate(ColumnAggregate(**aggregates), uid="op"))


def test_output_type_picks_columns_of_the_window_row(tmp_path):
    picked = Types.ROW_NAMED(["window_start", "k", "n"], [Types.LONG(), Types.STRING(), Types.LONG()])
    vectorized, per_record = (Harness(windowed(tmp_path, TumblingEventTimeWindows.of(1000), build=lambda s, v=v: s
                                               .aggregate(ColumnAggregate(n="count(*)"), uid="op", output_type=picked,
                                                          vectorized=v)))
                              for v in (True, False))
    assert feed_both(vectorized, per_record, (999, [("a", 1, 5), ("a", 2, 6)])) == [
        (1, {"window_start": 0, "k": "a", "n": 2})]
    with pytest.raises(ConfigError, match="output_type's columns \\['n'\\] are not among"):
        windowed(tmp_path, TumblingEventTimeWindows.of(1000), build=lambda s: s.aggregate(
            ColumnAggregate(n="count(*)"), uid="op", output_type=Types.ROW_NAMED(["n"], [Types.DOUBLE()])))


def columns_job(events: str, vectorized: bool):
    """Clicks per key per 10 s as a ColumnAggregate (tests/api/test_windows.py's clicks), on either path."""
    from state_store import Dataflow, FileSource
    from tests.support.windows import STRATEGY, TIMED, S

    return (Dataflow.from_source(FileSource(events, "json", TIMED, max_files_per_batch=1), job_id="columns",
                                 watermark_strategy=STRATEGY)
            .key_by("k").window(TumblingEventTimeWindows.of(10 * S))
            .aggregate(ColumnAggregate(clicks="count(*)", last="last(seq)", first="min(ts)"), uid="per-10s",
                       vectorized=vectorized)
            .sink_to("sinks/columns"))


@pytest.mark.e2e
@pytest.mark.beside_spark  # scripts/test.sh: on the spark tier's side
def test_a_killed_vectorised_window_replays_and_its_savepoint_restores_rescaled_onto_the_per_record_path(
        spark, lake, tmp_path):
    """``kill -9`` of the vectorised job's spark-submit once its state is committed (its checkpoint not
    written); the rerun replays to every window fired once. A savepoint (its open window read by the State
    Processor) restored at parallelism 3 on the other backend as the same job run per record; a fourth file
    fires the window the savepoint held: once, with the clicks of both sides of the restore."""
    from state_store.delta.points import StatePoint
    from state_store.ops.restore import restore_job
    from state_store.ops.savepoint import take_savepoint
    from state_store.ops.state_processor import SavepointReader
    from tests.support.helpers import run as run_job
    from tests.support.kill_harness import kill_job_of
    from tests.support.windows import S, write_window_clicks

    write_window_clicks(lake)  # a: 0, 3 s, 12 s, then 8 s (late), 1 s (late); b: 4 s, 25 s; c: 100 s
    kill_job_of(lake, tmp_path, "columns",
                "from tests.subtask.test_windows_vectorized import columns_job\n\n\ndef job():\n"
                f"    return columns_job({str(lake.events)!r}, True)\n")
    vectorized = columns_job(str(lake.events), True)
    assert isinstance(vectorized.function, VectorizedWindowAggregate)
    run_job(spark, vectorized, lake, lease_wait_s=20)
    savepoint = take_savepoint(spark, lake.settings, "columns", say=lambda line: None)
    reader = SavepointReader(spark, StatePoint(savepoint))
    assert [(r["key"], r["namespace"]) for r in reader.keyed_state("window-contents", uid="per-10s").collect()] == [
        ("c", "100000:110000")]
    per_record = columns_job(str(lake.events), False)
    restore_job(spark, lake.settings, per_record, StatePoint(savepoint), parallelism=3, backend="hashmap",
                say=lambda line: None)
    lake.write_events("003.json", [{"k": "c", "ts": 105 * S, "seq": 1}, {"k": "d", "ts": 200 * S, "seq": 0}])
    run_job(spark, per_record, lake)
    rows = spark.read.format("delta").load(str(lake.settings.in_warehouse(per_record.sink, "sink")))
    assert sorted(tuple(r)[:-1] for r in rows.collect()) == [
        ("a", 0, 10 * S, 2, 0, 0), ("a", 10 * S, 20 * S, 1, 0, 12 * S), ("b", 0, 10 * S, 1, 0, 4 * S),
        ("b", 20 * S, 30 * S, 1, 0, 25 * S), ("c", 100 * S, 110 * S, 2, 1, 100 * S)]
