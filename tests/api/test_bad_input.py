"""Bad input gets a clear error naming the problem and the fix, and nothing is written."""
from __future__ import annotations

import sys
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from state_store import ConfigError, FileSource, InputError, JobNotFound, RestoreError, Settings, Types
from state_store.catalog.job_store import JobStore
from state_store.catalog.jobs import JobCatalog
from state_store.cli import main
from state_store.job import check_job_id
from state_store.ops.savepoint import check_label
from state_store.side_outputs import OutputTag
from state_store.state.descriptors import ValueStateDescriptor, check_state_name
from tests.support.helpers import run, sink_rows, write_stored_values
from tests.support.jobs import EVENT, CountOnly, NoState, count_job, events


def _nothing_written(lake, spec) -> None:
    job_dir = lake.settings.job_dir(spec.job_id)
    meta = JobStore(job_dir)
    assert meta.last_commit() is None and meta.checkpoint_ids() == []
    assert not lake.settings.in_warehouse(spec.sink, "sink").exists()
    # A refused first run leaves nothing at all: no tables, no plans, no lease, no folders.
    assert not job_dir.exists(), sorted(str(p.relative_to(job_dir)) for p in job_dir.rglob("*"))


def test_unknown_job_names_the_registered_ones(lake):
    registry = JobCatalog(lake.settings)
    with pytest.raises(JobNotFound, match=r"'nope' is not registered .*registered: none.*lakestate register"):
        registry.load("nope")


def test_malformed_source_file_is_refused_before_anything_is_written(spark, lake):
    (lake.events / "e0.json").write_text('{"k": "a", "v": 1, "op": "add", "seq": 1}\n{"k": "b", "v": oops\n')
    spec = count_job(lake)
    with pytest.raises(InputError, match=r"microbatch 0 .* failed before anything was written.*e0\.json"):
        run(spark, spec, lake)
    _nothing_written(lake, spec)


def test_key_of_the_wrong_type_is_refused_before_anything_is_written(spark, lake):
    schema = Types.ROW_NAMED(["k", "v", "op", "seq"], [Types.LONG(), Types.LONG(), Types.STRING(), Types.LONG()])
    parquet_dir = lake.inputs / "parquet"
    parquet_dir.mkdir()
    # The files carry k as a string; the job says LONG.
    pq.write_table(pa.table({"k": ["a"], "v": [1], "op": ["add"], "seq": [1]}), parquet_dir / "p0.parquet")
    spec = count_job(lake, key_type=Types.LONG(), source=FileSource(str(parquet_dir), "parquet", schema))
    with pytest.raises(InputError, match=r"column 'k' is string in the parquet file .*p0\.parquet but the source "
                                         r"schema declares LONG \(bigint\); write it as bigint or change the "
                                         r"declared type"):
        run(spark, spec, lake)
    _nothing_written(lake, spec)


def test_incompatible_state_type_change_is_refused_and_a_compatible_one_migrates(spark, lake):
    lake.write_events("e0.json", events(0))
    spec = count_job(lake, function=CountOnly(Types.INT()))
    run(spark, spec, lake)
    lake.write_events("e1.json", events(1))
    changed = count_job(lake, function=CountOnly(Types.STRING()))
    with pytest.raises(RestoreError, match=r"state 'count.count': type changed from INT to STRING.*another name"):
        run(spark, changed, lake)
    assert JobStore(lake.settings.job_dir(spec.job_id)).last_commit() == 0  # nothing written by the refused run
    widened = count_job(lake, function=CountOnly(Types.LONG()))  # INT -> LONG is compatible
    run(spark, widened, lake)
    assert '{"k": "a", "n": 6}' in sink_rows(spark, lake, widened, with_microbatch=False)


@pytest.mark.parametrize("field,value,message", [
    ("checkpoint_interval", 0, "checkpoint_interval must be a positive integer, got 0"),
    ("checkpoint_interval", -3, "checkpoint_interval must be a positive integer, got -3"),
    ("parallelism", 0, "parallelism must be a positive integer, got 0"),
    ("parallelism", -1, "parallelism must be a positive integer, got -1"),
    ("num_retained", 0, "num_retained must be a positive integer"),
    ("parallelism", 9, "parallelism 9 is above max_parallelism 8"),
    ("backend", "rocks", "backend 'rocks' is unknown"),
    ("job_id", "Bad Id!", "job id 'Bad Id!' is not valid"),
])
def test_bad_job_parameters_are_refused_before_anything_is_written(spark, lake, field, value, message):
    lake.write_events("e0.json", events(0))
    spec = count_job(lake, **{field: value})
    with pytest.raises(ConfigError, match=message):
        run(spark, spec, lake)
    assert not (lake.settings.warehouse / "jobs").exists()


