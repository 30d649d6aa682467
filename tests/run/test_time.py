"""Time end to end (docs/writing/time.md), on real Spark and Delta: Flink's CountWithTimeoutFunction, sessions closed by
the watermark with late events to a side output, a processing-time heartbeat alert that fires without input,
and timers through restores, rescales, the State Processor and compaction."""
from __future__ import annotations

import json

import pytest

from state_store import FileSource, KeyedBroadcastProcessFunction, OutputTag, Types, ValueStateDescriptor
from state_store.catalog.job_store import JobStore
from state_store.delta.points import StatePoint
from state_store.errors import ConfigError
from state_store.ops.compaction import compact_job
from state_store.ops.restore import restore_job
from state_store.ops.savepoint import take_savepoint
from state_store.ops.state_processor import SavepointReader
from tests.support.helpers import crashed_and_moved, keyed_values, run, sink_rows, state_at_latest_checkpoint
from tests.support.jobs import COUNT_OUTPUT, RULE, count_job, events
from tests.support.lake import Lake
from tests.support.time_jobs import (
    MINUTE,
    S,
    count_with_timeout_job,
    heartbeat_job,
    session_input,
    sessions,
    sessions_job,
    side_rows,
    timed,
)

T0 = 1_700_000_000_000
QUIET = {"say": lambda line: None}


SESSIONS = [("a", 0, 80 * S, 3), ("b", 5 * S, 65 * S, 1), ("c", 100 * S, 160 * S, 1)]


def test_count_with_timeout_emits_a_keys_count_once_it_has_been_quiet_for_a_minute_of_event_time(spark, lake):
    lake.write_events("000.json", [timed("a", 0), timed("b", 0, 1), timed("a", 30 * S, 2)])
    lake.write_events("001.json", [timed("b", 80 * S)])  # W = 80 s - 1 ms: the stale 60 s timers of a and b fire
    lake.write_events("002.json", [timed("c", 100 * S)])  # W = 100 s - 1 ms: a's 90 s timer fires: a emits
    spec = count_with_timeout_job(lake)
    result = run(spark, spec, lake)
    rows = sorted((r["k"], r["count"], r["_microbatch"]) for r in
                  spark.read.format("delta").load(str(lake.settings.in_warehouse(spec.sink, "sink"))).collect())
    # The 60 s timers fire after a's and b's last modification moved on: they emit nothing, as in Flink.
    assert rows == [("a", 2, 2)]
    assert [b.timers_fired for b in result.batches] == [0, 2, 1]


def test_sessions_close_when_the_watermark_passes_and_late_events_go_to_the_side_output(spark, tmp_path):
    """One run of three microbatches and three runs of one give the same sink, side output and state; in the
    second of the three runs, b has no record but its stored timer is due: the run brings b to its subtask."""
    together, apart = Lake(tmp_path / "together"), Lake(tmp_path / "apart")
    for lake in (together, apart):
        session_input(lake)
    spec_t, spec_a = sessions_job(together), sessions_job(apart)
    run(spark, spec_t, together)
    runs = [run(spark, spec_a, apart, max_microbatches=1) for _ in range(3)]
    assert sessions(spark, together, spec_t) == SESSIONS
    assert side_rows(spark, together, spec_t) == [json.dumps(
        {"_microbatch": 2, "k": "b", "ts": 30 * S, "watermark": 100 * S - 1}, sort_keys=True)]
    assert sink_rows(spark, together, spec_t) == sink_rows(spark, apart, spec_a)
    assert side_rows(spark, together, spec_t) == side_rows(spark, apart, spec_a)
    assert state_at_latest_checkpoint(spark, together, spec_t) == state_at_latest_checkpoint(spark, apart, spec_a)
    second = runs[1].batches[0]
    assert (second.timers_in, second.timers_fired) == (2, 2)  # a's and b's stored timers; b has no record
    reader = SavepointReader.for_checkpoint(spark, spec_a.job_id, settings=apart.settings)
    assert [tuple(r) for r in reader.timers().collect()] == [(2, "c", "", 260 * S, "EVENT_TIME")]


