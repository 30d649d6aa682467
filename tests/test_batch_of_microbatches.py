"""A run of N microbatches in one Spark pass gives exactly what N runs of one microbatch give, and Flink's
lifecycle and ordering rules hold inside a run."""
from __future__ import annotations

import json

import pytest

from state_store import FileSource, JobSpec, KeyedProcessFunction, ListStateDescriptor, Types, ValueStateDescriptor
from state_store.catalog.job_store import JobStore
from tests.conftest import Lake
from tests.helpers import run, sink_rows, state_at_checkpoint
from tests.jobs import all_states_job, events

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
        assert state_at_checkpoint(spark, together, spec_together, a) == state_at_checkpoint(spark, apart, spec_apart, b)
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
    lake.write_events("e0.json", [r for k in keys for r in ({"k": k, "op": "set", "v": 5}, {"k": k, "op": "get", "v": 0},
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
