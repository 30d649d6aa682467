"""Whole jobs on real Spark and Delta: state semantics on every backend, restore, checkpoints."""
from __future__ import annotations

import json

import pytest

from state_store import KeyedProcessFunction, Types, ValueStateDescriptor
from state_store.catalog.job_store import JobStore
from state_store.delta.backends import DeltaStateBackend, MemoryStateBackend
from state_store.errors import InputError
from tests.support.helpers import keyed_values, run, sink_rows, state_at_latest_checkpoint
from tests.support.jobs import all_states_job, count_job, events


def _outputs(spark, lake, spec) -> dict:
    return {(r["k"], r["batch"]): r for r in map(json.loads, sink_rows(spark, lake, spec))}


@pytest.mark.parametrize("backend", ["delta", "hashmap", "memory"])
def test_every_state_type_keeps_flink_semantics_across_microbatches(spark, lake, backend):
    lake.write_rules("r0.json", [{"name": "factor", "factor": 2}])
    for b in range(2):
        lake.write_events(f"e{b}.json", events(b))
    spec = all_states_job(lake, job_id=f"sem-{backend}", backend=backend, checkpoint_interval=1)
    result = run(spark, spec, lake)
    assert [b.batch_id for b in result.batches] == [0, 1]
    out = _outputs(spark, lake, spec)

    a0, a1 = out[("a", 0)], out[("a", 1)]
    assert (a0["count"], a1["count"]) == (3, 6)  # ValueState accumulates from its default 0
    assert a0["items"] == [0, 1, 2] and a1["items"] == [0, 1, 2, 10, 11, 12]  # ListState in record order
    assert a0["tags"] == {"even": 1} and a1["tags"] == {"even": 2}  # MapState
    assert (a0["total"], a1["total"]) == (2 * 3, 2 * (3 + 33))  # ReducingState with the broadcast factor
    assert a1["avg"] == pytest.approx(36 / 6)  # AggregatingState
    assert (a0["ns_count"], a1["ns_count"]) == (3, 3)  # namespaces b0 and b1 are separate
    assert a0["factor"] == 2  # broadcast elements are processed before the keyed records

    b1 = out[("b", 1)]  # 'clear' as the last record of b in microbatch 1 empties every state of b
    assert (b1["count"], b1["items"], b1["tags"], b1["total"], b1["avg"]) == (0, [], {}, None, None)

    keyed, operator = state_at_latest_checkpoint(spark, lake, spec)
    counts = keyed_values(keyed, "all.count")
    assert counts[("a", "")] == 6 and ("b", "") not in counts  # a cleared state leaves no entry
    assert keyed_values(keyed, "all.per_ns")[("a", "b0")] == 3
    names = {r[0] for r in operator}
    assert {"all.batches_seen", "all.subtasks", "all.factors", "all.__raw__", "__source__.offsets"} <= names
    raw = {r[1]: r[3] for r in operator if r[0] == "all.__raw__"}
    assert sorted(raw) == [0, 1]  # raw operator state per subtask, written by snapshot_state each microbatch
    assert any(r[0] == "all.__raw_keyed__" for r in keyed)


def test_memory_snapshots_live_in_the_process_that_took_them_and_clear_forgets_them(spark, lake):
    spec = count_job(lake, job_id="mem-clear", backend="memory")
    lake.write_events("e0.json", events(0))
    run(spark, spec, lake, max_microbatches=1)
    assert MemoryStateBackend.snapshots.get(lake.settings.job_dir(spec.job_id), "keyed", 1) is not None
    lake.write_events("e1.json", events(1))
    MemoryStateBackend.snapshots.clear()  # what another process sees: the checkpoint's file, not its rows
    with pytest.raises(InputError, match="the memory backend keeps checkpoints only in the process that took them"):
        run(spark, spec, lake)


def test_stop_and_restart_continues_exactly_like_one_uninterrupted_run(spark, lake, tmp_path):
    from tests.support.lake import Lake

    other = Lake(tmp_path / "other")
    lake.write_rules("r0.json", [{"name": "factor", "factor": 3}])
    other.write_rules("r0.json", [{"name": "factor", "factor": 3}])
    for b in range(4):
        lake.write_events(f"e{b}.json", events(b))
        other.write_events(f"e{b}.json", events(b))
    spec = all_states_job(lake, job_id="restore", checkpoint_interval=3)
    first = run(spark, spec, lake, max_microbatches=2)
    assert first.checkpoints == [1]  # stopping takes a checkpoint, like stop-with-savepoint
    second = run(spark, spec, lake)
    assert second.restored_from == 1 and [b.batch_id for b in second.batches] == [2, 3]
    third = run(spark, spec, lake)
    assert third.batches == []  # drained: nothing is replayed or duplicated

    whole = all_states_job(other, job_id="restore", checkpoint_interval=3)
    run(spark, whole, other)
    assert sink_rows(spark, lake, spec) == sink_rows(spark, other, whole)
    assert state_at_latest_checkpoint(spark, lake, spec) == state_at_latest_checkpoint(spark, other, whole)


