"""A run of N microbatches in one Spark pass gives exactly what N runs of one microbatch give, and Flink's
lifecycle and ordering rules hold inside a run."""
from __future__ import annotations

import json

import pytest

from state_store import FileSource, JobSpec, KeyedProcessFunction, ListStateDescriptor, Types, ValueStateDescriptor
from state_store.catalog.job_store import JobStore
from tests.support.helpers import run, sink_rows, state_at_checkpoint
from tests.support.jobs import all_states_job, events
from tests.support.lake import Lake

BATCHES = 3  # a microbatch with records for one subtask only, between two with records for both


def _prepare(lake: Lake) -> None:
    lake.write_rules("r0.json", [{"name": "factor", "factor": 3}])
    for b in range(BATCHES):
        # Microbatch 1 touches one key only (b, whose state it clears): the other subtask has no records in it.
        lake.write_events(f"e{b}.json", events(b, keys=("b",) if b == 1 else ("a", "b", "c", "d", "e")))


@pytest.mark.parametrize("backend", ["delta", "hashmap"])
def test_one_run_of_n_microbatches_equals_n_runs_of_one_in_sink_and_state_at_every_checkpoint(
        spark, tmp_path, backend):
    together, apart = Lake(tmp_path / "together"), Lake(tmp_path / "apart")
    for lake in (together, apart):
        _prepare(lake)
    spec_together = all_states_job(together, job_id="eq", backend=backend, checkpoint_interval=1, num_retained=10)
    spec_apart = all_states_job(apart, job_id="eq", backend=backend, checkpoint_interval=1, num_retained=10)

    one = run(spark, spec_together, together)
    assert [b.batch_id for b in one.batches] == [0, 1, 2] and one.checkpoints == [1, 2, 3]
    for b in range(BATCHES):
        assert [x.batch_id for x in run(spark, spec_apart, apart, max_microbatches=1).batches] == [b]

    assert sink_rows(spark, together, spec_together) == sink_rows(spark, apart, spec_apart)
    meta_together, meta_apart = (JobStore(lake.settings.job_dir("eq")) for lake in (together, apart))
    assert meta_together.checkpoint_ids() == meta_apart.checkpoint_ids() == [1, 2, 3]
    for cid in range(1, BATCHES + 1):
        a, b = meta_together.checkpoint(cid), meta_apart.checkpoint(cid)
        assert a.batch_id == b.batch_id == cid - 1 and a.entries == b.entries
        assert (state_at_checkpoint(spark, together, spec_together, a)
                == state_at_checkpoint(spark, apart, spec_apart, b))
    keyed, operator = state_at_checkpoint(spark, together, spec_together, meta_together.checkpoint(BATCHES))
    # snapshot_state ran on both subtasks in every microbatch, also in microbatch 1 where one had no records.
    seen = {subtask: json.loads(value) for name, subtask, _, value in operator if name == "all.batches_seen"}
    assert seen == {0: [0, 1, 2], 1: [0, 1, 2]}


Record = Types.ROW_NAMED(["k", "op", "v"], [Types.STRING(), Types.STRING(), Types.LONG()])
PROBE_OUT = Types.ROW_NAMED(["k", "batch", "got", "restored", "union"],
                            [Types.STRING(), Types.LONG(), Types.LONG(), Types.BOOLEAN(), Types.LIST(Types.INT())])


class Probe(KeyedProcessFunction):
    """'set' stores v, 'get' outputs what is stored; reports is_restored() and the union list it was given."""

    def initialize_state(self, ctx):
        self.union = ctx.get_operator_state_store().get_union_list_state(ListStateDescriptor("who", Types.INT()))
        self.restored = ctx.is_restored()
        self.subtask = ctx.subtask
        self.union_seen = sorted(self.union.get())

    def open(self, ctx):
        self.value = ctx.get_state(ValueStateDescriptor("value", Types.LONG(), 0))

    def process(self, key, records, ctx):
        for r in records:
            if r["op"] == "set":
                self.value.update(r["v"])
            else:
                yield {"k": key, "batch": ctx.batch_id, "got": self.value.value(), "restored": self.restored,
                       "union": self.union_seen}

    def snapshot_state(self, ctx):
        self.union.update([self.subtask])


