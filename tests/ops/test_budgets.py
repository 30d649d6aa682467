"""Budgets of a job's pipeline registry entry (``max_state_bytes``, ``max_late_records``, ``on_over_budget``):
a run over one fails naming the state or operator and the figure, or warns; its checkpoint is kept either way;
the Lakestate page shows the budget beside the state's size."""
from __future__ import annotations

import re

import pyarrow.parquet as pq
import pytest

from demo.sessions_per_country import minute_of_clicks, write_clicks
from state_store.catalog.job_store import JobStore
from state_store.catalog.pipelines import parse_entry
from state_store.cli import main
from state_store.errors import ConfigError
from state_store.settings import Settings

ENTRY = '[jobs.late-window]\nentrypoint = "tests.support.time_jobs:late_window_job"\n'


@pytest.mark.parametrize("field, value, message", [
    ("max_state_bytes", 0, "field 'max_state_bytes' must be an integer above 0, got 0"),
    ("max_late_records", "10", "field 'max_late_records' must be an integer above 0, got '10'"),
    ("on_over_budget", "page", "field 'on_over_budget' must be 'fail' (the run's task fails, naming the figure) "
                               "or 'warn' (it says so and succeeds), got 'page'"),
    ("require_approval", ["rescale", "delete"], "field 'require_approval' must be a list of operations among "
                                                "rescale, restore, dispose, got ['rescale', 'delete']"),
])
def test_a_bad_budget_or_approval_field_is_refused_naming_it(tmp_path, field, value, message):
    with pytest.raises(ConfigError, match="late-window\\]: " + re.escape(message)):
        parse_entry("late-window", {"entrypoint": "tests.support.time_jobs:late_window_job", field: value},
                    tmp_path / "lakestate.toml")


def test_a_run_over_its_budgets_fails_naming_state_operator_and_figures_or_warns_and_the_page_shows_them(
        spark, tmp_path, monkeypatch, capsys):
    from state_store.provider.reader import job_overviews
    from state_store.provider.views import _budget

    root = tmp_path / "root"
    monkeypatch.setenv("LAKESTATE_ROOT", str(root))
    clicks = root / "input" / "country-clicks"
    write_clicks(clicks, files=2, events=60, users=20)
    # A third file of minute 0's clicks: its window closed once minute 1 was read, so all 60 are dropped as late.
    pq.write_table(minute_of_clicks(0, events=60, users=20, seed=99), clicks / "clicks-00002.parquet")
    registry = tmp_path / "lakestate.toml"
    registry.write_text(ENTRY + "max_state_bytes = 1000\nmax_late_records = 10\n")
    monkeypatch.setenv("LAKESTATE_REGISTRY", str(registry))

    assert main(["run", "--job", "late-window", "--registry", str(registry)]) == 2
    said = capsys.readouterr()
    store = JobStore(Settings.load().job_dir("late-window"))
    latest = store.latest_checkpoint()
    assert latest.batch_id == 2, "over budget, the run's checkpoint is kept"
    assert "[lakestate] summary: " in said.out
    error = said.err.strip().splitlines()[-1]  # the last line: what came before is Airflow's own logging
    assert error.startswith(f"lakestate: error: job late-window: over budget: state of checkpoint "
                            f"{latest.checkpoint_id} is ") and f"({latest.size_bytes} bytes), over max_state_bytes " \
        "= 1000 (registry entry [jobs.late-window]); the largest: per-minute." in error
    assert ("and the run dropped 60 late records, over max_late_records = 10 (registry entry [jobs.late-window]): "
            "operator per-minute 60. Allow more lateness") in error

    # on_over_budget = "warn": the same state said as a warning, and the run succeeds (no late record this time).
    registry.write_text(ENTRY + 'max_state_bytes = 1000\nmax_late_records = 10\non_over_budget = "warn"\n')
    assert main(["run", "--job", "late-window", "--registry", str(registry)]) == 0
    out = capsys.readouterr().out
    assert "[lakestate] warning: job late-window: over budget: state of checkpoint" in out
    assert "late records" not in out.split("[lakestate] warning:")[1]

    [job], _ = job_overviews(Settings.load())
    assert job.budget == {"max_state_bytes": 1000, "max_late_records": 10, "on_over_budget": "warn"}
    assert _budget(job) == (
        f'<p class="lakestate-budget">State {job_size(job)} of its budget of 1000 B (max_state_bytes) <strong>over '
        f'budget</strong>. Late records a run may drop: at most 10 (max_late_records). A run over budget warns.</p>')


def job_size(job) -> str:
    from state_store.delta.sizes import human_bytes

    return human_bytes(job.latest.size_bytes)
