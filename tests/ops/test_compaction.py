"""The compaction job (TTL's compaction filter) on real Spark and Delta: state tables shrink to their live
entries, every retained checkpoint still restores with identical state, a crash at any step loses nothing, and
a job carries on after it as if it had never been compacted."""
from __future__ import annotations

import json
import os
from urllib.parse import unquote

import pytest
from deltalake import DeltaTable

from state_store import StateTtlConfig
from state_store.catalog.job_store import JobStore
from state_store.delta.log import table_files, table_snapshot
from state_store.delta.points import StatePoint
from state_store.ops.compaction import compact_job, nothing_to_do
from state_store.ops.restore import restore_job
from state_store.ops.savepoint import take_savepoint
from tests.support.helpers import run, sink_rows, state_at_checkpoint, state_at_latest_checkpoint
from tests.support.jobs import TTL_MS, Remember, all_states_job, events, ticking_clock, ttl_job
from tests.support.lake import Lake

QUIET = dict(say=lambda m: None)


class Crash(Exception):
    pass


def _feed(lake, batches):
    lake.write_rules("r0.json", [{"name": "factor", "factor": 3}])
    for batch in batches:
        lake.write_events(f"e{batch}.json", events(batch))


def _retained_states(spark, lake, spec):
    meta = JobStore(lake.settings.job_dir(spec.job_id))
    return {c.checkpoint_id: state_at_checkpoint(spark, lake, spec, c) for c in meta.checkpoints()}


def test_compaction_keeps_every_retained_checkpoint_and_a_job_carries_on_as_if_never_compacted(spark, tmp_path):
    steady, lake = Lake(tmp_path / "steady"), Lake(tmp_path / "lake")
    for target in (steady, lake):
        _feed(target, range(6))
    run(spark, all_states_job(steady), steady)
    spec = all_states_job(lake, num_retained=2)
    for _ in range(4):  # four runs of one microbatch: four appends per table
        run(spark, spec, lake, max_microbatches=1)
    job_dir = lake.settings.job_dir(spec.job_id)
    before = _retained_states(spark, lake, spec)
    savepoint = take_savepoint(spark, lake.settings, spec.job_id, checkpoint_id=min(before), **QUIET)
    keyed_before = table_snapshot(job_dir / "state" / "keyed")
    report = compact_job(spark, lake.settings, spec.job_id, **QUIET)
    # Every retained checkpoint reads the same state; the new one (same microbatch) too.
    after = _retained_states(spark, lake, spec)
    assert {c: after[c] for c in before} == before
    latest = JobStore(job_dir).latest_checkpoint()
    assert latest.checkpoint_id == report["new_checkpoint"] and after[latest.checkpoint_id] == before[max(before)]
    assert latest.batch_id == 3
    # Superseded and removed entries are gone from the table's live version; its file count went down.
    assert report["superseded_removed"] > 0 and report["expired_removed"] == 0
    assert report["tables"]["keyed"]["files_after"] < keyed_before["num_files"]
    assert JobStore(job_dir).last_compaction() == json.loads(json.dumps(report))
    # The plans and commit markers of the microbatches before the oldest retained checkpoint's are gone (a
    # folder no longer grows by two files a run); the retained checkpoints' own and later ones stay.
    store = JobStore(job_dir)
    oldest = min(c.batch_id for c in store.checkpoints())
    assert 0 < oldest and [sorted(int(n[:-5]) for n in os.listdir(d)) for d in (store.plans, store.commits)] == \
        [list(range(oldest, 4))] * 2
    # Right after it there is nothing to do, seen without Spark: no table version, no checkpoint, no file
    # deleted; the history has both reports and the useful one stays the last.
    versions = {n: table_snapshot(t.path)["version"] for n, t in latest.state.items()}

    def no_spark():
        raise AssertionError("a compaction with nothing to do started Spark")

    again = compact_job(no_spark, lake.settings, spec.job_id, **QUIET)
    assert again["nothing_to_do"] and (again["checkpoint"], again["files_deleted"]) == (latest.checkpoint_id, 0)
    assert again["reason"].startswith(f"checkpoint {latest.checkpoint_id} (microbatch 3) is what the compaction")
    assert JobStore(job_dir).latest_checkpoint() == latest
    assert {n: table_snapshot(t.path)["version"] for n, t in latest.state.items()} == versions
    assert JobStore(job_dir).last_compaction() == json.loads(json.dumps(report))
    assert [r.get("nothing_to_do", False) for r in JobStore(job_dir).compaction_history()] == [True, False]
    # A savepoint taken before compaction restores, into a new job, the state of the checkpoint it copied.
    copy = all_states_job(lake, job_id="all-states-copy")
    restore_job(spark, lake.settings, copy, StatePoint(savepoint), **QUIET)
    assert state_at_latest_checkpoint(spark, lake, copy) == before[min(before)]
    # The job continues from the compacted tables and ends as the job that was never compacted.
    run(spark, spec, lake)
    assert nothing_to_do(JobStore(job_dir), JobStore(job_dir).latest_checkpoint()) is None  # a run wrote since
    assert sink_rows(spark, lake, spec) == sink_rows(spark, steady, all_states_job(steady))
    assert state_at_latest_checkpoint(spark, lake, spec) == state_at_latest_checkpoint(
        spark, steady, all_states_job(steady))
    # Once no retained checkpoint pins the versions from before the compaction (the run's checkpoints replaced
    # them), the next compaction deletes their data files, every one, and keeps what the retained ones read.
    keyed = job_dir / "state" / "keyed"
    old = {unquote(f) for f in table_files(keyed, keyed_before["version"])}
    retained = _retained_states(spark, lake, spec)
    # With a Delta checkpoint at the oldest pinned version (Delta writes one every 10 commits), it also deletes
    # the table's log before it: a log no longer grows by a commit a run. Spark still reads every version kept.
    pinned = min(c.state["keyed"].version for c in JobStore(job_dir).checkpoints())
    DeltaTable(str(keyed), version=pinned).create_checkpoint()
    second = compact_job(spark, lake.settings, spec.job_id, **QUIET)
    left = {f.relative_to(keyed).as_posix() for f in keyed.rglob("*.parquet") if "_delta_log" not in f.parts}
    assert old and not old & left and second["files_deleted"] >= len(old) + pinned and second["bytes_reclaimed"] > 0
    assert min(int(n[:20]) for n in os.listdir(keyed / "_delta_log") if n.endswith(".json")) == pinned
    assert {c: s for c, s in _retained_states(spark, lake, spec).items() if c in retained} == retained
    run(spark, spec, lake)  # the job carries on from the shortened log


