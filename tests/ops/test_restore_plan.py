"""The restore rules alone, without Spark: metadata in, a plan or the error naming the fix out. What a
restore then writes, and the refusals seen end to end, are proven in test_restore_checks, test_rescale and
test_savepoint."""
from __future__ import annotations

import pytest

from state_store import Types, ValueStateDescriptor
from state_store.errors import ConfigError, RestoreError
from state_store.key_groups import key_group_ranges
from state_store.records.layout import KEYED
from state_store.records.metadata import CheckpointMetadata, StateInfo
from state_store.restore_plan import JobFacts, RestoreRequest, plan_restore, rescale_request
from state_store.state.operator import SOURCE_OFFSETS_STATE

COUNT = StateInfo.from_descriptor(ValueStateDescriptor("count", Types.LONG()), KEYED)
JOB = JobFacts("counts", "count", Types.STRING().to_schema())


def _checkpoint(uid: str = "count", parallelism: int = 2, max_parallelism: int = 8) -> CheckpointMetadata:
    return CheckpointMetadata(
        job_id="counts", checkpoint_id=3, batch_id=5, uid=uid, key_type="STRING", backend="delta",
        parallelism=parallelism, max_parallelism=max_parallelism,
        key_group_ranges=[r.to_list() for r in key_group_ranges(max_parallelism, parallelism)],
        source_offsets={}, state={}, descriptors={f"{uid}.count": COUNT},
        entries={f"{uid}.count": 5, SOURCE_OFFSETS_STATE: 1}, completed_ms=0)


def test_a_uid_map_moves_the_state_to_the_new_uid_and_the_source_offsets_go_along():
    plan = plan_restore(JobFacts("counts", "counter", "STRING"), _checkpoint(), {"counter.count": COUNT},
                        RestoreRequest(uid_map={"count": "counter"}))
    assert plan.kept == {"count.count": "counter.count", SOURCE_OFFSETS_STATE: SOURCE_OFFSETS_STATE}
    assert plan.dropped == [] and not plan.rescale
    assert plan.changes() == "count.count -> counter.count"


def test_state_the_job_no_longer_registers_is_refused_naming_it_then_dropped_when_allowed():
    with pytest.raises(RestoreError, match=r"holds state that job 'counts' \(operator uid 'count'\) would not "
                                           r"restore: 'count.count' \(keyed value, 5 entries\).*"
                                           r"--allow-non-restored-state"):
        plan_restore(JOB, _checkpoint(), {}, RestoreRequest())
    plan = plan_restore(JOB, _checkpoint(), {}, RestoreRequest(allow_non_restored_state=True))
    assert plan.dropped == ["count.count"] and plan.changes() == "dropped ['count.count']"


def test_a_parallelism_above_max_parallelism_is_refused_before_the_definition_is_asked_for_its_states():
    def descriptors(parallelism, max_parallelism):
        raise AssertionError("the user's hooks ran at an invalid parallelism")

    with pytest.raises(ConfigError, match=r"cannot restore checkpoint 3 at parallelism 9: .*parallelism 9 is above "
                                          r"max_parallelism 8"):
        plan_restore(JOB, _checkpoint(), descriptors, RestoreRequest(parallelism=9))


def test_the_jobs_own_latest_checkpoint_at_another_parallelism_is_a_rescale_and_at_its_own_nothing_to_do():
    asked = []

    def descriptors(parallelism, max_parallelism):
        asked.append((parallelism, max_parallelism))
        return {"count.count": COUNT}

    rescale = plan_restore(JOB, _checkpoint(), descriptors, RestoreRequest(parallelism=4, own_latest=True))
    assert (rescale.rescale, rescale.nothing_to_do, rescale.parallelism) == (True, False, 4)
    assert asked == [(4, 8)]  # the definition's states, at the parallelism it will run with
    same = plan_restore(JOB, _checkpoint(), descriptors, RestoreRequest(parallelism=2, own_latest=True))
    assert same.nothing_to_do
    other_backend = plan_restore(JOB, _checkpoint(), descriptors, RestoreRequest(backend="hashmap", own_latest=True))
    assert not other_backend.rescale and other_backend.changes() == "backend delta -> hashmap"


def test_a_run_goes_on_only_with_the_uid_its_checkpoint_holds_where_a_restore_could_map_it():
    with pytest.raises(RestoreError, match=r"lakestate restore counts --checkpoint 3 --uid-map count=counter"):
        plan_restore(JobFacts("counts", "counter", "STRING"), _checkpoint(), {"counter.count": COUNT})
    plan = plan_restore(JOB, _checkpoint(), {"count.count": COUNT})  # the start of a run: nothing changed
    assert plan.nothing_to_do and plan.kept["count.count"] == "count.count"


def test_a_rescale_request_is_checked_in_one_place_naming_the_range_or_the_operators_and_says_if_it_changes_anything():
    """The CLI and the Airflow operator both call ``rescale_request`` before Spark starts or a job is submitted."""
    latest = _checkpoint(parallelism=2, max_parallelism=8)
    assert rescale_request("counts", latest, 2) == (["count"], False)
    assert rescale_request("counts", latest, 8, "count") == (["count"], True)
    with pytest.raises(ConfigError, match=r"--parallelism 9 is above job 'counts''s max parallelism 8 \(its key "
                                          r"groups\); give 1 to 8 \(it runs at 2\)"):
        rescale_request("counts", latest, 9)
    with pytest.raises(ConfigError, match=r"--parallelism must be a positive integer, got 0"):
        rescale_request("counts", latest, 0)
    with pytest.raises(ConfigError, match=r"job 'counts' has no operator 'nope' with state; its operators are "
                                          r"\['count'\]"):
        rescale_request("counts", latest, 2, "nope")