def test_heartbeat_alert_fires_in_a_timer_only_microbatch_when_input_stops(spark, lake):
    spec = heartbeat_job(lake)
    lake.write_events("000.json", [timed("a", 0), timed("b", 0, 1)])
    run(spark, spec, lake, clock=lambda: T0)
    lake.write_events("001.json", [timed("a", 0, 2)])
    run(spark, spec, lake, clock=lambda: T0 + 4 * MINUTE)  # a's timer moves to T0 + 14 min
    store = JobStore(lake.settings.job_dir(spec.job_id))
    offsets = store.latest_checkpoint().source_offsets
    assert run(spark, spec, lake, clock=lambda: T0 + 9 * MINUTE).batches == []  # nothing due: nothing planned
    quiet = run(spark, spec, lake, clock=lambda: T0 + 11 * MINUTE)
    assert [(b.batch_id, b.records_in, b.timers_fired, b.records_out) for b in quiet.batches] == [(2, 0, 1, 1)]
    assert store.latest_checkpoint().source_offsets == offsets  # a timer-only microbatch moves no offset
    later = run(spark, spec, lake, clock=lambda: T0 + 15 * MINUTE)
    alerts = sorted((r["k"], r["last_seen"], r["alerted_at"], r["_microbatch"]) for r in
                    spark.read.format("delta").load(str(lake.settings.in_warehouse(spec.sink, "sink"))).collect())
    assert alerts == [("a", T0 + 4 * MINUTE, T0 + 14 * MINUTE, 3), ("b", T0, T0 + 10 * MINUTE, 2)]
    assert [b.records_in for b in later.batches] == [0]
    assert run(spark, spec, lake, clock=lambda: T0 + 60 * MINUTE).batches == []  # every timer fired


def test_timers_survive_a_savepoint_restore_at_another_parallelism_and_backend_and_fire_once(spark, tmp_path):
    steady, moved = Lake(tmp_path / "steady"), Lake(tmp_path / "moved")
    for lake in (steady, moved):
        session_input(lake)
    run(spark, sessions_job(steady), steady)
    spec = sessions_job(moved)
    run(spark, spec, moved, max_microbatches=1)  # a and b have open sessions and timers
    savepoint = take_savepoint(spark, moved.settings, spec.job_id, **QUIET)
    reader = SavepointReader(spark, StatePoint(savepoint))
    assert sorted(tuple(r) for r in reader.timers().select("key", "timestamp", "domain").collect()) == [
        ("a", 70 * S, "EVENT_TIME"), ("b", 65 * S, "EVENT_TIME")]
    restored = restore_job(spark, moved.settings, spec, StatePoint(savepoint), parallelism=3, backend="hashmap",
                           **QUIET)
    assert (restored.parallelism, restored.backend) == (3, "hashmap")
    run(spark, spec, moved)
    assert sessions(spark, moved, spec) == SESSIONS  # each session closed once, by its key's new owner
    assert side_rows(spark, moved, spec) == side_rows(spark, steady, sessions_job(steady))
    keyed, operator = state_at_latest_checkpoint(spark, moved, spec)
    assert keyed == state_at_latest_checkpoint(spark, steady, sessions_job(steady))[0]
    clocks = [json.loads(v) for name, _, _, v in operator if name == "__source__.watermark"]
    assert len(clocks) == 3 and all(c[0]["watermark"] == 200 * S - 1 for c in clocks)


def test_compaction_drops_fired_and_deleted_timers(spark, lake):
    session_input(lake)
    spec = sessions_job(lake)
    run(spark, spec, lake)
    job_dir = lake.settings.job_dir(spec.job_id)
    keyed_path = JobStore(job_dir).latest_checkpoint().table("keyed").path

    def timer_rows():
        return spark.read.format("delta").load(keyed_path).filter("state_name = 'timed.__timers_event__'").count()

    assert timer_rows() > 1  # every registration, deletion and firing is a row
    compact_job(spark, lake.settings, spec.job_id, say=lambda line: None)
    keyed_path = JobStore(job_dir).latest_checkpoint().table("keyed").path
    assert timer_rows() == 1  # only c's open timer is left
    assert [tuple(r) for r in SavepointReader.for_checkpoint(spark, spec.job_id, settings=lake.settings)
            .timers().select("key", "timestamp").collect()] == [("c", 260 * S)]


