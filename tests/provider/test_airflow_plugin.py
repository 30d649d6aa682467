"""The Lakestate page in a real Airflow API server: it refuses anonymous requests, and for a logged-in user shows
the job's checkpoints, its state per state name and the key-group chart, read from the catalog and Delta logs;
the UI shows it as a React view. Where a checkpoint came from (rescale, restore, compaction) is read without
Airflow or Spark."""
from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timezone

import pytest

from state_store.cli import main as lakestate
from tests.support.airflow_server import airflow_env, demo_input, get, running_airflow, token
from tests.support.records import checkpoint_record, savepoint_record


@pytest.fixture(scope="module")
def airflow_with_a_job(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("plugin")
    root, registry = base / "lakestate", base / "lakestate.toml"
    registry.write_text('[jobs.clicks]\nentrypoint = "demo.clicks:job"\ncheckpoint_interval = 1\n')
    env = airflow_env(base, root, registry)
    demo_input(env)
    saved = os.environ.get("LAKESTATE_ROOT")
    os.environ["LAKESTATE_ROOT"] = str(root)  # the demo job's factory reads its input folder from it
    try:
        assert lakestate(["run", "--job", "clicks", "--registry", str(registry), "--root", str(root)]) == 0
        assert lakestate(["compact", "clicks", "--root", str(root)]) == 0  # its report is on the page
    finally:
        if saved is None:
            os.environ.pop("LAKESTATE_ROOT")
        else:
            os.environ["LAKESTATE_ROOT"] = saved
    with running_airflow(base, env) as url:
        yield url


def _plugin_routes(env: dict) -> list[tuple[str, str]]:
    """(method, path) of every route of every app the plugin gives Airflow, as Airflow's plugin manager loads
    them (FastAPI's own /docs, /redoc, /openapi.json included), so a new route cannot slip past the test."""
    code = textwrap.dedent("""
        import json
        from airflow import plugins_manager
        plugins_manager.initialize_fastapi_plugins()
        routes = [(m, a["url_prefix"] + r.path) for a in plugins_manager.fastapi_apps
                  for r in a["app"].routes for m in sorted(getattr(r, "methods", None) or ["GET"])]
        print(json.dumps(routes))
    """)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return [tuple(r) for r in json.loads(out.stdout.strip().splitlines()[-1])]


def test_every_route_of_the_plugin_refuses_an_anonymous_request(airflow_with_a_job, tmp_path):
    routes = _plugin_routes(airflow_env(tmp_path, tmp_path / "lakestate", tmp_path / "lakestate.toml"))
    assert {("GET", "/lakestate/"), ("GET", "/lakestate/api/jobs"), ("GET", "/lakestate/fragment"),
            ("GET", "/lakestate/static/lakestate.js")} <= set(routes), routes
    answers = {}
    for method, path in routes:
        status, body = get(airflow_with_a_job + re.sub(r"\{[^}]*\}", "x", path), method=method)
        answers[f"{method} {path}"] = status
        assert "clicks" not in body, (method, path, body[:300])
    assert set(answers.values()) == {401}, answers


def test_the_page_shows_checkpoints_state_and_the_key_group_chart_to_a_logged_in_user(airflow_with_a_job):
    bearer = token(airflow_with_a_job)
    started = time.perf_counter()
    status, page = get(airflow_with_a_job + "/lakestate/", bearer)
    seconds = time.perf_counter() - started
    assert status == 200, page[:500]
    assert "<section id='job-clicks'>" in page and "DAG lakestate_clicks" in page
    assert "<svg id='key-groups-clicks'" in page and page.count("<rect class='bar'") == 128
    assert re.findall(r"<g class='band' data-subtask='(\d+)' data-key-groups='([\d-]+)'>", page) == [
        ("0", "0-63"), ("1", "64-127")]
    status, data = get(airflow_with_a_job + "/lakestate/api/jobs", bearer)
    (job,) = json.loads(data)
    assert job["latest_checkpoint"] == 3 and job["checkpoints"] == [1, 2, 3]  # 3: the compaction's
    assert job["compaction"]["checkpoint"] == 2 and job["compaction"]["new_checkpoint"] == 3
    assert [c["new_checkpoint"] for c in job["compactions"]] == [3]
    assert job["subtasks"] == [{"key_groups": [0, 63], "keyed_bytes": sum(job["key_group_bytes"][:64])},
                               {"key_groups": [64, 127], "keyed_bytes": sum(job["key_group_bytes"][64:])}]
    assert "<h3>Last compaction that did work</h3>" in page and "compaction of checkpoint 2" in page
    assert f"<td class='num'>{job['compaction']['rows_scanned']:,}</td>" in page
    assert re.search(r"<td class='num'>\d+(\.\d)? (B|KiB|MiB)</td>", page) and "completed (UTC)" in page
    assert sum(job["key_group_bytes"]) > 0 and job["problems"] == []
    assert any(name.endswith(".events") and size > 0 for name, (size, files) in job["state_bytes"].items())
    assert seconds < 1.0, seconds


def test_the_lakestate_page_is_a_react_view_in_the_ui_navigation(airflow_with_a_job):
    bearer = token(airflow_with_a_job)
    status, data = get(airflow_with_a_job + "/api/v2/plugins", bearer)
    assert status == 200, data[:300]
    plugin = next(p for p in json.loads(data)["plugins"] if p["name"] == "lakestate")
    assert plugin["external_views"] == []  # an external view is framed, and its links are dead there
    (view,) = plugin["react_apps"]
    assert (view["bundle_url"], view["destination"], view["url_route"]) == (
        "/lakestate/static/lakestate.js", "nav", "lakestate")
    assert plugin["fastapi_apps"][0]["url_prefix"] == "/lakestate"
    status, bundle = get(airflow_with_a_job + view["bundle_url"], bearer)
    assert status == 200 and "globalThis.Lakestate = Lakestate" in bundle and "useNavigate" in bundle


def test_the_page_shows_times_in_the_timezone_the_user_picked(airflow_with_a_job):
    bearer = token(airflow_with_a_job)
    status, body = get(airflow_with_a_job + "/lakestate/fragment?tz=Asia/Kolkata", bearer)
    assert status == 200 and body.startswith("<div class='lakestate'") and "completed (Asia/Kolkata)" in body
    assert "<html" not in body  # a fragment, for the React view
    status, body = get(airflow_with_a_job + "/lakestate/fragment?tz=Not/AZone", bearer)
    assert status == 200 and "completed (UTC)" in body


def _settings(tmp_path_factory):
    """The settings of the module's Airflow (its LAKESTATE_ROOT)."""
    from state_store.settings import Settings

    return Settings.load(root=next(p for p in tmp_path_factory.getbasetemp().glob("plugin*/lakestate")))


def test_the_page_names_a_job_record_that_cannot_be_read_and_shows_the_other_jobs(airflow_with_a_job,
                                                                                    tmp_path_factory):
    jobs = _settings(tmp_path_factory).catalog_dir / "jobs"
    good = (jobs / "clicks.json").read_text()
    bad = {"truncated.json": (good[:len(good) // 2], r"cannot be read \(JSONDecodeError"),
           "no-spec.json": (json.dumps({"entrypoint": "demo.clicks:job"}), r"has no 'spec'"),
           "Bad Job.json": (good, r"is not a job record: job id 'Bad Job' is not valid")}
    try:
        for name, (text, _) in bad.items():
            (jobs / name).write_text(text)
        bearer = token(airflow_with_a_job)
        status, page = get(airflow_with_a_job + "/lakestate/", bearer)
        assert status == 200, page[:500]
        assert "<section id='job-clicks'>" in page and "<svg id='key-groups-clicks'" in page
        for name, (_, why) in bad.items():
            assert re.search(rf"<p class='problem'>[^<]*{re.escape(name)}[^<]* {why}", html.unescape(page)), name
        status, data = get(airflow_with_a_job + "/lakestate/api/jobs", bearer)
        assert status == 200 and [j["job"] for j in json.loads(data)] == ["clicks"], data[:500]
    finally:
        for name in bad:
            (jobs / name).unlink(missing_ok=True)


def test_the_page_renders_well_under_a_second_for_a_job_with_100_checkpoints(airflow_with_a_job, tmp_path_factory):
    # Last in this module: it adds 100 retained checkpoints to the job's catalog (copies of its latest one,
    # pinning the same table versions), which is all the page reads of them.
    from state_store.catalog.job_store import JobStore

    meta = JobStore(_settings(tmp_path_factory).job_dir("clicks"))
    latest = meta.latest_checkpoint()
    for cid in range(latest.checkpoint_id + 1, latest.checkpoint_id + 101):
        latest.checkpoint_id = cid
        meta.write_checkpoint(latest)
    bearer = token(airflow_with_a_job)
    get(airflow_with_a_job + "/lakestate/", bearer)  # the first request after start-up warms the app up
    started = time.perf_counter()
    status, page = get(airflow_with_a_job + "/lakestate/", bearer)
    seconds = time.perf_counter() - started
    assert status == 200 and page.count("<tr>") >= 102 + 1
    assert seconds < 0.5, seconds


def test_the_page_says_whether_a_checkpoint_came_from_a_rescale_a_restore_or_a_compaction():
    from state_store.provider.reader import JobOverview
    from state_store.records.metadata import AirflowRun, RestoredFrom

    run = AirflowRun("lakestate_clicks", "manual__1")
    job = JobOverview("clicks", "demo.clicks:job", 3, 128, "delta")
    savepoint = savepoint_record("before-v2")
    savepoint.path = "/sp/clicks/before-v2"
    job.savepoints = [savepoint]
    job.checkpoints = [checkpoint_record(1, 2, airflow_run=run), checkpoint_record(2, 3, RestoredFrom("clicks", 1)),
                       checkpoint_record(3, 3, RestoredFrom("clicks", 1, "/sp/clicks/before-v2")),
                       checkpoint_record(4, 2, RestoredFrom("clicks", 1), airflow_run=run),
                       checkpoint_record(5, 2, RestoredFrom("clicks", 1), airflow_run=run), checkpoint_record(6, 2)]
    job.compactions = [{"checkpoint": 4, "new_checkpoint": 5}, {"checkpoint": 5, "nothing_to_do": True}]
    assert [job.origin(c) for c in job.checkpoints] == [
        ("", ""), ("rescale", "rescale 2 → 3 from checkpoint 1"),
        ("rescale", "rescale 2 → 3 from savepoint before-v2"), ("restore", "restore from checkpoint 1"),
        ("compaction", "compaction of checkpoint 4"), ("", "")]
    # A compaction's checkpoint copies its source's record: that run is not its own.
    assert [job.airflow_run(c) for c in job.checkpoints] == [run, None, None, run, None, None]
    assert [(s, e) for s, e, _ in job.subtask_bytes()] == [(0, 63), (64, 127)]


def test_the_page_draws_a_jobs_graph_from_its_definition(tmp_path):
    """Sources into operators (a two-input operator's inputs numbered, a broadcast marked), each operator into the
    next, the last into the sink, each into its side outputs."""
    from demo.sessions_per_country import dataflow
    from state_store import Dataflow, FileSource, KafkaSource, KeyedCoProcessFunction, Types, WatermarkStrategy
    from state_store.provider.reader import job_edges

    for folder in ("clicks", "a"):
        (tmp_path / folder).mkdir()
    chain = dataflow(tmp_path / "clicks")
    assert job_edges(chain.describe()) == [
        (f"files {(tmp_path / 'clicks').resolve()} (parquet)", "sessions"),
        ("sessions", "side output late_clicks (sinks/sessions_per_country_late_clicks)"),
        ("operator sessions", "per-country"), ("per-country", "sink sinks/sessions_per_country")]

    class Both(KeyedCoProcessFunction):
        pass

    row = Types.ROW_NAMED(["k", "ts"], [Types.STRING(), Types.LONG()])
    by_ts = WatermarkStrategy.for_bounded_out_of_orderness(0).with_timestamp_column("ts")
    files = Dataflow.from_source(FileSource(str(tmp_path / "a"), "json", row), job_id="two", watermark_strategy=by_ts)
    topic = Dataflow.from_source(KafkaSource("localhost:9092", topics=["b"], schema=row), job_id="two",
                                 watermark_strategy=by_ts)
    two = files.connect(topic).key_by("k", "k").process(Both(), uid="both", output_type=row).sink_to("sinks/two")
    assert job_edges(two.describe()) == [(f"files {(tmp_path / 'a').resolve()} (json)", "both (input 1)"),
                                         ("Kafka b", "both (input 2)"), ("both", "sink sinks/two")]
    assert job_edges({"parallelism": 2, "backend": "delta"}) == []  # a record without its operators: no graph
    # The page's table shortens a path as a savepoint's is: its last two parts, the whole on hover and copy.
    from state_store.provider.reader import JobOverview
    from state_store.provider.views import job_section

    job = JobOverview("sessions-per-country", "demo.sessions_per_country:job", 2, 128, "delta")
    job.edges = job_edges(chain.describe())
    graph = re.search(r"<table class='graph'>.*?</table>", job_section(job)).group(0)
    folder = (tmp_path / "clicks").resolve()
    assert re.findall(r"<span class='path' title='([^']*)'>([^<]*)</span>", graph) == [
        (str(folder), f"…/{folder.parent.name}/clicks")]
    assert str(folder) not in re.sub(r"(title|data-copy)='[^']*'", "", graph)
    assert "<td>sink sinks/sessions_per_country</td>" in graph  # the warehouse's own, relative: as it is


def test_the_airflow_run_is_recorded_from_the_task_environment_and_old_records_stay_readable():
    from state_store.records.metadata import AirflowRun, CheckpointMetadata

    run = AirflowRun.of_environment({"AIRFLOW_CTX_DAG_ID": "lakestate_clicks", "AIRFLOW_CTX_DAG_RUN_ID": "r1"})
    assert run == AirflowRun("lakestate_clicks", "r1") and AirflowRun.of_environment({}) is None
    with_run, without = checkpoint_record(1, 2, airflow_run=run).to_dict(), checkpoint_record(1, 2).to_dict()
    assert with_run["airflow_run"] == {"dag_id": "lakestate_clicks", "run_id": "r1"}
    assert "airflow_run" not in without  # files written before stay byte-for-byte what they were
    assert CheckpointMetadata.from_dict(with_run).airflow_run == run
    assert CheckpointMetadata.from_dict(without).airflow_run is None


def test_sizes_and_counts_read_as_people_read_them():
    from state_store.provider.views import count, human_bytes

    assert [human_bytes(n) for n in (0, 1023, 1024, 4562404, 3 * 1024 ** 3)] == [
        "0 B", "1023 B", "1.0 KiB", "4.4 MiB", "3.0 GiB"]
    assert count(4562404) == "4,562,404" and count(None) == "-"


def _page_of(job) -> str:
    from zoneinfo import ZoneInfo

    from state_store.provider.views import job_section

    return job_section(job, ZoneInfo("Asia/Kolkata"))


def test_run_links_read_in_the_timezone_the_user_picked():
    from state_store.provider.reader import JobOverview
    from state_store.records.metadata import AirflowRun

    job = JobOverview("clicks", "demo.clicks:job", 2, 128, "delta")
    job.checkpoints = [checkpoint_record(1, 2, airflow_run=AirflowRun("lakestate_clicks",
                                                                "manual__2026-11-24T13:05:12.123+00:00")),
                       checkpoint_record(2, 2, airflow_run=AirflowRun("lakestate_clicks", "my own run id"))]
    links = re.findall(r"<span class='run'><a [^>]*>([^<]*)</a>", _page_of(job))
    assert links == ["my own run id", "manual 2026-11-24 18:35"]  # 13:05 UTC is 18:35 in Kolkata (+05:30)


def test_the_savepoint_path_cell_shows_the_savepoints_own_path():
    from state_store.provider.reader import JobOverview

    job = JobOverview("clicks", "demo.clicks:job", 2, 128, "delta")
    savepoint = savepoint_record("before-v2")
    savepoint.path = "/srv/lakestate/savepoints/clicks/before-v2"
    job.savepoints, job.checkpoints = [savepoint], [checkpoint_record(1, 2)]
    (shown,) = re.findall(r"<span class='path' title='([^']*)'>([^<]*)</span>", _page_of(job))
    assert shown == (savepoint.path, "…/clicks/before-v2")


def test_the_operations_line_links_restore_and_dispose_too():
    from state_store.provider.reader import JobOverview

    page = _page_of(JobOverview("clicks", "demo.clicks:job", 2, 128, "delta"))
    line = re.search(r"Operations \(each DAG's Trigger form asks for the job\): (.*?)</p>", page).group(1)
    assert re.findall(r"href='/dags/(lakestate_\w+)'", line) == [
        "lakestate_savepoint", "lakestate_rescale", "lakestate_restore", "lakestate_dispose", "lakestate_compaction"]


ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00$")


def test_housekeeping_gives_iso_times_beside_epoch_milliseconds(tmp_path):
    from dataclasses import replace

    from state_store.catalog.job_store import JobStore
    from state_store.ops.housekeeping import housekeeping
    from state_store.settings import Settings

    settings = Settings.load(root=tmp_path / "root")
    JobStore(settings.job_dir("clicks")).write_checkpoint(replace(checkpoint_record(1, 2), completed_ms=1764224499123))
    (row,) = housekeeping("clicks", settings, say=lambda m: None)["checkpoints"]
    assert (row["completed_ms"], row["completed"]) == (1764224499123, "2025-11-27T06:21:39.123+00:00")


def test_a_compaction_report_gives_its_start_as_an_iso_time_beside_epoch_milliseconds(tmp_path):
    from dataclasses import replace

    from state_store.catalog.job_store import JobStore
    from state_store.ops.compaction import compact_job
    from state_store.settings import Settings

    settings = Settings.load(root=tmp_path / "root")
    store = JobStore(settings.job_dir("clicks"))
    store.write_checkpoint(replace(checkpoint_record(1, 2), state={}))
    store.write_compaction({"job": "clicks", "checkpoint": 1, "started_ms": 1, "tables": {}})  # no run since
    report = compact_job(lambda: pytest.fail("nothing to do starts no Spark"), settings, "clicks",
                         say=lambda m: None)
    assert report["nothing_to_do"] and ISO_UTC.match(report["started"]), report
    assert report["started"] == datetime.fromtimestamp(report["started_ms"] / 1000, timezone.utc).isoformat(
        timespec="milliseconds")


def test_a_never_compacted_job_says_when_the_compaction_dag_runs_as_its_schedule_says():
    from state_store.provider.reader import JobOverview
    from state_store.provider.views import job_section

    job = JobOverview("clicks", "demo.clicks:job", 2, 128, "delta")

    def said(paused: bool, schedule: str) -> str:
        page = job_section(job, dags={"lakestate_compaction": (paused, schedule)})
        return re.search(r"<p class='meta compaction-none'>(.*?)</p>", page).group(1)

    assert said(False, "Every 5 minutes").endswith(": it runs every 5 minutes")  # [compaction] "*/5 * * * *"
    assert said(False, "Never, external triggers only").endswith(": trigger it")  # [compaction] "none"
    assert said(True, "At 03:00").endswith(": it is paused: unpause or trigger it")


def test_a_job_without_a_checkpoint_says_so_and_how_to_take_one_instead_of_a_table_of_headers():
    from state_store.provider.reader import JobOverview

    page = _page_of(JobOverview("clicks", "demo.clicks:job", 2, 128, "delta"))
    assert "<table class='checkpoints'>" not in page
    (said,) = re.findall(r"<p class='meta checkpoints-none'>(.*?)</p>", page)
    assert said.startswith("no checkpoint yet: trigger <a href='/dags/lakestate_clicks' data-nav>DAG "
                           "lakestate_clicks</a> (its run takes the job's first checkpoint), or run "), said
    assert said.endswith("<code>lakestate run --job clicks</code>")


def test_the_page_gives_what_a_rescale_starts_from_and_the_last_savepoint_tasks_duration_not_the_savepoints():
    """What the rescale form no longer says (its params stay the same across runs): the job's parallelism and
    max, and what "Savepoint first" adds: the last savepoint task's duration (a Spark start and the copy), not
    the savepoint's own seconds."""
    from state_store.provider.reader import JobOverview
    from state_store.provider.views import job_section
    from state_store.records.metadata import AirflowRun

    job = JobOverview("clicks", "demo.clicks:job", 2, 128, "delta")
    job.checkpoints = [checkpoint_record(1, 2)]

    def said(task_seconds: dict) -> str:
        return re.search(r"<p class='meta rescale'>(.*?)</p>", job_section(job, task_seconds=task_seconds)).group(1)

    assert said({}).endswith("the job runs at parallelism 2, max 128 (its key groups): a new parallelism is 1 to "
                             "128. Savepoint first adds a savepoint task's time: the job has no savepoint yet.")
    runs = [AirflowRun("lakestate_savepoint", "manual__1"), AirflowRun("lakestate_savepoint", "manual__2")]
    job.savepoints = [savepoint_record(f"sp{i}", created_ms=i, seconds=12.9, airflow_run=r.to_dict())
                      for i, r in enumerate(runs)]
    seconds = {("lakestate_savepoint", "manual__1"): 40.4, ("lakestate_savepoint", "manual__2"): 38.2}
    assert said(seconds).endswith("Savepoint first adds about 38 s: the last savepoint task took 38 s for 0 B "
                                  "(sp1).")
    assert "12.9" not in said(seconds)


def test_the_page_says_which_of_a_jobs_pipeline_savepoint_and_rescale_dags_are_paused():
    """Airflow creates DAGs paused: a run triggered of one waits without a word. The job's pipeline, savepoint
    and rescale DAGs that are paused are named, with the fix; the operations line tags each paused one."""
    from state_store.provider.reader import JobOverview
    from state_store.provider.views import job_section

    job = JobOverview("clicks", "demo.clicks:job", 2, 128, "delta")
    dags = {"lakestate_clicks": (True, "Never"), "lakestate_savepoint": (False, "Never"),
            "lakestate_rescale": (True, "Never"), "lakestate_dispose": (True, "Never")}
    page = job_section(job, dags=dags)
    (note,) = re.findall(r"<p class='meta paused'>(.*?)</p>", page)
    assert re.findall(r"data-nav>DAG (\w+)</a>", note) == ["lakestate_clicks", "lakestate_rescale"]
    assert note.endswith("A run triggered of a paused DAG waits until it is unpaused: unpause them with the "
                         "toggle on the DAG's page.")
    line = re.search(r"Operations \(each DAG's Trigger form asks for the job\): (.*?)</p>", page).group(1)
    assert re.findall(r">(\w+)</a> <span class='tag'>paused</span>", line) == ["rescale", "dispose"]
    assert "class='meta paused'" not in job_section(job, dags={d: (False, "Never") for d in dags})
