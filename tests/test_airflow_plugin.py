"""The Lakestate page in a real Airflow API server: it refuses anonymous requests, and for a logged-in user shows
the job's checkpoints, its state per state name and the key-group chart, read from the catalog and Delta logs."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from state_store.cli import main as lakestate

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture(scope="module")
def airflow_with_a_job(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("plugin")
    root, home = base / "lakestate", base / "airflow-home"
    registry = base / "lakestate.toml"
    registry.write_text('[jobs.clicks]\nentrypoint = "demo.clicks:job"\ncheckpoint_interval = 1\n')
    env = {**os.environ, "LAKESTATE_ROOT": str(root), "AIRFLOW_HOME": str(home), "LAKESTATE_REGISTRY": str(registry),
           "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"), "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(base / "passwords.json")}
    (base / "passwords.json").write_text(json.dumps({"admin": "lakestate-test"}))
    subprocess.run([sys.executable, "-m", "demo.generate", "--files", "2", "--events", "300", "--keys", "60"],
                   env=env, check=True, capture_output=True, cwd=ROOT)
    saved = os.environ.get("LAKESTATE_ROOT")
    os.environ["LAKESTATE_ROOT"] = str(root)  # the demo job's factory reads its input folder from it
    try:
        assert lakestate(["run", "--job", "clicks", "--registry", str(registry), "--root", str(root)]) == 0
    finally:
        if saved is None:
            os.environ.pop("LAKESTATE_ROOT")
        else:
            os.environ["LAKESTATE_ROOT"] = saved
    migrate = subprocess.run(["airflow", "db", "migrate"], env=env, capture_output=True, text=True, timeout=600)
    assert migrate.returncode == 0, migrate.stderr[-2000:]
    port = _free_port()
    log = open(base / "api-server.log", "w")
    server = subprocess.Popen(["airflow", "api-server", "--host", "127.0.0.1", "--port", str(port)], env=env,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                if _get(f"{url}/api/v2/monitor/health")[0] == 200:
                    break
            except OSError:
                pass
            assert server.poll() is None, (base / "api-server.log").read_text()[-3000:]
            time.sleep(0.5)
        else:
            pytest.fail("the Airflow API server did not come up: " + (base / "api-server.log").read_text()[-3000:])
        yield url
    finally:
        os.killpg(server.pid, 15)
        server.wait(60)
        log.close()


def _token(url: str) -> str:
    request = urllib.request.Request(f"{url}/auth/token", data=json.dumps(
        {"username": "admin", "password": "lakestate-test"}).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["access_token"]


@pytest.mark.parametrize("path", ["/lakestate/", "/lakestate/api/jobs"])
def test_the_plugin_refuses_an_anonymous_request(airflow_with_a_job, path):
    status, body = _get(airflow_with_a_job + path)
    assert status in (401, 403), (status, body[:300])
    assert "clicks" not in body


def test_the_page_shows_checkpoints_state_and_the_key_group_chart_to_a_logged_in_user(airflow_with_a_job):
    token = _token(airflow_with_a_job)
    started = time.perf_counter()
    status, page = _get(airflow_with_a_job + "/lakestate/", token)
    seconds = time.perf_counter() - started
    assert status == 200, page[:500]
    assert "<section id='job-clicks'>" in page and "DAG lakestate_clicks" in page
    assert "<svg id='key-groups-clicks'" in page and page.count("<rect") == 128
    status, data = _get(airflow_with_a_job + "/lakestate/api/jobs", token)
    (job,) = json.loads(data)
    assert job["latest_checkpoint"] == 2 and job["checkpoints"] == [1, 2]
    assert sum(job["key_group_bytes"]) > 0 and job["problems"] == []
    assert any(name.endswith(".events") and size > 0 for name, (size, files) in job["state_bytes"].items())
    assert seconds < 1.0, seconds


def test_the_lakestate_page_is_in_the_ui_navigation(airflow_with_a_job):
    status, data = _get(airflow_with_a_job + "/api/v2/plugins", _token(airflow_with_a_job))
    assert status == 200, data[:300]
    plugin = next(p for p in json.loads(data)["plugins"] if p["name"] == "lakestate")
    assert plugin["external_views"][0]["href"] == "/lakestate/"
    assert plugin["fastapi_apps"][0]["url_prefix"] == "/lakestate"
