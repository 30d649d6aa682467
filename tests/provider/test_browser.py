"""A real browser against a real Airflow, started as a user starts it (``scripts/airflow-ui.sh``: on 127.0.0.1
only, at the port it prints; ``stop`` ends every process it started): log in, trigger the pipeline DAG, wait for
its success (its summary is its XCom and its sink Asset's event; its log has no warning of Lakestate's own), open
the Lakestate page from the UI's navigation (a React view in the UI's own page, no iframe) and read it as a user
would: human units, the timezone picked in the UI, the chart's axis and subtask bands; follow its links to the
DAG, to the run behind a checkpoint and to the savepoint DAG, trigger that from its form, find the savepoint
and copy its path, and the savepoint task's duration on the page; a restore of a checkpoint that does not exist
fails with the command's own error; rescale from the rescale DAG's form (which refuses a parallelism out of range
with the value typed); then the page in dark mode, and the page on its own at /lakestate/. Debian's Chromium drives it
(installed by scripts/browser.sh from the test command); screenshots are kept in test-artifacts/."""
from __future__ import annotations

import json
import re
import socket
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import quote, unquote
from zoneinfo import ZoneInfo

import pytest

from tests.support.airflow_server import (
    PASSWORD,
    ROOT,
    airflow_env,
    airflow_ui,
    demo_input,
    get,
    listening,
    processes_of,
    send_json,
    standalone_processes,
    still_running,
    stop_ui,
    token,
)

ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
PICKED_ZONE = "Asia/Kolkata"  # +05:30: a time shown in UTC or in the machine's zone would not match
BYTES = re.compile(r"^\d+(\.\d)? (B|KiB|MiB|GiB)$")


@pytest.fixture
def browser(tmp_path):
    assert CHROMIUM.exists() and CHROMEDRIVER.exists(), \
        "Debian's chromium and chromium-driver are not installed: scripts/browser.sh (run by scripts/test.sh) " \
        "installs them"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.implicitly_wait(15)
    ARTIFACTS.mkdir(exist_ok=True)
    yield driver
    driver.quit()


def _wait(predicate, seconds: float, what: str, every: float = 2.0):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {seconds:.0f}s waiting for {what}")


def _present(browser, by: str, selector: str) -> list:
    """The elements found now: the driver's implicit wait (15 s) would wait that long for an element that is
    rightly absent."""
    browser.implicitly_wait(0)
    try:
        return browser.find_elements(by, selector)
    finally:
        browser.implicitly_wait(15)


def _shot(browser, name: str, height: int | None = None) -> None:
    """A screenshot of the whole page (the window grown to its height), then the window as it was. The UI
    scrolls its own content box, so the page's height is the view's."""
    height = height or browser.execute_script(
        "const v = document.querySelector('#lakestate-view .lakestate');"
        "return v ? v.getBoundingClientRect().height + 250 : document.documentElement.scrollHeight")
    browser.set_window_size(1400, max(1000, min(height + 40, 4000)))
    browser.save_screenshot(str(ARTIFACTS / name))
    browser.set_window_size(1400, 1000)