@pytest.mark.parametrize("make", [
    lambda: OutputTag("late\n", Types.ROW_NAMED(["k"], [Types.STRING()])),
    lambda: check_job_id("clicks\n"),
    lambda: check_state_name("o2\n", "operator uid"),
    lambda: ValueStateDescriptor("count\n", Types.LONG()),
    lambda: check_label("before-v2\n"),
], ids=["output tag", "job id", "uid", "state name", "savepoint label"])
def test_a_name_with_a_trailing_newline_is_refused(make):
    """Issue 37 #4: names become folders and keys; a pattern ending in "$" lets "name\n" through."""
    with pytest.raises((ConfigError, ValueError), match=r"not (valid|usable)"):
        make()


def test_a_warehouse_outside_the_configured_root_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"warehouse .*outside the configured root .*LAKESTATE_ROOT"):
        Settings.load(warehouse=tmp_path / "elsewhere", root=tmp_path / "root")


@pytest.mark.e2e
def test_under_airflow_a_missing_or_relative_root_is_refused_with_the_fix_and_nothing_is_written(
        tmp_path, monkeypatch, capsys):
    # What Airflow's task runner exports to a task's process, and spark-submit's driver inherits.
    monkeypatch.setenv("AIRFLOW_CTX_DAG_ID", "lakestate_clicks")
    for variable in ("LAKESTATE_ROOT", "LAKESTATE_WAREHOUSE", "LAKESTATE_SAVEPOINTS"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"under Airflow \(DAG lakestate_clicks\) the Lakestate root must be an "
                                          r"absolute folder .*LAKESTATE_ROOT is not set \(the default "
                                          r"'lakestate-data' would be under the task's folder .*set "
                                          r"LAKESTATE_ROOT=/absolute/path"):
        Settings.load()
    assert main(["jobs"]) == 2  # as the task's spark-submit says it: the operator raises with this line
    assert "lakestate: error: under Airflow (DAG lakestate_clicks)" in capsys.readouterr().err
    monkeypatch.setenv("LAKESTATE_ROOT", "data")
    with pytest.raises(ConfigError, match=r"root 'data' is relative to the task's folder .*LAKESTATE_ROOT="):
        Settings.load()
    monkeypatch.setenv("LAKESTATE_ROOT", str(tmp_path / "root"))
    with pytest.raises(ConfigError, match=r"savepoints 'sp' is relative .*LAKESTATE_SAVEPOINTS=.* --savepoints"):
        Settings.load(savepoints="sp")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert Settings.load().root == tmp_path / "root"  # absolute: accepted
    monkeypatch.delenv("AIRFLOW_CTX_DAG_ID")
    monkeypatch.delenv("LAKESTATE_ROOT")
    assert Settings.load().root == tmp_path / "lakestate-data"  # outside Airflow, the default as before


def test_a_sink_outside_the_warehouse_is_refused(spark, lake, tmp_path):
    lake.write_events("e0.json", events(0))
    spec = count_job(lake, sink=str(tmp_path / "escape"))
    with pytest.raises(ConfigError, match=r"sink .*escape is outside the warehouse"):
        run(spark, spec, lake)
    spec = count_job(lake, sink="../../outside")
    with pytest.raises(ConfigError, match=r"outside the warehouse"):
        run(spark, spec, lake)


def test_a_key_column_missing_from_the_schema_is_refused(lake):
    spec = count_job(lake, key="user")
    with pytest.raises(ConfigError, match=r"key column 'user' is not in the source schema"):
        spec.validate()
    assert EVENT.fields["k"].name == "STRING"


class _Failing(CountOnly):
    def process(self, key, records, ctx):
        if key == "c":
            raise ValueError("bad record for c")
        yield from super().process(key, records, ctx)


