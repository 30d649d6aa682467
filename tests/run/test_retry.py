"""A retry after a crash never takes the crashed attempt's writes for its own (issues 18 and 25).

Each write that is not a microbatch (restore, rescale, compaction, bootstrap) is crashed right after it
committed, before the checkpoint or metadata that would make it count; then it is retried with different
input, and the job must end exactly as a job where only the retry ever happened."""
from __future__ import annotations

import pytest

from state_store import Types, ValueStateDescriptor
from state_store.catalog.job_store import JobStore
from state_store.delta.points import StatePoint
from state_store.ops.restore import rescale_job, restore_job
from state_store.ops.state_processor import SavepointWriter
from tests.support.helpers import keyed_values, run, sink_rows, state_at_latest_checkpoint
from tests.support.jobs import all_states_job, count_job, events
from tests.support.lake import Lake

QUIET = dict(say=lambda m: None)


class Crash(Exception):
    """Stands for a kill -9 at the moment it is raised."""


def _crash_before_the_checkpoint(monkeypatch):
    """Crash every operation once its state tables are committed, before its checkpoint is written."""

    def crash(self, checkpoint):
        raise Crash(f"killed before checkpoint {checkpoint.checkpoint_id} was written")

    monkeypatch.setattr(JobStore, "write_checkpoint", crash)
    return lambda: monkeypatch.undo()


def _twin_lakes(tmp_path, names: tuple[str, str], batches: int, **job):
    """Two lakes with the same input (rules, then ``batches`` event files) and the same all-states job on each:
    the one an operation is killed on, and its twin where only the retry happens."""
    lakes = tuple(Lake(tmp_path / name) for name in names)
    for target in lakes:
        target.write_rules("r0.json", [{"name": "factor", "factor": 3}])
        for batch in range(batches):
            target.write_events(f"e{batch}.json", events(batch))
    return (*lakes, {id(t): all_states_job(t, **job) for t in lakes})


def _bootstrap(spark, lake, job_id: str, name: str, counts: dict[str, int]):
    rows = spark.createDataFrame(list(counts.items()), "k string, n bigint")
    return (SavepointWriter.bootstrap(spark, job_id, uid="count", key_type=Types.STRING(), max_parallelism=8,
                                      parallelism=2, settings=lake.settings)
            .with_keyed_state(ValueStateDescriptor("count", Types.LONG()), rows, key="k", value="n")
            .write(name, **QUIET))


def test_a_restore_killed_after_its_commit_then_one_of_another_savepoint_gives_that_savepoints_state(
        spark, lake, monkeypatch):
    _bootstrap(spark, lake, "sp", "first", {"a": 5, "b": 7, "5": 9})
    _bootstrap(spark, lake, "oth", "b", {"100": 1, "b": 3, "5": 1})
    killed, clean = count_job(lake, job_id="rz5"), count_job(lake, job_id="rz5-clean")
    undo = _crash_before_the_checkpoint(monkeypatch)
    with pytest.raises(Crash):
        restore_job(spark, lake.settings, killed, StatePoint.of_savepoint(lake.settings, "sp/first"), **QUIET)
    undo()
    assert (lake.settings.job_dir("rz5") / "state" / "g1" / "keyed" / "_delta_log").is_dir()  # it did commit
    for spec in (killed, clean):
        restore_job(spark, lake.settings, spec, StatePoint.of_savepoint(lake.settings, "oth/b"), **QUIET)
    assert keyed_values(state_at_latest_checkpoint(spark, lake, killed)[0], "count.count") == {
        ("100", ""): 1, ("b", ""): 3, ("5", ""): 1}
    assert state_at_latest_checkpoint(spark, lake, killed) == state_at_latest_checkpoint(spark, lake, clean)
    # A run later the job is still one that only ever restored oth/b: its state and its sink.
    lake.write_events("e0.json", [{"k": "5", "v": 1, "op": "add", "seq": 0}, {"k": "b", "v": 1, "op": "add",
                                                                                "seq": 1}])
    for spec in (killed, clean):
        run(spark, spec, lake)
    assert state_at_latest_checkpoint(spark, lake, killed) == state_at_latest_checkpoint(spark, lake, clean)
    assert sink_rows(spark, lake, killed) == sink_rows(spark, lake, clean)
    assert keyed_values(state_at_latest_checkpoint(spark, lake, killed)[0], "count.count")[("5", "")] == 2