def test_a_watermark_strategy_that_names_no_source_column_is_refused_before_anything_runs(spark, lake):
    from state_store import WatermarkStrategy

    spec = sessions_job(lake, watermark_strategy=WatermarkStrategy.for_monotonous_timestamps()
                        .with_timestamp_column("event_time"))
    with pytest.raises(ConfigError, match="timestamp column 'event_time' is not in the source schema"):
        run(spark, spec, lake)
    assert not lake.settings.job_dir(spec.job_id).exists()


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_records_without_an_event_time_are_refused_at_planning_naming_the_column_count_and_file(spark, lake, fmt):
    """Issue 37 #6: null event times reached process, were never late and never moved the watermark."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from state_store.errors import InputError

    rows = [timed("a", 0), {"k": "b", "ts": None, "seq": 1}, {"k": "c", "seq": 2}]
    if fmt == "json":
        lake.write_events("000.json", rows)
    else:  # written by pyarrow with statistics: the footers tell, nothing is read
        pq.write_table(pa.Table.from_pylist([{"ts": None, "seq": 0, **r} for r in rows]), lake.events / "000.parquet")
    spec = sessions_job(lake, source=FileSource(str(lake.events), fmt, sessions_job(lake).source.schema))
    with pytest.raises(InputError, match=r"2 record\(s\) have no event time: column 'ts' .* first in file "
                                         rf".*000\.{fmt}\. Give every record a timestamp"):
        run(spark, spec, lake)
    assert not (lake.settings.warehouse / "sinks").exists()
    assert JobStore(lake.settings.job_dir(spec.job_id)).last_commit() is None


def test_small_json_files_give_their_watermark_without_a_spark_job_and_spark_judges_the_rest(tmp_path, monkeypatch):
    """Issue 59 #20: a tiny run's planning was mostly a Spark job per microbatch and JSON source for the largest
    event time (bench/plan_cost.py); small files are now read here. What only Spark's read can judge (and name in
    its error: a record without a whole-number time, a line that does not parse) or a large input still goes to
    Spark (``_UNKNOWN``)."""
    from state_store.sources import files

    def written(name, text):
        (tmp_path / name).write_text(text)
        return tmp_path / name

    small = [written("a.json", '{"k": "a", "ts": 5, "nested": {"x": 1}}\n\n{"k": "b", "ts": 12}\n'),
             written("b.json", '{"ts": -3}\n'), written("empty.json", "")]
    assert files._json_max(small, "ts") == 12
    assert files._json_max([small[2]], "ts") is None
    for text in ('{"ts": 5.5}\n', '{"ts": "5"}\n', '{"ts": null}\n', '{"k": "no time"}\n', "garbage\n"):
        assert files._json_max([written("bad.json", text)], "ts") is files._UNKNOWN, text
    monkeypatch.setattr(files, "JSON_IN_PROCESS_BYTES", 10)
    assert files._json_max(small, "ts") is files._UNKNOWN


class ResetOnRule(KeyedBroadcastProcessFunction):
    """Counts per key; a broadcast rule resets every key's count (Flink's applyToKeyedState) and reports each
    reset to a side output."""

    def open(self, ctx):
        self.count = ctx.get_state(COUNT)

    def process(self, key, records, ctx):
        self.count.update((self.count.value() or 0) + len(records))
        yield {"k": key, "n": self.count.value()}

    def process_broadcast_element(self, value, ctx):
        def reset(key, state):
            ctx.output(RESETS, {"k": key, "n": state.value()})
            state.clear()

        ctx.apply_to_keyed_state(COUNT, reset)


COUNT = ValueStateDescriptor("count", Types.LONG())
RESETS = OutputTag("resets", COUNT_OUTPUT)


def test_apply_to_keyed_state_reaches_every_key_of_the_subtask_not_only_those_with_records(spark, lake):
    spec = count_job(lake, job_id="resets", function=ResetOnRule(), broadcast_source=FileSource(
        str(lake.rules), "json", RULE), side_outputs=[RESETS])
    lake.write_events("e0.json", events(0, keys=("a", "b", "c"), per_key=2))
    run(spark, spec, lake)
    lake.write_rules("r0.json", [{"name": "reset", "factor": 0}])
    lake.write_events("e1.json", events(1, keys=("a",), per_key=1))
    run(spark, spec, lake)
    assert side_rows(spark, lake, spec, "resets") == [json.dumps({"_microbatch": 1, "k": k, "n": 2}, sort_keys=True)
                                                      for k in ("a", "b", "c")]
    keyed, _ = state_at_latest_checkpoint(spark, lake, spec)
    assert keyed_values(keyed, "count.count") == {("a", ""): 1}  # b and c cleared without a record


MARKED = Types.ROW_NAMED(["k", "ts", "marker"], [Types.STRING(), Types.LONG(), Types.BOOLEAN()])
FIRED = Types.ROW_NAMED(["k", "what"], [Types.STRING(), Types.STRING()])
MARKED_FILES = [[("a", 1, False), ("b", 4, False), ("m", 2, True)], [("a", 6, False), ("m", 5, True)],
                [("b", 9, False)], [("m", 9, True)]]


def _marked_job(lake, generator=None, **overrides):
    """Each record's event-time timer, under the watermark a punctuated generator emits on marker records."""
    from state_store import JobSpec, KeyedProcessFunction, WatermarkGenerator, WatermarkStrategy

    class OnMarker(WatermarkGenerator):
        def on_event(self, event, event_timestamp, output):
            if event["marker"]:
                output.emit_watermark(event_timestamp)

    class Timers(KeyedProcessFunction):
        def process(self, key, records, ctx):
            for r in records:
                ctx.timer_service().register_event_time_timer(r["ts"])
            yield {"k": key, "what": f"{len(records)} at W {ctx.current_watermark()}"}

        def on_timer(self, timestamp, ctx):
            yield {"k": ctx.get_current_key(), "what": f"timer {timestamp}"}

    if not any(lake.events.iterdir()):  # the files once: a source file rewritten after planning is refused
        for i, rows in enumerate(MARKED_FILES):
            lake.write_events(f"{i:03}.json", [{"k": k, "ts": ts, "marker": m} for k, ts, m in rows])
    strategy = WatermarkStrategy.for_generator(generator or OnMarker).with_timestamp_column("ts")
    return JobSpec(job_id="marked", function=Timers(), source=FileSource(str(lake.events), "json", MARKED,
                                                                         max_files_per_batch=1),
                   key="k", key_type=Types.STRING(), output_type=FIRED, sink="sinks/marked",
                   watermark_strategy=strategy, **overrides)