def test_checkpoints_pin_table_versions_and_only_num_retained_are_kept(spark, lake):
    for b in range(4):
        lake.write_events(f"e{b}.json", events(b))
    spec = all_states_job(lake, job_id="retained", checkpoint_interval=1, num_retained=2, broadcast_source=None)
    from tests.support.jobs import AllStates  # noqa: F401  (broadcast-less run of the same function)

    first = run(spark, spec, lake, max_microbatches=3)
    # Issue 59: the run said "checkpoints taken: [2, 3]" and nothing of checkpoint 1: due, but never written
    assert (first.checkpoints, first.retained, first.skipped) == ([2, 3], [2, 3], [1])
    assert first.summary("retained")["retained_checkpoints"] == [2, 3]
    from state_store.cli import checkpoints_said
    assert checkpoints_said(first.checkpoints, first.retained, first.skipped) == (
        "checkpoints taken: 2, 3; retained: 2, 3 (checkpoint 1 not written: the job keeps only its newest 2, "
        "num_retained)")
    run(spark, spec, lake)
    meta = JobStore(lake.settings.job_dir("retained"))
    checkpoints = meta.checkpoints()
    assert [c.checkpoint_id for c in checkpoints] == [3, 4]
    versions = [c.state["keyed"].version for c in checkpoints]
    assert versions[0] < versions[1]  # two runs: each commits the keyed table once
    latest = checkpoints[-1]
    assert latest.batch_id == 3 and latest.status == "COMPLETED"
    assert latest.key_group_ranges == [[0, 7], [8, 15]]
    assert latest.descriptors["all.items"].to_dict() == {"scope": "keyed", "kind": "list", "type": "LONG"}
    assert latest.state["keyed"].size_bytes > 0 and latest.entries["all.count"] == 5
    assert latest.source_offsets["main"]["files"] == ["e0.json", "e1.json", "e2.json", "e3.json"]


def test_state_writes_grow_with_changed_entries_not_with_state_size(spark, lake):
    lake.write_events("e0.json", [{"k": f"k{i}", "v": i, "op": "add", "seq": i} for i in range(200)])
    lake.write_events("e1.json", [{"k": "k1", "v": 1, "op": "add", "seq": 1000}])
    spec = all_states_job(lake, job_id="growth", checkpoint_interval=1, broadcast_source=None)
    first, = run(spark, spec, lake, max_microbatches=1).batches
    second, = run(spark, spec, lake).batches
    assert first.state_upserts >= 200 * 5
    # One touched key: its five states, the per-namespace counter, plus operator and raw entries.
    assert second.state_upserts < 20
    from delta.tables import DeltaTable

    path = str(lake.settings.job_dir("growth") / "state" / "keyed")
    last = DeltaTable.forPath(spark, path).history(1).select("operationMetrics").first()[0]
    assert int(last["numOutputRows"]) < 20


def _write_parquet_events(directory, name, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("k", pa.string()), ("v", pa.int64()), ("op", pa.string()), ("seq", pa.int64())])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), directory / name)


class RawKeyedTally(KeyedProcessFunction):
    """Counts microbatches per key group of its subtask in raw keyed state; every output shows the sum of
    the subtask's tallies, so raw keyed state lost for any key group changes the output."""

    def initialize_state(self, ctx):
        self.tally = {kg: int(ctx.raw_keyed_state(kg) or b"0") for kg in ctx.key_group_range}

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG(), 0))

    def process(self, key, records, ctx):
        self.count.update(self.count.value() + len(records))
        yield {"k": key, "n": self.count.value() * 1000 + sum(self.tally.values())}

    def snapshot_state(self, ctx):
        for kg in ctx.key_group_range:
            ctx.write_raw_keyed_state(kg, str(self.tally[kg] + 1).encode())


def test_a_small_run_reads_only_the_key_groups_it_touches_and_loses_nothing_else(spark, lake, tmp_path, monkeypatch):
    """A run of few records reads only the touched key groups' partitions (plus all raw keyed state); it must
    give what the full read gives, raw keyed state of untouched key groups included."""
    from state_store import FileSource
    from state_store.run import frame
    from tests.support.jobs import EVENT
    from tests.support.lake import Lake

    reads = []
    original = DeltaStateBackend.read

    def spy(self, checkpoint, restrict=None, partitions=None):
        df = original(self, checkpoint, restrict, partitions)
        if self.table.name == "keyed" and checkpoint is not None:
            reads.append([f for f in df.inputFiles() if "/state/keyed/" in f])  # not the touched keys' input
        return df

    monkeypatch.setattr(DeltaStateBackend, "read", spy)

    def runs(lake):
        _write_parquet_events(lake.events, "e0.parquet", [{"k": f"k{i}", "v": i, "op": "add", "seq": i}
                                                          for i in range(40)])  # every key group of 8
        _write_parquet_events(lake.events, "e1.parquet", [{"k": "k1", "v": 7, "op": "add", "seq": 100}])
        spec = count_job(lake, job_id="small", function=RawKeyedTally(),
                         source=FileSource(str(lake.events), "parquet", EVENT, max_files_per_batch=1))
        run(spark, spec, lake, max_microbatches=1)
        assert run(spark, spec, lake).records_in == 1
        files = reads[-1]
        return sink_rows(spark, lake, spec), state_at_latest_checkpoint(spark, lake, spec), files

    small_sink, small_state, small_files = runs(lake)
    monkeypatch.setattr(frame, "SMALL_RUN_RECORDS", 0)  # the full read, for reference
    full_sink, full_state, full_files = runs(Lake(tmp_path / "reference"))
    assert small_sink == full_sink and small_state == full_state
    # k1 in microbatch 1: count 2, and a tally of 1 for each of its subtask's 4 key groups (of 8)
    assert [r for r in small_sink if '"k": "k1"' in r and '"_microbatch": 1' in r] == [
        '{"_microbatch": 1, "k": "k1", "n": 2004}']
    # The small run read one count partition and the raw keyed state; the full read every partition.
    assert {f.split("state_name=")[1].split("/")[0] for f in small_files} == {"count.count", "count.__raw_keyed__"}
    assert len([f for f in small_files if "count.count" in f]) == 1
    assert len([f for f in full_files if "count.count" in f]) == 8
