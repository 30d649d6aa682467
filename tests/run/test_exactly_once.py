"""A crash at any step of the microbatch protocol, then a rerun, equals a run without the crash."""
from __future__ import annotations

import pytest

from state_store.catalog.job_store import JobStore
from state_store.run.runtime import FAULT_POINTS, FaultInjector, InjectedFault
from tests.support.helpers import run, sink_rows, state_at_latest_checkpoint
from tests.support.jobs import all_states_job, events
from tests.support.lake import Lake

BATCHES = 3


def _prepare(lake: Lake) -> None:
    lake.write_rules("r0.json", [{"name": "factor", "factor": 2}])
    for b in range(BATCHES):
        lake.write_events(f"e{b}.json", events(b))


@pytest.fixture(scope="module")
def reference(spark, tmp_path_factory):
    lake = Lake(tmp_path_factory.mktemp("reference"))
    _prepare(lake)
    spec = all_states_job(lake, job_id="eo")
    run(spark, spec, lake)
    return sink_rows(spark, lake, spec), state_at_latest_checkpoint(spark, lake, spec)


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_crash_then_rerun_gives_the_same_state_and_sink_as_a_run_without_crash(spark, lake, reference, point):
    _prepare(lake)
    spec = all_states_job(lake, job_id="eo")  # checkpoint_interval=2: microbatch 1 ends with a checkpoint
    with pytest.raises(InjectedFault):
        run(spark, spec, lake, faults=FaultInjector(point, batch_id=1))
    rerun = run(spark, spec, lake)
    assert rerun.batches, "the rerun must process or replay the crashed microbatch"
    sink, state = reference
    assert sink_rows(spark, lake, spec) == sink  # nothing lost, nothing duplicated
    assert state_at_latest_checkpoint(spark, lake, spec) == state
    meta = JobStore(lake.settings.job_dir("eo"))
    assert meta.last_commit() == BATCHES - 1


@pytest.mark.parametrize("point", ["after_sink_write", "before_checkpoint", "after_checkpoint"])
def test_the_hashmap_backend_recovers_from_a_crash_like_the_delta_backend(spark, lake, tmp_path, point):
    reference_lake = Lake(tmp_path / "reference")
    _prepare(reference_lake)
    _prepare(lake)
    spec = all_states_job(lake, job_id="eo-hashmap", backend="hashmap")
    run(spark, all_states_job(reference_lake, job_id="eo-hashmap", backend="hashmap"), reference_lake)
    with pytest.raises(InjectedFault):
        run(spark, spec, lake, faults=FaultInjector(point, batch_id=1))
    run(spark, spec, lake)
    assert sink_rows(spark, lake, spec) == sink_rows(spark, reference_lake, spec)
    assert state_at_latest_checkpoint(spark, lake, spec) == state_at_latest_checkpoint(spark, reference_lake, spec)


def test_crash_in_the_first_microbatch_before_any_checkpoint_recovers(spark, lake, reference):
    _prepare(lake)
    spec = all_states_job(lake, job_id="eo")
    with pytest.raises(InjectedFault):
        run(spark, spec, lake, faults=FaultInjector("after_state_write", batch_id=0))
    run(spark, spec, lake)
    assert sink_rows(spark, lake, spec) == reference[0]
    assert state_at_latest_checkpoint(spark, lake, spec) == reference[1]
