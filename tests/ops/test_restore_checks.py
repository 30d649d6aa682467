"""Restore and rescale refuse what would do nothing or leave a checkpoint no later run can use, and a rescale to
the parallelism the job already has writes nothing (issues 18 and 25)."""
from __future__ import annotations

import pytest

from state_store import Types, ValueStateDescriptor
from state_store.catalog.job_store import JobStore
from state_store.catalog.savepoints import list_savepoints
from state_store.cli import main
from state_store.delta.points import StatePoint
from state_store.errors import ConfigError
from state_store.ops.restore import rescale_job, restore_job
from state_store.ops.state_processor import SavepointWriter
from tests.support.helpers import run
from tests.support.jobs import count_job, events

QUIET = dict(say=lambda m: None)


def _savepoint(spark, lake):
    rows = spark.createDataFrame([("a", 5)], "k string, n bigint")
    (SavepointWriter.bootstrap(spark, "sp", uid="count", key_type=Types.STRING(), max_parallelism=8, parallelism=2,
                               settings=lake.settings)
     .with_keyed_state(ValueStateDescriptor("count", Types.LONG()), rows, key="k", value="n").write("x", **QUIET))
    return StatePoint.of_savepoint(lake.settings, "sp/x")


def test_a_uid_map_that_maps_nothing_is_refused_naming_the_uids_the_savepoint_and_the_job_have(spark, lake):
    spec = count_job(lake, job_id="rj")
    with pytest.raises(ConfigError, match=r"--uid-map nope=rj maps nothing: savepoint .*sp/x has no operator uid "
                                          r"'nope'; the uids it has are \['count'\]"):
        restore_job(spark, lake.settings, spec, _savepoint(spark, lake), uid_map=["nope=rj"], **QUIET)
    with pytest.raises(ConfigError, match=r"--uid-map count=nope moves state to no operator: job 'rj' has no "
                                          r"operator 'nope'; its operators are \['count'\]"):
        restore_job(spark, lake.settings, spec, StatePoint.of_savepoint(lake.settings, "sp/x"),
                    uid_map=["count=nope"], **QUIET)
    assert not lake.settings.job_dir("rj").exists()  # refused before anything was written


def test_a_rescale_during_a_jobs_first_run_names_the_run_that_holds_it(lake, registered, capsys):  # noqa: F811
    """Issue 37 #9: before its first checkpoint a held job is not one to "run first": it is running."""
    from state_store.catalog.lease import JobLease

    with JobLease(JobStore(lake.settings.job_dir("cli-counts")).lease_dir, "cli-counts", run_id="run-first") as lease:
        assert main(["rescale", "cli-counts", "--parallelism", "3", *registered]) == 2
        assert lease.held
    err = capsys.readouterr().err
    assert (f"job 'cli-counts' has no checkpoint to rescale; its first run, run-first (pid {lease.pid} on "
            f"{lease.host}), holds the job now: wait for it to finish, then try again") in err
    assert main(["rescale", "cli-counts", "--parallelism", "3", *registered]) == 2  # released: nobody runs it
    assert "has no checkpoint to rescale; run it first" in capsys.readouterr().err


def test_restore_to_the_memory_backend_is_refused_in_one_line_before_anything_is_written(
        spark, lake, registered, capsys):  # noqa: F811
    _savepoint(spark, lake)
    assert main(["restore", "cli-counts", "--savepoint", "sp/x", "--backend", "memory", *registered]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lakestate: error: a restore or rescale writes a checkpoint for "
                                                   "the job's next run, and the memory backend keeps checkpoints "
                                                   "only in the process that took them; choose --backend delta or "
                                                   "hashmap")
    assert not lake.settings.job_dir("cli-counts").exists()


def test_a_rescale_of_a_job_on_the_memory_backend_is_refused_before_anything_is_written(spark, lake):
    spec = count_job(lake, backend="memory")
    lake.write_events("e0.json", events(0))
    run(spark, spec, lake)
    with pytest.raises(ConfigError, match=r"the memory backend keeps checkpoints only in the process that took "
                                          r"them; choose --backend delta or hashmap"):
        rescale_job(spark, lake.settings, spec, 3, **QUIET)
    assert JobStore(lake.settings.job_dir(spec.job_id)).checkpoint_ids() == [1]


def test_a_rescale_to_the_current_parallelism_writes_nothing_and_says_so(
        spark, lake, registered, capsys):  # noqa: F811
    spec = count_job(lake, job_id="cli-counts")
    for batch in range(2):
        lake.write_events(f"e{batch}.json", events(batch))
        run(spark, spec, lake, max_microbatches=1)
    meta = JobStore(lake.settings.job_dir(spec.job_id))
    before = (meta.checkpoint_ids(), meta.latest_checkpoint())
    said = []
    same = rescale_job(spark, lake.settings, spec, 2, savepoint_first=True, say=said.append)
    assert same == before[1] and (meta.checkpoint_ids(), meta.latest_checkpoint()) == before
    assert said == ["[lakestate] job cli-counts: already at parallelism 2, nothing to do (checkpoint 2 stays the "
                    "latest; nothing was written)"]
    assert list_savepoints(lake.settings) == []  # no savepoint either: there is no rescale to guard
    # The same from the command line (what jobs/rescale.py runs), without starting Spark.
    assert main(["rescale", "cli-counts", "--parallelism", "2", "--savepoint-first", *registered]) == 0
    assert capsys.readouterr().out.strip() == said[0]
    assert (meta.checkpoint_ids(), meta.latest_checkpoint()) == before
    # Above the job's max parallelism: refused naming the value and the range, before Spark starts.
    top = before[1].max_parallelism
    assert main(["rescale", "cli-counts", "--parallelism", str(top + 1), *registered]) == 2
    assert (f"lakestate: error: --parallelism {top + 1} is above job 'cli-counts''s max parallelism {top} (its key "
            f"groups); give 1 to {top} (it runs at 2)") in capsys.readouterr().err
    assert main(["rescale", "cli-counts", "--parallelism", "3", "--retain-savepoints", "-1", *registered]) == 2
    assert "--retain-savepoints must be 0 or more, got -1" in capsys.readouterr().err
    assert (meta.checkpoint_ids(), meta.latest_checkpoint()) == before


def test_the_rescale_dags_task_at_the_current_parallelism_succeeds_saying_nothing_changed(spark, lake, tmp_path,
                                                                                         monkeypatch):
    from pathlib import Path

    from structlog.testing import capture_logs  # what Airflow's task logger is built on

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow-home"))
    monkeypatch.setenv("LAKESTATE_ROOT", str(lake.root))
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "plugins"))
    from state_store.provider.operators import LakestateRescaleOperator

    spec = count_job(lake)
    lake.write_events("e0.json", events(0))
    run(spark, spec, lake)
    task = LakestateRescaleOperator(task_id="rescale")
    from types import SimpleNamespace

    context = {"params": {"job": "counts", "parallelism": 2, "savepoint_first": True},
               "dag": SimpleNamespace(dag_id="lakestate_rescale"), "run_id": "manual__1"}  # what every context has
    task.render_template_fields(context)  # as Airflow does before execute
    with capture_logs() as logged:
        returned = task.execute(context)
    assert returned == {"job": "counts", "checkpoint": 1, "microbatch": 0, "parallelism": 2, "changed": False}
    assert any("job counts: already at parallelism 2, nothing to do" in e["event"] for e in logged), logged
    assert JobStore(lake.settings.job_dir("counts")).checkpoint_ids() == [1] and list_savepoints(lake.settings) == []
