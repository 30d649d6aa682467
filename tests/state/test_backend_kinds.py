"""A state backend is its kind's capabilities (state_store.state.backend), never its name: a backend written from
its base class alone, a name and the capabilities it has, runs a job, a crash's replay, a rescale and a
compaction as the backend it derives from does (issue 60)."""
from __future__ import annotations

import pytest

from state_store.catalog.job_store import JobStore
from state_store.catalog.pipelines import pipeline_backends
from state_store.delta.backends import DeltaStateBackend, HashMapStateBackend, MemoryStateBackend, create_keyed_backend
from state_store.errors import ConfigError
from state_store.ops.compaction import compact_job
from state_store.ops.restore import rescale_job
from state_store.restore_plan import check_restore_backend, restore_backends
from state_store.run.runtime import FaultInjector, InjectedFault
from state_store.state.backend import BACKENDS, backend_kind, backend_names
from tests.support.helpers import run, sink_rows, state_at_latest_checkpoint
from tests.support.jobs import all_states_job, events


class AppendedTable(DeltaStateBackend):
    """The delta backend's tables under a name of its own, declaring what they can do: every room (a run's
    checkpoint, a rescale, compaction) asks these, so it takes the incremental paths."""

    name = "test-appended"
    incremental, full_snapshot_cleanup, in_process = True, False, False


class Snapshots(HashMapStateBackend):
    """The hashmap backend's snapshots under a name of its own: full snapshots (a rescale writes its operator
    rows whole, compaction has no table to rewrite, TTL cleans while snapshotting)."""

    name = "test-snapshots"
    incremental, full_snapshot_cleanup, in_process = False, True, False


class InThisProcess(MemoryStateBackend):
    """Snapshots kept in this process: no pipeline, restore or rescale may choose it."""

    name = "test-in-process"
    in_process, allowed_in_pipelines = True, False


# Naming a subclass registers it; these are registered only while a test of this module runs, so that every other
# test (the restore form's choices, the errors' lists of backends) sees the built-in backends alone.
OURS = (AppendedTable, Snapshots, InThisProcess)
for _cls in OURS:
    del BACKENDS[_cls.name]


@pytest.fixture(autouse=True)
def registered():
    BACKENDS.update({cls.name: cls for cls in OURS})
    yield
    for cls in OURS:
        BACKENDS.pop(cls.name, None)


def test_a_backend_named_by_a_subclass_is_registered_with_the_capabilities_it_declares():
    assert backend_names()[:3] == ("delta", "hashmap", "memory")
    assert backend_kind("test-appended") is AppendedTable and AppendedTable.incremental
    assert not backend_kind("test-snapshots").incremental
    assert "test-in-process" not in pipeline_backends() and "test-in-process" not in restore_backends()
    with pytest.raises(ConfigError, match=r"the test-in-process backend keeps checkpoints only in the process"):
        check_restore_backend("test-in-process")
    with pytest.raises(ConfigError, match=r"backend 'nope' is unknown; choose one of \('delta', 'hashmap', 'memory'"):
        check_restore_backend("nope")


@pytest.mark.parametrize("backend, parent", [("test-appended", "delta"), ("test-snapshots", "hashmap")])
def test_a_backend_of_capabilities_alone_replays_a_crash_rescales_and_compacts_as_its_parent(spark, tmp_path,
                                                                                             backend, parent):
    from tests.support.lake import Lake

    lakes = {name: Lake(tmp_path / name) for name in ("parent", "twin")}
    specs = {"parent": all_states_job(lakes["parent"], backend=parent),
             "twin": all_states_job(lakes["twin"], backend=backend)}
    for lake in lakes.values():
        lake.write_rules("r0.json", [{"name": "factor", "factor": 3}])
        for batch in range(4):
            lake.write_events(f"e{batch}.json", events(batch))
    quiet = dict(say=lambda m: None)
    for name, lake in lakes.items():
        spec = specs[name]
        if name == "twin":
            with pytest.raises(InjectedFault):
                run(spark, spec, lake, max_microbatches=2, faults=FaultInjector("after_state_write", batch_id=1))
        run(spark, spec, lake, max_microbatches=2)
        rescale_job(spark, lake.settings, spec, 3, **quiet)
        run(spark, spec, lake)
    twin = JobStore(lakes["twin"].settings.job_dir(specs["twin"].job_id))
    latest = twin.latest_checkpoint()
    assert (latest.backend, latest.parallelism, latest.batch_id) == (backend, 3, 3)
    assert bool(latest.table("keyed").incremental) is (backend == "test-appended")
    assert sink_rows(spark, lakes["twin"], specs["twin"]) == sink_rows(spark, lakes["parent"], specs["parent"])
    assert state_at_latest_checkpoint(spark, lakes["twin"], specs["twin"]) == \
        state_at_latest_checkpoint(spark, lakes["parent"], specs["parent"])
    report = compact_job(spark, lakes["twin"].settings, specs["twin"].job_id, **quiet)
    assert ("new_checkpoint" in report) is (backend == "test-appended"), report
    assert type(create_keyed_backend(backend, spark, twin.job_dir, latest.job_id, latest)).__name__ == \
        {"test-appended": "AppendedTable", "test-snapshots": "Snapshots"}[backend]