class Airflow:
    """The test's Airflow as the browser and the REST API see it."""

    def __init__(self, browser, url: str, home: Path):
        self.browser, self.url, self.home = browser, url, home
        self.api = token(url)

    def log_in(self) -> None:
        from selenium.webdriver.common.by import By

        self.browser.get(self.url + "/")
        self.browser.find_element(By.NAME, "username").send_keys("admin")
        self.browser.find_element(By.NAME, "password").send_keys(PASSWORD)
        self.browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        _wait(lambda: "/auth/login" not in self.browser.current_url, 30, "the login")

    def trigger_from_dag_page(self, screenshot: str, check_form=None) -> None:
        """On a DAG's page: open its trigger form (``check_form()`` reads it first) and trigger it."""
        confirm = self.open_form()
        if check_form:
            check_form()
        self.browser.save_screenshot(str(ARTIFACTS / screenshot))
        confirm[-1].click()

    def open_form(self) -> list:
        """On a DAG's page: open its trigger form; its Trigger buttons."""
        from selenium.webdriver.common.by import By

        self.browser.find_element(By.CSS_SELECTOR, "button[aria-label='Trigger Dag']").click()
        return _wait(lambda: [b for b in self.browser.find_elements(By.XPATH, "//button[normalize-space(.)='Trigger']")
                              if b.is_displayed() and b.get_attribute("aria-label") != "Trigger Dag"],
                     30, "the trigger form")

    def field(self, name: str):
        """The open form's field ``name``."""
        from selenium.webdriver.common.by import By

        return _wait(lambda: [e for e in self.browser.find_elements(By.NAME, f"element_{name}") if e.is_displayed()],
                     30, f"the {name} field")[0]

    def latest_run(self, dag_id: str) -> dict | None:
        status, body = get(f"{self.url}/api/v2/dags/{dag_id}/dagRuns", self.api)
        runs = json.loads(body)["dag_runs"] if status == 200 else []
        return max(runs, key=lambda r: r.get("run_after") or "", default=None)

    def finished(self, dag_id: str) -> dict:
        return _wait(lambda: (r := self.latest_run(dag_id)) and r["state"] in ("success", "failed") and r, 600,
                     f"the run of {dag_id} to finish", every=1)

    def wait_for_success(self, dag_id: str) -> dict:
        run = self.finished(dag_id)
        assert run["state"] == "success", (self.home / "standalone.log").read_text()[-4000:]
        return run

    def xcom(self, dag_id: str, run: dict, task_id: str, key: str = "return_value"):
        status, body = get(f"{self.url}/api/v2/dags/{dag_id}/dagRuns/{quote(run['dag_run_id'])}/taskInstances/"
                           f"{task_id}/xcomEntries/{key}", self.api)
        assert status == 200, body
        value = json.loads(body)["value"]
        return json.loads(value) if isinstance(value, str) else value

    def asset_events(self, uri: str) -> list[dict]:
        """The extras of ``uri``'s Asset events, oldest first."""
        status, body = get(f"{self.url}/api/v2/assets/events?limit=100", self.api)
        assert status == 200, body
        return [e["extra"] for e in sorted(json.loads(body)["asset_events"], key=lambda e: e["id"]) if e["uri"] == uri]

    def task_log(self, dag_id: str, run: dict, task_id: str) -> list[dict]:
        """The task's log (its first try) as Airflow's task runner wrote it: one JSON record per line."""
        (path,) = (self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run['dag_run_id']}" /
                   f"task_id={task_id}").glob("attempt=1.log")
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def lakestate_view(self):
        """The Lakestate page in the UI (the React view), its job section once it is rendered."""
        from selenium.webdriver.common.by import By

        self.browser.get(f"{self.url}/plugin/lakestate")
        section = self.browser.find_element(By.CSS_SELECTOR, "#lakestate-view section#job-clicks")
        assert not _present(self.browser, By.TAG_NAME, "iframe"), "the Lakestate page is framed again"
        return section

    def follow(self, link, lands_on: str) -> None:
        """Click ``link`` in the page and wait until the UI shows ``lands_on`` (a path)."""
        link.click()
        _wait(lambda: unquote(self.browser.current_url).endswith(lands_on), 30,
              f"the link to land on {lands_on} (at {self.browser.current_url})", every=0.5)


def _rows(section, table: str) -> list[list]:
    from selenium.webdriver.common.by import By

    return [[td for td in tr.find_elements(By.TAG_NAME, "td")]
            for tr in section.find_elements(By.CSS_SELECTOR, f"table.{table} tr")[1:]]


def _human(size: int) -> str:
    from state_store.provider.views import human_bytes

    return human_bytes(size)