def test_a_rescale_killed_after_its_operator_commit_leaks_into_no_later_run_rescale_or_compaction(
        spark, tmp_path, monkeypatch):
    from state_store.ops.compaction import compact_job

    steady, lake, specs = _twin_lakes(tmp_path, ("steady", "lake"), 4, parallelism=4)

    def both(step):
        for target in (steady, lake):
            step(target, specs[id(target)])

    def kill_a_scale_down():
        undo = _crash_before_the_checkpoint(monkeypatch)
        with pytest.raises(Crash):  # raw operator state of subtasks 2 and 3 dropped, split lists merged
            rescale_job(spark, lake.settings, specs[id(lake)], 2, allow_non_restored_state=True, **QUIET)
        undo()

    def same():
        assert state_at_latest_checkpoint(spark, lake, specs[id(lake)]) == state_at_latest_checkpoint(
            spark, steady, specs[id(steady)])

    both(lambda t, s: run(spark, s, t, max_microbatches=2))
    kill_a_scale_down()
    both(lambda t, s: run(spark, s, t, max_microbatches=1))  # the run continues from the checkpoint at p=4
    same()
    kill_a_scale_down()
    both(lambda t, s: rescale_job(spark, t.settings, s, 3, allow_non_restored_state=True, **QUIET))
    same()
    both(lambda t, s: compact_job(spark, t.settings, s.job_id, **QUIET))
    same()
    both(lambda t, s: run(spark, s, t))
    same()
    assert sink_rows(spark, lake, specs[id(lake)]) == sink_rows(spark, steady, specs[id(steady)])


def test_a_compaction_killed_after_its_rewrite_then_one_after_more_input_ends_as_a_clean_job(spark, tmp_path):
    from state_store.ops.compaction import compact_job

    clean, lake, specs = _twin_lakes(tmp_path, ("clean", "lake"), 3)
    for target in (clean, lake):
        run(spark, specs[id(target)], target, max_microbatches=2)

    def crash(at):
        if at == "after_rewrite":
            raise Crash(at)

    with pytest.raises(Crash):
        compact_job(spark, lake.settings, specs[id(lake)].job_id, fault=crash, **QUIET)
    for target in (clean, lake):  # more input, then the retry compacts a later checkpoint
        run(spark, specs[id(target)], target)
        compact_job(spark, target.settings, specs[id(target)].job_id, **QUIET)
    assert state_at_latest_checkpoint(spark, lake, specs[id(lake)]) == state_at_latest_checkpoint(
        spark, clean, specs[id(clean)])
    assert sink_rows(spark, lake, specs[id(lake)]) == sink_rows(spark, clean, specs[id(clean)])


def test_a_bootstrap_killed_after_writing_its_tables_then_retried_with_other_rows_holds_only_those(
        spark, lake, monkeypatch):
    import state_store.catalog.savepoints as savepoint_store  # it writes a savepoint's folder and metadata
    from state_store.ops.state_processor import SavepointReader

    def killed(path, data):
        raise Crash(f"killed before {path} was written")

    # What a kill -9 leaves: both tables committed in the hidden folder, no metadata, nothing cleaned up.
    monkeypatch.setattr(savepoint_store, "write_json_atomic", killed)
    monkeypatch.setattr(savepoint_store, "rmtree", lambda *a, **k: None)
    with pytest.raises(Crash):
        _bootstrap(spark, lake, "boot", "v1", {"a": 5, "b": 7})
    monkeypatch.undo()
    _bootstrap(spark, lake, "boot", "v1", {"b": 3, "c": 1})
    _bootstrap(spark, lake, "boot", "clean", {"b": 3, "c": 1})

    def counts(name):
        rows = SavepointReader.for_savepoint(spark, f"boot/{name}", lake.settings).keyed_state("count").collect()
        return sorted((r["key"], r["value"]) for r in rows)

    assert counts("v1") == counts("clean") == [("b", 3), ("c", 1)]


