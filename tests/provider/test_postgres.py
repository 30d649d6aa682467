"""Airflow on PostgreSQL, as a production Airflow runs: scripts/postgres.sh's server (Debian's PostgreSQL on
127.0.0.1, a folder of its own), Airflow's metadata database in it (the standalone's own migration makes it) and
the LocalExecutor with scripts/airflow-db.env's task slots. Two jobs' pipeline DAGs triggered together run side
by side; PostgreSQL stopped and started between two DAG runs loses nothing, and the next run succeeds. A rescale
that the job's entry makes ask first waits for an approval given through the REST API. The scheduler killed
while a run task runs, and started again, loses nothing either."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.support.airflow_server import (
    ROOT,
    airflow_db_settings,
    airflow_env,
    airflow_ui,
    demo_input,
    get,
    processes_of,
    send_json,
    standalone_components,
    standalone_env,
    start_ui,
    token,
)
from tests.support.helpers import cpu_seconds, file_sizes, run_advancing, wait_advancing
from tests.support.ports import free_ports

pytestmark = pytest.mark.e2e
SCRIPT = ROOT / "scripts" / "postgres.sh"
DAGS = ("lakestate_clicks", "lakestate_sessions")


def _script(command: str, env: dict) -> subprocess.CompletedProcess:
    """scripts/postgres.sh ``command``, waited for while its output, its folder and its processes' CPU grow."""
    return run_advancing(["bash", str(SCRIPT), command], f"scripts/postgres.sh {command}",
                         watch=[env["LAKESTATE_POSTGRES_DIR"]], env=env)


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


def _trigger(url: str, api: str, dag_id: str, home: Path, conf: dict | None = None) -> str:
    # The DAG processor's first parse of the DAG file, waited for while its logs grow.
    wait_advancing(lambda: get(f"{url}/api/v2/dags/{dag_id}", api)[0] == 200,
                   lambda: file_sizes(home / "logs"), f"{dag_id} parsed", stall_s=300, ceiling_s=600)
    status, body = send_json(f"{url}/api/v2/dags/{dag_id}/dagRuns", api, {"logical_date": None, "conf": conf or {}},
                             method="POST")
    assert status == 200, body
    return json.loads(body)["dag_run_id"]


def _task_states(url: str, api: str, dag_id: str, run_id: str) -> list[tuple]:
    """(task, state, try) of each task instance of the DAG run, as the API has them."""
    status, body = get(f"{url}/api/v2/dags/{dag_id}/dagRuns/{quote(run_id)}/taskInstances", api)
    return sorted((t["task_id"], t["state"], t["try_number"]) for t in json.loads(body)["task_instances"]) \
        if status == 200 else [("?", status)]