def _check_checkpoints(section, checkpoint, run: dict) -> list:
    """The newest checkpoint's row reads as it should; returns its cells."""
    from selenium.webdriver.common.by import By

    header = section.find_element(By.CSS_SELECTOR, "table.checkpoints tr").text
    assert f"completed ({PICKED_ZONE})" in header, header
    row = _rows(section, "checkpoints")[0]
    cells = [c.text for c in row]
    shown = datetime.fromtimestamp(checkpoint.completed_ms / 1000, ZoneInfo(PICKED_ZONE)).strftime("%Y-%m-%d %H:%M:%S")
    assert cells[:3] == [str(checkpoint.checkpoint_id), str(checkpoint.batch_id), shown], cells
    assert cells[5] == f"{sum(checkpoint.entries.values()):,}", cells
    assert cells[9] == _human(checkpoint.size_bytes) and BYTES.match(cells[9]), cells
    assert re.fullmatch(r"keyed v\d+ · operator v\d+", cells[8]), cells
    when = row[2].find_element(By.CLASS_NAME, "when")
    assert when.value_of_css_property("white-space") == "nowrap"
    # The run behind it: recorded from the task's environment when spark-submit ran under Airflow.
    assert (checkpoint.airflow_run.dag_id, checkpoint.airflow_run.run_id) == ("lakestate_clicks", run["dag_run_id"])
    link = row[7].find_element(By.TAG_NAME, "a")
    assert unquote(link.get_attribute("href")).endswith(f"/dags/lakestate_clicks/runs/{run['dag_run_id']}")
    return row


def _check_chart(section, checkpoint) -> None:
    """The chart has its bytes axis and one band per subtask over exactly the key groups it owns."""
    from selenium.webdriver.common.by import By

    chart = section.find_element(By.CSS_SELECTOR, "svg.key-group-chart")
    assert len(chart.find_elements(By.CSS_SELECTOR, "rect.bar")) == checkpoint.max_parallelism
    bands = [(b.get_attribute("data-subtask"), b.get_attribute("data-key-groups"))
             for b in chart.find_elements(By.CSS_SELECTOR, "g.band")]
    assert bands == [(str(i), f"{s}-{e}") for i, (s, e) in enumerate(checkpoint.key_group_ranges)] \
        == [("0", "0-63"), ("1", "64-127")], bands
    ticks = [t.text for t in chart.find_elements(By.CSS_SELECTOR, "text.y-tick")]
    assert ticks[0] == "0 B" and all(BYTES.match(t) for t in ticks), ticks
    subtasks = [[c.text for c in r] for r in _rows(section, "subtasks")]
    assert [r[:2] for r in subtasks] == [["0", "0–63"], ["1", "64–127"]], subtasks
    assert all(BYTES.match(r[2]) and r[4].startswith("×") for r in subtasks), subtasks


