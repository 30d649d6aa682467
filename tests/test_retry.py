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

from .conftest import Lake
from .helpers import keyed_values, run, sink_rows, state_at_latest_checkpoint
from .jobs import all_states_job, count_job, events

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

    steady, lake, specs = _twin_lakes(tmp_path, ("steady", "lake"), 5, parallelism=4)

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

    clean, lake, specs = _twin_lakes(tmp_path, ("clean", "lake"), 4)
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
    import state_store.ops.savepoint as savepoint_module
    from state_store.ops.state_processor import SavepointReader

    def killed(path, data):
        raise Crash(f"killed before {path} was written")

    # What a kill -9 leaves: both tables committed in the hidden folder, no metadata, nothing cleaned up.
    monkeypatch.setattr(savepoint_module, "write_json_atomic", killed)
    monkeypatch.setattr(savepoint_module, "rmtree", lambda *a, **k: None)
    with pytest.raises(Crash):
        _bootstrap(spark, lake, "boot", "v1", {"a": 5, "b": 7})
    monkeypatch.undo()
    _bootstrap(spark, lake, "boot", "v1", {"b": 3, "c": 1})
    _bootstrap(spark, lake, "boot", "clean", {"b": 3, "c": 1})

    def counts(name):
        rows = SavepointReader.for_savepoint(spark, f"boot/{name}", lake.settings).keyed_state("count").collect()
        return sorted((r["key"], r["value"]) for r in rows)

    assert counts("v1") == counts("clean") == [("b", 3), ("c", 1)]


def _sweeps_killed_after_their_cleanup(spark, tmp_path, more_input: int):
    """Two sweep jobs (TTL with incremental cleanup only) after microbatch 0 and ``more_input`` files more: in
    ``lake`` a run of microbatches 1-3 killed once its cleanup is committed; ``clean`` ran them as that run
    did. The caller retries ``lake`` (the killed run's microbatches are replayed) and runs ``clean`` on."""
    from state_store.run.runtime import FaultInjector, InjectedFault

    from .test_ttl_tables import _clock, _sweep

    clean, lake = Lake(tmp_path / "clean"), Lake(tmp_path / "lake")
    specs = {id(t): _sweep(t, "sweep", "delta") for t in (clean, lake)}
    clocks = {id(t): _clock() for t in (clean, lake)}
    for target in (clean, lake):
        run(spark, specs[id(target)], target, max_microbatches=1, clock=clocks[id(target)])
    with pytest.raises(InjectedFault):
        run(spark, specs[id(lake)], lake, max_microbatches=3, clock=clocks[id(lake)],
            faults=FaultInjector("after_cleanup_write", 3))
    for batch in range(6, 6 + more_input):
        for target in (clean, lake):
            target.write_events(f"e{batch}.json", [{"k": "z", "v": batch, "op": "add", "seq": batch * 100}])
    run(spark, specs[id(clean)], clean, max_microbatches=3, clock=clocks[id(clean)])
    return clean, lake, specs, clocks


def _same_at_every_microbatch(spark, clean, lake, specs, last):
    from .helpers import state_at_checkpoint

    ours = {c.batch_id: c for c in JobStore(lake.settings.job_dir("sweep")).readable_checkpoints()}
    theirs = {c.batch_id: c for c in JobStore(clean.settings.job_dir("sweep")).readable_checkpoints()}
    assert sorted(ours) == sorted(theirs) == list(range(last + 1))
    for batch in range(last + 1):
        assert state_at_checkpoint(spark, lake, specs[id(lake)], ours[batch]) == state_at_checkpoint(
            spark, clean, specs[id(clean)], theirs[batch]), batch
        assert (ours[batch].entries, ours[batch].cleanup_cursor) == (theirs[batch].entries,
                                                                      theirs[batch].cleanup_cursor), batch


def test_a_ttl_cleanup_killed_after_its_commit_then_a_replay_with_more_input_ends_as_a_clean_job(spark, tmp_path):
    clean, lake, specs, clocks = _sweeps_killed_after_their_cleanup(spark, tmp_path, more_input=2)
    for target in (clean, lake):  # the replay goes on past the killed run's microbatches, in one run
        run(spark, specs[id(target)], target, clock=clocks[id(target)])
    _same_at_every_microbatch(spark, clean, lake, specs, 7)


def test_a_compaction_between_a_killed_ttl_cleanup_and_its_replay_brings_no_removed_entry_back(spark, tmp_path):
    from state_store.ops.compaction import compact_job

    clean, lake, specs, clocks = _sweeps_killed_after_their_cleanup(spark, tmp_path, more_input=0)
    said = []
    report = compact_job(spark, lake.settings, "sweep", say=said.append)
    for target in (clean, lake):
        run(spark, specs[id(target)], target, clock=clocks[id(target)])
    _same_at_every_microbatch(spark, clean, lake, specs, 5)
    # The compaction left the tables as they were, said why, and the next one compacts.
    assert "new_checkpoint" not in report and report["files_deleted"] == 0
    assert any("a run removed expired entries after microbatch 3 but stopped before its checkpoint" in line
               for line in said), said
    assert "new_checkpoint" in compact_job(spark, lake.settings, "sweep", **QUIET)


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