def test_a_crash_at_each_step_of_a_compaction_leaves_every_retained_checkpoint_restorable(spark, tmp_path):
    lake = Lake(tmp_path)
    _feed(lake, range(3))
    spec = all_states_job(lake, num_retained=2)
    for _ in range(2):
        run(spark, spec, lake, max_microbatches=1)
    # One job, a crash at each step in turn: each retry starts from what the crash before it left, so what was
    # read after one crash is what the next must keep (read once, not again).
    after = _retained_states(spark, lake, spec)
    for step in ("after_rewrite", "after_checkpoint", "while_deleting"):
        before = after

        def fault(at, step=step):
            if at == step:
                raise Crash(at)

        with pytest.raises(Crash):
            compact_job(spark, lake.settings, spec.job_id, fault=fault, **QUIET)
        after = _retained_states(spark, lake, spec)
        assert {c: after[c] for c in before} == before, step
    compact_job(spark, lake.settings, spec.job_id, **QUIET)  # the lease was released: a retry completes
    run(spark, spec, lake)
    assert JobStore(lake.settings.job_dir(spec.job_id)).latest_checkpoint().batch_id == 2


def test_on_hashmap_compaction_deletes_a_snapshot_no_checkpoint_pins_and_the_job_carries_on(spark, tmp_path,
                                                                                              monkeypatch):
    from state_store.delta.backends import HashMapStateBackend

    steady, lake = Lake(tmp_path / "steady"), Lake(tmp_path / "lake")
    for target in (steady, lake):
        _feed(target, range(4))
    run(spark, all_states_job(steady, backend="hashmap"), steady)
    spec = all_states_job(lake, backend="hashmap", num_retained=2)
    for _ in range(2):
        run(spark, spec, lake, max_microbatches=1)
    # A crash after checkpoint 3 is written and checkpoint 1 forgotten, before its snapshot is deleted.
    discard = HashMapStateBackend.discard

    def crash(self, checkpoint, retained):
        raise Crash("before discard")

    monkeypatch.setattr(HashMapStateBackend, "discard", crash)
    with pytest.raises(Crash):
        run(spark, spec, lake, max_microbatches=1)
    monkeypatch.setattr(HashMapStateBackend, "discard", discard)
    job_dir = lake.settings.job_dir(spec.job_id)
    orphan = job_dir / "snapshots" / "chk-1"
    assert orphan.is_dir() and sorted(c.checkpoint_id for c in JobStore(job_dir).checkpoints()) == [2, 3]
    before = _retained_states(spark, lake, spec)
    report = compact_job(spark, lake.settings, spec.job_id, **QUIET)
    # Nothing rewritten (full snapshots hold live entries only); the orphan gone, the retained ones kept.
    assert report["backend"] == "hashmap" and "new_checkpoint" not in report and report["tables"] == {}
    assert not orphan.exists() and report["files_deleted"] > 0 and report["bytes_reclaimed"] > 0
    assert _retained_states(spark, lake, spec) == before
    run(spark, spec, lake)
    assert sink_rows(spark, lake, spec) == sink_rows(spark, steady, all_states_job(steady, backend="hashmap"))
    assert state_at_latest_checkpoint(spark, lake, spec) == state_at_latest_checkpoint(
        spark, steady, all_states_job(steady, backend="hashmap"))