def test_the_lakestate_page_in_the_airflow_ui_reads_well_and_its_links_move_the_ui(browser, tmp_path):
    from selenium.webdriver.common.by import By

    from state_store.catalog.job_store import JobStore
    from state_store.settings import Settings

    registry = tmp_path / "lakestate.toml"
    registry.write_text('[jobs.clicks]\nentrypoint = "demo.clicks:job"\ncheckpoint_interval = 1\n' + SQL_JOB)
    env = {**airflow_env(tmp_path, tmp_path / "lakestate", registry),
           "PYTHONWARNINGS": "default"}  # the tasks' logs show every warning they raise
    demo_input(env)
    home = Path(env["AIRFLOW_HOME"])
    store = JobStore(Settings.load(root=tmp_path / "lakestate").job_dir("clicks"))
    with airflow_ui(env) as url:
        port = int(url.rsplit(":", 1)[1])
        _check_it_listens_on_this_machine_only(port, home)
        airflow = Airflow(browser, url, home)
        for dag_id in ("lakestate_clicks", "lakestate_savepoint", "lakestate_rescale", "lakestate_compaction"):
            _wait(lambda dag_id=dag_id: get(f"{url}/api/v2/dags/{dag_id}", airflow.api)[0] == 200, 180,
                  f"{dag_id} parsed")
        # Paused: the page must then not say that it runs daily.
        assert send_json(f"{url}/api/v2/dags/lakestate_compaction", airflow.api, {"is_paused": True})[0] == 200
        airflow.log_in()
        browser.execute_script(f"localStorage.setItem('timezone', JSON.stringify('{PICKED_ZONE}'))")

        browser.get(f"{url}/dags/lakestate_clicks")
        airflow.trigger_from_dag_page("1-trigger-form.png")
        run = airflow.wait_for_success("lakestate_clicks")
        _check_the_runs_summary_and_log(airflow, run)
        _check_a_sql_job(airflow)

        # From the UI's navigation to the page: rendered in the UI, not in a frame.
        browser.get(f"{url}/dags/lakestate_clicks/runs")
        browser.find_element(By.XPATH, "//a[normalize-space(.)='Lakestate']").click()
        _wait(lambda: "/plugin/lakestate" in browser.current_url, 30, "the Lakestate page")
        section = browser.find_element(By.CSS_SELECTOR, "#lakestate-view section#job-clicks")
        assert not _present(browser, By.TAG_NAME, "iframe")
        latest = store.latest_checkpoint()
        assert (latest.checkpoint_id, latest.batch_id) == (2, 1)
        _check_checkpoints(section, latest, run)
        _check_chart(section, latest)
        never = section.find_element(By.CSS_SELECTOR, ".compaction-none").text
        assert "paused" in never and "runs" not in never, never
        _shot(browser, "page-after-1-lakestate.png")

        # Every link moves the UI itself: to the DAG, to the run behind a checkpoint, to an operation's DAG.
        airflow.follow(section.find_element(By.LINK_TEXT, "DAG lakestate_clicks"), "/dags/lakestate_clicks")
        section = airflow.lakestate_view()
        airflow.follow(_rows(section, "checkpoints")[0][7].find_element(By.TAG_NAME, "a"),
                       f"/dags/lakestate_clicks/runs/{run['dag_run_id']}")
        section = airflow.lakestate_view()
        airflow.follow(section.find_element(By.LINK_TEXT, "savepoint"), "/dags/lakestate_savepoint")
        airflow.trigger_from_dag_page("2-savepoint-trigger-form.png", lambda: _check_an_empty_optional_field(airflow))
        savepoint_run = airflow.wait_for_success("lakestate_savepoint")
        # A restore of a checkpoint that does not exist, triggered as a DAG run: it fails (while the browser
        # reads the savepoint's row) with the command's own error.
        status, body = send_json(f"{url}/api/v2/dags/lakestate_restore/dagRuns", airflow.api, {
            "logical_date": None, "conf": {"job": "clicks", "checkpoint": 999}}, method="POST")
        assert status == 200, body
        _check_savepoint(airflow, savepoint_run)
        _check_a_failed_restore_says_the_commands_error(airflow)
        _check_rescale(airflow, store)
        _check_dark_mode_and_the_standalone_page(airflow)
        started = standalone_processes(home)
        said = stop_ui(env)
    assert "airflow scheduler" in said and "stopped" in said, said
    assert still_running(started) == [] and listening(port) == [], (still_running(started), listening(port))


# The demo's SQL Top-N (lakestate.toml): the top 3 pages of the clicks by their count, an updating result.
SQL_JOB = """
[jobs.sql-top-pages]
sql = \"\"\"SELECT page, clicks, place FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY clicks DESC) AS place
  FROM (SELECT page, COUNT(*) AS clicks FROM clicks GROUP BY page)) WHERE place <= 3\"\"\"
sink = "sinks/sql_top_pages"

[jobs.sql-top-pages.tables.clicks]
path = "input/clicks"
format = "parquet"
schema = "user_id BIGINT, page STRING, amount DOUBLE, seq BIGINT"
"""


