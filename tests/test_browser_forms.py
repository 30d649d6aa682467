"""The operation DAGs' trigger forms in a real browser against a real Airflow API server: an optional number
field left empty is not marked as an error; the rescale form shows the job's current and max parallelism, and
a parallelism out of range is refused with the value typed, before a run exists (the form's number field must
not clamp it to a bound without a word). Screenshots are kept in test-artifacts/."""
from __future__ import annotations

import json
import subprocess
import sys


from tests.airflow_server import PASSWORD, ROOT, airflow_env, demo_input, get, running_airflow, token
from tests import test_browser
from tests.test_browser import ARTIFACTS, _wait

browser = test_browser.browser  # the fixture: Debian's Chromium, headless



def test_the_rescale_form_shows_current_and_max_parallelism_and_refuses_out_of_range_with_the_value_typed(
        browser, tmp_path):
    """And the savepoint form's optional checkpoint field, left empty, has no red error border."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    registry = tmp_path / "lakestate.toml"
    registry.write_text('[jobs.clicks]\nentrypoint = "demo.clicks:job"\nmax_microbatches = 1\n')
    env = airflow_env(tmp_path, tmp_path / "lakestate", registry)
    demo_input(env, files=1)
    ran = subprocess.run([sys.executable, "-m", "state_store.cli", "run", "--job", "clicks", "--registry",
                          str(registry)], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr[-3000:]  # checkpoint 1 at parallelism 2 (max 128): what the form reads
    for step in (["db", "migrate"], ["dags", "reserialize"]):  # the API server alone parses no DAG file
        done = subprocess.run(["airflow", *step], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-3000:]
    with running_airflow(tmp_path, env, command="api-server") as url:
        api = token(url)
        _wait(lambda: get(f"{url}/api/v2/dags/lakestate_rescale", api)[0] == 200, 180, "the rescale DAG")
        browser.get(url + "/")
        browser.find_element(By.NAME, "username").send_keys("admin")
        browser.find_element(By.NAME, "password").send_keys(PASSWORD)
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        _wait(lambda: "/auth/login" not in browser.current_url, 30, "the login")

        def runs() -> list[dict]:
            return json.loads(get(f"{url}/api/v2/dags/lakestate_rescale/dagRuns", api)[1])["dag_runs"]

        def open_form(dag_id="lakestate_rescale", field="parallelism"):
            browser.get(f"{url}/dags/{dag_id}")
            browser.find_element(By.CSS_SELECTOR, "button[aria-label='Trigger Dag']").click()
            return _wait(lambda: [e for e in browser.find_elements(By.NAME, f"element_{field}") if e.is_displayed()],
                         30, f"the {field} field")[0]

        # An optional number field left empty is fine: no error mark (the red border), before or after a visit.
        checkpoint = open_form("lakestate_savepoint", "checkpoint")
        assert checkpoint.get_attribute("value") == "" and checkpoint.get_attribute("aria-invalid") != "true"
        checkpoint.click()
        checkpoint.send_keys(Keys.TAB)
        assert checkpoint.get_attribute("aria-invalid") != "true" and checkpoint.get_attribute("data-invalid") is None
        browser.save_screenshot(str(ARTIFACTS / "forms-0-savepoint-form-empty-checkpoint.png"))

        def trigger_with(value: str):
            field = open_form()
            field.send_keys(Keys.CONTROL, "a")
            field.send_keys(value, Keys.TAB)  # leaving the field is when a clamping number field clamps
            shown = field.get_attribute("value")
            buttons = [b for b in browser.find_elements(By.XPATH, "//button[normalize-space(.)='Trigger']")
                       if b.is_displayed() and b.get_attribute("aria-label") != "Trigger Dag"]
            buttons[-1].click()
            return shown

        field = open_form()
        assert field.get_attribute("value") == "2"  # the job's current parallelism is the default
        assert "clicks: runs at 2, max 128" in browser.page_source
        browser.save_screenshot(str(ARTIFACTS / "forms-1-rescale-form.png"))

        for typed, said in (("0", "0 is less than the minimum of 1"),
                            ("100000", "100000 is greater than the maximum of 128")):
            assert trigger_with(typed) == typed  # not clamped to 1 or to 32768
            _wait(lambda: said in browser.page_source, 30, f"the form to refuse {typed}")
            browser.save_screenshot(str(ARTIFACTS / f"forms-2-refused-{typed}.png"))
            assert runs() == []  # refused before a run exists

        assert trigger_with("3") == "3"
        _wait(lambda: runs(), 30, "the run of a parallelism in range")
        assert runs()[0]["conf"]["parallelism"] == 3
