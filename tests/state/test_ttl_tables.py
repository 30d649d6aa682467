"""State TTL through whole runs on real Spark and Delta, with a clock the test sets: the expiry column,
what a job reads back, and full snapshot cleanup in savepoints and ``hashmap`` checkpoints."""
from __future__ import annotations

import json

import pytest

from state_store.catalog.job_store import JobStore
from state_store.delta.points import StatePoint
from state_store.ops.restore import restore_job
from state_store.ops.savepoint import take_savepoint
from state_store.ops.state_processor import SavepointReader
from tests.support.helpers import run
from tests.support.jobs import TTL_MS, Remember, sweep_job, ticking_clock, ttl_job


@pytest.mark.parametrize("backend", ["delta", "hashmap"])
def test_expired_entries_are_never_read_back_and_full_snapshots_leave_them_out(spark, lake, backend):
    # Key a is written in microbatches 0 and 3, key b in 0, 1 and 2, key c only in 2.
    plan = {0: ["a", "b"], 1: ["b"], 2: ["b", "c"], 3: ["a"]}
    for batch, keys in plan.items():
        lake.write_events(f"e{batch}.json", [{"k": k, "v": batch * 10 + i, "op": "add", "seq": batch * 100 + i}
                                             for i, k in enumerate(keys)])
    spec = ttl_job(lake, backend)
    run(spark, spec, lake, clock=ticking_clock())
    sink = {(r["k"], r["batch"]): (r["last"], r["seen"]) for r in
            spark.read.format("delta").load(str(lake.settings.in_warehouse(spec.sink, "sink"))).collect()}
    # a, written at 0 ms, expired at 1500 ms: microbatch 3 (3000 ms) reads nothing.
    assert sink[("a", 3)] == (None, [])
    # b is rewritten every microbatch: each list element lives 1500 ms from its own write.
    assert sink[("b", 1)] == (0 + 1, [1])  # value 1 written at 0 (v = batch*10 + position)
    assert sink[("b", 2)] == (10, [10])  # element 1 (written at 0 ms) expired at 1500 ms
    meta = JobStore(lake.settings.job_dir(spec.job_id))
    latest = meta.latest_checkpoint()
    assert latest.processing_time == 3000
    assert latest.descriptors["ttl.last"].ttl.ttl_ms == TTL_MS
    # The expiry column holds last write + TTL, readable without decoding values.
    keyed = spark.read.format("delta").load(latest.state["keyed"].path)
    if backend == "delta":
        rows = {(r["state_name"], r["key"], r["batch_id"]): (r["value"], r["expiry"]) for r in keyed.collect()}
        assert rows[("ttl.last", "c", 2)] == ("21", 2000 + TTL_MS)
        # A list: each element with its expiry, the row's expiry its last element's. The working state (and so
        # an incremental checkpoint) keeps element 10, expired at 2500 ms, until something cleans it up.
        value, expiry = rows[("ttl.seen", "b", 2)]
        assert (json.loads(value), expiry) == ([[2500, 10], [3500, 20]], 3500)
    # A savepoint of the last checkpoint (3000 ms) leaves out what had expired by then: b (last written at
    # 2000 ms, expiring 3500) stays with its live elements only; c (2000 -> 3500) stays; a was rewritten at 3000.
    savepoint = take_savepoint(spark, lake.settings, spec.job_id, label="ttl", say=lambda m: None)
    saved = spark.read.format("delta").load(savepoint.table_path("keyed")).collect()
    seen = {r["key"]: json.loads(r["value"]) for r in saved if r["state_name"] == "ttl.seen"}
    assert seen == {"a": [[4500, 30]], "b": [[3500, 20]], "c": [[3500, 21]]}
    assert savepoint.entries["ttl.seen"] == 3
    if backend == "delta":  # TTL turned off across a restore (Flink 2.2): every stored value is visible again
        off = ttl_job(lake, backend, NoTtl(), name="ttl-off")
        restore_job(spark, lake.settings, off, StatePoint(savepoint), say=lambda m: None)
        lake.write_events("e4.json", [{"k": "b", "v": 40, "op": "add", "seq": 400}])
        run(spark, off, lake, clock=lambda: 60_000)  # long after b's entries (3500 ms) expired
        rows = spark.read.format("delta").load(str(lake.settings.in_warehouse(off.sink, "sink"))).collect()
        assert [(r["k"], r["batch"], r["last"], r["seen"]) for r in rows] == [("b", 4, 20, [20])]
    # Through the State Processor API: typed elements, nothing expired.
    reader = SavepointReader.for_checkpoint(spark, spec.job_id, settings=lake.settings)
    got = sorted((r["key"], r["value"]) for r in reader.keyed_state("seen").collect())
    assert got == [("a", 30), ("b", 20), ("c", 21)]
    if backend == "hashmap":  # a full snapshot per checkpoint: cleaned as a savepoint is
        values = {r["key"]: json.loads(r["value"]) for r in keyed.collect() if r["state_name"] == "ttl.seen"}
        assert values == seen
        assert latest.entries["ttl.seen"] == 3