def test_a_watermark_generator_drives_event_time_replays_and_restores_rescaled(spark, tmp_path):
    """``WatermarkStrategy.for_generator`` (issue 61, item 5, after Flink's WatermarkStrategyTest's punctuated
    generator): the plans pin what the generator emitted ([2, 5, 5, 9]) and timers fire by it; a crash after the
    sink write replays to the clean run; a savepoint restores at parallelism 3 on the hashmap backend and goes on
    as the clean run; a generator that goes back in time is refused before anything is written."""
    from state_store import WatermarkGenerator

    clean = Lake(tmp_path / "clean")
    spec = _marked_job(clean)
    run(spark, spec, clean)
    store = JobStore(clean.settings.job_dir("marked"))
    assert [store.read_plan(b).watermark for b in range(4)] == [2, 5, 5, 9]
    fired = sorted((r["k"], r["what"], r["_microbatch"]) for r in spark.read.format("delta").load(
        str(clean.settings.sink("sinks/marked"))).collect() if r["what"].startswith("timer"))
    assert fired == [("a", "timer 1", 0), ("a", "timer 6", 3), ("b", "timer 4", 1), ("b", "timer 9", 3),
                     ("m", "timer 2", 0), ("m", "timer 5", 1), ("m", "timer 9", 3)]

    crashed, moved = crashed_and_moved(spark, tmp_path, _marked_job, "marked", crash_batch=1, saved_after=2)
    assert sink_rows(spark, crashed, spec) == sink_rows(spark, clean, spec)
    assert sink_rows(spark, moved, spec) == sink_rows(spark, clean, spec)

    class Backwards(WatermarkGenerator):
        def on_event(self, event, event_timestamp, output):
            output.emit_watermark(-event_timestamp)

    back = Lake(tmp_path / "back")
    with pytest.raises(ConfigError, match="Backwards emitted watermark -4 after -1: a watermark never goes back"):
        run(spark, _marked_job(back, Backwards), back)
    assert not back.settings.sink("sinks/marked").exists()


