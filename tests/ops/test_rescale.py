"""Rescale and restore with changes, against real Spark and Delta (docs/operating/savepoints.md)."""
from __future__ import annotations

import json

import pytest

from state_store import KeyedProcessFunction, ListStateDescriptor, MapStateDescriptor, Types
from state_store.catalog.job_store import JobStore
from state_store.errors import ConfigError, RestoreError
from state_store.ops.restore import rescale_job
from tests.support.helpers import run, sink_rows, state_at_latest_checkpoint
from tests.support.jobs import all_states_job, count_job, events

KEYS = tuple(f"k{i:02d}" for i in range(24))  # enough keys for every subtask to own some
PROBE_OUT = Types.ROW_NAMED(["k", "batch", "subtask", "split", "union", "bcast", "pending"],
                            [Types.STRING(), Types.LONG(), Types.INT(), Types.LIST(Types.STRING()),
                             Types.LIST(Types.STRING()), Types.MAP(Types.STRING(), Types.STRING()),
                             Types.LIST(Types.STRING())])


class Probe(KeyedProcessFunction):
    """Reports, with each key's output, the operator state its subtask restored at the start of the run.

    A first run seeds Flink's example: subtask 0 holds split list [a, b, c], subtask 1 holds [d, e]; union
    state is [u<i>] per subtask; broadcast state maps 'from' -> 'b<i>'; a second split list, pending, holds
    [p1, p2] and [p3, p4]."""

    def initialize_state(self, ctx):
        store = ctx.get_operator_state_store()
        self.split = store.get_list_state(ListStateDescriptor("split", Types.STRING()))
        self.union = store.get_union_list_state(ListStateDescriptor("union", Types.STRING()))
        self.bcast = store.get_broadcast_state(MapStateDescriptor("bcast", Types.STRING(), Types.STRING()))
        self.pending = store.get_list_state(ListStateDescriptor("pending", Types.STRING()))
        if not hasattr(self, "restored"):
            self.restored = (self.split.get(), self.union.get(), dict(self.bcast.items()), self.pending.get())
        self.first_run = not ctx.is_restored()

    def open(self, ctx):
        self.subtask = ctx.get_index_of_this_subtask()

    def process(self, key, records, ctx):
        split, union, bcast, pending = self.restored
        yield {"k": key, "batch": ctx.batch_id, "subtask": self.subtask, "split": split, "union": union,
               "bcast": bcast, "pending": pending}

    def snapshot_state(self, ctx):
        if self.first_run:
            self.split.update(["a", "b", "c"] if self.subtask == 0 else ["d", "e"])
            self.bcast.put("from", f"b{self.subtask}")
            self.pending.update(["p1", "p2"] if self.subtask == 0 else ["p3", "p4"])
        self.union.update([f"u{self.subtask}"])


def probe_job(lake, **overrides):
    return count_job(lake, "probe", function=Probe(), output_type=PROBE_OUT, uid="probe", max_parallelism=8,
                     **overrides)


def restored_by_subtask(spark, lake, spec, batch):
    rows = spark.read.format("delta").load(str(lake.settings.in_warehouse(spec.sink, "sink"))) \
        .filter(f"batch = {batch}").collect()
    seen = {}
    for r in rows:
        seen.setdefault(r["subtask"], set()).add(json.dumps([r["split"], r["union"], r["bcast"], r["pending"]],
                                                             sort_keys=True))
    assert all(len(v) == 1 for v in seen.values()), seen  # one restore per subtask
    return {s: json.loads(next(iter(v))) for s, v in sorted(seen.items())}


def test_operator_state_is_redistributed_as_flink_does_up_and_down(spark, lake):
    spec = probe_job(lake)
    for batch in range(3):
        lake.write_events(f"e{batch}.json", events(batch, keys=KEYS, per_key=1))
    run(spark, spec, lake, max_microbatches=1)
    rescale_job(spark, lake.settings, spec, 3, savepoint_first=True, say=lambda m: None)
    from state_store.catalog.savepoints import list_savepoints

    (savepoint,) = list_savepoints(lake.settings, spec.job_id)  # taken under the same hold, before the rescale
    assert (savepoint.checkpoint_id, savepoint.parallelism) == (1, 2)
    run(spark, spec, lake, max_microbatches=1)
    got = restored_by_subtask(spark, lake, spec, 1)
    # Java's HashMap iterates "split" before "pending": split starts at subtask 0 and gives its extra elements to
    # subtasks 0 and 1, so pending starts at subtask 2 (Flink's rotation), not at 0 again.
    assert got == {0: [["a", "b"], ["u0", "u1"], {"from": "b0"}, ["p3"]],
                   1: [["c", "d"], ["u0", "u1"], {"from": "b1"}, ["p4"]],
                   2: [["e"], ["u0", "u1"], {"from": "b0"}, ["p1", "p2"]]}
    rescale_job(spark, lake.settings, spec, 1, say=lambda m: None)
    run(spark, spec, lake, max_microbatches=1)
    assert restored_by_subtask(spark, lake, spec, 2) == {
        0: [["a", "b", "c", "d", "e"], ["u0", "u1", "u2"], {"from": "b0"}, ["p3", "p4", "p1", "p2"]]}


