"""A real browser against a real Airflow: log in, trigger the pipeline DAG, wait for its success, open the
Lakestate page and find the new checkpoint and the key-group chart; then trigger the savepoint DAG from its
trigger form and find the savepoint on the Lakestate page. Debian's Chromium drives it (installed by
scripts/browser.sh from the test command); screenshots are kept in test-artifacts/."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.airflow_server import PASSWORD, ROOT, airflow_env, demo_input, get, running_airflow, token

pytestmark = pytest.mark.slow
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


@pytest.fixture
def browser(tmp_path):
    assert CHROMIUM.exists() and CHROMEDRIVER.exists(), \
        "Debian's chromium and chromium-driver are not installed: scripts/browser.sh (run by scripts/test.sh) installs them"
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


def test_log_in_trigger_the_pipeline_and_find_the_new_checkpoint_on_the_lakestate_page(browser, tmp_path):
    from selenium.webdriver.common.by import By

    registry = tmp_path / "lakestate.toml"
    registry.write_text('[jobs.clicks]\nentrypoint = "demo.clicks:job"\ncheckpoint_interval = 1\n')
    env = airflow_env(tmp_path, tmp_path / "lakestate", registry)
    demo_input(env)
    with running_airflow(tmp_path, env, command="standalone") as url:
        api = token(url)
        _wait(lambda: get(f"{url}/api/v2/dags/lakestate_clicks", api)[0] == 200, 180, "the DAG to be parsed")

        browser.get(url + "/")
        browser.find_element(By.NAME, "username").send_keys("admin")
        browser.find_element(By.NAME, "password").send_keys(PASSWORD)
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        _wait(lambda: "/auth/login" not in browser.current_url, 30, "the login")

        def trigger(dag_id: str, screenshot: str) -> None:
            browser.get(f"{url}/dags/{dag_id}")
            browser.find_element(By.CSS_SELECTOR, "button[aria-label='Trigger Dag']").click()
            confirm = _wait(lambda: [b for b in browser.find_elements(By.XPATH,
                                                                      "//button[normalize-space(.)='Trigger']")
                                     if b.is_displayed() and b.get_attribute("aria-label") != "Trigger Dag"],
                            30, "the trigger form")
            browser.save_screenshot(str(ARTIFACTS / screenshot))
            confirm[-1].click()

        def run_state(dag_id: str):
            status, body = get(f"{url}/api/v2/dags/{dag_id}/dagRuns", api)
            runs = json.loads(body)["dag_runs"] if status == 200 else []
            return runs[0]["state"] if runs and runs[0]["state"] in ("success", "failed") else None

        trigger("lakestate_clicks", "1-trigger-form.png")
        assert _wait(lambda: run_state("lakestate_clicks"), 600, "the triggered DAG run to finish",
                     every=5) == "success", (tmp_path / "airflow-standalone.log").read_text()[-4000:]
        browser.get(f"{url}/dags/lakestate_clicks/runs")
        _wait(lambda: "success" in browser.page_source, 60, "the run's success in the UI")
        browser.save_screenshot(str(ARTIFACTS / "2-dag-run-success.png"))

        browser.find_element(By.XPATH, "//a[normalize-space(.)='Lakestate']").click()
        _wait(lambda: "/plugin/lakestate" in browser.current_url, 30, "the Lakestate page")
        frame = browser.find_element(By.TAG_NAME, "iframe")
        browser.switch_to.frame(frame)
        section = browser.find_element(By.ID, "job-clicks")
        rows = [r.text for r in section.find_elements(By.CSS_SELECTOR, "table tr")]
        assert any(r.split()[:2] == ["2", "1"] for r in rows), rows  # checkpoint 2 at microbatch 1, the newest
        chart = section.find_element(By.CSS_SELECTOR, "svg.key-group-chart")
        assert len(chart.find_elements(By.TAG_NAME, "rect")) == 128
        browser.switch_to.default_content()
        browser.save_screenshot(str(ARTIFACTS / "3-lakestate-page.png"))

        # The savepoint DAG from its trigger form: its typed params default to the registry's job and the latest
        # checkpoint; the savepoint then shows on the Lakestate page.
        _wait(lambda: get(f"{url}/api/v2/dags/lakestate_savepoint", api)[0] == 200, 180, "the savepoint DAG")
        trigger("lakestate_savepoint", "4-savepoint-trigger-form.png")
        assert _wait(lambda: run_state("lakestate_savepoint"), 600, "the savepoint DAG run to finish",
                     every=5) == "success", (tmp_path / "airflow-standalone.log").read_text()[-4000:]
        status, body = get(f"{url}/api/v2/dags/lakestate_savepoint/dagRuns", api)
        run_id = json.loads(body)["dag_runs"][0]["dag_run_id"]
        status, body = get(f"{url}/api/v2/dags/lakestate_savepoint/dagRuns/{run_id}/taskInstances/savepoint/"
                           f"xcomEntries/return_value", api)
        assert status == 200, body
        xcom = json.loads(body)["value"]
        xcom = json.loads(xcom) if isinstance(xcom, str) else xcom
        assert xcom["checkpoint"] == 2 and xcom["path"].endswith(f"/savepoints/clicks/{xcom['name']}")
        browser.get(f"{url}/plugin/lakestate")
        browser.switch_to.frame(browser.find_element(By.TAG_NAME, "iframe"))
        section = browser.find_element(By.ID, "job-clicks")
        rows = [r.text for r in section.find_elements(By.CSS_SELECTOR, "table tr")]
        assert any(r.startswith("airflow-manual") and r.split()[1:3] == ["2", "1"] for r in rows), rows
        browser.switch_to.default_content()
        browser.save_screenshot(str(ARTIFACTS / "5-savepoint-on-lakestate-page.png"))
