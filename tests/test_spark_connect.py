"""Warm runs through Spark Connect: scripts/spark-connect.sh starts a real Connect server (pyspark's own, with the
Delta jars), a client session writes and reads Delta over it, and stop leaves no process behind."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "spark-connect.sh"

pytestmark = pytest.mark.slow  # a JVM start (about 15 s here)


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

    def script(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(SCRIPT), *args], env=self.env, capture_output=True, text=True,
                              timeout=240, check=check)

    @property
    def mark(self) -> str:
        return self.pidfile.read_text().split()[2]


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    """A running server for the module: (its sc:// URL, the server); stopped at the end, checked gone."""
    server = ConnectServer(tmp_path_factory.mktemp("connect"))
    started = server.script("start", "--background")
    url = started.stdout.strip().splitlines()[-1]
    assert url.startswith("sc://127.0.0.1:"), started.stdout + started.stderr
    mark = server.mark
    try:
        yield url, server
    finally:
        server.script("stop")
        assert _marked(mark) == [], "stop left processes of the server behind"
        assert not server.pidfile.exists()


@pytest.fixture(scope="module")
def remote(connect_server):
    """A client session on the server (Spark Connect's, no JVM in this process)."""
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(connect_server[0]).create()
    yield session
    session.stop()


def test_spark_connect_script_serves_delta_and_says_its_url(connect_server, remote, tmp_path):
    url, server = connect_server
    assert server.script("status").stdout.strip() == url
    # A second start finds the running server instead of starting another.
    again = server.script("start", "--background")
    assert url in again.stdout and "already running" in again.stdout
    assert _marked(server.mark)

    assert type(remote).__module__.startswith("pyspark.sql.connect")
    path = str(tmp_path / "t")
    remote.range(3).selectExpr("id", "id * 10 AS v").write.format("delta").save(path)
    remote.range(3, 4).selectExpr("id", "id * 10 AS v").write.format("delta").mode("append").save(path)
    rows = remote.read.format("delta").load(path).orderBy("id").collect()
    assert [(r.id, r.v) for r in rows] == [(0, 0), (1, 10), (2, 20), (3, 30)]
    history = remote.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version", "operation").collect()
    assert sorted((r.version, r.operation) for r in history) == [(0, "WRITE"), (1, "WRITE")]


def test_spark_connect_script_stop_without_a_server_says_so(tmp_path):
    server = ConnectServer(tmp_path)
    assert "no Spark Connect server" in server.script("stop").stdout
    assert server.script("status", check=False).returncode == 1
