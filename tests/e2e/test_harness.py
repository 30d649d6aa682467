"""The e2e tests' harness itself, without a JVM: a test that fails inside a process group it started leaves none
of the group running (the helper and the fixture), a wait fails on a stall and not on a slow advance, and the
suite's last step finds what a run left running by the mark every started process inherits."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.helpers import (
    RUN_MARK,
    Stalled,
    end_left_by_run,
    group_members,
    left_by_run,
    process_group,
    still_alive,
    wait_advancing,
)

ROOT = Path(__file__).resolve().parents[2]
# A shell that ignores SIGTERM (so do the children it starts: an ignored signal stays ignored across exec), with a
# child and a grandchild, as `airflow dags test` has its task's spark-submit and the JVM under it.
STUBBORN = "trap '' TERM; sleep 600 & bash -c 'sleep 600 & wait' & echo ready; wait"


def _started(process: subprocess.Popen) -> dict[int, str]:
    assert process.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 30
    while len(members := group_members(process.pid)) < 4:  # the shell, sleep, the inner bash and its sleep
        assert time.monotonic() < deadline, members
        time.sleep(0.05)
    return members


def test_a_test_failing_inside_a_process_group_leaves_no_process_of_the_group_running():
    with pytest.raises(AssertionError, match="the test fails here"):
        with process_group(["bash", "-c", STUBBORN], grace_s=1, stdout=subprocess.PIPE, text=True) as process:
            members = _started(process)
            assert process.pid in members and os.getpgid(process.pid) == process.pid != os.getpgid(0)
            raise AssertionError("the test fails here")
    assert not still_alive(members)
    assert process.returncode is not None  # the leader reaped, not a zombie


@pytest.mark.e2e  # an inner pytest: 5 s of the unit tier's minute (conftest: a test that starts processes)
def test_a_failed_test_leaves_none_of_the_processes_it_started_running_through_the_fixture_or_not(tmp_path):
    """An inner pytest with this suite's conftest (its hooks and fixtures) runs two failing tests: one starts a
    group through ``process_groups``, the other starts processes by ``subprocess.Popen`` alone, one leading a
    group of its own and one in pytest's group, each with children. Once the inner pytest has ended, no process
    any of them started runs (their pids and start times written by the inner tests)."""
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(f"""
        import subprocess, time
        from pathlib import Path
        import tests.support.helpers
        from tests.support.helpers import children, group_members

        tests.support.helpers.END_GRACE_S = 1  # the stubborn shells outwait SIGTERM: SIGKILL sooner than a JVM gets

        def _four(pgid):
            while len(members := group_members(pgid)) < 4:
                time.sleep(0.05)
            return members

        def test_through_the_fixture(process_groups):
            process = process_groups.start(["bash", "-c", {STUBBORN!r}], grace_s=1, stdout=subprocess.PIPE, text=True)
            assert process.stdout.readline().strip() == "ready"
            Path({str(tmp_path / "fixture")!r}).write_text(repr(_four(process.pid)))
            assert False, "the inner test fails"

        def test_by_popen_alone():
            own = subprocess.Popen(["bash", "-c", {STUBBORN!r}], start_new_session=True, stdout=subprocess.PIPE,
                                   text=True)
            assert own.stdout.readline().strip() == "ready"
            members = _four(own.pid)
            shared = subprocess.Popen(["bash", "-c", "sleep 600 & echo ready; wait"], stdout=subprocess.PIPE,
                                      text=True)
            assert shared.stdout.readline().strip() == "ready"
            members.update(children())  # own's shell and the shared one
            members.update({{int(p): t for p, t in group_members(own.pid).items()}})
            [sleep] = Path(f"/proc/{{shared.pid}}/task/{{shared.pid}}/children").read_text().split()
            members[int(sleep)] = Path(f"/proc/{{sleep}}/stat").read_text().rsplit(")", 1)[1].split()[19]
            assert len(members) == 6, members
            Path({str(tmp_path / "popen")!r}).write_text(repr(members))
            assert False, "the inner test fails"
    """))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.conftest", "-q",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_inner.py")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1 and "2 failed" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    for name in ("fixture", "popen"):
        members = eval((tmp_path / name).read_text())  # written above
        assert len(members) == (4 if name == "fixture" else 6) and not still_alive(members), (name, members)


def test_a_wait_outlasts_its_stall_window_while_things_advance_and_fails_once_they_stop():
    ticks = iter(range(10_000))
    started = time.monotonic()
    # Done after 0.6 s, three stall windows of 0.2 s: a slow advance is waited for.
    assert wait_advancing(lambda: time.monotonic() - started > 0.6 and "done", lambda: next(ticks) // 2,
                          "advancing", stall_s=0.2, ceiling_s=5, every_s=0.05) == "done"
    with pytest.raises(Stalled, match=r"stuck: nothing advanced in 0 s .*last seen: 'same'"):
        wait_advancing(lambda: False, lambda: "same", "stuck", stall_s=0.3, ceiling_s=5, every_s=0.05)
    with pytest.raises(Stalled, match="endless: not done in 0 s, though it advanced"):
        wait_advancing(lambda: False, lambda: next(ticks), "endless", stall_s=5, ceiling_s=0.3, every_s=0.05)


def test_the_suites_last_step_finds_kills_and_reports_what_a_run_left_but_what_may_stay(capsys):
    mark = f"harness-{os.getpid()}-{time.time_ns()}"
    env = {**os.environ, RUN_MARK: mark}
    # A process whose mark is hidden (exec'd with an environment without it), under one that carries it; and one
    # that may stay by design.
    left = subprocess.Popen(["bash", "-c", "env -u LAKESTATE_TEST_RUN sleep 600 & wait"], env=env,
                            start_new_session=True)
    stays = subprocess.Popen(["sleep", "601"], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while len(found := left_by_run(mark, allowed=("sleep 601",))) < 2:
            assert time.monotonic() < deadline, found
            time.sleep(0.05)
        assert left.pid in found and stays.pid not in found, found
        assert end_left_by_run(mark, allowed=("sleep 601",), grace_s=0.5) == 1
        printed = capsys.readouterr().out
        assert "the suite left 2 process(es) running" in printed and "sleep 600" in printed, printed
        assert left.wait(30) and not left_by_run(mark, allowed=("sleep 601",))
        assert end_left_by_run(mark, allowed=("sleep 601",), grace_s=0) == 0
        assert stays.poll() is None
    finally:
        for process in (left, stays):
            process.kill()
            process.wait()


def test_a_command_run_while_it_advances_keeps_what_it_started_in_the_background_and_is_ended_when_it_stalls():
    from tests.support.helpers import run_advancing

    # A script that starts a daemon and returns (scripts/kafka.sh start does): the daemon stays, as with
    # subprocess.run.
    done = run_advancing(["bash", "-c", "sleep 602 > /dev/null 2>&1 & echo $!"], "a start", stall_s=5, ceiling_s=30)
    daemon = int(done.stdout)
    try:
        assert done.returncode == 0 and Path(f"/proc/{daemon}").exists()
    finally:
        os.kill(daemon, 9)
    # One that stalls (no output, no CPU): ended with its group once the stall window passes.
    with pytest.raises(Stalled, match="a stuck script: nothing advanced in 1 s"):
        run_advancing(["bash", "-c", "sleep 603 & wait"], "a stuck script", stall_s=1, ceiling_s=30)
    assert not [line for line in os.popen("ps -ww -eo args") if line.startswith("sleep 603")]
