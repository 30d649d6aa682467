"""One run of a job at a time; a crashed holder is taken over."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from state_store import JobLocked
from state_store.catalog.job_store import JobStore
from state_store.catalog.lease import current_holder
from state_store.run.runtime import FaultInjector
from tests.support.helpers import run, sink_rows, write_holder
from tests.support.jobs import count_job, events


def test_a_second_run_of_the_same_job_is_refused_naming_the_holder(spark, lake):
    for b in range(2):
        lake.write_events(f"e{b}.json", events(b))
    spec = count_job(lake)
    holding, release = threading.Event(), threading.Event()

    def hold():
        holding.set()
        assert release.wait(120)

    outcome = {}

    def first_run():
        try:
            outcome["result"] = run(spark, spec, lake, faults=FaultInjector("after_sink_write", 0, action=hold))
        except BaseException as e:  # noqa: BLE001 - reported to the test below
            outcome["error"] = e

    thread = threading.Thread(target=first_run)
    thread.start()
    try:
        assert holding.wait(180), "the first run never reached its first microbatch"
        holder = current_holder(JobStore(lake.settings.job_dir(spec.job_id)).dir / "lease")
        with pytest.raises(JobLocked, match=rf"job 'counts' is held by run {holder['run_id']}"):
            run(spark, spec, lake)
    finally:
        release.set()
        thread.join(300)
    assert "error" not in outcome, outcome.get("error")
    assert [b.batch_id for b in outcome["result"].batches] == [0, 1]
    assert len(sink_rows(spark, lake, spec)) == 10  # 5 keys x 2 microbatches, written once


@pytest.mark.e2e
def test_a_crashed_holder_is_taken_over(spark, lake):
    lake.write_events("e0.json", events(0))
    spec = count_job(lake)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lease = JobStore(lake.settings.job_dir(spec.job_id)).dir / "lease"
    import socket

    write_holder(lease, {"run_id": "run-crashed", "host": socket.gethostname(), "pid": dead.pid,
                         "heartbeat_ms": int(time.time() * 1000)})
    lines = []
    result = run(spark, spec, lake, progress=lines.append)
    assert [b.batch_id for b in result.batches] == [0]
    assert any(line.startswith("[lakestate] job counts: taking over from run run-crashed: ") for line in lines)
    assert current_holder(lease)["released"]  # released at the end of the run


def test_a_silent_holder_on_another_host_is_taken_over_after_the_lease_timeout(spark, lake):
    lake.write_events("e0.json", events(0))
    spec = count_job(lake)
    lease = JobStore(lake.settings.job_dir(spec.job_id)).dir / "lease"
    record = {"run_id": "run-elsewhere", "host": "another-host", "pid": 1, "heartbeat_ms": int(time.time() * 1000),
              "timeout_s": 60}
    write_holder(lease, record)
    with pytest.raises(JobLocked, match="held by run run-elsewhere"):
        run(spark, spec, lake, lease_timeout_s=1)  # the holder's timeout decides, not the newcomer's
    record["heartbeat_ms"] -= 120_000
    write_holder(lease, record)
    assert [b.batch_id for b in run(spark, spec, lake, lease_timeout_s=60).batches] == [0]


def test_the_lease_heartbeats_in_the_background_so_a_long_microbatch_is_not_taken_over(tmp_path):
    from state_store.catalog.lease import JobLease

    path = tmp_path / "lease"
    holder = JobLease(path, "long", timeout_s=1.0).acquire()
    try:
        first = current_holder(path)["heartbeat_ms"]
        time.sleep(1.6)  # longer than the timeout, with no call from the run
        assert current_holder(path)["heartbeat_ms"] > first
        with pytest.raises(JobLocked, match=f"held by run {holder.run_id}"):
            JobLease(path, "long", timeout_s=1.0).acquire()
    finally:
        holder.release()
    assert current_holder(path)["released"]