def _spark_cpu(home: Path) -> int:
    """The CPU time of the spark-submit JVMs of ``home``'s tasks, in steps of 5 s (an idle JVM's heartbeats and GC
    are not progress; a working one on a loaded machine still gets some CPU)."""
    return int(cpu_seconds(int(p.split()[0]) for p in processes_of(home) if "deploy.SparkSubmit" in p) // 5)


def _run_advancing(url: str, api: str, dag_id: str, run_id: str, home: Path):
    """What moves while a DAG run runs: its task instances' states, its task logs, its spark-submits' CPU."""
    logs = home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
    return lambda: (_task_states(url, api, dag_id, run_id), file_sizes(logs), _spark_cpu(home))


def _finished(url: str, api: str, dag_id: str, run_id: str, home: Path) -> dict:
    """The DAG run once it ended (it must have succeeded), waited for while it advances: a fixed 600 s ran out
    on a loaded machine (issue 59)."""
    def ended() -> dict | None:
        status, body = get(f"{url}/api/v2/dags/{dag_id}/dagRuns/{quote(run_id)}", api)
        run = json.loads(body) if status == 200 else {}
        return run if run.get("state") in ("success", "failed") else None

    run = wait_advancing(ended, _run_advancing(url, api, dag_id, run_id, home), f"{dag_id} {run_id} finished",
                         stall_s=300, ceiling_s=900)
    if run["state"] != "success":
        tasks = sorted((home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}").glob("task_id=*/*.log"))
        logs = [(home / "standalone.log").read_text()[-4000:]] + [f"{t}:\n{t.read_text()[-1500:]}" for t in tasks]
        raise AssertionError(f"{dag_id} {run_id} ended {run['state']}:\n" + "\n".join(logs))
    return run


def _span(url: str, api: str, dag_id: str, run_id: str) -> tuple[datetime, datetime]:
    status, body = get(f"{url}/api/v2/dags/{dag_id}/dagRuns/{quote(run_id)}/taskInstances/run", api)
    assert status == 200, body
    task = json.loads(body)
    return datetime.fromisoformat(task["start_date"]), datetime.fromisoformat(task["end_date"])


def test_airflow_on_postgres_runs_two_pipelines_side_by_side_and_survives_a_postgres_restart(postgres, tmp_path,
                                                                                             process_groups):
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
        runs = {dag_id: _trigger(url, api, dag_id, home) for dag_id in DAGS}
        for dag_id, run_id in runs.items():
            _finished(url, api, dag_id, run_id, home)
        # The LocalExecutor ran both jobs' run tasks at once (parallelism 4): their spans overlap.
        (a_start, a_end), (b_start, b_end) = (_span(url, api, d, r) for d, r in runs.items())
        assert max(a_start, b_start) < min(a_end, b_end), ((a_start, a_end), (b_start, b_end))
        # Airflow's metadata is PostgreSQL's: the runs are rows of its dag_run table.
        stored = _query(postgres, "SELECT dag_id, run_id, state FROM dag_run ORDER BY dag_id")
        assert stored == [[d, runs[d], "success"] for d in DAGS], stored

        api = _a_postgres_outage_then_the_ui_started_again(postgres, url, home)
        again = _trigger(url, api, "lakestate_clicks", home)
        _finished(url, api, "lakestate_clicks", again, home)
        stored = _query(postgres, "SELECT run_id, state FROM dag_run WHERE dag_id = 'lakestate_clicks' ORDER BY id")
        assert stored == [[runs["lakestate_clicks"], "success"], [again, "success"]], stored
        _a_rescale_asks_first_and_a_rejection_writes_nothing(url, api, home, tmp_path / "lakestate")
        _the_scheduler_killed_mid_run_and_restarted_loses_nothing(url, api, env, home, tmp_path / "lakestate",
                                                                  process_groups)


def _a_postgres_outage_then_the_ui_started_again(postgres, url: str, home: Path) -> str:
    """PostgreSQL stopped under the running Airflow, between two DAG runs, until one of Airflow's components
    exits for want of it (Airflow's own behaviour: a scheduler, triggerer or DAG processor whose database stops
    answering ends, and the standalone does not start it again), then started. ``scripts/airflow-ui.sh
    --background``, run again as a user does, names what exited and starts the standalone again on its port,
    every component running; nothing stored is lost (the caller's next run and approval). A new API token."""
    components = ["api_server", "dag-processor", "scheduler", "triggerer"]
    running = lambda: [c.split()[1] for c in standalone_components(home)]  # noqa: E731
    assert running() == components
    env = standalone_env(home)
    assert _script("stop", postgres["env"]).returncode == 0
    wait_advancing(lambda: running() != components, lambda: file_sizes(home / "standalone.log"),
                   "a component of the standalone exiting while its database is down", stall_s=120, ceiling_s=300)
    exited = set(components) - set(running())
    restarted = _script("start", postgres["env"])
    assert restarted.returncode == 0 and "started" in restarted.stdout, restarted.stdout + restarted.stderr
    output = start_ui(env)
    port = url.rsplit(":", 1)[1]
    lost = re.search(r"lost its (.*) \(exited: .* starting it again on port (\d+)", output)
    assert lost and lost.group(2) == port and exited <= set(lost.group(1).replace("api-server", "api_server")
                                                            .split()), output
    assert f"Airflow UI: {url} " in output, output
    assert running() == components
    return token(url)


def _the_scheduler_killed_mid_run_and_restarted_loses_nothing(url: str, api: str, env: dict, home: Path,
                                                              root: Path, processes) -> None:
    """While a run task of the clicks pipeline runs, the scheduler is killed (kill -9) and a new one started
    with its environment. The task runs on (Airflow 3's tasks report to the API server, not to the scheduler)
    and ends once, and the DAG run succeeds under the new scheduler. The sink holds each input event once: per
    user, the last count equals the user's events, and no microbatch has a user twice."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    demo_input(env, files=4)
    run_id = _trigger(url, api, "lakestate_clicks", home)
    # The run task running, and its spark-submit under way (its JVM started): then the scheduler is killed.
    wait_advancing(lambda: ("run", "running", 1) in _task_states(url, api, "lakestate_clicks", run_id)
                   and any("deploy.SparkSubmit" in p for p in processes_of(home)),
                   _run_advancing(url, api, "lakestate_clicks", run_id, home), "the run task's spark-submit started",
                   stall_s=300, ceiling_s=600, every_s=0.5)
    [scheduler] = [int(p.split()[0]) for p in processes_of(home) if " scheduler" in p and "airflow" in p]
    environ = dict(v.split("=", 1) for v in Path(f"/proc/{scheduler}/environ").read_bytes().decode().split("\0")
                   if "=" in v)
    os.kill(scheduler, signal.SIGKILL)
    killed = datetime.now(timezone.utc)
    # It carries the standalone's mark: airflow-ui.sh stop ends it; its group ends with the test in any case.
    with open(home / "scheduler-2.log", "w") as log:
        processes.start(["airflow", "scheduler"], env=environ, stdout=log, stderr=subprocess.STDOUT)
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


def _scheduler_heartbeat(url: str, api: str) -> str | None:
    status, body = get(f"{url}/api/v2/jobs?job_type=SchedulerJob&is_alive=true", api)
    return max((j["latest_heartbeat"] or "" for j in json.loads(body)["jobs"]), default=None) if status == 200 else None


def _executing(ti_id: str) -> bool:
    """Whether a LocalExecutor worker of this machine still runs task instance ``ti_id`` (its process title)."""
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and f"LocalExecutor: {ti_id}".encode() in (proc / "cmdline").read_bytes():
                return True
    return False


class _Deferral:
    """Whether the scheduler has taken in the end of the approve task's first process (it deferred). A person
    answers seconds after the request; an answer before this races Airflow 3.1's scheduler, which then takes
    that process's exit for a task killed outside it and fails the resumed task (apache/airflow#66374).

    The API shows the deferral (the task instance ``deferred``, its trigger claimed by the triggerer), but
    nothing in the API or the database shows the scheduler has read the executor's event for it: for a deferred
    task instance the scheduler only logs it (``TaskInstance Finished``, in a log that did not always come,
    issue 59). So: the LocalExecutor worker has let the task go (its process title no longer names the task
    instance: it reports the event before it takes its next one), and the scheduler's heartbeat, which it writes
    at the end of each loop after reading its executor's events, has then advanced twice: the loop that wrote
    the second began after the first, so after the event was there to read."""

    def __init__(self, url: str, api: str, run_id: str):
        self.url, self.api, self.run_id = url, api, run_id
        self.beats: list[str | None] = []  # the scheduler's heartbeats seen since the worker let the task go
        self.seen: tuple = ()

    def __call__(self) -> dict | None:
        """The approval's request once the scheduler has taken in the deferral, else None."""
        status, request = _hitl(self.url, self.api, self.run_id)
        ti = json.loads(get(f"{self.url}/api/v2/dags/lakestate_rescale/dagRuns/{quote(self.run_id)}/taskInstances/"
                            f"approve", self.api)[1])
        trigger = ti.get("trigger") or {}
        deferred = (status == 200 and not request.get("response_received") and ti.get("state") == "deferred"
                    and trigger.get("triggerer_id") is not None and not _executing(ti["id"]))
        if not deferred:
            self.beats.clear()
        elif (beat := _scheduler_heartbeat(self.url, self.api)) is not None and beat not in self.beats:
            self.beats.append(beat)
        self.seen = (status, request.get("response_received"), ti.get("state"), trigger.get("triggerer_id"),
                     len(self.beats))
        return request if len(self.beats) >= 3 else None


def _a_rescale_asks_first_and_a_rejection_writes_nothing(url: str, api: str, home: Path, root: Path) -> None:
    """The clicks job's entry requires an approval of a rescale (require_approval): the rescale DAG's run waits
    in its ``approve`` task, whose request (read and answered through the REST API) says what will change; a
    rejection skips the rescale and writes nothing, an approval lets it run."""
    from state_store.catalog.job_store import JobStore
    from state_store.settings import Settings

    store = JobStore(Settings.load(root=root).job_dir("clicks"))
    before = store.latest_checkpoint()
    for answer in ("Reject", "Approve"):
        run_id = _trigger(url, api, "lakestate_rescale", home, {"job": "clicks", "parallelism": 3})
        deferral = _Deferral(url, api, run_id)
        logs = home / "logs" / "dag_id=lakestate_rescale" / f"run_id={run_id}"
        request = wait_advancing(deferral, lambda deferral=deferral, logs=logs: (deferral.seen, file_sizes(logs)),
                                 "the approval asked", stall_s=300, ceiling_s=600)
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


def test_the_ui_scripts_stop_leaves_out_a_process_that_ended_while_it_was_listed():
    """scripts/airflow-ui.sh runs under ``set -e``: ``stamped`` (the start times of the processes ``stop_ui`` ends)
    leaves out one gone since it was listed, and succeeds. It once ended the script there, when the DAG processor
    a PostgreSQL restart had stopped was exiting as the script listed it."""
    script = (ROOT / "scripts" / "airflow-ui.sh").read_text().splitlines()
    functions = "\n".join(line for line in script if line.startswith(("started_at()", "stamped()")))
    ended = subprocess.Popen(["true"])
    ended.wait()
    shown = subprocess.run(["bash", "-c", f"set -euo pipefail\n{functions}\nfound=$(stamped $$ {ended.pid})\n"
                                          f"echo \"$found\""], capture_output=True, text=True)
    assert shown.returncode == 0 and re.fullmatch(r"\d+:\d+", shown.stdout.strip()), shown