ALIGNED = {"web": [[("a", 1_000)], [("a", 2_000)], [("b", 3_000)]],
           "app": [[("a", 100)], [("b", 200)], [("a", 900)], [("b", 1_900)], [("a", 2_900)]]}


def _aligned_job(lake, job_id="aligned", **overrides):
    """A union of a fast source (web) and a slow one (app) in one alignment group of 500 ms drift."""
    from datetime import timedelta

    from state_store import Dataflow
    from tests.support.joins import BY_TS, LEFT, OUT_ROW, Count

    if not (lake.inputs / "web").exists():
        for source, files in ALIGNED.items():
            (lake.inputs / source).mkdir()
            for i, rows in enumerate(files):
                (lake.inputs / source / f"{i:03}.json").write_text("".join(
                    f'{{"k": "{k}", "ts": {ts}, "who": "{source}"}}\n' for k, ts in rows))
    aligned = BY_TS.with_watermark_alignment("clicks", timedelta(milliseconds=500))
    web, app = (Dataflow.from_source(FileSource(str(lake.inputs / n), "json", LEFT, max_files_per_batch=1),
                                     job_id=job_id, watermark_strategy=aligned) for n in ALIGNED)
    spec = web.union(app).key_by("k").process(Count(), uid="count", output_type=OUT_ROW).sink_to(f"sinks/{job_id}")
    return spec.with_overrides(**overrides)


def test_watermark_alignment_pauses_the_source_ahead_replays_a_crash_and_restores_rescaled(spark, tmp_path):
    """Flink's watermark alignment (issue 61, item 5, after ``WatermarkAlignmentITCase``): web's watermark (999
    after microbatch 0) is more than 500 ms past app's (99, then 199), so web reads nothing in microbatches 1 and
    2, then goes on once app's 899 is within the drift; the pauses are in the plans, so a crash after the sink
    write replays to the clean run, and a savepoint restored at parallelism 3 on the hashmap backend goes on as
    the clean run does (its clock, restored, pauses web again)."""

    clean = Lake(tmp_path / "clean")
    spec = _aligned_job(clean)
    said = []
    run(spark, spec, clean, progress=said.append)
    store = JobStore(clean.settings.job_dir("aligned"))
    plans = [store.read_plan(b) for b in range(5)]
    assert [(p.sources["main"]["start"] != p.sources["main"]["end"], p.watermark) for p in plans] == [
        (True, 99), (False, 199), (False, 899), (True, 1_899), (True, 2_899)]
    assert sum("input 'main' paused by watermark alignment: its watermark 999 is past group 'clicks''s least" in s
               for s in said) == 2
    rows = sink_rows(spark, clean, spec)
    assert sorted((r["_microbatch"], r["k"], r["what"]) for r in map(json.loads, rows)) == [
        (0, "a", "2 by 1000"), (1, "b", "1 by 200"), (2, "a", "3 by 900"), (3, "a", "4 by 2000"),
        (3, "b", "2 by 1900"), (4, "a", "5 by 2900"), (4, "b", "3 by 3000")]

    crashed, moved = crashed_and_moved(spark, tmp_path, _aligned_job, "aligned", crash_batch=2, saved_after=2)
    assert sink_rows(spark, crashed, spec) == rows
    assert state_at_latest_checkpoint(spark, crashed, spec) == state_at_latest_checkpoint(spark, clean, spec)
    assert sink_rows(spark, moved, spec) == rows
    again = JobStore(moved.settings.job_dir("aligned")).read_plan(2).sources["main"]
    assert again["start"] == again["end"]