def _check_a_sql_job(airflow: Airflow) -> None:
    """A SQL job of the registry runs through its pipeline DAG, and the page shows its query and its operators:
    the sink holds the top 3 pages of the clicks, as pandas counts them."""
    import pandas as pd
    from deltalake import DeltaTable
    from selenium.webdriver.common.by import By

    dag = "lakestate_sql-top-pages"
    _wait(lambda: get(f"{airflow.url}/api/v2/dags/{dag}", airflow.api)[0] == 200, 180, f"{dag} parsed")
    assert send_json(f"{airflow.url}/api/v2/dags/{dag}", airflow.api, {"is_paused": False})[0] == 200
    status, body = send_json(f"{airflow.url}/api/v2/dags/{dag}/dagRuns", airflow.api, {"logical_date": None},
                             method="POST")
    assert status == 200, body
    airflow.wait_for_success(dag)
    root = airflow.home.parent / "lakestate"
    counts = pd.read_parquet(root / "input" / "clicks").groupby("page").size().sort_values(ascending=False)
    top = DeltaTable(str(root / "warehouse" / "sinks" / "sql_top_pages")).to_pandas().sort_values("place")
    assert top["clicks"].tolist() == counts.head(3).tolist() and top["place"].tolist() == [1, 2, 3]
    airflow.lakestate_view()
    section = airflow.browser.find_element(By.CSS_SELECTOR, "#lakestate-view section#job-sql-top-pages")
    assert "SQL" in section.find_element(By.CSS_SELECTOR, "p.meta").text
    query = section.find_element(By.CSS_SELECTOR, "details.sql pre")
    assert "ROW_NUMBER() OVER (ORDER BY clicks DESC)" in query.get_attribute("textContent")
    assert "sql-top-group-clicks-page" in section.text


def _check_it_listens_on_this_machine_only(port: int, home: Path) -> None:
    assert listening(port) == ["0100007F"], listening(port)  # 127.0.0.1 only, not 0.0.0.0 nor ::
    with socket.socket() as s:  # the same port at this machine's other address is not served
        other = socket.gethostbyname(socket.gethostname())
        if other != "127.0.0.1":
            assert s.connect_ex((other, port)) != 0
    assert processes_of(home), "the standalone's processes carry its AIRFLOW_HOME"


# A warning raised from Lakestate's own code, as Python prints it: "<...>/state_store/<file>.py:<line>: <Kind>Warning".
# Spark's own, which the hook's logger passes on, are not Lakestate's.
OUR_WARNING = re.compile(r"state_store/[\w/]+\.py:\d+: \w*Warning")


def _check_the_runs_summary_and_log(airflow: Airflow, run: dict) -> None:
    """The run's summary is its XCom and its sink Asset's event extra (a downstream DAG scheduled on the Asset
    reads it); housekeeping pushes one key; the log says what was planned and checkpointed, and has no warning
    raised by Lakestate's code."""
    summary = airflow.xcom("lakestate_clicks", run, "run")
    assert summary["microbatches"] == [0, 1] and summary["checkpoints"] == [1, 2] and summary["records_in"] == 600
    assert summary["records_out"] > 0 and summary["records_per_s"] > 0 and summary["job"] == "clicks"
    assert airflow.asset_events("lakestate://clicks/sink") == [summary]
    status, body = get(f"{airflow.url}/api/v2/dags/lakestate_clicks/dagRuns/{quote(run['dag_run_id'])}/"
                       f"taskInstances/housekeeping/xcomEntries", airflow.api)
    assert [e["key"] for e in json.loads(body)["xcom_entries"]] == ["return_value"], body
    said = "\n".join(str(r.get("event", "")) for r in airflow.task_log("lakestate_clicks", run, "run"))
    assert "planned microbatches 0..1" in said and "checkpoint 2 at microbatch 1" in said, said[-3000:]
    assert not [line for line in said.splitlines() if OUR_WARNING.search(line)], said


def _check_a_failed_restore_says_the_commands_error(airflow: Airflow) -> None:
    """A failed operation raises with the command's own error, logged at ERROR, not the provider's generic
    text."""
    run = airflow.finished("lakestate_restore")
    assert run["state"] == "failed" and run["conf"]["checkpoint"] == 999, run
    records = airflow.task_log("lakestate_restore", run, "restore")
    errors = [d for r in records for d in r.get("error_detail") or []]
    assert [(d["exc_type"], d["exc_value"]) for d in errors][:1] == [
        ("AirflowException", "lakestate: error: checkpoint 999 does not exist; retained: [1, 2]")], records[-5:]
    said = [r for r in records if "lakestate: error:" in str(r.get("event", ""))]
    assert any(r["level"] == "error" for r in said), said
    assert "Cannot execute" not in json.dumps(errors), errors


