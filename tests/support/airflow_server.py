"""A real Airflow for tests: a fresh home with SQLite, this project's DAGs and plugin, a known admin password, and
the API server (or the whole standalone) on a free port of 127.0.0.1."""
from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.helpers import cpu_seconds, file_sizes, group_members, process_group, run_advancing, wait_advancing
from tests.support.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "lakestate-test"


def airflow_env(base: Path, lakestate_root: Path, registry: Path) -> dict:
    (base / "passwords.json").write_text(json.dumps({"admin": PASSWORD}))
    return {**os.environ, "LAKESTATE_ROOT": str(lakestate_root), "AIRFLOW_HOME": str(base / "airflow-home"),
            "LAKESTATE_REGISTRY": str(registry), "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(base / "passwords.json"),
            "PYTHONWARNINGS": "ignore"}


def airflow_db_settings() -> dict:
    """scripts/airflow-db.env: Airflow's database (user, password, name) and executor settings, the one place
    scripts/postgres.sh and docker/compose.yaml read them from."""
    return dict(line.split("=", 1) for line in (ROOT / "scripts" / "airflow-db.env").read_text().splitlines()
                if line and not line.startswith("#"))


def get(url: str, token: str | None = None, method: str = "GET") -> tuple[int, str]:
    """Status and body of a request without a body (GET, or ``method``), as ``token``'s user or anonymously."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {},
                                     method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def send_json(url: str, token: str, body: dict, method: str = "PATCH") -> tuple[int, str]:
    """Status and body of a request with a JSON body, as ``token``'s user."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method=method, headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def token(url: str) -> str:
    request = urllib.request.Request(f"{url}/auth/token", data=json.dumps(
        {"username": "admin", "password": PASSWORD}).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["access_token"]


_MIGRATED: list[Path] = []  # the first migrated database of this test process


def migrate(env: dict) -> None:
    """``airflow db migrate`` for ``env``'s AIRFLOW_HOME (SQLite): run once per test process; each later home
    gets a copy of that first database (the same Airflow, the same migrations: ~10-30 s saved each time)."""
    import shutil
    import tempfile

    home = Path(env["AIRFLOW_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    if _MIGRATED:
        shutil.copyfile(_MIGRATED[0], home / "airflow.db")
        return
    done = run_advancing(["airflow", "db", "migrate"], "airflow db migrate", watch=[home], env=env, stall_s=300,
                         ceiling_s=900)
    assert done.returncode == 0, done.stderr[-2000:]
    kept = Path(tempfile.mkdtemp(prefix="lakestate-airflow-db-")) / "airflow.db"
    shutil.copyfile(home / "airflow.db", kept)
    _MIGRATED.append(kept)


@contextlib.contextmanager
def running_airflow(base: Path, env: dict):
    """``airflow db migrate`` (``migrate``), then ``airflow api-server`` until the block ends; yields the base URL
    once the API answers its health check. (The whole standalone, as a user starts it: ``airflow_ui``.)"""
    migrate(env)
    port, worker_logs, trigger_logs = free_ports(3)
    env = {**env, "AIRFLOW__API__PORT": str(port), "AIRFLOW__API__HOST": "127.0.0.1",
           # Task runners reach the API server here; the log servers take free ports too.
           "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
           "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(worker_logs),
           "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger_logs)}
    args = ["airflow", "api-server", "--host", "127.0.0.1", "--port", str(port)]
    log_path = base / "airflow-api-server.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                  cwd=ROOT)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(360):
                try:
                    if get(f"{url}/api/v2/monitor/health")[0] == 200:
                        break
                except OSError:
                    pass
                assert server.poll() is None, log_path.read_text()[-3000:]
                time.sleep(0.5)
            else:
                raise AssertionError("Airflow did not come up: " + log_path.read_text()[-3000:])
            yield url
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, 15)
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, 9)
                server.wait(30)


@contextlib.contextmanager
def airflow_ui(env: dict):
    """The standalone (API server with the UI, scheduler, DAG processor, triggerer) as a user starts it:
    ``scripts/airflow-ui.sh --background`` on a free port, the database a copy of this process's first migrated
    one (``migrate``); yields the URL it printed. Ended by ``scripts/airflow-ui.sh stop`` when the block ends;
    a block that checks what stop did calls ``stop_ui`` itself first (the second stop finds nothing to stop).
    With a database of its own (``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``), the script's own migration makes it."""
    if "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in env:
        migrate(env)
    port, worker_logs, trigger_logs = free_ports(3)
    env = {**env, "LAKESTATE_UI_PORT": str(port), "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(worker_logs),
           "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger_logs)}
    env.pop("LAKESTATE_UI_HOST", None)
    home = Path(env["AIRFLOW_HOME"])
    try:  # the standalone stopped whatever happens from here on, a start that fails or stalls too
        output = start_ui(env)
        printed = re.search(r"Airflow UI: (http://([\d.]+):(\d+)) ", output)
        assert printed and printed.group(2, 3) == ("127.0.0.1", str(port)), output[-2000:]
        yield printed.group(1)
    finally:
        started = standalone_processes(home)
        stop_ui(env)
    assert not (left := still_running(started)), f"scripts/airflow-ui.sh stop left these running: {left}"


def start_ui(env: dict) -> str:
    """``scripts/airflow-ui.sh --background`` for ``env``'s AIRFLOW_HOME, which must succeed; its output."""
    home = Path(env["AIRFLOW_HOME"])
    said = home.parent / f"{home.name}.airflow-ui.out"
    with open(said, "w") as out, process_group(["bash", "scripts/airflow-ui.sh", "--background"], cwd=ROOT,
                                               env=env, stdout=out, stderr=subprocess.STDOUT) as script:
        # Its migration, connection and the standalone's start: waited for while their logs grow and the
        # script's airflow commands use CPU (5 s steps), not for a fixed time (the script gives the API
        # server 5 minutes of its own).
        wait_advancing(lambda: script.poll() is not None,
                       lambda: (file_sizes(said, Path(f"{home}.migrate.log"), home / "standalone.log"),
                                int(cpu_seconds(group_members(script.pid)) // 5)),
                       "scripts/airflow-ui.sh --background", stall_s=300, ceiling_s=900)
    output = said.read_text()
    assert script.returncode == 0, output[-6000:]
    return output


def standalone_env(home: Path) -> dict:
    """The environment the running standalone of ``home`` was started with (its port, its log servers' ports,
    its database), read from its process: what starting it again for the same user takes."""
    pid = int((home / "lakestate-ui.pid").read_text().split()[0])
    return dict(v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if "=" in v)


def standalone_components(home: Path) -> list[str]:
    """The running components of the standalone of ``home`` (its own children's commands, sorted): "airflow
    scheduler", "airflow triggerer", "airflow dag-processor", "airflow api_server -- host:... port:..."."""
    pid = (home / "lakestate-ui.pid").read_text().split()[0]
    listed = subprocess.run(["ps", "-ww", "-o", "stat=,args=", "--ppid", pid], capture_output=True, text=True).stdout
    return sorted(re.sub(r"^\S*/bin/python \S*/bin/airflow", "airflow", args.strip())
                  for stat, _, args in (line.strip().partition(" ") for line in listed.splitlines())
                  if not stat.startswith("Z"))


def stop_ui(env: dict) -> str:
    """``scripts/airflow-ui.sh stop`` for ``env``'s AIRFLOW_HOME; its output (a second stop says nothing ran)."""
    stopped = subprocess.run(["bash", "scripts/airflow-ui.sh", "stop"], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=120)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    return stopped.stdout


def processes_of(home: Path) -> list[str]:
    """Every process whose environment has ``AIRFLOW_HOME=home``, as "pid command"."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and f"AIRFLOW_HOME={home}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                found.append(f"{proc.name} {command}")
        except OSError:  # gone meanwhile, or another user's
            continue
    return found


def _stats() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent, process group, start time) of every process, from /proc/<pid>/stat."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit():
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                if fields[0] != "Z":
                    found[int(proc.name)] = (int(fields[1]), int(fields[2]), fields[19])
        except (OSError, IndexError):
            continue
    return found


def standalone_processes(home: Path) -> set[tuple[int, str]]:
    """(pid, start time) of the standalone of ``home`` and of all it started: the processes carrying its
    AIRFLOW_HOME, its process group (the pid file's), and their children at any depth (a LocalExecutor worker's
    process title overwrites the environment /proc shows, and one whose scheduler was killed has no parent)."""
    stats = _stats()
    pidfile = home / "lakestate-ui.pid"
    group = int(pidfile.read_text().split()[0]) if pidfile.exists() else None
    found = {int(p.split()[0]) for p in processes_of(home)} | {pid for pid, s in stats.items() if s[1] == group}
    while more := {pid for pid, s in stats.items() if s[0] in found} - found:
        found |= more
    return {(pid, stats[pid][2]) for pid in found if pid in stats}


def still_running(processes: set[tuple[int, str]]) -> list[str]:
    """Those of ``processes`` (from ``standalone_processes``) that still run, as "pid command"."""
    stats, found = _stats(), []
    for pid, started in sorted(processes):
        if stats.get(pid, (0, 0, ""))[2] == started:
            with contextlib.suppress(OSError):  # gone meanwhile
                found.append(f"{pid} {Path(f'/proc/{pid}/cmdline').read_bytes().replace(bytes(1), b' ').decode()}")
    return found


def listening(port: int) -> list[str]:
    """The local addresses of the TCP sockets listening on ``port`` (from /proc/net/tcp and tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.append(address)
    return found


def demo_input(env: dict, files: int = 2) -> None:
    subprocess.run([sys.executable, "-m", "demo.generate", "--files", str(files), "--events", "300", "--keys", "60"],
                   env=env, check=True, capture_output=True, cwd=ROOT)
