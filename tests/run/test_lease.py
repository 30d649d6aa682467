"""The single-writer fence: the holder's timeout decides, and a takeover is a compare-and-swap."""
from __future__ import annotations

import threading
import time

import pytest

from state_store import JobLocked
from state_store.catalog.lease import JobLease, current_holder, generations
from state_store.cli import main as lakestate
from state_store.errors import ConfigError
from tests.support.helpers import write_holder


def _remote_holder(heartbeat_age_s: float, timeout_s: float = 60) -> dict:
    return {"run_id": "run-remote", "host": "another-host", "pid": 1, "timeout_s": timeout_s,
            "heartbeat_ms": int((time.time() - heartbeat_age_s) * 1000)}


@pytest.mark.parametrize("newcomer_timeout", [1, 0.001])
def test_a_newcomers_short_timeout_does_not_take_over_a_healthy_holder(tmp_path, newcomer_timeout):
    write_holder(tmp_path / "lease", _remote_holder(heartbeat_age_s=5, timeout_s=60))
    with pytest.raises(JobLocked, match=r"held by run run-remote .*its lease timeout 60s"):
        JobLease(tmp_path / "lease", "job", timeout_s=newcomer_timeout).acquire()
    assert current_holder(tmp_path / "lease")["run_id"] == "run-remote"


def test_the_holders_own_timeout_decides_when_it_is_stale(tmp_path):
    write_holder(tmp_path / "lease", _remote_holder(heartbeat_age_s=5, timeout_s=2))
    said = []
    taker = JobLease(tmp_path / "lease", "job", timeout_s=600).acquire(say=said.append)
    try:
        assert current_holder(tmp_path / "lease")["run_id"] == taker.run_id
        assert [m.split(":")[0] for m in said] == ["taking over from run run-remote"]  # told, not printed
    finally:
        taker.release()


@pytest.mark.parametrize("bad", [0, -5, float("nan")])
def test_a_timeout_of_zero_or_less_is_refused(tmp_path, bad, capsys):
    with pytest.raises(ConfigError, match="lease timeout .* above 0"):
        JobLease(tmp_path / "lease", "job", timeout_s=bad)
    assert lakestate(["run", "--job", "x", "--root", str(tmp_path), "--lease-timeout", str(bad)]) == 2
    assert "above 0" in capsys.readouterr().err
    assert not (tmp_path / "lease").exists()


def test_two_takers_of_a_dead_holders_lease_never_both_win(tmp_path):
    takers = 4
    for attempt in range(40):
        lease_dir = tmp_path / f"try-{attempt}"
        write_holder(lease_dir, _remote_holder(heartbeat_age_s=600), generation=attempt % 3 + 1)
        barrier, won, refused = threading.Barrier(takers), [], []

        def take(lease_dir=lease_dir, barrier=barrier, won=won, refused=refused):  # this try's, not the next one's
            lease = JobLease(lease_dir, "job", timeout_s=60)
            barrier.wait()
            try:
                won.append(lease.acquire())
            except JobLocked:
                refused.append(lease)

        threads = [threading.Thread(target=take) for _ in range(takers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        try:
            assert len(won) == 1, f"try {attempt}: {len(won)} takers won"
            assert len(refused) == takers - 1
            assert current_holder(lease_dir)["run_id"] == won[0].run_id
        finally:
            for lease in won:
                lease.release()


def test_a_released_lease_is_taken_at_the_next_generation_and_old_ones_are_pruned(tmp_path):
    for _ in range(4):
        JobLease(tmp_path / "lease", "job").acquire().release()
    assert generations(tmp_path / "lease") == [3, 4]
    assert current_holder(tmp_path / "lease")["released"]


def test_a_holder_that_was_taken_over_stops_and_leaves_the_newer_holder_alone(tmp_path):
    old = JobLease(tmp_path / "lease", "job", timeout_s=60).acquire()
    try:
        write_holder(tmp_path / "lease", _remote_holder(heartbeat_age_s=0), generation=old.generation + 1)
        with pytest.raises(JobLocked, match=f"run {old.run_id} lost job 'job' to run run-remote"):
            old.heartbeat()
    finally:
        old.release()
    assert current_holder(tmp_path / "lease")["run_id"] == "run-remote"
    assert not current_holder(tmp_path / "lease").get("released")
