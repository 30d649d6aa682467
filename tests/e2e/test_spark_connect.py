"""Warm runs through Spark Connect: scripts/spark-connect.sh starts a real Connect server (pyspark's own, with the
Delta jars), a client session (in a process of its own: tests/support/connect_client.py) writes and reads Delta over
it, a whole run over it gives what a local run gives, and stop leaves no process behind."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.airflow_server import migrate

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "spark-connect.sh"

pytestmark = pytest.mark.e2e  # a Spark Connect server: a JVM start (about 15 s here)


def _marked(mark: str) -> list[int]:
    """Processes carrying the server's run mark, as the script finds them (zombies excluded)."""
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            env = (p / "environ").read_bytes().split(b"\0")
            state = (p / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"LAKESTATE_CONNECT_RUN={mark}".encode() in env and state != "Z":
            found.append(int(p.name))
    return found


class ConnectServer:
    """The script's server in a folder of its own (pid file, log)."""

    def __init__(self, folder: Path):
        self.env = {**os.environ, "LAKESTATE_CONNECT_DIR": str(folder)}
        self.pidfile = folder / "server.pid"
        self.marks: list[str] = []  # the run marks of every server it started

    def script(self, *args: str, check: bool = True, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(SCRIPT), *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=check)

    @property
    def mark(self) -> str:
        return self.pidfile.read_text().split()[2]


def _started(server: ConnectServer) -> str:
    started = server.script("start", "--background")
    url = started.stdout.strip().splitlines()[-1]
    assert url.startswith("sc://127.0.0.1:"), started.stdout + started.stderr
    assert "already running" not in started.stdout
    return url


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    """A running server for the module: [its sc:// URL, the server] (a test that kills and restarts the server
    puts the new URL in); stopped at the end, checked gone, with whatever an earlier server of it left."""
    server = ConnectServer(tmp_path_factory.mktemp("connect"))
    url = _started(server)
    server.marks.append(server.mark)
    try:
        yield [url, server]
    finally:
        server.script("stop")
        assert [p for mark in server.marks for p in _marked(mark)] == [], "stop left processes of the server behind"
        assert not server.pidfile.exists()


def _client(url: str, *args) -> object:
    """``tests/support/connect_client.py`` on the server ``url``: its JSON result."""
    done = subprocess.run([sys.executable, "-m", "tests.support.connect_client", url, *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_spark_connect_script_serves_delta_and_says_its_url(connect_server, tmp_path):
    url, server = connect_server
    assert server.script("status").stdout.strip() == url
    # A second start finds the running server instead of starting another.
    again = server.script("start", "--background")
    assert url in again.stdout and "already running" in again.stdout
    assert _marked(server.mark)

    out = _client(url, "delta", tmp_path / "t")
    assert out["session"].startswith("pyspark.sql.connect")
    assert out["rows"] == [[0, 0], [1, 10], [2, 20], [3, 30]]
    assert out["history"] == [[0, "WRITE"], [1, "WRITE"]]


def test_a_jobs_runs_share_its_session_until_the_server_closes_it(connect_server):
    out = _client(connect_server[0], "job-sessions")
    assert len(set(out["same"])) == 1, out  # both runs of the hour in the job's session
    assert out["after"] != out["same"][0] and out["rows"] == 2, out


def test_spark_connect_script_stop_without_a_server_says_so(tmp_path):
    server = ConnectServer(tmp_path)
    assert "no Spark Connect server" in server.script("stop").stdout
    assert server.script("status", check=False).returncode == 1


def test_a_run_over_spark_connect_gives_the_sink_and_state_of_a_local_run(connect_server, spark, tmp_path):
    """Every state kind, broadcast input and raw state over the server, on the hashmap backend: its snapshot is a
    Spark write of Delta through the server, which no other test here does. The delta backend's commits, reads
    and restores over Connect are proven by the TTL, dataflow and killed-server tests below, and every state kind
    on it by tests/run/test_runtime.py locally; the state kinds' code is the same on either backend."""
    from tests.support.connect_client import two_runs
    from tests.support.lake import Lake

    backend = "hashmap"
    warm = _client(connect_server[0], "two-runs", tmp_path / "connect", backend)
    local = json.loads(json.dumps(two_runs(spark, Lake(tmp_path / "local"), backend)))  # tuples as lists
    assert warm == local
    assert len(warm[0]) == 10 and warm[1]  # both runs wrote: 5 keys a microbatch, keyed state kept


def test_a_dataflow_of_two_operators_runs_over_spark_connect_as_pandas_computes_it(connect_server, tmp_path):
    """The operators' passes, the edge between them and the one checkpoint of both, all through the server."""
    out = _client(connect_server[0], "chain", tmp_path / "chain", "delta")
    assert out["runs"] == [[0, 1], [2]]
    assert out["latest"] == out["expected"] and len(out["expected"]) == 7, out


def test_lakestate_run_and_every_operation_with_remote_work_on_the_server(connect_server, tmp_path):
    """`lakestate run --remote sc://...` (what a DAG's warm run does) of the demo job, 10 events a run: the second
    run restores the first's checkpoint. Then each operation with `--remote`, as the operation DAGs run them on a
    spark_connect connection: a savepoint, a rescale 2 -> 3 with a savepoint first, a compaction and a restore of
    the savepoint (back at parallelism 2), a run after them and a key's state. All in processes without a JVM;
    each command's time is printed."""
    env = {**os.environ, "LAKESTATE_ROOT": str(tmp_path / "root"), "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-m", "state_store.cli"]
    run = [*cli, "run", "--job", "clicks", "--registry", str(ROOT / "lakestate.toml"), "--max-microbatches", "1"]
    subprocess.run([sys.executable, "-m", "demo.generate", "--files", "3", "--events", "10", "--keys", "5"],
                   env=env, cwd=ROOT, check=True, capture_output=True)
    took = {}

    def remote(name, command) -> str:
        started = time.time()
        done = subprocess.run([*command, "--remote", connect_server[0]], env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=300)
        took[name] = round(time.time() - started, 1)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "py4j" not in done.stderr.lower()
        return done.stdout

    for n in range(2):
        said = remote(f"run {n + 1}", run)
        assert "1 microbatches, 10 records" in said, said
        assert ("restored checkpoint 1" if n else "no checkpoint") in said, said
    assert "savepoint path:" in remote("savepoint", [*cli, "savepoint", "clicks", "--label", "before"])
    said = remote("rescale 2 -> 3, savepoint first", [*cli, "rescale", "clicks", "--parallelism", "3",
                                                     "--savepoint-first"])
    assert "at parallelism 3" in said and "savepoint" in said, said
    said = remote("compaction", [*cli, "compact", "clicks", "--json"])
    report = json.loads(said[said.index("\n{") + 1:] if not said.startswith("{") else said)
    assert report["checkpoint"] and not report.get("nothing_to_do"), report
    said = remote("restore", [*cli, "restore", "clicks", "--savepoint", "clicks/before"])
    assert "parallelism 2" in said, said
    said = remote("run 3", run)
    assert "1 microbatches, 10 records" in said and "restored checkpoint" in said, said
    from state_store.catalog.job_store import JobStore
    from state_store.settings import Settings

    latest = JobStore(Settings.load(None, str(tmp_path / "root"), None).job_dir("clicks")).latest_checkpoint()
    assert (latest.parallelism, latest.batch_id) == (2, 2)
    said = remote("state", [*cli, "state", "--job", "clicks", "--state", "events", "--key", "0"])
    assert json.loads(said.strip().splitlines()[-1])["value"] == 6  # two events of user 0 in each of 3 files
    print("\n[spark-connect] commands over the server, wall time each (a Python process, no JVM): "
          + ", ".join(f"{k} {v} s" for k, v in took.items()))


def test_airflow_pipeline_run_and_rescale_tasks_run_on_the_spark_connect_connection(connect_server, tmp_path):
    """`airflow dags test` of a pipeline DAG with `lakestate_spark` of type spark_connect: the run task runs on
    the server (no spark-submit), its XCom is the run's summary; then the rescale DAG's task on it too. The
    tasks' times are printed."""
    import sqlite3

    from tests.support.airflow_files import airflow_test_env, write_registry

    host, port = connect_server[0][len("sc://"):].split(":")
    registry = write_registry(tmp_path, """
    [jobs.clicks]
    entrypoint = "demo.clicks:job"
    max_microbatches = 1
    checkpoint_interval = 1
    """)
    env = airflow_test_env(tmp_path, registry, tmp_path / "lakestate")
    subprocess.run([sys.executable, "-m", "demo.generate", "--files", "1", "--events", "10", "--keys", "5"],
                   env=env, check=True, capture_output=True, cwd=ROOT)
    migrate(env)
    # The connection README's `airflow connections add lakestate_spark --conn-type spark_connect ...` makes, given
    # as Airflow's environment variable (one CLI process fewer).
    env["AIRFLOW_CONN_LAKESTATE_SPARK"] = json.dumps({"conn_type": "spark_connect", "host": host, "port": int(port)})
    done = subprocess.run(["airflow", "dags", "test", "lakestate_clicks"], env=env, capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    text = done.stdout + done.stderr
    assert ", state=success, run_type=" in text, text[-4000:]
    assert f"running on the Spark Connect server sc://{host}:{port}" in text, text[-4000:]
    assert "spark-submit" not in text
    with sqlite3.connect(tmp_path / "airflow-home" / "airflow.db") as con:
        (value,) = con.execute("select value from xcom where dag_id = 'lakestate_clicks' and "
                               "task_id = 'run'").fetchone()
        (seconds,) = con.execute("select duration from task_instance where dag_id = 'lakestate_clicks' and "
                                 "task_id = 'run'").fetchone()
    summary = json.loads(value)
    assert summary["microbatches"] == [0] and summary["records_in"] == 10 and summary["checkpoints"] == [1]
    # An operation DAG on the same connection: the rescale form's run (a savepoint first, by default)
    done = subprocess.run(["airflow", "dags", "test", "lakestate_rescale", "-c",
                           json.dumps({"job": "clicks", "parallelism": 3})], env=env, capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    text = done.stdout + done.stderr
    assert ", state=success, run_type=" in text, text[-4000:]
    assert re.search(f"running on the Spark Connect server sc://{host}:{port}/?: lakestate rescale clicks", text), text
    assert "spark-submit" not in text and "rescaling checkpoint 1 from parallelism 2 to 3" in text, text[-4000:]
    with sqlite3.connect(tmp_path / "airflow-home" / "airflow.db") as con:
        (value,) = con.execute("select value from xcom where dag_id = 'lakestate_rescale' and task_id = 'rescale' "
                               "and key = 'return_value'").fetchone()
        (rescaled,) = con.execute("select duration from task_instance where dag_id = 'lakestate_rescale' and "
                                  "task_id = 'rescale'").fetchone()
    assert json.loads(value) == {"job": "clicks", "checkpoint": 2, "microbatch": 0, "parallelism": 3, "changed": True}
    print(f"\n[spark-connect] over Spark Connect: the pipeline's run task {seconds:.2f} s task time "
          f"(run {summary['seconds']} s); the rescale task with a savepoint first {rescaled:.2f} s")


def test_the_state_processor_bootstraps_changes_and_reads_savepoints_over_spark_connect(connect_server, tmp_path):
    """SavepointWriter and SavepointReader on a Connect session (issue 42: the State Processor's reads and
    writes over Connect too): a savepoint bootstrapped from a DataFrame, a copy with its uid renamed, both read."""
    out = _client(connect_server[0], "state-processor", tmp_path / "lake")
    assert out["entries"] == {"count.count": 2}
    assert out["read"] == {"bootstrapped": ["count", [["a", 100], ["b", 200]]],
                           "renamed": ["counter", [["a", 100], ["b", 200]]]}


def test_a_failed_run_over_spark_connect_says_why_and_leaves_no_file(connect_server, tmp_path):
    out = _client(connect_server[0], "failing", tmp_path / "lake")
    assert out["error"] and re.search(r"microbatch 0 of job 'failing' failed before anything was written: "
                                      r"UserFunctionError: process\(\) raised ValueError", out["error"]), out
    assert out["parquet"] == []


def test_ttl_incremental_cleanup_over_spark_connect_removes_what_a_local_run_removes(connect_server, spark, tmp_path):
    """The cleanup's MERGE ... DELETE runs as SQL over Connect (delta-spark's DeltaTable needs a server plugin)."""
    from tests.support.connect_client import sweep
    from tests.support.lake import Lake

    warm = _client(connect_server[0], "sweep", tmp_path / "connect", "delta")
    local = json.loads(json.dumps(sweep(spark, Lake(tmp_path / "local"), "delta")))
    assert warm == local
    assert sum(warm[0]) == 6 and {row[2] for row in warm[1] if row[0] == "ttl.last"} == {"z"}


def test_a_server_killed_mid_run_is_an_error_naming_it_and_the_run_again_on_a_new_one_is_exactly_once(
        connect_server, tmp_path, monkeypatch):
    """`lakestate run --remote` of a count job: microbatch 0 runs; the server is killed (kill -9) while microbatch
    1's pass is on it. The run fails within a bounded time naming the server; status says the server does not
    answer, though a worker of it lives on; start ends that worker and starts a new server (not "already
    running"); the run again on it gives the sink of a run that was never killed, each microbatch's rows once."""
    from collections import Counter

    from deltalake import DeltaTable

    from state_store.cli import main
    from tests.support.jobs import events
    from tests.support.lake import Lake

    url, server = connect_server
    BOUND_S = 60  # the client's bounded retries (connect.LOST_AFTER_S) and the failed pass's grace, with room
    lake = Lake(tmp_path)
    monkeypatch.setenv("LAKESTATE_ROOT", str(lake.root))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    assert main(["register", "tests.support.connect_client:pausing_job"]) == 0

    def run(remote):
        return subprocess.Popen([sys.executable, "-m", "state_store.cli", "run", "--job", "paused", "--remote",
                                 remote], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    lake.write_events("e0.json", events(0))
    out, err = run(url).communicate(timeout=300)
    assert "1 microbatches, 15 records" in out, out[-3000:] + err[-3000:]
    lake.write_events("e1.json", events(1))
    killed = run(url)
    deadline = time.monotonic() + 240
    while not (lake.root / "paused").exists():  # microbatch 1's pass is on the server
        assert killed.poll() is None and time.monotonic() < deadline, killed.communicate()
        time.sleep(0.1)
    os.kill(int(server.pidfile.read_text().split()[0]), signal.SIGKILL)
    lost = time.monotonic()
    try:
        out, err = killed.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        killed.kill()
        pytest.fail(f"the run said nothing {BOUND_S} s after its server was killed: {killed.communicate()}")
    seconds = time.monotonic() - lost
    assert killed.returncode == 2, (seconds, out[-2000:], err[-3000:])
    assert f"lakestate: error: the Spark Connect server at {url} stopped answering during the run" in err, err
    assert "scripts/spark-connect.sh status" in err, err
    print(f"\n[spark-connect] a server killed mid-run: the run's error {seconds:.1f} s after the kill")

    assert _marked(server.mark), "no process of the killed server outlived it: the start below proves less"
    status = server.script("status", check=False, timeout=60)
    assert status.returncode == 1 and f"recorded at {url} does not answer" in status.stderr, status.stderr
    killed_mark = server.mark
    connect_server[0] = url = _started(server)  # the tests after this one use the new server
    server.marks.append(server.mark)
    assert _marked(killed_mark) == [], "start left what the killed server left behind"

    out, err = run(url).communicate(timeout=300)
    assert "1 microbatches, 15 records" in out, out[-3000:] + err[-3000:]
    sink = DeltaTable(str(lake.settings.sink("sinks/paused"))).to_pandas()
    counts, expected = Counter(), []
    for b in range(2):  # a clean run's sink: each microbatch's count per key, once
        counts.update(e["k"] for e in events(b))
        expected += [(k, counts[k]) for k in sorted({e["k"] for e in events(b)})]
    assert sorted(zip(sink["k"], sink["n"])) == sorted(expected)