def test_a_state_dropped_for_a_run_then_registered_again_is_checked_against_its_stored_type(spark, lake):
    lake.write_events("e0.json", events(0))
    run(spark, count_job(lake), lake)  # count: LONG
    lake.write_events("e1.json", events(1))
    run(spark, count_job(lake, function=NoState()), lake)  # a run without it; its entries stay in the tables
    lake.write_events("e2.json", events(2))
    with pytest.raises(RestoreError, match=r"state 'count.count': type changed from LONG to STRING"):
        run(spark, count_job(lake, function=CountOnly(Types.STRING())), lake)
    assert [b.records_in for b in run(spark, count_job(lake), lake).batches] == [15]  # LONG again: restored


def test_an_error_in_the_user_function_is_reported_and_nothing_is_written(spark, lake):
    lake.write_events("e0.json", events(0))
    spec = count_job(lake, function=_Failing())
    with pytest.raises(InputError, match=r"microbatch 0 of job 'counts' failed before anything was written: "
                                         r".*process\(\) raised ValueError: bad record for c \(at key 'c' of "
                                         r"microbatch 0"):
        run(spark, spec, lake)
    _nothing_written(lake, spec)


@pytest.mark.parametrize("change,message", [
    ({"key_type": Types.INT()}, r"keys records by STRING but the job now declares key_type INT"),
    ({"uid": "renamed"}, r"holds the state of operator uid 'count' but the job's operator is now 'renamed'.*"
                         r"lakestate restore counts --checkpoint 1 --uid-map count=renamed"),
    ({"max_parallelism": 16}, r"max_parallelism is the number of key groups and is fixed for a job's life"),
])
def test_a_restore_that_would_misplace_state_is_refused(spark, lake, change, message):
    lake.write_events("e0.json", events(0))
    spec = count_job(lake)
    run(spark, spec, lake)
    lake.write_events("e1.json", events(1))
    changed = count_job(lake, **change)
    if "key_type" in change:  # the declared schema must agree with the key type
        changed.source = FileSource(str(lake.events), "json", Types.ROW_NAMED(
            ["k", "v", "op", "seq"], [Types.INT(), Types.LONG(), Types.STRING(), Types.LONG()]))
    with pytest.raises(RestoreError, match=message):
        run(spark, changed, lake)
    assert JobStore(lake.settings.job_dir(spec.job_id)).last_commit() == 0


def test_a_run_continues_at_the_parallelism_and_backend_of_its_checkpoint_and_says_so(spark, lake):
    lake.write_events("e0.json", events(0))
    run(spark, count_job(lake), lake)
    lake.write_events("e1.json", events(1))
    said = []
    run(spark, count_job(lake, parallelism=1, backend="hashmap"), lake, progress=said.append)
    latest = JobStore(lake.settings.job_dir("counts")).latest_checkpoint()
    assert (latest.parallelism, latest.backend, latest.batch_id) == (2, "delta", 1)
    assert any("the job definition says parallelism 1, its checkpoint 1 has 2: continuing with 2 (change it with "
               "lakestate rescale)" in line for line in said), said
    assert any("says backend hashmap, its checkpoint 1 has delta: continuing with delta" in line for line in said)


@pytest.mark.parametrize("stored,problem", [('{"a": 1}', "expected a value of type LONG, got dict"),
                                            ("[" * 2000 + "]" * 2000, "recursion depth exceeded"),
                                            ("1" * 40, "")], ids=["a dict", "too deep", "too large"])
def test_a_stored_value_of_the_wrong_type_is_a_clear_error_naming_the_state_and_key(spark, lake, stored, problem):
    lake.write_events("e0.json", events(0))
    spec = count_job(lake)
    run(spark, spec, lake)
    write_stored_values(spark, lake, spec.job_id, "count.count", {"a": stored})  # where a's LONG count lives
    lake.write_events("e1.json", events(1))
    with pytest.raises(InputError, match=r"StoredValueError: state 'count.count' of key 'a' holds a stored value "
                                         r"that is not its declared LONG: .*" + problem):
        run(spark, spec, lake)


@pytest.mark.parametrize("column,values,declared", [("v", ["1"], "LONG"), ("seq", [1.5], "LONG"),
                                                    ("op", [1], "STRING")])
