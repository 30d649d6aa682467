"""Airflow on PostgreSQL, as a production Airflow runs: scripts/postgres.sh's server (Debian's PostgreSQL on
127.0.0.1, a folder of its own), Airflow's metadata database in it (the standalone's own migration makes it) and
the LocalExecutor with scripts/airflow-db.env's task slots. Two jobs' pipeline DAGs triggered together run side
by side; PostgreSQL stopped and started between two DAG runs loses nothing, and the next run succeeds. A rescale
that the job's entry makes ask first waits for an approval given through the REST API. The scheduler killed
while a run task runs, and started again, loses nothing either."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.airflow_server import (ROOT, airflow_db_settings, airflow_env, airflow_ui, demo_input, get,
                                  processes_of, send_json, token)
from tests.ports import free_ports

pytestmark = pytest.mark.e2e
SCRIPT = ROOT / "scripts" / "postgres.sh"
DAGS = ("lakestate_clicks", "lakestate_sessions")


def _script(command: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), command], env=env, capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def postgres():
    """A server of this module's own (a free port, a fresh folder that the system user ``postgres`` can reach
    when the tests run as root), stopped at its end: start and stop are idempotent and say so."""
    directory = Path(tempfile.mkdtemp(prefix="lakestate-postgres-", dir="/tmp"))
    directory.chmod(0o755)
    env = {**os.environ, "LAKESTATE_POSTGRES_DIR": str(directory / "pg"),
           "LAKESTATE_POSTGRES_PORT": str(free_ports(1)[0])}
    started = _script("start", env)
    assert started.returncode == 0 and "started on 127.0.0.1" in started.stdout, started.stdout + started.stderr
    again = _script("start", env)
    assert again.returncode == 0 and "already running" in again.stdout, again.stdout + again.stderr
    try:
        yield {"env": env, "url": _script("url", env).stdout.strip()}
    finally:
        stopped = _script("stop", env)
        assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stdout + stopped.stderr
        assert _script("status", env).returncode == 1
        assert _script("stop", env).stdout.strip() == "[postgres] not running"
        shutil.rmtree(directory, ignore_errors=True)


def _query(postgres, sql: str) -> list[list[str]]:
    """Rows of ``sql`` in Airflow's database, as Airflow's own user reads them over TCP."""
    db, port = airflow_db_settings(), postgres["env"]["LAKESTATE_POSTGRES_PORT"]
    done = subprocess.run(["psql", "-X", "-At", "-h", "127.0.0.1", "-p", port, "-U", db["POSTGRES_USER"],
                           "-d", db["POSTGRES_DB"], "-F", "|", "-c", sql], capture_output=True, text=True,
                          env={**os.environ, "PGPASSWORD": db["POSTGRES_PASSWORD"]}, timeout=60)
    assert done.returncode == 0, done.stderr
    return [line.split("|") for line in done.stdout.splitlines()]


def _trigger(url: str, api: str, dag_id: str, conf: dict | None = None) -> str:
    deadline = time.time() + 180  # the DAG processor's first parse of the DAG file
    while get(f"{url}/api/v2/dags/{dag_id}", api)[0] != 200:
        assert time.time() < deadline, f"{dag_id} was not parsed in 180 s"
        time.sleep(1)
    status, body = send_json(f"{url}/api/v2/dags/{dag_id}/dagRuns", api, {"logical_date": None, "conf": conf or {}},
                             method="POST")
    assert status == 200, body
    return json.loads(body)["dag_run_id"]


def _finished(url: str, api: str, dag_id: str, run_id: str, home: Path) -> dict:
    deadline = time.time() + 600
    while time.time() < deadline:
        status, body = get(f"{url}/api/v2/dags/{dag_id}/dagRuns/{quote(run_id)}", api)
        run = json.loads(body) if status == 200 else {}
        if run.get("state") in ("success", "failed"):
            tasks = sorted((home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}").glob("task_id=*/*.log"))
            logs = [(home / "standalone.log").read_text()[-4000:]] + [f"{t}:\n{t.read_text()[-1500:]}" for t in tasks]
            assert run["state"] == "success", "\n".join(logs)
            return run
        time.sleep(1)
    raise AssertionError(f"{dag_id} {run_id} did not finish in 600 s")


def _span(url: str, api: str, dag_id: str, run_id: str) -> tuple[datetime, datetime]:
    status, body = get(f"{url}/api/v2/dags/{dag_id}/dagRuns/{quote(run_id)}/taskInstances/run", api)
    assert status == 200, body
    task = json.loads(body)
    return datetime.fromisoformat(task["start_date"]), datetime.fromisoformat(task["end_date"])


def test_airflow_on_postgres_runs_two_pipelines_side_by_side_and_survives_a_postgres_restart(postgres, tmp_path):
    registry = tmp_path / "lakestate.toml"
    registry.write_text('[jobs.clicks]\nentrypoint = "demo.clicks:job"\nrequire_approval = ["rescale"]\n\n'
                        '[jobs.sessions]\nentrypoint = "demo.sessions:job"\n')
    settings = {k: v for k, v in airflow_db_settings().items() if k.startswith("AIRFLOW__")}
    env = {**airflow_env(tmp_path, tmp_path / "lakestate", registry), **settings,
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres["url"]}
    demo_input(env)
    home = Path(env["AIRFLOW_HOME"])
    with airflow_ui(env) as url:
        api = token(url)
        runs = {dag_id: _trigger(url, api, dag_id) for dag_id in DAGS}
        for dag_id, run_id in runs.items():
            _finished(url, api, dag_id, run_id, home)
        # The LocalExecutor ran both jobs' run tasks at once (parallelism 4): their spans overlap.
        (a_start, a_end), (b_start, b_end) = (_span(url, api, d, r) for d, r in runs.items())
        assert max(a_start, b_start) < min(a_end, b_end), ((a_start, a_end), (b_start, b_end))
        # Airflow's metadata is PostgreSQL's: the runs are rows of its dag_run table.
        stored = _query(postgres, "SELECT dag_id, run_id, state FROM dag_run ORDER BY dag_id")
        assert stored == [[d, runs[d], "success"] for d in DAGS], stored

        # PostgreSQL stopped and started under the running Airflow, between two DAG runs: nothing lost.
        assert _script("stop", postgres["env"]).returncode == 0
        restarted = _script("start", postgres["env"])
        assert restarted.returncode == 0 and "started" in restarted.stdout, restarted.stdout + restarted.stderr
        again = _trigger(url, api, "lakestate_clicks")
        _finished(url, api, "lakestate_clicks", again, home)
        stored = _query(postgres, "SELECT run_id, state FROM dag_run WHERE dag_id = 'lakestate_clicks' ORDER BY id")
        assert stored == [[runs["lakestate_clicks"], "success"], [again, "success"]], stored
        _a_rescale_asks_first_and_a_rejection_writes_nothing(url, api, home, tmp_path / "lakestate")
        _the_scheduler_killed_mid_run_and_restarted_loses_nothing(url, api, env, home, tmp_path / "lakestate")


def _the_scheduler_killed_mid_run_and_restarted_loses_nothing(url: str, api: str, env: dict, home: Path,
                                                              root: Path) -> None:
    """While a run task of the clicks pipeline runs, the scheduler is killed (kill -9) and a new one started
    with its environment. The task runs on (Airflow 3's tasks report to the API server, not to the scheduler)
    and ends once, and the DAG run succeeds under the new scheduler. The sink holds each input event once: per
    user, the last count equals the user's events, and no microbatch has a user twice."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    demo_input(env, files=4)
    run_id = _trigger(url, api, "lakestate_clicks")
    deadline = time.time() + 300
    while json.loads(get(f"{url}/api/v2/dags/lakestate_clicks/dagRuns/{quote(run_id)}/taskInstances/run",
                         api)[1]).get("state") != "running":
        assert time.time() < deadline, "the run task did not start in 5 minutes"
        time.sleep(0.5)
    time.sleep(5)  # its spark-submit under way
    [scheduler] = [int(p.split()[0]) for p in processes_of(home) if " scheduler" in p and "airflow" in p]
    environ = dict(v.split("=", 1) for v in Path(f"/proc/{scheduler}/environ").read_bytes().decode().split("\0")
                   if "=" in v)
    os.kill(scheduler, signal.SIGKILL)
    killed = datetime.now(timezone.utc)
    with open(home / "scheduler-2.log", "w") as log:  # carries the standalone's mark: airflow-ui.sh stop ends it
        subprocess.Popen(["airflow", "scheduler"], env=environ, stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True)
    _finished(url, api, "lakestate_clicks", run_id, home)
    # The task ran on through the restart, once: its state was PostgreSQL's, not the dead scheduler's.
    task = json.loads(get(f"{url}/api/v2/dags/lakestate_clicks/dagRuns/{quote(run_id)}/taskInstances/run", api)[1])
    assert task["try_number"] == 1 and datetime.fromisoformat(task["end_date"]) > killed, task
    events = pq.read_table(root / "input" / "clicks").to_pandas().groupby("user_id").size()
    sink = DeltaTable(str(root / "warehouse" / "sinks" / "clicks")).to_pandas()
    assert not sink.duplicated(["user_id", "batch_id"]).any()
    assert sink.groupby("user_id")["events"].max().sort_index().tolist() == events.sort_index().tolist()


def _hitl(url: str, api: str, run_id: str) -> tuple[int, dict]:
    status, body = get(f"{url}/api/v2/dags/lakestate_rescale/dagRuns/{quote(run_id)}/taskInstances/approve/-1/"
                       f"hitlDetails", api)
    return status, json.loads(body) if status == 200 else {}


def _deferral_seen(home: Path, run_id: str) -> bool:
    """Whether the scheduler has taken in the end of the approve task's first process (it deferred). A person
    answers seconds after the request; an answer before this races Airflow 3.1's scheduler, which then takes
    that process's exit for a task killed outside it and fails the resumed task (apache/airflow#66374)."""
    finished = f"TaskInstance Finished: dag_id=lakestate_rescale, task_id=approve, run_id={run_id}, map_index=-1, "
    return any(finished in line and "state=deferred" in line
               for line in (home / "standalone.log").read_text().splitlines())


def _a_rescale_asks_first_and_a_rejection_writes_nothing(url: str, api: str, home: Path, root: Path) -> None:
    """The clicks job's entry requires an approval of a rescale (require_approval): the rescale DAG's run waits
    in its ``approve`` task, whose request (read and answered through the REST API) says what will change; a
    rejection skips the rescale and writes nothing, an approval lets it run."""
    from state_store.catalog.job_store import JobStore
    from state_store.settings import Settings

    store = JobStore(Settings.load(root=root).job_dir("clicks"))
    before = store.latest_checkpoint()
    for answer in ("Reject", "Approve"):
        run_id = _trigger(url, api, "lakestate_rescale", {"job": "clicks", "parallelism": 3})
        deadline = time.time() + 180
        while ((asked := _hitl(url, api, run_id))[0] != 200 or asked[1].get("response_received")
               or not _deferral_seen(home, run_id)):
            assert time.time() < deadline, f"no approval was asked in 180 s: {asked}"
            time.sleep(1)
        request = asked[1]
        assert request["subject"] == "Approve the rescale of job clicks?"
        assert request["options"] == ["Approve", "Reject"]
        assert request["body"].startswith("Rescales job **clicks**: parallelism **2 -> 3**.\n- Now: checkpoint "
                                          f"{before.checkpoint_id} (microbatch {before.batch_id}): state ")
        status, body = send_json(f"{url}/api/v2/dags/lakestate_rescale/dagRuns/{quote(run_id)}/taskInstances/"
                                 f"approve/-1/hitlDetails", api, {"chosen_options": [answer]})
        assert status == 200, body
        _finished(url, api, "lakestate_rescale", run_id, home)
        status, body = get(f"{url}/api/v2/dags/lakestate_rescale/dagRuns/{quote(run_id)}/taskInstances/rescale", api)
        assert json.loads(body)["state"] == ("skipped" if answer == "Reject" else "success"), body
        latest = store.latest_checkpoint()
        if answer == "Reject":  # nothing written: the same latest checkpoint, no savepoint
            assert latest == before and not (root / "savepoints" / "clicks").exists()
    assert (latest.parallelism, latest.batch_id) == (3, before.batch_id)