def _check_savepoint(airflow: Airflow, run: dict) -> None:
    """The savepoint's XCom, Asset event and log line; its row: its path shortened to its job's folder and its
    own, copied whole by its button; its run linked."""
    from selenium.webdriver.common.by import By

    xcom = airflow.xcom("lakestate_savepoint", run, "savepoint")
    assert xcom["checkpoint"] == 2 and xcom["path"].endswith(f"/savepoints/clicks/{xcom['name']}")
    # A backup DAG can be scheduled on the savepoints' Asset; the log says where it is.
    assert airflow.asset_events("lakestate://clicks/savepoints") == [xcom]
    said = [str(r.get("event", "")) for r in airflow.task_log("lakestate_savepoint", run, "savepoint")]
    assert any(f"savepoint path: {xcom['path']}" in line for line in said), said[-20:]
    browser = airflow.browser
    browser.execute_cdp_cmd("Browser.grantPermissions", {
        "origin": airflow.url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    section = airflow.lakestate_view()
    row = _rows(section, "savepoints")[0]
    cells = [c.text for c in row]
    assert cells[0] == xcom["name"] and cells[1:3] == ["2", "1"] and BYTES.match(cells[7]), cells
    path = row[-1].find_element(By.CSS_SELECTOR, ".path")
    assert path.text == f"…/clicks/{xcom['name']}" and path.get_attribute("title") == xcom["path"], cells
    button = row[-1].find_element(By.CSS_SELECTOR, "button.copy")
    button.click()
    _wait(lambda: button.text == "copied", 10, "the path to be copied", every=0.2)
    assert button.get_attribute("data-copy") == xcom["path"]
    copied = browser.execute_async_script("navigator.clipboard.readText().then(arguments[0], "
                                          "e => arguments[0]('cannot read the clipboard: ' + e))")
    assert copied == xcom["path"] or copied.startswith("cannot read the clipboard: "), copied
    link = row[8].find_element(By.TAG_NAME, "a")
    assert unquote(link.get_attribute("href")).endswith(f"/dags/lakestate_savepoint/runs/{run['dag_run_id']}")
    # What "Savepoint first" adds to a rescale: the savepoint task's duration (Airflow's), not the copy's own.
    status, body = get(f"{airflow.url}/api/v2/dags/lakestate_savepoint/dagRuns/{quote(run['dag_run_id'])}/"
                       f"taskInstances/savepoint", airflow.api)
    took = json.loads(body)["duration"]
    rescale = section.find_element(By.CSS_SELECTOR, ".rescale").text
    assert f"Savepoint first adds about {took:.0f} s: the last savepoint task took {took:.0f} s" in rescale, rescale
    _shot(browser, "page-after-2-savepoint.png")


def _check_an_empty_optional_field(airflow: Airflow) -> None:
    """The savepoint form's optional checkpoint field, left empty, has no error mark (the red border), before
    or after a visit."""
    from selenium.webdriver.common.keys import Keys

    checkpoint = airflow.field("checkpoint")
    assert checkpoint.get_attribute("value") == "" and checkpoint.get_attribute("aria-invalid") != "true"
    checkpoint.click()
    checkpoint.send_keys(Keys.TAB)
    assert checkpoint.get_attribute("aria-invalid") != "true" and checkpoint.get_attribute("data-invalid") is None


def _rescale_from_its_form(airflow: Airflow) -> None:
    """The rescale form's parallelism is empty (no default: the Lakestate page says what each job runs at, so the
    DAG does not change with each run); a parallelism out of range is refused with the value typed (the number
    field must not clamp it to a bound without a word) before a run exists; 3 is triggered."""
    from selenium.webdriver.common.keys import Keys

    def runs() -> list[dict]:
        return json.loads(get(f"{airflow.url}/api/v2/dags/lakestate_rescale/dagRuns", airflow.api)[1])["dag_runs"]

    def trigger_with(value: str) -> str:
        airflow.browser.get(f"{airflow.url}/dags/lakestate_rescale")
        buttons = airflow.open_form()
        field = airflow.field("parallelism")
        field.send_keys(Keys.CONTROL, "a")
        field.send_keys(value, Keys.TAB)  # leaving the field is when a clamping number field clamps
        shown = field.get_attribute("value")
        buttons[-1].click()
        return shown

    airflow.browser.get(f"{airflow.url}/dags/lakestate_rescale")
    airflow.open_form()
    assert airflow.field("parallelism").get_attribute("value") == ""
    assert "the Lakestate page shows each job's current and max" in airflow.browser.page_source
    airflow.browser.save_screenshot(str(ARTIFACTS / "forms-1-rescale-form.png"))
    for typed, said in (("0", "0 is less than the minimum of 1"),
                        ("100000", "100000 is greater than the maximum of 32768")):
        assert trigger_with(typed) == typed  # not clamped to 1 or to 32768
        _wait(lambda said=said: said in airflow.browser.page_source, 30, f"the form to refuse {typed}")
        airflow.browser.save_screenshot(str(ARTIFACTS / f"forms-2-refused-{typed}.png"))
        assert runs() == []  # refused before a run exists
    assert trigger_with("3") == "3"
    _wait(lambda: runs(), 30, "the run of a parallelism in range")
    assert runs()[0]["conf"]["parallelism"] == 3


def _check_rescale(airflow: Airflow, store) -> None:
    """After a rescale 2 -> 3 (the rescale DAG, from its form), the page says where the new checkpoint came
    from, links its run, and the chart has three subtasks' bands."""
    from selenium.webdriver.common.by import By

    _rescale_from_its_form(airflow)
    run = airflow.wait_for_success("lakestate_rescale")
    latest = store.latest_checkpoint()
    assert (latest.checkpoint_id, latest.parallelism) == (3, 3)
    section = airflow.lakestate_view()
    row = _rows(section, "checkpoints")[0]
    cells = [c.text for c in row]
    assert cells[0] == "3" and cells[6] == "rescale 2 → 3 from checkpoint 2", cells
    link = row[7].find_element(By.TAG_NAME, "a")
    assert unquote(link.get_attribute("href")).endswith(f"/dags/lakestate_rescale/runs/{run['dag_run_id']}")
    chart = section.find_element(By.CSS_SELECTOR, "svg.key-group-chart")
    bands = [b.get_attribute("data-key-groups") for b in chart.find_elements(By.CSS_SELECTOR, "g.band")]
    assert bands == [f"{s}-{e}" for s, e in latest.key_group_ranges] == ["0-42", "43-85", "86-127"], bands
    assert [[c.text for c in r][:2] for r in _rows(section, "subtasks")] == [
        ["0", "0–42"], ["1", "43–85"], ["2", "86–127"]]
    _shot(airflow.browser, "page-after-3-rescale.png")


def _check_dark_mode_and_the_standalone_page(airflow: Airflow) -> None:
    from selenium.webdriver.common.by import By

    browser = airflow.browser
    browser.execute_script("localStorage.setItem('theme', 'dark')")
    section = airflow.lakestate_view()
    assert "dark" in browser.find_element(By.TAG_NAME, "html").get_attribute("class").split()

    def brightness(element, prop: str) -> int:
        return sum(int(v) for v in re.findall(r"\d+", element.value_of_css_property(prop))[:3])

    head = section.find_element(By.CSS_SELECTOR, "table.checkpoints th")
    assert brightness(head, "background-color") < 200 and brightness(head, "color") > 500
    _shot(browser, "page-after-4-dark.png")
    browser.execute_script("localStorage.setItem('theme', 'light')")

    # On its own, the page still works (for a bookmark or curl), and its links go where the UI's do.
    browser.get(f"{airflow.url}/lakestate/?tz={PICKED_ZONE}")
    section = browser.find_element(By.CSS_SELECTOR, "section#job-clicks")
    assert f"completed ({PICKED_ZONE})" in section.text
    airflow.follow(section.find_element(By.LINK_TEXT, "DAG lakestate_clicks"), "/dags/lakestate_clicks")