def _probe_job(lake) -> JobSpec:
    return JobSpec(job_id="probe", function=Probe(), source=FileSource(str(lake.events), "json", Record, 1),
                   key="k", key_type=Types.STRING(), output_type=PROBE_OUT, sink="sinks/probe", uid="probe",
                   parallelism=2, max_parallelism=8)


def test_records_keep_source_order_and_is_restored_and_union_state_follow_flink(spark, lake):
    keys = [f"k{i}" for i in range(6)]  # enough keys for both subtasks
    # Without order_by a key's records keep file order: 'set 5' then 'get' reads 5, then 'set 1' follows.
    lake.write_events("e0.json", [r for k in keys for r in ({"k": k, "op": "set", "v": 5},
                                                          {"k": k, "op": "get", "v": 0},
                                                          {"k": k, "op": "set", "v": 1})])
    lake.write_events("e1.json", [{"k": k, "op": "get", "v": 0} for k in keys])
    lake.write_events("e2.json", [{"k": k, "op": "get", "v": 0} for k in keys])
    spec = _probe_job(lake)
    run(spark, spec, lake, max_microbatches=2)
    run(spark, spec, lake)
    rows = [json.loads(r) for r in sink_rows(spark, lake, spec)]
    by_batch = {b: [r for r in rows if r["batch"] == b] for b in (0, 1, 2)}
    assert {r["got"] for r in by_batch[0]} == {5} and {r["got"] for r in by_batch[1]} == {1}
    # is_restored() only when the run started from a checkpoint: not in the first run's microbatches.
    assert {r["restored"] for r in by_batch[0] + by_batch[1]} == {False}
    assert {r["restored"] for r in by_batch[2]} == {True}
    # Union list state: on restore every subtask gets every subtask's list, at the same parallelism too.
    assert {tuple(r["union"]) for r in by_batch[2]} == {(0, 1)}
    assert {tuple(r["union"]) for r in by_batch[0]} == {()}


# -- every operator kind, scheduled as Airflow schedules it: N runs of one microbatch, state open across runs ------
def _kinds():
    """(kind, job over a lake) for every stateful operator kind: each keeps something open across microbatches
    (a window, a session, a join's buffers, a timer), so a run starts from what the run before it left."""
    from state_store import ColumnAggregate, Dataflow, EventTimeSessionWindows, TumblingEventTimeWindows
    from tests.support.joins import BY_AT, BY_TS, LEFT, OUT_ROW, PAIR, RIGHT, Count, Latest, Matched, Pairs

    def left(lake, schema=LEFT):
        return Dataflow.from_source(FileSource(str(lake.events), "json", schema, max_files_per_batch=1), job_id="n",
                                    watermark_strategy=BY_TS)

    def right(lake):
        return Dataflow.from_source(FileSource(str(lake.rules), "json", RIGHT, max_files_per_batch=1), job_id="n",
                                    watermark_strategy=BY_AT)

    def left_of_rules(lake):
        return Dataflow.from_source(FileSource(str(lake.rules), "json", LEFT, max_files_per_batch=1), job_id="n",
                                    watermark_strategy=BY_TS)

    def window(vectorized):
        return lambda lake: (left(lake).key_by("k").window(TumblingEventTimeWindows.of(3))
                             .aggregate(ColumnAggregate(n="count(*)", last="max(ts)"), uid="w", vectorized=vectorized)
                             .sink_to("sinks/n"))

    def session(lake):
        from tests.support.windows import Session
        stream = Dataflow.from_source(FileSource(str(lake.events), "json", LEFT_V, max_files_per_batch=1),
                                      job_id="n", watermark_strategy=BY_TS)
        return (stream.key_by("k").window(EventTimeSessionWindows.with_gap(2))
                .process(Session(), uid="s", output_type=SESSION_OUT).sink_to("sinks/n"))

    return {
        "vectorised-window": window(True),
        # a per-record window's open windows taken over by the vectorised path in the next run (the same state)
        "per-record-then-vectorised-window": lambda lake, m=1: window(m > 0)(lake),
        "window": window(False),
        "session": session,
        "interval-join": lambda lake: (left(lake).key_by("k").interval_join(right(lake).key_by("key")).between(-2, 2)
                                       .process(Pairs(), uid="ij", output_type=PAIR).sink_to("sinks/n")),
        "window-join": lambda lake: (left(lake).join(right(lake)).where("k").equal_to("key")
                                     .window(TumblingEventTimeWindows.of(3)).apply(Matched(), uid="wj",
                                                                                   output_type=OUT_ROW)
                                     .sink_to("sinks/n")),
        "co-process": lambda lake: (left(lake).connect(right(lake)).key_by("k", "key")
                                    .process(Latest(), uid="co", output_type=OUT_ROW).sink_to("sinks/n")),
        "union": lambda lake: (left(lake).union(left_of_rules(lake)).key_by("k")
                               .process(Count(), uid="u", output_type=OUT_ROW).sink_to("sinks/n")),
    }


