"""Savepoints and restore with changes, against real Spark and Delta (docs/operating/savepoints.md)."""
from __future__ import annotations

import shutil

import pytest

from state_store.catalog.job_store import JobStore
from state_store.catalog.savepoints import dispose_savepoint, list_savepoints, load_savepoint
from state_store.delta.log import table_snapshot
from state_store.delta.points import StatePoint
from state_store.errors import ConfigError, RestoreError
from state_store.ops.compaction import compact_job
from state_store.ops.restore import restore_job
from state_store.ops.savepoint import take_savepoint
from tests.support.helpers import keyed_values, run, sink_rows, state_at_latest_checkpoint
from tests.support.jobs import all_states_job, count_job, events

QUIET = dict(say=lambda m: None)


def _raw_free(keyed):
    return [r for r in keyed if not r[0].endswith("__raw_keyed__")]


def _feed(lake, batches):
    lake.write_rules("r0.json", [{"name": "factor", "factor": 2}])
    for batch in batches:
        lake.write_events(f"e{batch}.json", events(batch))


def _steady_and_lake(spark, tmp_path, batches: int, job):
    """Two lakes with the same input: in 'steady' the job has run it all without a stop; 'lake' is untouched."""
    from tests.support.lake import Lake

    steady, lake = Lake(tmp_path / "steady"), Lake(tmp_path / "lake")
    for target in (steady, lake):
        _feed(target, range(batches))
    run(spark, job(steady), steady)
    return steady, lake


def test_a_savepoint_is_a_complete_copy_another_engine_reads_the_same(spark, lake, monkeypatch):
    from deltalake import DeltaTable

    spec = all_states_job(lake)
    _feed(lake, range(2))
    run(spark, spec, lake)
    savepoint = take_savepoint(spark, lake.settings, spec.job_id, label="first", **QUIET)
    assert savepoint.path == str(lake.settings.savepoints / spec.job_id / "first")
    assert (savepoint.checkpoint_id, savepoint.batch_id, savepoint.parallelism, savepoint.max_parallelism) == (
        1, 1, 2, 16)
    assert savepoint.key_group_ranges == [[0, 7], [8, 15]] and savepoint.uid == "all"
    assert set(savepoint.descriptors) >= {"all.count", "all.items", "all.batches_seen"}
    keyed, operator = state_at_latest_checkpoint(spark, lake, spec)
    # Spark and delta-rs read the savepoint's keyed and operator tables to the same rows as the checkpoint.
    for table, expected, columns in (("keyed", keyed, ["state_name", "key_group", "key", "namespace", "user_key",
                                                       "value"]),
                                     ("operator", operator, ["state_name", "subtask", "mode", "value"])):
        other = DeltaTable(savepoint.table_path(table)).to_pyarrow_table().select(columns).to_pylist()
        assert sorted(tuple(r[c] for c in columns) for r in other) == expected
        mine = spark.read.format("delta").load(savepoint.table_path(table)).select(*columns).collect()
        assert sorted(tuple(r) for r in mine) == expected
    # The same savepoint of a table over DRIVER_MAX_BYTES ("first" was read whole by this process with Arrow):
    # partition by partition in this process, and through Spark (a partition over PARTITION_MAX_BYTES too): the
    # same rows, of every state kind.
    from state_store.delta import live_arrow

    monkeypatch.setattr(live_arrow, "DRIVER_MAX_BYTES", 0)
    for label, partition_max in (("by-parts", live_arrow.PARTITION_MAX_BYTES), ("by-spark", 0)):
        monkeypatch.setattr(live_arrow, "PARTITION_MAX_BYTES", partition_max)
        other = take_savepoint(spark, lake.settings, spec.job_id, label=label, **QUIET)
        for table in ("keyed", "operator"):
            rows = [DeltaTable(s.table_path(table)).to_pyarrow_table().sort_by([(c, "ascending") for c in (
                "state_name", "key_group" if table == "keyed" else "subtask")]).to_pylist() for s in (savepoint, other)]
            assert sorted(map(str, rows[0])) == sorted(map(str, rows[1])) and rows[0], label
        assert (other.entries, other.size_bytes > 0) == (savepoint.entries, True)
        dispose_savepoint(lake.settings, f"{spec.job_id}/{label}")
    assert [s.name for s in list_savepoints(lake.settings)] == ["first"]
    with pytest.raises(ConfigError, match=r"a savepoint named 'first' of job 'all-states' already exists"):
        take_savepoint(spark, lake.settings, spec.job_id, label="first", **QUIET)
    with pytest.raises(ConfigError, match=r"savepoint label '../x' is not usable"):
        take_savepoint(spark, lake.settings, spec.job_id, label="../x", **QUIET)
    with pytest.raises(ConfigError, match=r"outside the savepoint root"):
        load_savepoint(lake.settings, "../warehouse")
    dispose_savepoint(lake.settings, f"{spec.job_id}/first")
    assert list_savepoints(lake.settings) == [] and not (lake.settings.savepoints / spec.job_id / "first").exists()