class CompactionOnly(Remember):
    """Remember, its only TTL cleanup the compaction filter (the incremental one would get there first)."""

    def ttl(self):
        return StateTtlConfig.new_builder(TTL_MS).disable_cleanup_in_background().cleanup_in_compaction().build()


def test_the_compaction_filter_drops_expired_entries_and_list_elements(spark, lake):
    plan = {0: ["a", "b"], 1: ["b"], 2: ["b", "c"], 3: ["a"], 4: ["c"]}
    for batch, keys in plan.items():
        lake.write_events(f"e{batch}.json", [{"k": k, "v": batch * 10 + i, "op": "add", "seq": batch * 100 + i}
                                             for i, k in enumerate(keys)])
    spec = ttl_job(lake, "delta", CompactionOnly())
    run(spark, spec, lake, clock=ticking_clock())
    report = compact_job(spark, lake.settings, spec.job_id, **QUIET)
    latest = JobStore(lake.settings.job_dir(spec.job_id)).latest_checkpoint()
    assert latest.processing_time == 4000
    rows = spark.read.format("delta").load(latest.state["keyed"].path).collect()
    live = {(r["state_name"], r["key"]): (json.loads(r["value"]), r["expiry"]) for r in rows}
    # At 4000 ms: b (last written at 2000, expired at 3500) is gone; a (3000 -> 4500) and c (4000 -> 5500) live;
    # c's list element from 2000 ms is cut out.
    assert live == {("ttl.last", "a"): (30, 3000 + TTL_MS), ("ttl.seen", "a"): ([[4500, 30]], 4500),
                    ("ttl.last", "c"): (40, 4000 + TTL_MS), ("ttl.seen", "c"): ([[5500, 40]], 5500)}
    assert report["expired_removed"] == 2
    assert latest.entries["ttl.last"] == 2 and latest.entries["ttl.seen"] == 2


def test_compacting_a_job_without_a_checkpoint_is_refused_before_anything_is_written(lake):
    from state_store.errors import ConfigError

    with pytest.raises(ConfigError, match="has no checkpoint .* nothing to compact"):
        compact_job(None, lake.settings, "never-ran", **QUIET)
    assert not lake.settings.job_dir("never-ran").exists()


def test_the_compaction_history_keeps_the_newest_hundred_reports_and_the_last_that_did_work(tmp_path):
    """A compaction on a schedule of minutes writes a report a tick, "nothing to do" ones too: the history keeps
    the newest ``COMPACTION_REPORTS_KEPT``, and ``compaction.json`` the last that did work, however old."""
    store = JobStore(tmp_path / "job")
    for ms in range(1, 103):
        store.write_compaction({"job": "j", "checkpoint": 1, "started_ms": ms, "tables": {}, "nothing_to_do": ms > 1})
    assert [r["started_ms"] for r in store.compaction_history()] == list(range(102, 2, -1))
    assert len(os.listdir(tmp_path / "job" / "_meta" / "compactions")) == 100
    assert store.last_compaction()["started_ms"] == 1