def test_a_parquet_column_of_another_type_than_declared_is_refused(spark, lake, column, values, declared):
    parquet_dir = lake.inputs / "parquet"
    parquet_dir.mkdir()
    data = {"k": ["a"], "v": [1], "op": ["add"], "seq": [1], column: values}
    pq.write_table(pa.table({"k": ["b"], "v": [2], "op": ["add"], "seq": [2]}), parquet_dir / "p0.parquet")
    pq.write_table(pa.table(data), parquet_dir / "p1.parquet")
    spec = count_job(lake, source=FileSource(str(parquet_dir), "parquet", EVENT))
    with pytest.raises(InputError, match=rf"column '{column}' is \w+ in the parquet file .*p1\.parquet but the "
                                         rf"source schema declares {declared}"):
        run(spark, spec, lake)
    _nothing_written(lake, spec)


# A TTL that cannot be used, as Python source a job module is written with (name -> expression).
BAD_TTLS = {"zero": "0", "negative": "-5", "NaN": "float('nan')", "one microsecond": "timedelta(microseconds=1)",
            "infinite": "float('inf')", "longer than Long.MAX_VALUE ms": "2 ** 63",
            "on operator state": "10_000"}


@pytest.fixture
def ttl_job(lake, monkeypatch, tmp_path):
    """``lakestate`` arguments for a job module ``ttl_job_module:job`` building TtlCount with the TTL that
    $TTL_CASE names (read when the job is built, so a test may change it between register and run)."""
    (tmp_path / "ttl_job_module.py").write_text(textwrap.dedent(f"""
        import os
        from datetime import timedelta
        from pathlib import Path
        from tests.support.jobs import TtlCount, count_job

        TTLS = {{"ten seconds": 10_000, {", ".join(f"{k!r}: {v}" for k, v in BAD_TTLS.items())}}}

        class _L:
            events = Path({str(lake.events)!r})

        def job():
            case = os.environ["TTL_CASE"]
            return count_job(_L, job_id="ttl-counts", function=TtlCount(TTLS[case], case == "on operator state"))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ttl_job_module", raising=False)
    return ["--root", str(lake.root)]


def _one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lakestate: error: "), lines
    assert "unexpected" not in lines[0] and "full trace" not in lines[0], lines[0]
    return lines[0]


def _ttl_message(case: str) -> str:
    if case == "on operator state":
        return "operator state 'seen' has a TTL: TTL applies to keyed state only"
    if case in ("infinite", "longer than Long.MAX_VALUE ms"):
        return "is too long: at most 9223372036854775807 ms (Long.MAX_VALUE, as in Flink); for entries that never " \
               "expire, leave TTL off"
    return "is not usable: give a positive whole number of milliseconds"


@pytest.mark.parametrize("case", BAD_TTLS)
def test_a_bad_ttl_is_refused_by_register_in_one_line_and_nothing_is_recorded(lake, ttl_job, monkeypatch, capsys,
                                                                             case):
    monkeypatch.setenv("TTL_CASE", case)
    assert main(["register", "ttl_job_module:job", *ttl_job]) == 2
    assert _ttl_message(case) in _one_error_line(capsys)
    assert JobCatalog(lake.settings).ids() == []


@pytest.mark.parametrize("case", ["infinite", "on operator state"])
def test_a_bad_ttl_is_refused_at_the_runs_start_in_one_line_before_anything_is_written(spark, lake, ttl_job,
                                                                                     monkeypatch, capsys, case):
    monkeypatch.setenv("TTL_CASE", "ten seconds")
    assert main(["register", "ttl_job_module:job", *ttl_job]) == 0
    lake.write_events("e0.json", events(0))
    monkeypatch.setenv("TTL_CASE", case)  # the job's code changed after it was registered
    capsys.readouterr()
    assert main(["run", "--job", "ttl-counts", *ttl_job]) == 2
    assert _ttl_message(case) in _one_error_line(capsys)
    assert not lake.settings.job_dir("ttl-counts").exists()
    assert not lake.settings.in_warehouse("sinks/ttl-counts", "sink").exists()


def _count_job_module(tmp_path, monkeypatch, lake) -> str:
    """An entrypoint ``bad_sink_module:job`` building ``count_job`` over ``lake``, for ``JobCatalog.register``."""
    (tmp_path / "bad_sink_module.py").write_text(
        "from pathlib import Path\nfrom tests.support.jobs import count_job\n\n"
        f"class _L:\n    events = Path({str(lake.events)!r})\n\n"
        "def job():\n    return count_job(_L)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "bad_sink_module", raising=False)
    return "bad_sink_module:job"


@pytest.mark.parametrize("sink", ["jobs/counts/state/keyed", "jobs/other-job/out", "jobs", "_lakestate/out"])
def test_a_sink_inside_the_jobs_or_catalog_folders_is_refused_at_register_and_at_run(spark, lake, tmp_path,
                                                                                   monkeypatch, sink):
    lake.write_events("e0.json", events(0))
    entrypoint = _count_job_module(tmp_path, monkeypatch, lake)
    message = (r"sink .* is inside the warehouse's '(jobs|_lakestate)' folder, where Lakestate keeps the jobs' state "
               r"and catalog: give the sink its own folder, such as 'sinks/<job>'")
    with pytest.raises(ConfigError, match=message):
        JobCatalog(lake.settings).register(entrypoint, overrides={"sink": sink})
    assert JobCatalog(lake.settings).ids() == []
    spec = count_job(lake, sink=sink)
    with pytest.raises(ConfigError, match=message):
        run(spark, spec, lake)
    assert not (lake.settings.warehouse / "jobs" / "counts").exists()


def test_a_sink_made_read_only_during_a_run_reports_the_read_only_error_not_the_cleanups(spark, lake):
    from contextlib import ExitStack

    from state_store.run.runtime import FaultInjector
    from tests.support.helpers import read_only

    lake.write_events("e0.json", events(0))
    spec = count_job(lake)
    sink = lake.settings.in_warehouse(spec.sink, "sink")
    sink.mkdir(parents=True)
    with ExitStack() as stack:  # the volume turns read-only once the run has checked it
        mount = FaultInjector("after_plan", action=lambda: stack.enter_context(read_only(sink)))
        with pytest.raises(InputError, match=r"microbatch 0 .* failed before anything was written: .*Read-only file "
                                             r"system") as failure:
            run(spark, spec, lake, faults=mount)
    assert "Device or resource busy" not in str(failure.value)
    assert JobStore(lake.settings.job_dir(spec.job_id)).read_plan(0) is None


def test_a_read_only_sink_folder_is_refused_before_anything_is_written(spark, lake):
    from tests.support.helpers import read_only

    lake.write_events("e0.json", events(0))
    spec = count_job(lake)
    sink = lake.settings.in_warehouse(spec.sink, "sink")
    with read_only(sink):
        with pytest.raises(ConfigError, match=rf"the sink {sink} cannot be written: its folder {sink} is on a "
                                              rf"read-only file system; give the job a sink it can write"):
            run(spark, spec, lake)
        assert list(sink.iterdir()) == []
    assert not lake.settings.job_dir(spec.job_id).exists()


def test_a_read_only_savepoint_root_is_refused_before_anything_is_written(spark, lake):
    from state_store.ops.savepoint import take_savepoint
    from tests.support.helpers import read_only

    lake.write_events("e0.json", events(0))
    spec = count_job(lake)
    run(spark, spec, lake)
    root = lake.settings.savepoints
    with read_only(root):
        with pytest.raises(ConfigError, match=rf"the savepoint root {root} cannot be written: its folder {root} is "
                                              rf"on a read-only file system; point --savepoints or "
                                              rf"LAKESTATE_SAVEPOINTS"):
            take_savepoint(spark, lake.settings, spec.job_id, label="first", say=lambda m: None)
        assert list(root.iterdir()) == []


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_a_folder_named_like_a_source_file_is_refused_before_anything_is_written(spark, lake, fmt):
    folder = lake.inputs / "mixed"
    (folder / f"spark-output.{fmt}").mkdir(parents=True)
    spec = count_job(lake, source=FileSource(str(folder), fmt, EVENT))
    with pytest.raises(InputError, match=rf"source {folder} holds a folder spark-output\.{fmt}: a FileSource reads "
                                         rf"the files in its folder, not folders; move it out of {folder}, or read "
                                         rf"it with a FileSource of its own"):
        run(spark, spec, lake)
    _nothing_written(lake, spec)