LEFT_V = Types.ROW_NAMED(["k", "ts", "who", "v"], [Types.STRING(), Types.LONG(), Types.STRING(), Types.LONG()])
SESSION_OUT = Types.ROW_NAMED(["k", "sum", "start", "end"], [Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG()])
# W(m) = least of the sources' max time - 1: 0, 3, 7. Windows of 3 ms: [0, 3) fires in microbatch 1, [3, 6) in 2,
# [6, 9) stays open; a's session from 2 merges with 4 across a run; the joins' buffers hold records across runs.
LEFT_FILES = [[("a", 0), ("b", 1)], [("a", 2), ("a", 4)], [("b", 7), ("a", 9)]]
RIGHT_FILES = [[("a", 1)], [("b", 3), ("a", 4)], [("a", 8)]]


@pytest.mark.parametrize("kind", list(_kinds()))
def test_every_operator_kind_gives_in_n_scheduled_runs_of_one_microbatch_what_one_run_of_n_gives(
        spark, tmp_path, kind):
    """What a pipeline DAG scheduled every few minutes does: each run picks up one new file, with windows,
    sessions, join buffers and timers left open by the run before; its sink and state are those of one run of
    all the files (issue 59: the vectorised window failed every second run)."""
    together, apart = Lake(tmp_path / "together"), Lake(tmp_path / "apart")
    for lake in (together, apart):
        for m, (lefts, rights) in enumerate(zip(LEFT_FILES, RIGHT_FILES)):
            lake.write_events(f"{m:03d}.json", [{"k": k, "ts": t, "who": "l", "v": t} for k, t in lefts])
            lake.write_rules(f"{m:03d}.json", [{"k": k, "key": k, "ts": t, "at": t, "who": "r"} for k, t in rights])
    build = _kinds()[kind]
    spec_together = build(together)
    assert [b.batch_id for b in run(spark, spec_together, together).batches] == [0, 1, 2]
    for m in range(3):
        spec_apart = build(apart, m) if kind.startswith("per-record-then") else build(apart)
        assert [b.batch_id for b in run(spark, spec_apart, apart, max_microbatches=1).batches] == [m]
    rows = sink_rows(spark, together, spec_together)
    assert rows and rows == sink_rows(spark, apart, spec_apart)
    stores = [JobStore(lake.settings.job_dir("n")) for lake in (together, apart)]
    states = [state_at_checkpoint(spark, lake, spec, store.latest_checkpoint())
              for lake, spec, store in zip((together, apart), (spec_together, spec_apart), stores)]
    assert states[0] == states[1]
    assert states[0][0], "something is still open after the last microbatch (a window, a buffer, a timer)"