def test_the_in_process_rewrite_holds_one_partition_at_a_time_and_writes_what_the_whole_table_selects(
        tmp_path, monkeypatch):
    """A compaction on a small worker holds one ``(state_name, key_group)`` partition's rows, not the table's
    (issue 59, item 8: its peak grew with the state; bench/compaction_memory.py measures it): each partition is
    read on its own and its file written before the next is read, and the table it leaves is what the whole
    table's selection (``live_arrow.latest_live`` over every row) gives, a killed run's later rows kept (its
    file untouched where all its rows are later, rewritten where some are not)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from state_store.delta import live_arrow
    from state_store.ops.compaction import _compact_in_process
    from state_store.records.layout import KEYED_TABLE
    from state_store.records.metadata import TableVersion
    from state_store.subtask import run_files

    schema, path = run_files.arrow_schema(KEYED_TABLE.schema), tmp_path / "keyed"

    def append(rows, generation=0):
        table = pa.Table.from_pylist([{"state_name": s, "key_group": g, "key": k, "namespace": "", "user_key": None,
                                       "value": v, "expiry": None, "batch_id": b, "generation": generation}
                                      for s, g, k, v, b in rows], schema=schema)
        write_deltalake(str(path), table, mode="append", partition_by=list(KEYED_TABLE.partition_columns))

    append([("a", g, f"k{g}{i}", f"v{i}", 0) for g in range(3) for i in range(4)] + [("b", 1, "x", "1", 0)])
    append([("a", 0, "k00", "new", 1), ("a", 1, "k10", None, 1), ("b", 1, "x", "2", 1)])  # superseded, removed
    append([("a", 2, "k20", "restored", 1)], generation=7)  # a write of a generation the checkpoint pins
    everything = live_arrow.read_rows(path, 2, KEYED_TABLE)  # version 2: the checkpoint's, of microbatch 1
    expected = live_arrow.latest_live(everything, KEYED_TABLE, 1, [7])
    append([("a", 5, "k50", "killed", 2)])  # a killed run's, after the checkpoint, in a partition of its own
    later = set(table_files(path)) - set(table_files(path, 2))  # its file
    append([("b", 1, "x", "killed", 1), ("b", 1, "y", "killed", 2)])  # one file of microbatches 1 and 2
    assert len(live_arrow.partitions(path, 2, KEYED_TABLE)) == 4  # a:0, a:1, a:2, b:1
    events, read, write = [], live_arrow.read_files, run_files.write_batches
    monkeypatch.setattr(live_arrow, "read_files", lambda *a: events.append(("read", read(*a))) or events[-1][1])
    monkeypatch.setattr(run_files, "write_batches", lambda *a: events.append(("write", None)) or write(*a))
    scanned, written, per_state = _compact_in_process(TableVersion(str(path), 2, generations=[7]), 1, KEYED_TABLE)
    # Each partition's rows were read, and its file written, before the next partition was read: between two
    # writes, the reads of one partition (none for a:5, which only the killed run wrote; b:1's checkpoint rows,
    # then the later rows of its mixed file).
    segments, reads = [[]], []
    for event, table in events:
        if event == "write":
            segments.append([])
        else:
            segments[-1].append({tuple(r[c] for c in KEYED_TABLE.partition_columns) for r in table.to_pylist()})
            reads.append(table)
    assert segments[-1] == [] and sorted(len(s) for s in segments[:-1]) == [0, 1, 1, 1, 2]
    assert all(len(set().union(*s)) == 1 for s in segments if s)
    assert max(r.num_rows for r in reads) == 5 and sum(r.num_rows for r in reads) == everything.num_rows + 2

    def rows(table):
        return sorted(tuple(r.values()) for r in table.select(KEYED_TABLE.columns).to_pylist())

    after = DeltaTable(str(path))
    assert rows(after.to_pyarrow_table()) == sorted(rows(expected) + [("a", 5, "k50", "", None, "killed", None, 2, 0),
                                                                      ("b", 1, "y", "", None, "killed", None, 2, 0)])
    assert len(later) == 1 and later <= set(table_files(path)) and len(table_files(path)) == 5  # a file a partition
    assert (scanned, written, per_state) == (everything.num_rows, expected.num_rows, {"a": 11, "b": 1})