def _without_raw(keyed):
    return [r for r in keyed if not r[0].endswith("__raw_keyed__")]


@pytest.mark.parametrize("backend", ["delta", "hashmap"])
def test_a_job_rescaled_up_then_down_ends_with_the_state_and_sink_of_one_never_rescaled(spark, tmp_path, backend):
    from tests.support.lake import Lake

    lakes = {name: Lake(tmp_path / name) for name in ("steady", "rescaled")}
    specs = {name: all_states_job(lake, backend=backend) for name, lake in lakes.items()}
    for lake in lakes.values():
        lake.write_rules("r0.json", [{"name": "factor", "factor": 3}])
        for batch in range(6):
            lake.write_events(f"e{batch}.json", events(batch))
    quiet = dict(say=lambda m: None)
    run(spark, specs["steady"], lakes["steady"])
    lake, spec = lakes["rescaled"], specs["rescaled"]
    run(spark, spec, lake, max_microbatches=2)
    before = JobStore(lake.settings.job_dir(spec.job_id)).latest_checkpoint()
    after = rescale_job(spark, lake.settings, spec, 3, **quiet)
    assert (after.parallelism, after.batch_id, after.checkpoint_id) == (3, before.batch_id, before.checkpoint_id + 1)
    assert after.state["keyed"] == before.state["keyed"]  # keyed rows are not rewritten: the same version pinned
    run(spark, spec, lake, max_microbatches=2)
    with pytest.raises(RestoreError, match=r"subtasks \[1, 2\] of checkpoint .* hold raw operator state"):
        rescale_job(spark, lake.settings, spec, 1, **quiet)
    rescale_job(spark, lake.settings, spec, 1, allow_non_restored_state=True, **quiet)
    result = run(spark, spec, lake)
    assert [b.batch_id for b in result.batches] == [4, 5]
    latest = JobStore(lake.settings.job_dir(spec.job_id)).latest_checkpoint()
    assert latest.parallelism == 1
    assert sink_rows(spark, lake, spec) == sink_rows(spark, lakes["steady"], specs["steady"])
    steady_keyed, _ = state_at_latest_checkpoint(spark, lakes["steady"], specs["steady"])
    keyed, operator = state_at_latest_checkpoint(spark, lake, spec)
    assert _without_raw(keyed) == _without_raw(steady_keyed)
    assert {r[1] for r in operator} == {0}  # every operator entry is subtask 0's now


def test_a_rescale_beyond_max_parallelism_or_with_nothing_to_rescale_is_refused(spark, lake):
    spec = count_job(lake)
    with pytest.raises(ConfigError, match=r"job 'counts' has no checkpoint to restore from; run it first"):
        rescale_job(spark, lake.settings, spec, 3, say=lambda m: None)
    assert not lake.settings.job_dir(spec.job_id).exists()
    lake.write_events("e0.json", events(0))
    run(spark, spec, lake)
    with pytest.raises(ConfigError, match=r"parallelism 9 is above max_parallelism 8"):
        rescale_job(spark, lake.settings, spec, 9, savepoint_first=True, say=lambda m: None)
    from state_store.catalog.savepoints import list_savepoints

    assert list_savepoints(lake.settings) == []  # refused before anything was written, the savepoint too
    with pytest.raises(RestoreError, match=r"max_parallelism is the number of key groups and is fixed"):
        rescale_job(spark, lake.settings, count_job(lake, max_parallelism=16), 3, say=lambda m: None)
    assert JobStore(lake.settings.job_dir(spec.job_id)).checkpoint_ids() == [1]


def test_a_rescale_or_savepoint_while_a_run_holds_the_job_waits_or_is_refused_naming_the_run(spark, lake):
    import time

    from state_store.errors import JobLocked
    from state_store.ops.savepoint import take_savepoint
    from tests.support.helpers import write_holder

    spec = count_job(lake)
    lease_dir = lake.settings.job_dir(spec.job_id) / "_meta" / "lease"
    write_holder(lease_dir, {"run_id": "run-busy", "host": "another-host", "pid": 1, "timeout_s": 60,
                             "heartbeat_ms": int(time.time() * 1000)})
    with pytest.raises(JobLocked, match=r"job 'counts' is held by run run-busy"):
        rescale_job(spark, lake.settings, spec, 3, say=lambda m: None)
    said = []
    with pytest.raises(JobLocked, match=r"held by run run-busy"):
        take_savepoint(spark, lake.settings, spec.job_id, wait_s=1, say=said.append)
    assert any("waiting up to 1s for the job to be free" in line for line in said)
    assert lease_dir.is_dir()  # the holder's lease is never removed by the refused newcomer
