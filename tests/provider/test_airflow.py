"""The pipeline and operation DAGs: they parse light (Airflow's own DagBag in a fresh interpreter), a bad registry
entry is one import error naming its field, and each DAG's own task runs a job end to end on the shared session
(the same tasks under Airflow's scheduler, with spark-submit: tests/provider/test_browser.py)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from state_store import ConfigError, JobLocked
from state_store.catalog.pipelines import (
    CRON_PRESETS,
    OPERATION_DAG_IDS,
    compaction_schedule,
    load_registry,
    registry_entry,
)
from state_store.run.runtime import FaultInjector
from tests.support.airflow_files import ROOT, airflow_test_env, write_registry
from tests.support.airflow_server import airflow_db_settings
from tests.support.helpers import run
from tests.support.jobs import count_job, events

DAG_FILE = ROOT / "dags" / "lakestate_pipelines.py"


def _parse(tmp_path: Path, registry: Path, lakestate_root: Path | None = None) -> dict:
    """Parse the DAG file in a fresh interpreter with Airflow's own DagBag; what it found, and what was imported."""
    code = textwrap.dedent(f"""
        import json, sys, time
        from airflow.models.dagbag import DagBag
        bag = DagBag(dag_folder="/nonexistent", include_examples=False)
        started = time.perf_counter()
        bag.process_file({str(DAG_FILE)!r})
        seconds = time.perf_counter() - started
        dags = {{}}
        for dag_id, dag in bag.dags.items():
            dags[dag_id] = {{"tasks": sorted(t.task_id for t in dag.tasks), "max_active_runs": dag.max_active_runs,
                            "catchup": dag.catchup, "schedule": str(dag.timetable.summary),
                            "outlets": [a.uri for t in dag.tasks for a in t.outlets],
                            "args": dag.get_task("run").application_args,
                            "params": {{k: p.schema for k, p in dag.params.items()}}, "doc": dag.doc_md,
                            "sensor_mode": dag.get_task("wait_for_lease").mode,
                            "housekeeping_multiple_outputs": dag.get_task("housekeeping").multiple_outputs}}
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "pandas", "delta", "demo", "tests"))
        print(json.dumps({{"dags": dags, "errors": bag.import_errors, "seconds": seconds, "heavy": heavy}}))
    """)
    out = subprocess.run([sys.executable, "-c", code], env=airflow_test_env(tmp_path, registry, lakestate_root),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


GOOD = """
    [jobs.clicks]
    entrypoint = "demo.clicks:job"
    schedule = "@hourly"
    max_microbatches = 5
    parallelism = 2

    [jobs.counts]
    entrypoint = "tests.support.jobs:count_job"
"""


@pytest.mark.e2e
def test_one_pipeline_dag_per_registry_entry_parsed_light_and_fast(tmp_path):
    found = _parse(tmp_path, write_registry(tmp_path, GOOD))
    assert found["errors"] == {}
    assert sorted(found["dags"]) == ["lakestate_clicks", "lakestate_counts"]
    clicks = found["dags"]["lakestate_clicks"]
    assert clicks["tasks"] == ["housekeeping", "run", "wait_for_lease"]
    assert (clicks["max_active_runs"], clicks["catchup"], clicks["schedule"]) == (1, False, "0 * * * *")
    assert clicks["outlets"] == ["lakestate://clicks/sink"]
    assert clicks["args"][:5] == ["run", "--job", "clicks", "--registry", str(tmp_path / "lakestate.toml")]
    assert found["dags"]["lakestate_counts"]["schedule"] == "None"
    # A catch-up run in steps: max_microbatches from the trigger form; the lease waited for without a slot.
    assert clicks["params"] == {"max_microbatches": {"type": ["null", "integer"], "if": {"type": "integer"},
                                                     "then": {"minimum": 1}, "title": "Max microbatches"},
                                "end_of_input": {"type": "boolean", "title": "End of input (drain)"}}
    assert clicks["args"][5:7] == ["{% if params.get('max_microbatches') %}--max-microbatches={{ params."
                                   "max_microbatches | int }}{% endif %}", "{% if params.get('end_of_input') %}"
                                   "--end-of-input{% endif %}"]
    assert "at most 5 (the registry's)" in clicks["doc"] and "(/lakestate/)" in clicks["doc"]
    assert clicks["sensor_mode"] == "reschedule" and clicks["housekeeping_multiple_outputs"] is False
    assert found["heavy"] == [], "the DAG file must not import Spark, pandas or user job code when parsed"
    # Light is what "heavy" proves; this bound only guards against Airflow's own (dagbag_import_timeout, 30 s)
    # with room for a loaded machine (the e2e tier runs beside the spark tier): a parse takes ~0.1 s alone.
    assert found["seconds"] < 10.0, found["seconds"]


@pytest.mark.e2e
def test_a_registered_jobs_side_outputs_are_outlet_assets_of_its_pipeline_dag(tmp_path, monkeypatch):
    from state_store.catalog.jobs import JobCatalog
    from state_store.settings import Settings

    root = tmp_path / "root"
    monkeypatch.setenv("LAKESTATE_ROOT", str(root))
    registry = write_registry(tmp_path, """
        [jobs.sessions]
        entrypoint = "demo.sessions:job"
    """)
    before = _parse(tmp_path, registry, root)["dags"]["lakestate_sessions"]
    assert before["outlets"] == ["lakestate://sessions/sink"]  # not registered yet: its code is not imported
    JobCatalog(Settings.load(root=root)).register("demo.sessions:job")  # what its first pipeline run does
    found = _parse(tmp_path, registry, root)
    assert found["dags"]["lakestate_sessions"]["outlets"] == ["lakestate://sessions/sink",
                                                              "lakestate://sessions/side/late"]
    assert found["heavy"] == []
    # A DAG of one's own (the example's, whose run names only the sink as its outlet) gets the side output's
    # Asset as an outlet too: the operator adds the job's outputs to the outlets it is given.
    env = {**airflow_test_env(tmp_path, registry, root), "AIRFLOW__CORE__DAGS_FOLDER": str(EXAMPLE.parent)}
    own = _parse_examples(env)["dags"]["example_lakestate_on_asset"]
    assert own["outlets"] == ["lakestate://sessions/sink", "lakestate://sessions/side/late"]


BAD_ENTRIES = {
    'parallelism = -1': r"field 'parallelism' must be an integer above 0 and at most 32768, got -1",
    'backend = "rocksdb"': r"field 'backend' must be one of delta, hashmap, got 'rocksdb'",
    'schedule = "every hour"': r"field 'schedule' must be a cron expression",
    'paralelism = 2': r"unknown field 'paralelism'",
}
OPERATION_NAMES = ("savepoint", "rescale", "compaction", "restore", "dispose")
DUPLICATE = GOOD + """
    [jobs.clicks]
    entrypoint = "demo.clicks:job"
    """


@pytest.fixture(scope="module")
def parsed_registries(tmp_path_factory) -> dict:
    """Each bad registry below, its DAG folder parsed as Airflow's dag processor does (DagBag over the folder),
    all in one fresh interpreter (Airflow's import is most of a parse; DagBag imports each file anew): per
    case, each DAG's job drop-down (None without one), the import errors by file, and the registry's path."""
    tmp = tmp_path_factory.mktemp("registries")
    texts = {**{bad: GOOD + f"""
    [jobs.broken]
    entrypoint = "demo.clicks:job"
    {bad}
    """ for bad in BAD_ENTRIES}, **{name: GOOD + f"""
    [jobs.{name}]
    entrypoint = "tests.support.jobs:count_job"
    """ for name in OPERATION_NAMES}, "duplicate": DUPLICATE}
    registries = {}
    for i, (case, text) in enumerate(texts.items()):
        (tmp / str(i)).mkdir()
        registries[case] = str(write_registry(tmp / str(i), text))
    code = textwrap.dedent(f"""
        import json, os
        from airflow.models.dagbag import DagBag
        found = {{}}
        for case, registry in {registries!r}.items():
            os.environ["LAKESTATE_REGISTRY"] = registry
            bag = DagBag(dag_folder={str(ROOT / "dags")!r}, include_examples=False)
            dags = {{d: {{k: p.schema for k, p in dag.params.items()}}.get("job", {{}}).get("enum")
                    for d, dag in bag.dags.items()}}
            found[case] = {{"dags": dags, "errors": bag.import_errors, "registry": registry}}
        print(json.dumps(found))
    """)
    out = subprocess.run([sys.executable, "-c", code], env=airflow_test_env(tmp, tmp / "unset.toml"),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("bad", BAD_ENTRIES)
@pytest.mark.e2e
def test_a_bad_entry_is_one_import_error_naming_its_field_and_the_others_still_load(parsed_registries, bad):
    found = parsed_registries[bad]
    assert sorted(d for d in found["dags"] if d not in OPERATION_DAGS) == ["lakestate_clicks", "lakestate_counts"]
    (error,) = found["errors"].values()
    assert "[jobs.broken]" in error
    import re

    assert re.search(BAD_ENTRIES[bad], error), error


def test_the_registry_refuses_a_missing_entrypoint_and_names_the_file(tmp_path):
    registry = write_registry(tmp_path, """
    [jobs.x]
    schedule = "none"
    """)
    entries, errors = load_registry(registry)
    assert entries == {} and "field 'entrypoint' must look like 'package.module:factory'" in errors["x"]
    with pytest.raises(ConfigError, match=r"job 'nope' is not in the pipeline registry"):
        registry_entry("nope", registry)
    with pytest.raises(ConfigError, match=r"no pipeline registry at .*missing\.toml"):
        load_registry(tmp_path / "missing.toml")


def test_the_registry_refuses_the_memory_backend_naming_file_entry_and_field(tmp_path):
    # Memory state lives only in the process of one run: the first DAG run would succeed, every later one fail.
    registry = write_registry(tmp_path, GOOD + """
    [jobs.tiny]
    entrypoint = "tests.support.jobs:count_job"
    backend = "memory"
    """)
    entries, errors = load_registry(registry)
    assert sorted(entries) == ["clicks", "counts"]
    assert errors["tiny"].startswith(f"{registry} [jobs.tiny]: field 'backend' is 'memory'")
    assert "only for tiny in-process tests" in errors["tiny"] and "delta (the default) or hashmap" in errors["tiny"]


@pytest.mark.parametrize("schedule", ["a b c d e", "61 * * * *", "0 0 1 1 * 2099", "* * * *"])
def test_a_schedule_airflow_cannot_parse_is_refused_naming_file_entry_and_field(tmp_path, schedule):
    registry = write_registry(tmp_path, GOOD + f"""
    [jobs.odd]
    entrypoint = "tests.support.jobs:count_job"
    schedule = "{schedule}"
    """)
    entries, errors = load_registry(registry)
    assert sorted(entries) == ["clicks", "counts"]
    assert errors["odd"].startswith(f"{registry} [jobs.odd]: field 'schedule' must be a cron expression"), errors
    assert f"got {schedule!r}" in errors["odd"]


def test_cron_expressions_airflow_accepts_are_accepted(tmp_path):
    schedules = ["*/10 * * * *", "0 0 * * 1-5", "0 6 1,15 * *", "@daily", "@once", "none"]
    registry = write_registry(tmp_path, "".join(f"""
    [jobs.j{i}]
    entrypoint = "tests.support.jobs:count_job"
    schedule = "{s}"
    """ for i, s in enumerate(schedules)))
    entries, errors = load_registry(registry)
    assert errors == {} and [entries[f"j{i}"].schedule for i in range(6)] == [*schedules[:5], None]


# The [compaction] table's schedule, as the registry gives it (None: the table left out), and the cron the
# compaction's timetable gets (None: only triggered).
COMPACTION_SCHEDULES = {None: "0 3 * * *", "*/5 * * * *": "*/5 * * * *", "none": None, "@hourly": "0 * * * *",
                        "@weekly": "0 0 * * 0", "0 6 1,15 * *": "0 6 1,15 * *"}


def test_the_registrys_compaction_table_sets_the_compaction_schedule_as_a_cron_or_none(tmp_path):
    from airflow.utils.dates import cron_presets

    assert CRON_PRESETS == cron_presets  # a preset becomes the cron Airflow itself reads it as
    for given, cron in COMPACTION_SCHEDULES.items():
        registry = write_registry(tmp_path, GOOD + ("" if given is None else f"""
    [compaction]
    schedule = "{given}"
    """))
        assert compaction_schedule(registry) == cron, given
        assert sorted(load_registry(registry)[0]) == ["clicks", "counts"]  # the entries load beside the table
    # A file that is not valid TOML, or none: the default schedule (the pipeline DAG file shows that error).
    assert compaction_schedule(write_registry(tmp_path, DUPLICATE + '[compaction]\nschedule = "none"\n')) == "0 3 * * *"
    assert compaction_schedule(tmp_path / "missing.toml") == "0 3 * * *"


BAD_COMPACTIONS = {
    '[compaction]\nschedule = "every night"': r"field 'schedule' must be a cron expression in UTC \('0 3 \* \* \*', "
                                              r"the default: daily at 03:00\), a preset \(@hourly, @daily, @weekly, "
                                              r"@monthly, @quarterly, @yearly\) or 'none' \(only triggered\), got "
                                              r"'every night' \(",
    '[compaction]\nschedule = "61 * * * *"': r"field 'schedule' must be a cron .* got '61 \* \* \* \*' \(",
    '[compaction]\nschedule = "@once"': r"field 'schedule' must be .* got '@once' \(not a preset that repeats\)",
    '[compaction]\nschedule = 3': r"field 'schedule' must be .* got 3 \(not a string\)",
    '[compaction]\nshedule = "0 4 * * *"': r"unknown field 'shedule' \(= '0 4 \* \* \*'\); the only field is "
                                           r"'schedule' \(a cron expression or 'none'\): remove it, or, if it is "
                                           r"the schedule misspelt, name it schedule$",
    'compaction = "daily"': r"must be a table of one field, schedule, got 'daily': write \[compaction\] on a line "
                            r"of its own and schedule = \"0 3 \* \* \*\" under it$",
}


@pytest.mark.parametrize("bad", BAD_COMPACTIONS)
def test_a_bad_compaction_table_is_refused_naming_file_field_value_and_fix_and_the_entries_still_load(tmp_path, bad):
    registry = write_registry(tmp_path, bad + "\n" + GOOD)  # before any [jobs.x]: a top-level key stays top-level
    with pytest.raises(ConfigError) as refused:
        compaction_schedule(registry)
    assert str(refused.value).startswith(f"{registry} [compaction]: "), refused.value
    assert re.search(BAD_COMPACTIONS[bad], str(refused.value)), refused.value
    assert sorted(load_registry(registry)[0]) == ["clicks", "counts"]


def test_a_registry_key_outside_the_jobs_and_compaction_tables_is_refused_naming_it(tmp_path):
    registry = write_registry(tmp_path, 'schedule = "@hourly"\n' + GOOD)
    with pytest.raises(ConfigError) as refused:
        load_registry(registry)
    assert str(refused.value) == (f"the pipeline registry {registry} must hold only [jobs.<job id>] tables and a "
                                  f"[compaction] table, not top-level key 'schedule': put each job's fields under "
                                  f"its [jobs.<job id>] header, and the compaction's schedule under [compaction]")


def test_the_compaction_dag_runs_on_the_registrys_schedule_and_a_bad_one_takes_only_it_away(tmp_path, monkeypatch):
    """The operation DAGs built in this process (no Spark, no job code): the compaction's timetable and doc follow
    the [compaction] table, its first run is the one the scheduler gives it when unpaused (serialized as the
    scheduler reads it), and a bad table is the operation DAG file's import error naming it, while the other
    operation DAGs load (Airflow's DagBag; over the whole DAG folder in a fresh interpreter: the e2e tests)."""
    from datetime import datetime, timedelta, timezone

    from airflow.models.dagbag import DagBag
    from airflow.serialization.serialized_objects import SerializedDAG

    from state_store.provider.dags import BrokenEntry, operation_dags

    monkeypatch.setenv("LAKESTATE_ROOT", str(tmp_path / "root"))

    def compaction(table: str):
        return operation_dags(write_registry(tmp_path, GOOD + table))["lakestate_compaction"]

    daily = compaction("")
    assert daily.timetable.summary == "0 3 * * *" and "`0 3 * * *` (at 03:00, in UTC)" in daily.doc_md
    every_5 = compaction('[compaction]\nschedule = "*/5 * * * *"\n')
    now = datetime.now(timezone.utc)
    first = SerializedDAG.deserialize_dag(SerializedDAG.serialize_dag(every_5)).next_dagrun_info(None)
    assert every_5.timetable.summary == "*/5 * * * *" and first.run_after.minute % 5 == 0
    assert now <= first.run_after <= now + timedelta(minutes=5, seconds=5)  # the next one, not one already past
    assert "on the cron schedule `*/5 * * * *` (every 5 minutes, in UTC)." in every_5.doc_md
    never = compaction('[compaction]\nschedule = "none"\n')
    assert never.timetable.summary == "None" and "(lakestate compact), when triggered only." in never.doc_md
    for table, said in (('schedule = "every night"', "field 'schedule' must be a cron expression"),
                        ('shedule = "0 4 * * *"', "unknown field 'shedule'")):
        registry = write_registry(tmp_path, GOOD + f"[compaction]\n{table}\n")
        assert isinstance(operation_dags(registry)["lakestate_compaction"], BrokenEntry)
        monkeypatch.setenv("LAKESTATE_REGISTRY", str(registry))
        bag = DagBag(dag_folder="/nonexistent", include_examples=False)
        bag.process_file(str(ROOT / "dags" / "lakestate_operations.py"))
        assert sorted(bag.dags) == ["lakestate_dispose", "lakestate_rescale", "lakestate_restore",
                                    "lakestate_savepoint"]
        ((file, error),) = bag.import_errors.items()
        assert Path(file).name == "lakestate_operations.py"
        assert error.startswith(f"ValueError: lakestate_compaction does not load: {registry} [compaction]: {said}")


OPERATION_DAGS = {"lakestate_savepoint": ["clicks", "counts"], "lakestate_rescale": ["clicks", "counts"],
                  "lakestate_restore": ["clicks", "counts"], "lakestate_dispose": None, "lakestate_compaction": None}


@pytest.mark.e2e
@pytest.mark.parametrize("name", OPERATION_NAMES)
def test_an_entry_named_like_an_operation_dag_is_refused_naming_it_and_the_operation_dags_still_load(
        parsed_registries, name):
    found = parsed_registries[name]
    registry = found["registry"]
    assert sorted(OPERATION_DAGS) == sorted(OPERATION_DAG_IDS)  # the registry refuses every operation's id
    assert found["dags"] == {**OPERATION_DAGS, "lakestate_clicks": None, "lakestate_counts": None}
    (error,) = found["errors"].values()
    assert f"{registry} [jobs.{name}]: the entry's name {name!r} makes DAG id lakestate_{name}" in error, error
    assert "rename the entry" in error


@pytest.mark.e2e
def test_a_duplicate_entry_is_an_import_error_naming_file_and_line_and_the_operation_dags_still_load(
        parsed_registries):
    found = parsed_registries["duplicate"]
    registry = found["registry"]
    # No entry of a file that does not parse can be trusted: no pipeline DAG; the operations offer the jobs
    # whose [jobs.<id>] headers can be read.
    assert found["dags"] == OPERATION_DAGS
    ((file, error),) = found["errors"].items()
    assert Path(file).name == "lakestate_pipelines.py"
    assert f"{registry}, line 11: [jobs.clicks] is declared again (first at line 2)" in error, error
    assert "merge the two [jobs.clicks] tables into one, or rename one" in error


def test_a_second_run_waits_for_the_lease_instead_of_failing(spark, lake):
    lake.write_events("e0.json", events(0))
    spec = count_job(lake)
    holding, release = threading.Event(), threading.Event()
    first = {}

    def hold():
        holding.set()
        release.wait(120)

    thread = threading.Thread(target=lambda: first.update(
        result=run(spark, spec, lake, faults=FaultInjector("after_sink_write", 0, action=hold))))
    thread.start()
    try:
        assert holding.wait(180)
        with pytest.raises(JobLocked):
            run(spark, spec, lake)  # without waiting: refused
        said = []
        timer = threading.Timer(3.0, release.set)
        timer.start()
        second = run(spark, spec, lake, lease_wait_s=120, progress=said.append)
    finally:
        release.set()
        thread.join(300)
    assert [b.batch_id for b in first["result"].batches] == [0]
    assert second.batches == []  # it ran after the first, which had taken the only input
    assert any("waiting up to 120s for the job to be free" in line for line in said)


def test_a_side_outputs_asset_event_carries_its_own_row_count_not_the_sinks(spark, lake):
    """The run's summary (the ``[lakestate] summary:`` line the operator reads) and the extras the pipeline
    DAG's ``run`` task gives its outlet Assets' events: the side output's says the rows it got."""
    from state_store.provider.dags import side_output_asset, sink_asset
    from state_store.provider.operators import outlet_extras
    from tests.support.time_jobs import session_input, sessions, sessions_job, side_rows

    session_input(lake)  # three sessions to the sink, one late event to the side output "late"
    spec = sessions_job(lake)
    summary = run(spark, spec, lake).summary(spec.job_id)
    sink, late = sink_asset(spec.job_id), side_output_asset(spec.job_id, "late")
    extras = {asset.uri: extra for asset, extra in outlet_extras(json.loads(json.dumps(summary)), [sink, late])}
    sink, late = sink.uri, late.uri
    assert extras[sink] == summary and summary["records_out"] == len(sessions(spark, lake, spec)) == 3
    assert extras[late]["records_out"] == len(side_rows(spark, lake, spec)) == 1
    assert extras[late]["side_output"] == "late" and extras[late]["run_id"] == summary["run_id"]


def test_the_approve_task_asks_when_the_registry_is_missing_or_broken_or_the_jobs_entry_is_bad(tmp_path,
                                                                                                   monkeypatch):
    """The approval fails closed: where the registry cannot say whether the job's entry asks (a file gone since
    the DAGs were parsed, a line another entry broke, a bad field of the job's own entry), the approve task asks
    a person, and says why and the fix; the dispose task, reached without an approver, deletes nothing."""
    from airflow.models.dagbag import DagBag

    registry, root = write_registry(tmp_path, '[jobs.clicks]\nentrypoint = "demo.clicks:job"\n'), tmp_path / "root"
    monkeypatch.setenv("LAKESTATE_REGISTRY", str(registry))
    monkeypatch.setenv("LAKESTATE_ROOT", str(root))
    bag = DagBag(dag_folder="/nonexistent", include_examples=False)
    bag.process_file(str(ROOT / "dags" / "lakestate_operations.py"))
    approve = {op: bag.dags[f"lakestate_{op}"].get_task("approve") for op in ("rescale", "restore", "dispose")}
    params = {"rescale": {"job": "clicks", "parallelism": 3}, "restore": {"job": "clicks", "checkpoint": 1},
              "dispose": {"savepoint": "clicks/before"}}
    assert all(approve[op].asked(params[op]) is None for op in approve)  # the entry is read and does not ask
    for text, said in [(None, "no pipeline registry at"),
                       ('[jobs.clicks]\nentrypoint = "demo.clicks:job"\n[jobs.other]\nentrypoint = "x:y"\n'
                        '[jobs.other]\n', "[jobs.other] is declared again"),
                       ('[jobs.clicks]\nentrypoint = "demo.clicks:job"\nmax_state_bytes = "1GB"\n',
                        "field 'max_state_bytes' must be an integer above 0")]:
        registry.unlink(missing_ok=True)
        if text:
            registry.write_text(text)
        for op, task in approve.items():
            asked = task.asked(params[op])
            assert asked.problem and said in asked.why and "so whether job 'clicks' asks for an approval of a " \
                f"{op} (require_approval) is unknown" in asked.why, asked
        with pytest.raises(ConfigError, match=r"a dispose of it needs a person's approval; give --approved-by NAME"):
            bag.dags["lakestate_dispose"].get_task("dispose").python_callable(params=params["dispose"])


def test_a_parse_of_the_operation_dags_reads_the_registry_once_lists_no_savepoint_and_a_checkpoint_changes_no_dag(
        tmp_path, monkeypatch):
    """Parsing is cheap and stable: the DAG file reads the registry once (its jobs and its compaction schedule
    from one read) and no savepoint's metadata; a checkpoint and a savepoint of a job leave every operation DAG's
    serialized form, and so its hash (a new DAG version in Airflow when it changes), as it was. What changes is
    on the Lakestate page."""
    from airflow.models.dagbag import DagBag
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.serialization.serialized_objects import SerializedDAG

    from state_store.catalog.job_store import JobStore
    from state_store.settings import Settings
    from tests.support.records import checkpoint_record, savepoint_record

    registry, root = write_registry(tmp_path, '[jobs.clicks]\nentrypoint = "demo.clicks:job"\n'), tmp_path / "root"
    monkeypatch.setenv("LAKESTATE_REGISTRY", str(registry))
    monkeypatch.setenv("LAKESTATE_ROOT", str(root))
    opened = _OPENED["paths"]

    def parse() -> dict:
        opened.clear()
        _OPENED["on"] = True  # the audit hook records the files opened meanwhile
        try:
            bag = DagBag(dag_folder="/nonexistent", include_examples=False)
            bag.process_file(str(ROOT / "dags" / "lakestate_operations.py"))
        finally:
            _OPENED["on"] = False
        assert bag.import_errors == {}
        return {d: SerializedDagModel.hash(SerializedDAG.to_dict(dag)) for d, dag in bag.dags.items()}

    before = parse()
    assert [p for p in opened if p == str(registry)] == [str(registry)], opened
    settings = Settings.load(root=root)
    JobStore(settings.job_dir("clicks")).write_checkpoint(checkpoint_record(1, 2))
    folder = settings.savepoints / "clicks" / "before-v2"
    folder.mkdir(parents=True)
    (folder / "_metadata.json").write_text(json.dumps(savepoint_record("before-v2", seconds=12.9).to_dict()))
    assert parse() == before
    assert not [p for p in opened if p.startswith(str(settings.savepoints))], opened


_OPENED = {"on": False, "paths": []}  # the files opened while a test turns the audit hook below on


def _record_opens(event: str, args) -> None:
    if _OPENED["on"] and event == "open" and isinstance(args[0], (str, os.PathLike)):
        _OPENED["paths"].append(os.fspath(args[0]))


sys.addaudithook(_record_opens)  # an audit hook cannot be removed: it records only while a test asks


def test_the_dags_tasks_run_a_job_through_savepoint_rescale_compaction_and_dispose(spark, tmp_path, monkeypatch):
    """Each DAG's own task as Airflow's DagBag parses it, its templates rendered from a run's params, executed in
    this process on the shared session (tests/support/airflow_inprocess.py): the pipeline, a savepoint from the form's
    params, a failing restore, then the other operations. What only a real Airflow proves (the scheduler, the
    task runner, spark-submit's command line and environment, XCom and Asset rows in its database, the task's
    log): tests/provider/test_browser.py, whose Airflow runs the pipeline, a savepoint and a failing restore so."""
    from airflow.exceptions import AirflowException

    from demo import generate
    from demo.sessions_per_country import write_clicks
    from tests.support.airflow_inprocess import execute, in_process_dags

    registry = write_registry(tmp_path, """
    [jobs.clicks]
    entrypoint = "demo.clicks:job"
    max_microbatches = 2
    checkpoint_interval = 1

    [jobs.sessions-per-country]
    entrypoint = "demo.sessions_per_country:job"
    """)
    root = tmp_path / "lakestate"
    monkeypatch.setenv("LAKESTATE_ROOT", str(root))
    generate.main(["--files", "3", "--events", "500", "--keys", "100"])
    write_clicks(root / "input" / "country-clicks", files=3, events=300, users=50)
    dags = in_process_dags(monkeypatch, registry, root)

    summary, said, events = execute(dags["lakestate_clicks"].get_task("run"), {}, "lakestate_clicks")
    said = "\n".join(said)
    assert "planned microbatches 0..1" in said and "checkpoint 2 at microbatch 1" in said
    assert summary["microbatches"] == [0, 1] and summary["checkpoints"] == [1, 2] and summary["records_in"] == 1000
    assert events["lakestate://clicks/sink"] == summary
    # The savepoint DAG, as the UI's trigger form runs it: the path is in the log and the XCom.
    saved, said, events = execute(dags["lakestate_savepoint"].get_task("savepoint"),
                                  {"job": "clicks", "label": "before-rescale"}, "lakestate_savepoint")
    path = root / "savepoints" / "clicks" / "before-rescale"
    assert f"savepoint path: {path}" in "\n".join(said) and (path / "_metadata.json").exists()
    assert events["lakestate://clicks/savepoints"] == saved and saved["path"] == str(path)
    # A failed operation raises with the command's own error, not the provider's generic text.
    with pytest.raises(AirflowException) as failed:
        execute(dags["lakestate_restore"].get_task("restore"), {"job": "clicks", "checkpoint": 999},
                "lakestate_restore")
    assert str(failed.value) == "lakestate: error: checkpoint 999 does not exist; retained: [1, 2]"
    _the_other_operations_as_their_dags_define_them(dags, root)


def _the_other_operations_as_their_dags_define_them(dags: dict, root: Path) -> None:
    """Rescale, the next pipeline run, compaction twice, dispose, a dataflow's run and one operator's rescale:
    each DAG's own task, executed in-process after the runs above."""
    from state_store.catalog.job_store import JobStore
    from state_store.catalog.savepoints import list_savepoints
    from state_store.settings import Settings
    from tests.support.airflow_inprocess import execute

    settings = Settings.load(root=root)
    meta = JobStore(settings.job_dir("clicks"))
    # The rescale DAG (a savepoint first, by default), then the pipeline continues at the new parallelism.
    # Its entry does not ask for an approval (require_approval): the rescale DAG's approve task goes on at once.
    approved, _, _ = execute(dags["lakestate_rescale"].get_task("approve"), {"job": "clicks", "parallelism": 3},
                             "lakestate_rescale")
    assert approved == {"chosen_options": ["Approve"], "asked": False}
    rescale = dags["lakestate_rescale"].get_task("rescale")
    returned, said, events = execute(rescale, {"job": "clicks", "parallelism": 3, "retain_savepoints": 1},
                                     "lakestate_rescale")
    assert "rescaling checkpoint 2 from parallelism 2 to 3" in "\n".join(said)
    assert returned == {"job": "clicks", "checkpoint": 3, "microbatch": 1, "parallelism": 3, "changed": True}
    assert events["lakestate://clicks/savepoints"]["name"].startswith("rescale-2-")
    summary, said, _ = execute(dags["lakestate_clicks"].get_task("run"), {"max_microbatches": 1}, "lakestate_clicks")
    said = "\n".join(said)
    assert "restored checkpoint 3 (microbatch 1)" in said and "planned microbatches 2..2" in said
    assert summary["microbatches"] == [2] and summary["checkpoints"] == [4]
    assert (meta.latest_checkpoint().batch_id, meta.latest_checkpoint().parallelism) == (2, 3)
    assert len(list_savepoints(settings, "clicks")) == 2  # the labelled one and the rescale's
    # The compaction DAG maps over the jobs that have a checkpoint, each task labelled by its job.
    compaction = dags["lakestate_compaction"]
    assert compaction.get_task("jobs_with_checkpoints").python_callable() == ["clicks"]
    assert compaction.get_task("per_job.compact").map_index_template == "{{ task.job }}"
    from state_store.provider.operators import LakestateCompactOperator

    report, said, _ = execute(LakestateCompactOperator(task_id="compact", job="clicks"), {}, "lakestate_compaction")
    assert "job clicks: compacted checkpoint 4 (microbatch 2)" in "\n".join(said)
    assert report == meta.last_compaction() and meta.latest_checkpoint().checkpoint_id == 5
    assert report["new_checkpoint"] == 5 and report["rows_scanned"] >= report["tables"]["keyed"]["rows_after"] > 0
    # Right after it, a compaction has nothing to do: it says so, writes no table version and no checkpoint,
    # and the useful report stays the last one; the history has both.
    again, said, _ = execute(LakestateCompactOperator(task_id="compact", job="clicks"), {}, "lakestate_compaction")
    assert "job clicks: nothing to do: checkpoint 5 (microbatch 2) is what the compaction of" in "\n".join(said)
    assert again["nothing_to_do"] and meta.checkpoint_ids()[-1] == 5 and meta.last_compaction() == report
    assert [r.get("nothing_to_do", False) for r in meta.compaction_history()] == [True, False]
    # What an approval of a restore or a dispose would show (provider/approval.py), from the job's metadata.
    from state_store.provider.approval import describe_change

    restore = describe_change("restore", {"job": "clicks", "checkpoint": 3, "parallelism": 2}, settings).splitlines()
    assert restore[0] == "Restores job **clicks** from checkpoint 3: it becomes the job's next checkpoint."
    assert restore[1].startswith("- Now: checkpoint 5 (microbatch 2): state ") and restore[1].endswith("parallelism 3")
    assert restore[2].startswith("- From: checkpoint 3 (microbatch 1): state ") and restore[3] == "- Parallelism 3 -> 2"
    dispose = describe_change("dispose", {"savepoint": "clicks/before-rescale"}, settings).splitlines()
    assert dispose[0] == (f"Deletes savepoint **clicks/before-rescale** "
                          f"({root / 'savepoints' / 'clicks' / 'before-rescale'}), for good:")
    assert dispose[1].startswith("- of checkpoint 2 (microbatch 1): state ")
    # Dispose, from its DAG: files only.
    gone = dags["lakestate_dispose"].get_task("dispose").python_callable(params={"savepoint": "clicks/before-rescale"})
    path = root / "savepoints" / "clicks" / "before-rescale"
    assert gone == {"job": "clicks", "name": "before-rescale", "path": str(path)} and not path.exists()
    assert [s.name for s in list_savepoints(settings, "clicks")][0].startswith("rescale-2-")
    # A job of two operators (a dataflow) through its pipeline DAG's task: the result is pandas' over the input.
    _, said, _ = execute(dags["lakestate_sessions-per-country"].get_task("run"), {},
                         "lakestate_sessions-per-country")
    said = "\n".join(said)
    assert "operator per-country: microbatch 2:" in said and "checkpoint 3 at microbatch 2" in said
    _assert_sessions_per_country(settings, root / "input" / "country-clicks")
    execute(rescale, {"job": "sessions-per-country", "parallelism": 4, "operator": "per-country"},
            "lakestate_rescale")
    latest = JobStore(settings.job_dir("sessions-per-country")).latest_checkpoint()
    assert (latest.parallelism, latest.of_operator("per-country").parallelism) == (2, 4)


EXAMPLE = ROOT / "docs" / "examples" / "lakestate_example_dags.py"


def _parse_examples(env: dict) -> dict:
    """The example DAG file parsed by Airflow's DagBag in a fresh interpreter: its errors, DAGs, tasks (in order),
    schedules and outlets."""
    parse = textwrap.dedent(f"""
        import json
        from airflow.models.dagbag import DagBag
        bag = DagBag({str(EXAMPLE.parent)!r}, include_examples=False)
        condition = lambda dag: getattr(dag.timetable, "asset_condition", None)  # set when scheduled on Assets
        print(json.dumps({{"errors": bag.import_errors, "dags": {{d: {{
            "tasks": [t.task_id for t in dag.topological_sort()], "schedule": dag.timetable.summary,
            "on_assets": [a.uri for _, a in condition(dag).iter_assets()] if condition(dag) else [],
            "outlets": [a.uri for t in dag.tasks for a in t.outlets]}} for d, dag in bag.dags.items()}}}}))
    """)
    out = subprocess.run([sys.executable, "-c", parse], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.e2e
def test_the_example_dags_parse_with_the_upstream_task_before_the_sensor_and_the_run(tmp_path):
    """What docs/examples/lakestate_example_dags.py wires: a job after an upstream task, a job on another job's
    sink Asset. Its tasks are the provider's own, which tests/provider/test_browser.py's Airflow runs for real."""
    registry = write_registry(tmp_path, """
    [jobs.clicks]
    entrypoint = "demo.clicks:job"

    [jobs.sessions]
    entrypoint = "demo.sessions:job"
    """)
    root = tmp_path / "lakestate"
    env = {**airflow_test_env(tmp_path, registry, root), "AIRFLOW__CORE__DAGS_FOLDER": str(EXAMPLE.parent)}
    found = _parse_examples(env)
    assert found["errors"] == {}
    assert found["dags"] == {
        "example_lakestate_after_upstream": {"tasks": ["land_clicks", "wait_for_lease", "run"], "schedule": "None",
                                             "on_assets": [], "outlets": ["lakestate://clicks/sink"]},
        "example_lakestate_on_asset": {"tasks": ["wait_for_lease", "run"], "schedule": "Asset",
                                       "on_assets": ["lakestate://clicks/sink"],
                                       "outlets": ["lakestate://sessions/sink"]}}


def _assert_sessions_per_country(settings, clicks_dir: Path) -> None:
    """The dataflow demo's sink, the latest totals per country, against the same logic in pandas."""
    import pandas as pd
    from deltalake import DeltaTable

    from demo.sessions_per_country import expected, latest_totals, read_clicks

    rows = DeltaTable(str(settings.sink("sinks/sessions_per_country"))).to_pandas()
    pd.testing.assert_frame_equal(latest_totals(rows), expected(read_clicks(clicks_dir)), check_dtype=False)


@pytest.mark.e2e
def test_the_operation_dags_offer_typed_params_docs_and_a_compaction_that_unpausing_does_not_start(tmp_path):
    registry = write_registry(tmp_path, """
    [jobs.clicks]
    entrypoint = "demo.clicks:job"
    [jobs.orders]
    entrypoint = "demo.clicks:job"
    """)
    code = textwrap.dedent(f"""
        import json, sys
        from airflow.models.dagbag import DagBag
        from airflow.serialization.serialized_objects import SerializedDAG
        from airflow.utils import timezone
        bag = DagBag(dag_folder="/nonexistent", include_examples=False)
        bag.process_file({str(ROOT / "dags" / "lakestate_operations.py")!r})
        out = {{d: {{k: {{**p.schema, "description": p.description}} for k, p in dag.params.items()}}
               for d, dag in bag.dags.items()}}
        docs = {{d: dag.doc_md for d, dag in bag.dags.items()}}
        tasks = {{d: sorted(t.task_id for t in dag.tasks) for d, dag in bag.dags.items()}}
        waits = {{d: (dag.get_task("wait_for_lease").mode, dag.get_task("wait_for_lease").job_id)
                 for d, dag in bag.dags.items() if "wait_for_lease" in dag.task_ids}}
        compaction = bag.dags["lakestate_compaction"]
        # What the scheduler does when the DAG is unpaused: its next run from no run at all.
        first = SerializedDAG.deserialize_dag(SerializedDAG.serialize_dag(compaction)).next_dagrun_info(None)
        mapped, compaction_wait = compaction.get_task("per_job.compact"), compaction.get_task("per_job.wait_for_lease")
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "pandas", "delta", "demo"))
        print(json.dumps({{"params": out, "docs": docs, "errors": bag.import_errors, "heavy": heavy,
                          "tasks": tasks, "waits": waits,
                          "first_run_in_s": (first.run_after - timezone.utcnow()).total_seconds(),
                          "catchup": compaction.catchup, "map_index_template": mapped.map_index_template,
                          "compaction_wait": [compaction_wait.mode, compaction_wait.map_index_template,
                                              [t.task_id for t in compaction_wait.downstream_list]]}}))
    """)
    out = subprocess.run([sys.executable, "-c", code], env=airflow_test_env(tmp_path, registry, tmp_path / "root"),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["errors"] == {} and found["heavy"] == []
    params = found["params"]
    savepoint, rescale = params["lakestate_savepoint"], params["lakestate_rescale"]
    restore = params["lakestate_restore"]
    for form in (savepoint, rescale, restore):
        assert form["job"]["enum"] == ["clicks", "orders"]
    assert savepoint["checkpoint"]["type"] == ["null", "integer"] and savepoint["label"]["type"] == ["null", "string"]
    # No top-level minimum/maximum the form's number field would clamp a typed 0 or 100000 to: bounds the
    # trigger checks and refuses with the value typed (tests/provider/test_browser.py types them in the rescale form).
    parallelism = rescale["parallelism"]
    assert parallelism["type"] == "integer" and "minimum" not in parallelism and "maximum" not in parallelism
    assert parallelism["then"] == {"minimum": 1, "maximum": 32768}  # a job's own max: the task refuses above it
    assert "default" not in parallelism and parallelism["description"].endswith("the Lakestate page shows each "
                                                                                "job's current and max")
    assert rescale["savepoint_first"]["type"] == "boolean" and rescale["retain_savepoints"]["then"]["minimum"] == 0
    assert rescale["operator"]["type"] == ["null", "string"]  # a dataflow's one operator to rescale
    assert restore["savepoint"]["type"] == ["null", "string"] and restore["backend"]["enum"] == [None, "delta",
                                                                                                 "hashmap"]
    assert params["lakestate_dispose"]["savepoint"]["pattern"].startswith("^")
    assert params["lakestate_compaction"] == {}  # scheduled, mapped over the registered jobs
    for dag_id, doc in found["docs"].items():
        assert "(/lakestate/)" in doc, dag_id  # each links to the Lakestate page
    assert "1 to the job's max parallelism" in found["docs"]["lakestate_rescale"]
    # Unpausing the daily compaction schedules its next 03:00, not a run of the interval already past.
    assert found["catchup"] is False and 0 < found["first_run_in_s"] <= 24 * 3600
    assert found["map_index_template"] == "{{ task.job }}"
    # An operation waits for its job without a worker slot, then submits; a rescale, a restore and a dispose
    # first ask for an approval when the job's entry says so (approve: tests/provider/test_postgres.py).
    assert found["tasks"] == {"lakestate_savepoint": ["savepoint", "wait_for_lease"],
                              "lakestate_rescale": ["approve", "rescale", "wait_for_lease"],
                              "lakestate_restore": ["approve", "restore", "wait_for_lease"],
                              "lakestate_dispose": ["approve", "dispose"],
                              "lakestate_compaction": ["jobs_with_checkpoints", "per_job.compact",
                                                       "per_job.wait_for_lease"]}
    # The compaction waits for each job the same way, in a task group mapped over the jobs.
    assert found["compaction_wait"] == ["reschedule", "{{ task.job_id }}", ["per_job.compact"]]
    assert {tuple(w) for w in found["waits"].values()} == {("reschedule", "{{ params.job }}")}


@pytest.fixture(scope="module")
def parsed_forms(tmp_path_factory) -> dict:
    """Every Lakestate DAG's params (schema and description) and docs, as Airflow's DagBag parses the two DAG
    files, for a registry of one job (``clicks``: not run yet, max parallelism 128 once run)."""
    tmp_path = tmp_path_factory.mktemp("forms")
    registry = write_registry(tmp_path, """
    [jobs.clicks]
    entrypoint = "demo.clicks:job"
    """)
    code = textwrap.dedent(f"""
        import json
        from airflow.models.dagbag import DagBag
        bag = DagBag(dag_folder="/nonexistent", include_examples=False)
        for name in ("lakestate_pipelines.py", "lakestate_operations.py"):
            bag.process_file({str(ROOT / "dags")!r} + "/" + name)
        print(json.dumps({{"errors": bag.import_errors,
                          "params": {{d: {{k: {{**p.schema, "description": p.description}}
                                          for k, p in dag.params.items()}} for d, dag in bag.dags.items()}},
                          "docs": {{d: dag.doc_md for d, dag in bag.dags.items()}}}}))
    """)
    out = subprocess.run([sys.executable, "-c", code], env=airflow_test_env(tmp_path, registry, tmp_path / "root"),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["errors"] == {}
    return {**found, "registry": str(registry), "home": str(tmp_path)}


def _refusal(schema: dict, value) -> str | None:
    """What the trigger says of ``value`` for a param of ``schema`` (Airflow validates with jsonschema)."""
    import jsonschema

    schema = {k: v for k, v in schema.items() if k != "description"}
    try:
        jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())
    except jsonschema.ValidationError as e:
        return e.message
    return None


def _number_fields(parsed_forms) -> dict:
    return {f"{d}.{k}": p for d, params in parsed_forms["params"].items() for k, p in params.items()
            if "integer" in ([p["type"]] if isinstance(p.get("type"), str) else p.get("type") or [])}


def test_a_number_out_of_range_is_refused_as_less_than_the_minimum_of_1_or_more_than_the_maximum(parsed_forms):
    fields = _number_fields(parsed_forms)
    assert set(fields) == {"lakestate_clicks.max_microbatches", "lakestate_savepoint.checkpoint",
                           "lakestate_rescale.parallelism", "lakestate_rescale.retain_savepoints",
                           "lakestate_restore.checkpoint", "lakestate_restore.parallelism"}
    for name, schema in fields.items():
        assert not {"exclusiveMinimum", "exclusiveMaximum"} & set(json.dumps(schema).split('"')), name
        low = 0 if name.endswith("retain_savepoints") else 1
        assert _refusal(schema, low - 1) == f"{low - 1} is less than the minimum of {low}", name
        assert _refusal(schema, low) is None, name
    assert _refusal(fields["lakestate_rescale.parallelism"], 32769) == "32769 is greater than the maximum of 32768"
    assert _refusal(fields["lakestate_restore.parallelism"], 32769) == "32769 is greater than the maximum of 32768"


def test_an_optional_number_field_left_empty_is_valid_and_gets_no_bound_the_form_would_mark_it_red_with(
        parsed_forms):
    """Airflow's number field reads an empty value as 0 against the schema's top-level ``minimum``: a
    ``minimum`` of 1 there marks an empty optional field as an error (and clamps a typed value when left).
    The browser test (tests/provider/test_browser.py) sees the field itself."""
    for name, schema in _number_fields(parsed_forms).items():
        assert "minimum" not in schema and "maximum" not in schema, name
        if name != "lakestate_rescale.parallelism":
            assert "null" in schema["type"] and _refusal(schema, None) is None, name


def test_the_savepoint_labels_help_names_its_allowed_characters(parsed_forms):
    label = parsed_forms["params"]["lakestate_savepoint"]["label"]
    assert "letters, digits and _ . -" in label["description"] and "64" in label["description"]
    assert _refusal(label, "a b") is not None and _refusal(label, "before-v2.1_x") is None


def test_a_form_value_with_a_trailing_newline_is_refused_by_every_pattern(parsed_forms):
    """Issue 37 #4: Airflow checks a pattern with re.search, where "$" also matches before a final newline."""
    patterned = {(d, k): p for d, params in parsed_forms["params"].items() for k, p in params.items()
                 if "pattern" in p}
    assert {k for _, k in patterned} == {"label", "savepoint"}
    for (dag_id, name), schema in patterned.items():
        good = "clicks/before-v2" if name == "savepoint" else "before-v2"
        assert _refusal(schema, good) is None, (dag_id, name)
        assert _refusal(schema, good + "\n") is not None, (dag_id, name)


def test_the_dag_docs_render_as_markdown_paragraphs_and_lists_without_a_machine_path(parsed_forms):
    """The docs popup renders Markdown: each DAG's docs are short paragraphs and a list of its params, not a
    paragraph broken up by code spans (grey blocks), and name no path of the machine that parsed them."""
    from markdown_it import MarkdownIt

    for dag_id, doc in parsed_forms["docs"].items():
        assert parsed_forms["registry"] not in doc and parsed_forms["home"] not in doc, dag_id
        assert not re.search(r"(?<![\w)])/(tmp|home|work|srv|opt)/", doc), dag_id
        rendered = MarkdownIt().render(doc)
        assert "<pre>" not in rendered and rendered.count("<code>") <= 2, (dag_id, rendered)
        assert "<li>" in rendered and '<a href="/lakestate/">' in rendered, (dag_id, rendered)
        if parsed_forms["params"][dag_id]:  # each param is an item of the list, by the title its form shows
            for param in parsed_forms["params"][dag_id].values():
                assert f"<strong>{param['title']}</strong>" in rendered, (dag_id, param["title"])


def test_jars_at_the_same_paths_on_every_worker_go_on_the_class_paths_instead_of_to_each_executor(monkeypatch):
    """By default spark-submit ships the jars (each application's executors copy them: the S3 bundle is 560 MB);
    with LAKESTATE_JARS_ON_WORKERS=1 they go on the driver's and executors' class path and are copied nowhere
    (that a cluster's runs then leave no copies: tests/e2e/test_cluster.py). A value it does not know is refused."""
    from state_store.provider.hooks import LakestateSparkHook

    monkeypatch.setenv("LAKESTATE_JARS", "/opt/jars/a.jar,/opt/jars/b.jar")
    shipped = LakestateSparkHook(conf={"spark.log.level": "WARN"})
    assert (shipped._jars, shipped._conf) == ("/opt/jars/a.jar,/opt/jars/b.jar", {"spark.log.level": "WARN"})
    monkeypatch.setenv("LAKESTATE_JARS_ON_WORKERS", "1")
    placed = LakestateSparkHook(conf={"spark.log.level": "WARN"})
    path = f"/opt/jars/a.jar{os.pathsep}/opt/jars/b.jar"
    assert placed._jars is None and placed._conf == {"spark.log.level": "WARN", "spark.driver.extraClassPath": path,
                                                     "spark.executor.extraClassPath": path}
    monkeypatch.setenv("LAKESTATE_JARS_ON_WORKERS", "yes")
    with pytest.raises(ConfigError, match=r"LAKESTATE_JARS_ON_WORKERS must be 1 .* or 0 .*, got 'yes'"):
        LakestateSparkHook()


def test_a_runs_lineage_names_each_source_sink_and_side_output_as_openlineage_names_them(tmp_path):
    """Inputs: a folder (file + its path), a Kafka topic (kafka://<first server> + the topic), a Delta table
    (its path); outputs: the sink and each side output where the warehouse puts them (s3a:// is s3://<bucket> +
    the key); the run facet gives the parallelism of the latest checkpoint and the run's figures. The events
    Airflow's OpenLineage listener sends of a real run: tests/e2e/test_cluster.py."""
    from types import SimpleNamespace

    from demo.sessions_per_country import dataflow, on_kafka
    from state_store import Dataflow, DeltaSource, Types
    from state_store.provider.lineage import run_lineage
    from state_store.settings import Settings
    from tests.support.jobs import CountOnly

    def on_s3(table: str) -> str:  # Settings.sink of a warehouse at s3a://bucket/lake/warehouse
        return f"s3a://bucket/lake/warehouse/{table}"

    summary = {"checkpoints": [4], "microbatches": [3], "records_in": 10, "records_out": 2,
               "side_outputs": {"late_clicks": 1}}
    for folder in ("clicks", "orders"):
        (tmp_path / folder).mkdir()
    files = run_lineage({"spec": dataflow(tmp_path / "clicks").describe()}, summary, on_s3)
    assert [(d.namespace, d.name) for d in files.inputs] == [("file", str((tmp_path / "clicks").resolve()))]
    assert [(d.namespace, d.name) for d in files.outputs] == [
        ("s3://bucket", "lake/warehouse/sinks/sessions_per_country"),
        ("s3://bucket", "lake/warehouse/sinks/sessions_per_country_late_clicks")]
    facet = files.run_facets["lakestate"]
    assert (facet.job, facet.parallelism, facet.checkpoints, facet.side_outputs) == (
        "sessions-per-country", {"sessions": 2, "per-country": 3}, [4], {"late_clicks": 1})
    latest = SimpleNamespace(parallelism=4,
                             of_operator=lambda uid: SimpleNamespace(parallelism=5) if uid == "per-country" else None)
    kafka = run_lineage({"spec": on_kafka("b1:9092,b2:9092", "clicks").describe()}, {}, Settings.load(
        root=tmp_path).sink, latest)
    assert [(d.namespace, d.name) for d in kafka.inputs] == [("kafka://b1:9092", "clicks")]
    assert kafka.outputs[0].namespace == "file" and kafka.run_facets["lakestate"].parallelism == {
        "sessions": 4, "per-country": 5}
    delta = (Dataflow.from_source(DeltaSource(str(tmp_path / "orders")), job_id="d").key_by("k", Types.STRING())
             .process(CountOnly(), uid="count", output_type=Types.ROW_NAMED(["k"], [Types.STRING()]))
             .sink_to("sinks/d"))
    assert [(d.namespace, d.name) for d in run_lineage({"spec": delta.describe()}, {}, on_s3).inputs] == [
        ("file", str((tmp_path / "orders").resolve()))]


def test_the_docker_deployment_runs_airflow_on_postgres_against_the_spark_master():
    import yaml

    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    airflow = compose["services"]["airflow"]
    env = airflow["environment"]
    # One place for the database's settings: scripts/airflow-db.env, which scripts/postgres.sh reads too.
    db = airflow_db_settings()
    assert compose["services"]["postgres"]["env_file"] == airflow["env_file"] == "../scripts/airflow-db.env"
    assert "environment" not in compose["services"]["postgres"]
    user, password, name = db["POSTGRES_USER"], db["POSTGRES_PASSWORD"], db["POSTGRES_DB"]
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == f"postgresql+psycopg2://{user}:{password}@postgres/{name}"
    assert db["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor" and int(db["AIRFLOW__CORE__PARALLELISM"]) > 1
    assert not {k for k in env if k in db}, "set in scripts/airflow-db.env, not again in compose.yaml"
    url = subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), "url"], capture_output=True, text=True,
                         env={**os.environ, "LAKESTATE_POSTGRES_PORT": "5433"}, check=True).stdout.strip()
    assert url == f"postgresql+psycopg2://{user}:{password}@127.0.0.1:5433/{name}"
    assert json.loads(env["AIRFLOW_CONN_LAKESTATE_SPARK"]) == {"conn_type": "spark", "host": "spark://spark-master",
                                                               "port": 7077}
    assert airflow["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert {"spark-worker-1", "spark-worker-2", "postgres", "kafka"} <= set(compose["services"])
    kafka = compose["services"]["kafka"]
    assert kafka["environment"]["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://kafka:9092"
    assert env["LAKESTATE_KAFKA_BOOTSTRAP"] == "kafka:9092" and airflow["depends_on"]["kafka"]
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert "LAKESTATE_REGISTRY=/opt/lakestate/lakestate.toml" in dockerfile and "psycopg2" in dockerfile
    # Every jar LAKESTATE_JARS names is one set-up fetches here (the Kafka connector's too), at the same version.
    jars = re.search(r"LAKESTATE_JARS=(\S+)", dockerfile).group(1).split(",")
    assert sorted(Path(j).name for j in jars) == sorted(p.name for p in (ROOT / ".cache" / "jars").glob("*.jar"))


def test_the_lease_sensor_waits_while_the_job_is_held_and_gives_its_worker_slot_back(tmp_path, monkeypatch):
    from state_store.catalog.lease import holding, release_reservation
    from state_store.provider.operators import LakestateLeaseSensor
    from state_store.settings import Settings

    monkeypatch.setenv("LAKESTATE_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow-home"))
    sensor = LakestateLeaseSensor(task_id="wait_for_lease", job_id="clicks", lease_handoff="lakestate_clicks-r1")
    assert (sensor.mode, sensor.poke_interval, sensor.timeout) == ("reschedule", 30, 3600)
    settings = Settings.load()
    with holding(settings.job_dir("clicks"), "clicks", "savepoint", say=lambda m: None):
        assert not sensor.poke({})  # a savepoint holds the job: poke again later, without the slot meanwhile
    assert sensor.poke({})  # released: free, and now reserved for the task after the sensor
    assert sensor.poke({})  # a retried sensor of the same run finds its own reservation
    assert release_reservation(settings.job_dir("clicks") / "_meta" / "lease", "lakestate_clicks-r1-clicks")


def test_a_second_dags_lease_sensor_waits_from_the_first_sensors_pass_until_its_command_releases_the_job(
        tmp_path, monkeypatch):
    """A savepoint DAG's and a rescale DAG's sensors of one job, poked together: the first passes and holds the
    job for its command (whose JVM starts later: the window the issue saw two drivers in); the second waits
    until that command has run and released the job. Proven by the lease records' times, not by sleeps."""
    from state_store.catalog.lease import HANDOFF_ENV, current_holder, generations, holding
    from state_store.provider.operators import LakestateLeaseSensor, reservation
    from state_store.settings import Settings

    monkeypatch.setenv("LAKESTATE_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow-home"))
    job_dir = Settings.load().job_dir("clicks")
    sensors = [LakestateLeaseSensor(task_id="wait_for_lease", job_id="clicks", lease_handoff=f"{dag}-manual__1")
               for dag in ("lakestate_savepoint", "lakestate_rescale")]
    first, second = sensors
    lease_dir = job_dir / "_meta" / "lease"
    assert first.poke({}) and not second.poke({})  # the second waits though the first's command has not started
    reserved_first = current_holder(lease_dir)
    # What the savepoint task's `lakestate savepoint` does as its driver starts, with the task's environment.
    monkeypatch.setenv(HANDOFF_ENV, reservation(first.lease_handoff, "clicks"))
    with holding(job_dir, "clicks", "savepoint", say=lambda m: None) as lease:
        assert lease.generation == generations(lease_dir)[-2] + 1  # taken over from the reservation, none between
        assert not second.poke({})  # the command holds the job: still waiting
    savepoint = current_holder(lease_dir)
    assert second.poke({})  # released: the rescale's sensor passes and reserves for its command
    reserved_second = current_holder(lease_dir)
    monkeypatch.setenv(HANDOFF_ENV, reservation(second.lease_handoff, "clicks"))
    with holding(job_dir, "clicks", "rescale", say=lambda m: None):
        pass
    rescale = current_holder(lease_dir)
    assert [r["run_id"].split("-")[0] for r in (reserved_first, savepoint, reserved_second, rescale)] == [
        "lakestate_savepoint", "savepoint", "lakestate_rescale", "rescale"]
    # One holder at a time: each took the job after the one before had it, the next only once it was released.
    assert reserved_first["acquired_ms"] <= savepoint["acquired_ms"] <= savepoint["heartbeat_ms"] \
        <= reserved_second["acquired_ms"] <= rescale["acquired_ms"]
    assert savepoint["released"] and rescale["released"] and reserved_second["reserved"]


def test_sensors_that_find_the_job_held_are_served_first_come_first_served(tmp_path, monkeypatch):
    """A compaction's sensor that found the job held is not starved by pipeline runs triggered back to back: a
    pipeline's sensor that finds the job free while the compaction's waits in line waits behind it, and passes
    once the compaction's has had its turn. A waiter whose sensor ended (not seen for 3 pokes and a minute)
    leaves the line."""
    import json
    import time

    from state_store.catalog.lease import ahead_in_line, holding, release_reservation
    from state_store.provider.operators import LakestateLeaseSensor, reservation
    from state_store.settings import Settings

    monkeypatch.setenv("LAKESTATE_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow-home"))
    job_dir = Settings.load().job_dir("clicks")
    lease_dir = job_dir / "_meta" / "lease"
    (job_dir / "state").mkdir(parents=True)
    (job_dir / "state" / "table").write_text("a job with state")  # not a folder the lease alone made
    compaction, pipeline = (LakestateLeaseSensor(task_id="wait_for_lease", job_id="clicks", lease_handoff=h)
                            for h in ("lakestate_compaction-scheduled__1", "lakestate_clicks-manual__2"))
    with holding(job_dir, "clicks", "run", say=lambda m: None):
        assert not compaction.poke({})  # held by a run: the compaction's sensor joins the line
    assert not pipeline.poke({})  # free, but the compaction's sensor waited first
    assert compaction.poke({})  # its turn: reserved for its command
    assert not pipeline.poke({})  # held by that reservation
    assert release_reservation(lease_dir, reservation(compaction.lease_handoff, "clicks"))
    assert pipeline.poke({}) and not list(lease_dir.glob("waiting-*"))  # the line is empty again
    gone = lease_dir / "waiting-gone.json"
    gone.write_text(json.dumps({"run_id": "lakestate_savepoint-manual__0-clicks", "since_ms": 0,
                                "seen_ms": int(time.time() * 1000) - 151_000}))
    assert ahead_in_line(lease_dir, "anyone", stale_s=3 * 30 + 60) == [] and not gone.exists()


@pytest.mark.e2e
def test_a_sensors_reservation_outlives_its_task_process_and_only_its_own_command_takes_it_over(tmp_path,
                                                                                              monkeypatch):
    """The sensor's task process ends when it passes: its reservation must not look like a crashed holder."""
    from state_store.catalog.lease import HANDOFF_ENV, holding, release_reservation
    from state_store.errors import JobLocked
    from state_store.provider.operators import LakestateLeaseSensor
    from state_store.settings import Settings

    root = tmp_path / "root"
    monkeypatch.setenv("LAKESTATE_ROOT", str(root))
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow-home"))
    code = textwrap.dedent("""
        from state_store.provider.operators import LakestateLeaseSensor
        assert LakestateLeaseSensor(task_id="w", job_id="clicks", lease_handoff="lakestate_savepoint-r1").poke({})
    """)
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONWARNINGS": "ignore"},
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]  # it passed, and its process is gone
    job_dir = Settings.load().job_dir("clicks")
    other = LakestateLeaseSensor(task_id="w", job_id="clicks", lease_handoff="lakestate_rescale-r1")
    assert not other.poke({})
    with pytest.raises(JobLocked, match="held by run lakestate_savepoint-r1-clicks"):
        with holding(job_dir, "clicks", "rescale", say=lambda m: None):
            pass  # a command without the reservation's name (another DAG's) is refused
    monkeypatch.setenv(HANDOFF_ENV, "lakestate_savepoint-r1-clicks")
    with holding(job_dir, "clicks", "savepoint", say=lambda m: None):
        assert not other.poke({})
    monkeypatch.delenv(HANDOFF_ENV)
    assert other.poke({})  # released by the savepoint's command; now the rescale's sensor's
    # A task that ends without its command taking the job over (it failed first) releases its reservation.
    assert release_reservation(job_dir / "_meta" / "lease", "lakestate_rescale-r1-clicks")
    assert LakestateLeaseSensor(task_id="w", job_id="clicks", lease_handoff="lakestate_restore-r1").poke({})