def _sweeps_killed_after_their_cleanup(spark, tmp_path):
    """Three sweep jobs (TTL with incremental cleanup only) after microbatch 0: in ``grouped`` and ``compacted``
    a run of microbatches 1-3 killed once its cleanup is committed; ``clean`` ran them as that run did. Then two
    files more for all three, which the caller's retries replay past; ``clean`` is run to the end."""
    from state_store.run.runtime import FaultInjector, InjectedFault
    from tests.support.jobs import sweep_job, ticking_clock

    lakes = tuple(Lake(tmp_path / name) for name in ("clean", "grouped", "compacted"))
    specs = {id(t): sweep_job(t, "sweep", "delta") for t in lakes}
    clocks = {id(t): ticking_clock() for t in lakes}
    for target in lakes:
        run(spark, specs[id(target)], target, max_microbatches=1, clock=clocks[id(target)])
    for target in lakes[1:]:
        with pytest.raises(InjectedFault):
            run(spark, specs[id(target)], target, max_microbatches=3, clock=clocks[id(target)],
                faults=FaultInjector("after_cleanup_write", 3))
    for batch in (6, 7):  # more input than the killed run planned, read only by the runs after it
        for target in lakes:
            target.write_events(f"e{batch}.json", [{"k": "z", "v": batch, "op": "add", "seq": batch * 100}])
    clean = lakes[0]
    for n in (3, None):
        run(spark, specs[id(clean)], clean, max_microbatches=n, clock=clocks[id(clean)])
    return lakes, specs, clocks


def _by_microbatch(spark, lake, spec) -> dict:
    """Microbatch -> (state, entry counts, cleanup cursor) at each readable checkpoint of ``lake``'s sweep job."""
    from tests.support.helpers import state_at_checkpoint

    found = {c.batch_id: c for c in JobStore(lake.settings.job_dir(spec.job_id)).readable_checkpoints()}
    return {batch: (state_at_checkpoint(spark, lake, spec, c), c.entries, c.cleanup_cursor)
            for batch, c in found.items()}


def test_a_ttl_cleanup_killed_after_its_commit_ends_as_a_clean_job_replayed_in_smaller_runs_or_after_a_compaction(
        spark, tmp_path):
    # One clean reference for two retries (they share it: it was built twice when they were two tests).
    # grouped: the replay in smaller runs takes each path of a committed cleanup (ttl/cleanup.py): a run ending
    # before its microbatch (1), one ending at it (2-3), then a run past it with the new input (4-7).
    # compacted: a compaction before the replay, which replays 1-3 and runs on past them in one run.
    from state_store.ops.compaction import compact_job

    (clean, grouped, compacted), specs, clocks = _sweeps_killed_after_their_cleanup(spark, tmp_path)
    reference = _by_microbatch(spark, clean, specs[id(clean)])  # read once, compared with both retries
    assert sorted(reference) == list(range(8))
    said = []
    for n in (1, 2, None):
        run(spark, specs[id(grouped)], grouped, max_microbatches=n, clock=clocks[id(grouped)],
            progress=said.append)
    assert any("an earlier attempt already cleaned up at microbatch 3" in line for line in said)  # at 1
    assert any("committed by an earlier attempt, removed" in line for line in said)  # at 3
    assert _by_microbatch(spark, grouped, specs[id(grouped)]) == reference
    said = []
    report = compact_job(spark, compacted.settings, "sweep", say=said.append)
    run(spark, specs[id(compacted)], compacted, clock=clocks[id(compacted)])
    assert _by_microbatch(spark, compacted, specs[id(compacted)]) == reference
    # The compaction left the tables as they were, said why, and the next one compacts.
    assert "new_checkpoint" not in report and report["files_deleted"] == 0
    assert any("a run removed expired entries after microbatch 3 but stopped before its checkpoint" in line
               for line in said), said
    assert "new_checkpoint" in compact_job(spark, compacted.settings, "sweep", **QUIET)


def test_a_rescale_writes_past_a_higher_generation_an_older_release_left_in_the_table(spark, tmp_path):
    # Releases before generations were lease generations wrote a restore's rows at txnVersion = checkpoint id,
    # which a job with many checkpoints has far above its lease generation: a rescale must still go through,
    # with rows newer than those.
    from state_store.delta.backends import create_operator_backend
    from state_store.delta.state_tables import append_idempotent

    steady, lake, specs = _twin_lakes(tmp_path, ("steady", "lake"), 2, parallelism=2)
    for target in (steady, lake):
        run(spark, specs[id(target)], target)
    meta = JobStore(lake.settings.job_dir(specs[id(lake)].job_id))
    backend = create_operator_backend("delta", spark, meta.job_dir, specs[id(lake)].job_id, meta.latest_checkpoint())
    empty = spark.read.format("delta").load(str(backend.path)).limit(0)
    assert append_idempotent(empty, backend.path, backend.restore_app_id, 50, ("state_name",), "generation")
    for target in (steady, lake):
        rescale_job(spark, target.settings, specs[id(target)], 3, **QUIET)
    assert meta.latest_checkpoint().state["operator"].generations[-1] == 51
    assert state_at_latest_checkpoint(spark, lake, specs[id(lake)]) == state_at_latest_checkpoint(
        spark, steady, specs[id(steady)])
