"""Storage faults: a damaged checkpoint falls back to the one before it with a warning naming it; what cannot be
recovered is a clear error naming the file and what to do."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from state_store import ConfigError, RestoreError
from state_store.catalog.job_store import JobStore
from state_store.run.runtime import FaultInjector, InjectedFault
from tests.support.helpers import run, sink_rows, state_at_latest_checkpoint
from tests.support.jobs import count_job, events
from tests.support.lake import Lake


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def _reference(spark, tmp_path, **overrides):
    lake = Lake(tmp_path / "reference")
    for b in range(3):
        lake.write_events(f"e{b}.json", events(b))
    spec = count_job(lake, **overrides)
    run(spark, spec, lake)
    return sink_rows(spark, lake, spec), state_at_latest_checkpoint(spark, lake, spec)


def _two_checkpoints(spark, lake, **overrides):
    """Microbatches 0 and 1 run, checkpoints 1 and 2 retained; then one more input file."""
    spec = count_job(lake, **overrides)
    for b in range(2):
        lake.write_events(f"e{b}.json", events(b))
    run(spark, spec, lake)
    lake.write_events("e2.json", events(2))
    meta = JobStore(lake.settings.job_dir(spec.job_id))
    assert meta.checkpoint_ids() == [1, 2]
    return spec, meta


@pytest.mark.parametrize("backend", ["delta", "hashmap"])
def test_a_corrupted_latest_checkpoint_falls_back_to_the_one_before_with_a_warning(spark, lake, tmp_path, backend):
    spec, meta = _two_checkpoints(spark, lake, backend=backend)
    _truncate(meta.checkpoints_dir / "chk-2.json")
    said = []
    result = run(spark, spec, lake, progress=said.append)
    assert result.restored_from == 1
    assert any("warning: checkpoint 2's file" in line and "chk-2.json is corrupt" in line for line in said), said
    assert any("falling back to checkpoint 1 (microbatch 0)" in line for line in said), said
    assert [b.batch_id for b in result.batches] == [1, 2]  # 1 replayed from its recorded plan
    assert (sink_rows(spark, lake, spec), state_at_latest_checkpoint(spark, lake, spec)) == \
        _reference(spark, tmp_path, backend=backend)


def test_when_every_checkpoint_is_corrupt_the_error_names_each_file(spark, lake):
    spec, meta = _two_checkpoints(spark, lake)
    for cid in (1, 2):
        (meta.checkpoints_dir / f"chk-{cid}.json").write_text("{")
    with pytest.raises(RestoreError, match=r"no retained checkpoint can be restored: checkpoint 2's file .*chk-2\.json "
                                           r"is corrupt .* \| checkpoint 1's file .*chk-1\.json is corrupt"):
        run(spark, spec, lake)


def test_a_corrupted_plan_is_a_clear_error_naming_the_file(spark, lake):
    spec = count_job(lake)
    for b in range(2):
        lake.write_events(f"e{b}.json", events(b))
    with pytest.raises(InjectedFault):
        run(spark, spec, lake, faults=FaultInjector("after_plan", batch_id=1))
    plan = JobStore(lake.settings.job_dir(spec.job_id)).plans / "1.json"
    _truncate(plan)
    with pytest.raises(ConfigError, match=rf"the plan of microbatch 1, {plan}, is corrupt .*Restore the file"):
        run(spark, spec, lake)


def test_a_corrupted_state_table_log_entry_is_a_clear_error_naming_it(spark, lake):
    spec, meta = _two_checkpoints(spark, lake)
    version = meta.latest_checkpoint().state["keyed"].version
    entry = lake.settings.job_dir(spec.job_id) / "state" / "keyed" / "_delta_log" / f"{version:020d}.json"
    _truncate(entry)
    with pytest.raises(RestoreError, match=rf"checkpoint 2's keyed state table .*: {entry} is corrupt \(line \d+: .*"
                                           r"Restore the file from a backup"):
        run(spark, spec, lake)


def _a_data_file(table: Path, version: int) -> Path:
    log = table / "_delta_log" / f"{version:020d}.json"
    adds = [json.loads(line)["add"]["path"] for line in log.read_text().splitlines() if '"add"' in line]
    return table / adds[0]


def test_a_deleted_state_data_file_is_a_clear_error_naming_it(spark, lake):
    spec, meta = _two_checkpoints(spark, lake)
    table = lake.settings.job_dir(spec.job_id) / "state" / "keyed"
    gone = _a_data_file(table, meta.latest_checkpoint().state["keyed"].version)
    gone.unlink()
    with pytest.raises(RestoreError, match=rf"checkpoint 2's keyed state table .* needs 1 data file\(s\) that are "
                                           rf"gone: {gone}; restore them from a backup"):
        run(spark, spec, lake)


def test_a_deleted_snapshot_file_of_the_hashmap_backend_falls_back_to_the_previous_checkpoint(spark, lake, tmp_path):
    spec, meta = _two_checkpoints(spark, lake, backend="hashmap")
    snapshot = Path(meta.latest_checkpoint().state["keyed"].path)
    gone = _a_data_file(snapshot, meta.latest_checkpoint().state["keyed"].version)
    gone.unlink()
    said = []
    result = run(spark, spec, lake, progress=said.append)
    assert result.restored_from == 1
    assert any(f"needs 1 data file(s) that are gone: {gone}" in line for line in said), said
    assert (sink_rows(spark, lake, spec), state_at_latest_checkpoint(spark, lake, spec)) == \
        _reference(spark, tmp_path, backend="hashmap")