def test_a_savepoint_of_a_job_without_a_checkpoint_is_refused_and_leaves_no_folder(spark, lake):
    with pytest.raises(ConfigError, match=r"job 'nothing-yet' has no checkpoint yet: run it first, then take a "
                                          r"savepoint"):
        take_savepoint(spark, lake.settings, "nothing-yet", **QUIET)
    assert not lake.settings.job_dir("nothing-yet").exists()


def test_a_savepoint_that_fails_half_way_leaves_nothing_that_looks_complete(spark, lake, monkeypatch):
    import state_store.catalog.savepoints as savepoint_store  # it writes the metadata, last

    spec = count_job(lake)
    _feed(lake, range(1))
    run(spark, spec, lake)

    def disk_full(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(savepoint_store, "write_json_atomic", disk_full)
    with pytest.raises(OSError, match="No space left"):
        take_savepoint(spark, lake.settings, spec.job_id, label="broken", **QUIET)
    assert list_savepoints(lake.settings) == []
    assert [p.name for p in (lake.settings.savepoints / spec.job_id).iterdir()] == []


def test_a_savepoint_restores_after_the_jobs_tables_are_vacuumed_and_after_they_are_deleted(spark, tmp_path):
    steady, lake = _steady_and_lake(spark, tmp_path, 5, count_job)
    spec = count_job(lake)
    run(spark, spec, lake, max_microbatches=2)
    savepoint = take_savepoint(spark, lake.settings, spec.job_id, **QUIET)
    keyed_at_savepoint, _ = state_at_latest_checkpoint(spark, lake, spec)
    run(spark, spec, lake, max_microbatches=2)
    # Compact the job's tables (their rows move into new files) and VACUUM them down to their latest version:
    # the files of the savepoint's checkpoint are gone from them.
    compact_job(spark, lake.settings, spec.job_id, say=lambda line: None)
    for table in ("keyed", "operator"):
        path = lake.settings.job_dir(spec.job_id) / "state" / table
        before = len(list(path.rglob("*.parquet")))
        from deltalake import DeltaTable

        # delta-rs's VACUUM (Spark's lists the table in a job of its own: ~10 s a table here); the same files go.
        DeltaTable(str(path)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
        assert before > len(list(path.rglob("*.parquet"))) == table_snapshot(path)["num_files"]
    with pytest.raises(RestoreError, match=r"would rewind the job"):
        restore_job(spark, lake.settings, spec, StatePoint(savepoint), **QUIET)
    # Delete the job's whole folder: its sink still holds microbatch 3, so the savepoint (microbatch 1) may not
    # come back under the same id either (the sink would keep rows the restored state never produced).
    shutil.rmtree(lake.settings.job_dir(spec.job_id))
    with pytest.raises(RestoreError, match=r"its output table .*sinks/counts is at microbatch 3.*would rewind"):
        restore_job(spark, lake.settings, spec, StatePoint(savepoint), **QUIET)
    assert not lake.settings.job_dir(spec.job_id).exists()
    # Into a new job id: the state of the savepoint, whole, and the job carries on to the state of a run that
    # never stopped.
    copy = count_job(lake, job_id="counts-copy")
    restored = restore_job(spark, lake.settings, copy, StatePoint(savepoint), **QUIET)
    assert (restored.checkpoint_id, restored.batch_id, restored.restored_from.savepoint) == (
        1, 1, savepoint.path)
    keyed, _ = state_at_latest_checkpoint(spark, lake, copy)
    assert keyed == keyed_at_savepoint
    run(spark, copy, lake)
    assert state_at_latest_checkpoint(spark, lake, copy)[0] == state_at_latest_checkpoint(spark, steady,
                                                                                          count_job(steady))[0]


def test_a_restore_is_refused_when_the_sink_committed_a_microbatch_no_commit_marker_records(spark, tmp_path):
    """Issue 37 #1: a run killed between its sink commit and its commit marker leaves the sink at microbatch 1
    while the job's folder says 0; a restore of another job's savepoint at microbatch 0 would let the next run
    skip the sink append of 1 (already committed, from the old state) while its state comes from the savepoint."""
    from state_store.run.context import FaultInjector, InjectedFault
    from tests.support.lake import Lake

    lake = Lake(tmp_path)
    spec, other = count_job(lake, job_id="a"), count_job(lake, job_id="b")
    _feed(lake, range(1))
    run(spark, spec, lake)
    run(spark, other, lake)
    savepoint = take_savepoint(spark, lake.settings, other.job_id, **QUIET)
    _feed(lake, range(1, 2))
    with pytest.raises(InjectedFault):
        run(spark, spec, lake, faults=FaultInjector("after_sink_write", batch_id=1))
    with pytest.raises(RestoreError, match=r"job 'a' has already committed microbatch 1 \(its output table "
                                           r".*sinks/a is at microbatch 1\), and savepoint .* is at microbatch 0: "
                                           r"restoring it would rewind the job"):
        restore_job(spark, lake.settings, spec, StatePoint(savepoint), **QUIET)
    assert JobStore(lake.settings.job_dir(spec.job_id)).checkpoint_ids() == [1]  # nothing written


def test_a_job_restored_from_another_jobs_savepoint_reads_its_own_files_that_share_a_name(spark, lake, tmp_path):
    """Issue 37 #2: offsets were bare file names, so job b never read its own e0.json after a restore from job
    a's savepoint, because a had read an e0.json in another folder. Offsets keep the source's folder now."""
    from state_store import FileSource
    from tests.support.jobs import EVENT

    spec = count_job(lake, job_id="a")
    _feed(lake, range(1))
    run(spark, spec, lake)
    savepoint = take_savepoint(spark, lake.settings, spec.job_id, **QUIET)
    own = tmp_path / "b-events"
    own.mkdir()
    (own / "e0.json").write_text((lake.events / "e0.json").read_text().replace('"k": "a"', '"k": "z"'))
    other = count_job(lake, job_id="b", source=FileSource(str(own), "json", EVENT, max_files_per_batch=1))
    restore_job(spark, lake.settings, other, StatePoint(savepoint), **QUIET)
    said = []
    run(spark, other, lake, progress=said.append)
    assert any(f"the offsets this job continues from are of another folder ({lake.events.resolve()}): every file "
               f"of {own.resolve()} is new to it" in line for line in said), said
    rows = sink_rows(spark, lake, other, with_microbatch=False)
    assert any('"k": "z"' in r for r in rows), rows  # its own e0.json was read
    assert JobStore(lake.settings.job_dir("b")).latest_checkpoint().source_offsets["main"]["dir"] == str(own.resolve())


def test_a_backend_switch_through_a_savepoint_keeps_every_value_and_the_job_carries_on(spark, tmp_path):
    steady, lake = _steady_and_lake(spark, tmp_path, 4, all_states_job)
    spec = all_states_job(lake)
    run(spark, spec, lake, max_microbatches=2)
    keyed, operator = state_at_latest_checkpoint(spark, lake, spec)
    savepoint = take_savepoint(spark, lake.settings, spec.job_id, **QUIET)
    switched = restore_job(spark, lake.settings, spec, StatePoint(savepoint), backend="hashmap", **QUIET)
    assert (switched.backend, switched.parallelism, switched.batch_id) == ("hashmap", 2, 1)
    assert state_at_latest_checkpoint(spark, lake, spec) == (keyed, operator)
    run(spark, spec, lake, max_microbatches=1)
    back = restore_job(spark, lake.settings, spec, None, backend="delta", parallelism=3, **QUIET)
    assert (back.backend, back.parallelism) == ("delta", 3)
    assert back.state["keyed"].path.endswith(f"state/g{back.checkpoint_id}/keyed")
    run(spark, spec, lake)
    assert JobStore(lake.settings.job_dir(spec.job_id)).latest_checkpoint().batch_id == 3
    assert sink_rows(spark, lake, spec) == sink_rows(spark, steady, all_states_job(steady))
    assert _raw_free(state_at_latest_checkpoint(spark, lake, spec)[0]) == _raw_free(
        state_at_latest_checkpoint(spark, steady, all_states_job(steady))[0])


def test_a_changed_uid_needs_a_uid_map_and_dropped_state_needs_allow_non_restored_state(spark, lake):
    spec = count_job(lake)
    _feed(lake, range(2))
    run(spark, spec, lake, max_microbatches=1)
    counts = keyed_values(state_at_latest_checkpoint(spark, lake, spec)[0], "count.count")
    savepoint = take_savepoint(spark, lake.settings, spec.job_id, **QUIET)
    moved = count_job(lake, job_id="counter", uid="counter")
    with pytest.raises(RestoreError, match=r"holds state that job 'counter' \(operator uid 'counter'\) would not "
                                           r"restore: 'count.count' \(keyed value, 5 entries\)\. Register it again "
                                           r"in the job, map its uid with --uid-map count=counter, or pass "
                                           r"--allow-non-restored-state to drop it"):
        restore_job(spark, lake.settings, moved, StatePoint(savepoint), **QUIET)
    assert not lake.settings.job_dir("counter").exists()  # refused before anything was written
    restore_job(spark, lake.settings, moved, StatePoint(savepoint), uid_map=["count=counter"], **QUIET)
    assert keyed_values(state_at_latest_checkpoint(spark, lake, moved)[0], "counter.count") == counts
    run(spark, moved, lake, max_microbatches=1)
    after = keyed_values(state_at_latest_checkpoint(spark, lake, moved)[0], "counter.count")
    assert after[("a", "")] == counts[("a", "")] + 3

    from tests.support.jobs import NoState

    bare = count_job(lake, job_id="bare", function=NoState())
    with pytest.raises(RestoreError, match=r"'count.count' \(keyed value, 5 entries\)"):
        restore_job(spark, lake.settings, bare.with_overrides(uid="count"), StatePoint(savepoint), **QUIET)
    dropped = restore_job(spark, lake.settings, bare.with_overrides(uid="count"), StatePoint(savepoint),
                          allow_non_restored_state=True, **QUIET)
    assert "count.count" not in dropped.entries and "count.count" not in dropped.descriptors
    assert state_at_latest_checkpoint(spark, lake, bare)[0] == []


def _metadata(job_id: str, name: str, keyed_path: str) -> dict:
    from state_store.records.metadata import SavepointMetadata, TableVersion

    return SavepointMetadata(
        job_id=job_id, name=name, checkpoint_id=1, batch_id=0, uid="count", key_type="STRING", backend="delta",
        parallelism=1, max_parallelism=8, key_group_ranges=[[0, 7]], source_offsets={}, descriptors={}, entries={},
        tables={"keyed": TableVersion(keyed_path), "operator": TableVersion("operator")}, created_ms=0).to_dict()


@pytest.mark.parametrize("where", ["absolute", "relative", "symlink"])
def test_a_savepoint_whose_metadata_points_a_table_outside_its_folder_is_refused(lake, where):
    import json

    live = lake.settings.job_dir("counts") / "state" / "keyed"  # a job's live table
    live.mkdir(parents=True)
    folder = lake.settings.savepoints / "counts" / "edited"
    folder.mkdir(parents=True)
    keyed = {"absolute": str(live), "relative": "../../../warehouse/jobs/counts/state/keyed", "symlink": "keyed"}[where]
    if where == "symlink":
        (folder / "keyed").symlink_to(live)
    (folder / "_metadata.json").write_text(json.dumps(_metadata("counts", "edited", keyed)))
    message = (rf"savepoint {folder}'s _metadata.json puts its keyed table at {live}, outside the savepoint's folder: "
               r"a savepoint's tables must be inside its own folder")
    with pytest.raises(ConfigError, match=message):
        load_savepoint(lake.settings, "counts/edited")
    warnings = []
    assert list_savepoints(lake.settings, warn=warnings.append) == [] and len(warnings) == 1
    dispose_savepoint(lake.settings, "counts/edited")  # what the error says to do: the live table is untouched
    assert not folder.exists() and live.is_dir()


def test_a_savepoint_folder_whose_metadata_names_another_savepoint_is_refused_and_disposed_by_its_folders_name(lake):
    """Issue 59: a copy of savepoint ``counts/original`` at ``other/copy`` (its metadata unchanged) was listed and
    restored as ``counts/original``, a name ``dispose`` then refused; its refusal for a table outside its folder
    named the original to dispose, which would delete the intact savepoint."""
    import json
    import shutil

    original = lake.settings.savepoints / "counts" / "original"
    original.mkdir(parents=True)
    (original / "_metadata.json").write_text(json.dumps(_metadata("counts", "original", "keyed")))
    copy = lake.settings.savepoints / "other" / "copy"
    shutil.copytree(original, copy)
    message = (r"_metadata.json names savepoint counts/original, not its folder's other/copy: a savepoint is named "
               r"by its folder; .* or dispose it \(lakestate dispose other/copy\)")
    with pytest.raises(ConfigError, match=message):
        load_savepoint(lake.settings, "other/copy")
    warnings = []
    assert [f"{s.job_id}/{s.name}" for s in list_savepoints(lake.settings, warn=warnings.append)] == ["counts/original"]
    assert len(warnings) == 1 and "other/copy" in warnings[0]
    assert dispose_savepoint(lake.settings, "other/copy").name == "copy"  # the copy goes, the original stays
    assert not copy.exists() and load_savepoint(lake.settings, "counts/original").name == "original"


def test_housekeeping_removes_inprogress_savepoints_no_live_process_owns(lake):
    import json
    import socket
    import time

    from state_store.ops.housekeeping import housekeeping
    from tests.support.helpers import dead_pid, write_holder

    job = lake.settings.savepoints / "counts"
    lease = lake.settings.job_dir("counts") / "_meta" / "lease"

    def left(name: str, owner: dict | None) -> None:  # what a savepoint's write leaves when it is cut short
        folder = job / f".inprogress-{name}-0123abcd"
        (folder / "keyed").mkdir(parents=True)
        (folder / "keyed" / "part-0.parquet").write_bytes(b"x" * 100)
        if owner is not None:
            (folder / "_owner.json").write_text(json.dumps(owner))

    left("killed", {"host": socket.gethostname(), "pid": dead_pid(), "run_id": None})
    left("alive-here", {"host": socket.gethostname(), "pid": __import__("os").getpid(), "run_id": None})
    left("remote", {"host": "another-host", "pid": 1, "run_id": "savepoint-remote"})
    left("unrecorded", None)  # killed before it recorded its owner (or left by an older release)
    remote = {"run_id": "savepoint-remote", "host": "another-host", "pid": 1, "timeout_s": 60}
    write_holder(lease, {**remote, "heartbeat_ms": int(time.time() * 1000)})  # still at work, on another host
    said = []
    report = housekeeping("counts", lake.settings, say=said.append)
    assert sorted(p.name for p in job.iterdir()) == [
        ".inprogress-alive-here-0123abcd", ".inprogress-remote-0123abcd", ".inprogress-unrecorded-0123abcd"]
    assert report["removed_savepoints"] == [".inprogress-killed-0123abcd"]
    assert any("removed savepoint folders that no live process is writing: .inprogress-killed-0123abcd" in line
               for line in said), said
    write_holder(lease, {**remote, "heartbeat_ms": int(time.time() * 1000), "released": True}, generation=2)
    housekeeping("counts", lake.settings, say=said.append)  # the remote savepoint is over: what it left goes
    assert [p.name for p in job.iterdir()] == [".inprogress-alive-here-0123abcd"]


def test_the_next_savepoint_removes_what_a_killed_one_left_and_housekeeping_keeps_one_in_progress(spark, lake,
                                                                                                  monkeypatch):
    import json
    import shutil

    import state_store.ops.savepoint as savepoint_module
    from state_store.ops.housekeeping import housekeeping
    from tests.support.helpers import dead_pid

    spec = count_job(lake)
    _feed(lake, range(1))
    run(spark, spec, lake)
    job = lake.settings.savepoints / spec.job_id
    snapshot = savepoint_module.table_snapshot

    def meanwhile(path):  # while the first savepoint writes: housekeeping runs, and a copy of it is "killed"
        work = path.parent
        housekeeping(spec.job_id, lake.settings, say=lambda m: None)
        assert work.is_dir()  # this process, holding the job's lease, writes it
        owner = json.loads((work / "_owner.json").read_text())
        killed = job / ".inprogress-killed-0123abcd"
        if not killed.exists():
            shutil.copytree(work, killed)
            (killed / "_owner.json").write_text(json.dumps({**owner, "pid": dead_pid()}))
        return snapshot(path)

    monkeypatch.setattr(savepoint_module, "table_snapshot", meanwhile)
    take_savepoint(spark, lake.settings, spec.job_id, label="first", **QUIET)
    monkeypatch.undo()
    assert sorted(p.name for p in job.iterdir()) == [".inprogress-killed-0123abcd", "first"]
    assert sorted(p.name for p in (job / "first").iterdir()) == ["_metadata.json", "keyed", "operator"]
    take_savepoint(spark, lake.settings, spec.job_id, label="second", **QUIET)
    assert sorted(p.name for p in job.iterdir()) == ["first", "second"]


def test_rescale_savepoint_retention_keeps_the_newest_n_and_never_touches_labelled_or_manual_ones(spark, lake):
    import time

    from state_store.ops.savepoint import RESCALE_PREFIX, retain_rescale_savepoints, savepoint_of_checkpoint

    spec = count_job(lake)
    lake.write_events("e0.json", events(0))
    run(spark, spec, lake)
    meta = JobStore(lake.settings.job_dir(spec.job_id))
    take_savepoint(spark, lake.settings, spec.job_id, label="keep-me", **QUIET)
    manual = take_savepoint(spark, lake.settings, spec.job_id, **QUIET)  # savepoint-<checkpoint>-<time>
    rescales = []
    for _ in range(3):  # what three rescales with a savepoint first take (names differ by the second)
        rescales.append(savepoint_of_checkpoint(spark, lake.settings, meta.latest_checkpoint(), meta.job_dir,
                                                prefix=RESCALE_PREFIX, **QUIET).name)
        time.sleep(1.1)
    with pytest.raises(ConfigError, match="must be 0 or more, got -1"):
        retain_rescale_savepoints(lake.settings, spec.job_id, -1, **QUIET)
    assert retain_rescale_savepoints(lake.settings, spec.job_id, 1, **QUIET) == rescales[:2]
    assert sorted(s.name for s in list_savepoints(lake.settings, spec.job_id)) == sorted(
        ["keep-me", manual.name, rescales[2]])
    assert retain_rescale_savepoints(lake.settings, spec.job_id, 1, **QUIET) == []
