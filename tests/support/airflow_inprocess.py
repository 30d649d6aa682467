"""A Lakestate operator's ``execute`` in the test's own process, on the shared SparkSession: the DAG's real task
(parsed by Airflow's DagBag), its templates rendered from a DAG run's params as Airflow renders them, and the
command its spark-submit would run (``state_store/entrypoint/main.py``: ``cli.main(application_args)``) called
in-process by a hook that stands where the Spark provider's ``SparkSubmitHook`` stands.

What only a real Airflow proves (the scheduler, the task runner, spark-submit's command line and environment,
XCom and Asset rows in its database, the task's log) tests/provider/test_browser.py proves with three real runs (the
pipeline, a savepoint, a failing restore); this runs every operator's logic without a JVM start and an Airflow
process each."""
from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path
from types import SimpleNamespace

from airflow.exceptions import AirflowException
from airflow.utils.log.logging_mixin import LoggingMixin

from tests.support.helpers import environ


class InProcessHook(LoggingMixin):
    """``submit`` runs the operator's rendered command in this process with the operator's ``env_vars`` set, and
    hands its output to ``_process_spark_submit_log`` line by line (which the Lakestate operators wrap to read
    the command's errors and summary), failing as ``SparkSubmitHook`` fails on a non-zero exit."""

    def __init__(self, operator):
        super().__init__()
        self.operator = operator
        self.output: list[str] = []

    def submit(self, application: str = "") -> None:
        from state_store.cli import main

        out = io.StringIO()
        with environ(self.operator.env_vars or {}), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = main(list(self.operator.application_args))
        self._process_spark_submit_log(iter(out.getvalue().splitlines()))
        if code:
            raise AirflowException(f"Cannot execute: lakestate {' '.join(self.operator.application_args)}. "
                                   f"Error code is: {code}.")

    def _process_spark_submit_log(self, lines) -> None:
        for line in lines:
            self.output.append(line)
            self.log.info("%s", line)

    def on_kill(self) -> None:
        pass


def execute(task, params: dict, dag_id: str, run_id: str = "manual__in_process"):
    """``task.execute`` as a DAG run with ``params`` would run it (templates rendered first), on an
    ``InProcessHook``; returns (its XCom return value, the command's output lines, the extras of the outlet
    events it emitted by Asset URI: an Asset's own, and those added through an AssetAlias)."""
    from airflow.sdk.execution_time.context import OutletEventAccessors

    events = OutletEventAccessors()  # what a task's context holds
    if task.has_dag():  # a run's params: the DAG's defaults, then what the run was triggered with
        params = {**task.dag.params.dump(), **params}
    task = copy.copy(task)  # rendering replaces the templates: the DAG's task keeps its own for the next run
    context = {"params": params, "dag": SimpleNamespace(dag_id=dag_id), "run_id": run_id, "task": task,
               "outlet_events": events}
    task.render_template_fields(context)
    hook = task._hook = InProcessHook(task)
    try:
        returned = task.execute(context)
    finally:
        task._hook = None
    extras = {key.uri: events[key].extra for key in events if getattr(key, "uri", None) and events[key].extra}
    for key in events:
        extras.update({e.dest_asset_key.uri: e.extra for e in events[key].asset_alias_events})
    return returned, hook.output, extras


def in_process_dags(monkeypatch, registry: Path, root: Path) -> dict:
    """This project's DAGs parsed by Airflow's DagBag in this process (the registry and root set as a task sees
    them), for ``execute``; the Spark connection is the default one, ``local[*]``."""
    from airflow.models.dagbag import DagBag

    from tests.support.airflow_files import ROOT

    monkeypatch.setenv("LAKESTATE_REGISTRY", str(registry))
    monkeypatch.setenv("LAKESTATE_ROOT", str(root))
    monkeypatch.setenv("AIRFLOW_CONN_LAKESTATE_SPARK", json.dumps({"conn_type": "spark", "host": "local[*]"}))
    bag = DagBag(dag_folder="/nonexistent", include_examples=False)
    for name in ("lakestate_pipelines.py", "lakestate_operations.py"):
        bag.process_file(str(ROOT / "dags" / name))
    assert bag.import_errors == {}
    return bag.dags