class NoTtl(Remember):
    """Remember with TTL turned off."""

    def ttl(self):
        return None


def _keys_at(spark, lake, job_id, batch):
    meta = JobStore(lake.settings.job_dir(job_id))
    checkpoint = [c for c in meta.readable_checkpoints() if c.batch_id == batch][-1]
    reader = SavepointReader.for_checkpoint(spark, job_id, settings=lake.settings,
                                            checkpoint_id=checkpoint.checkpoint_id)
    return sorted(r["key"] for r in reader.keyed_state("last").collect())


@pytest.mark.parametrize("backend", ["delta", "hashmap"])
def test_incremental_cleanup_removes_expired_entries_a_few_per_microbatch_and_never_a_live_one(spark, lake, backend):
    spec, clock, said = sweep_job(lake, f"sweep-{backend}", backend), ticking_clock(), []
    meta = JobStore(lake.settings.job_dir(spec.job_id))
    runs = (1, 3, 2)  # microbatches 0, 1-3, 4-5; a run visits 2 entries per microbatch (1 per subtask)
    for n in runs:
        run(spark, spec, lake, max_microbatches=n, clock=clock, progress=said.append)
    removed = [int(line.split("removed ")[1].split()[0]) for line in said if "TTL incremental cleanup" in line]
    assert len(removed) == len(runs) and all(r <= 2 * n for r, n in zip(removed, runs))  # never more than visited
    assert removed[0] == 0 and sum(removed) == 6  # all six went, a few per run, judged at its last microbatch
    entries = {c.batch_id: c.entries.get("ttl.last", 0) for c in meta.readable_checkpoints()}
    assert entries == {0: 6, 1: 7, 2: 7, 3: 7 - removed[1], 4: 7 - removed[1], 5: 1}  # counts follow
    assert _keys_at(spark, lake, spec.job_id, 5) == ["z"]
    # The run of microbatches 1-3 removed them at 3000 ms: its checkpoint of microbatch 1 (1000 ms, when nothing
    # had expired) still holds all seven.
    assert _keys_at(spark, lake, spec.job_id, 1) == ["k0", "k1", "k2", "k3", "k4", "k5", "z"]
    assert meta.latest_checkpoint().cleanup_cursor is not None
    if backend == "hashmap":
        return
    # delta: the rows are deleted from the table's current version, not shadowed by tombstones, and the
    # table's first version still holds them.
    path = meta.latest_checkpoint().state["keyed"].path
    current = spark.read.format("delta").load(path).filter("state_name = 'ttl.last'")
    assert {r["key"] for r in current.collect()} == {"z"} and current.filter("value IS NULL").count() == 0
    first = spark.read.format("delta").option("versionAsOf", 0).load(path)
    assert {r["key"] for r in first.collect()} == {f"k{i}" for i in range(6)}
    # A crash right after the cleanup's commit, then a replay in smaller runs ending as the job that never
    # crashed, is test_retry.py's test_a_ttl_cleanup_killed_after_its_commit_ends_as_a_clean_job_...
