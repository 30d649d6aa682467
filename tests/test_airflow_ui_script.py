"""``scripts/airflow-ui.sh``: the standalone listens on 127.0.0.1 at the port it prints (the one asked for), and
``scripts/airflow-ui.sh stop`` leaves no process of its Airflow home behind."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.ports import free_ports

pytestmark = pytest.mark.e2e  # the UI script starts Airflow's processes

REPO = Path(__file__).resolve().parent.parent


def _processes_of(home: Path) -> list[str]:
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


def _listening(port: int) -> list[str]:
    """The local addresses of the TCP sockets listening on ``port`` (from /proc/net/tcp and tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.append(address)
    return found


def test_the_ui_listens_on_localhost_at_the_printed_port_and_stop_ends_everything_it_started(tmp_path):
    (port,) = free_ports()
    home = tmp_path / "airflow"
    env = {**os.environ, "AIRFLOW_HOME": str(home), "LAKESTATE_ROOT": str(tmp_path / "root"),
           "LAKESTATE_UI_PORT": str(port)}
    env.pop("LAKESTATE_UI_HOST", None)
    try:
        started = subprocess.run(["bash", "scripts/airflow-ui.sh", "--background"], cwd=REPO, env=env,
                                 capture_output=True, text=True, timeout=400)
        assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
        printed = re.search(r"Airflow UI: http://([\d.]+):(\d+) ", started.stdout)
        assert printed and printed.groups() == ("127.0.0.1", str(port)), started.stdout[-2000:]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=10) as r:
            assert r.status == 200
        assert _listening(port) == ["0100007F"], _listening(port)  # 127.0.0.1 only, not 0.0.0.0 nor ::
        with socket.socket() as s:  # the same port elsewhere on this machine is not served
            other = socket.gethostbyname(socket.gethostname())
            if other != "127.0.0.1":
                assert s.connect_ex((other, port)) != 0
        assert _processes_of(home), "the standalone's processes carry its AIRFLOW_HOME"
    finally:
        stopped = subprocess.run(["bash", "scripts/airflow-ui.sh", "stop"], cwd=REPO, env=env, capture_output=True,
                                 text=True, timeout=120)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "airflow scheduler" in stopped.stdout and "stopped" in stopped.stdout, stopped.stdout
    assert _processes_of(home) == [], _processes_of(home)
    assert _listening(port) == []
