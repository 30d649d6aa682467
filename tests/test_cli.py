"""The lakestate command line: register, list jobs and checkpoints, show one key's state."""
from __future__ import annotations

import json
import textwrap

import pytest

from state_store.cli import main
from tests.jobs import events


@pytest.fixture
def registered(lake, monkeypatch, tmp_path):
    module = tmp_path / "cli_job_module.py"
    module.write_text(textwrap.dedent(f"""
        from pathlib import Path
        from tests.conftest import Lake
        from tests.jobs import count_job

        class _L:  # the lake of this test, as the job module sees it
            events = Path({str(lake.events)!r})

        def job():
            return count_job(_L, job_id="cli-counts")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "cli_job_module", raising=False)  # each test has its own lake
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{__import__('os').environ.get('PYTHONPATH', '')}")
    args = ["--root", str(lake.root)]
    assert main(["register", "cli_job_module:job", *args]) == 0
    return args


def test_jobs_lists_registered_jobs_and_unknown_job_is_a_clear_error(lake, registered, capsys):
    assert main(["jobs", *registered]) == 0
    assert "cli-counts" in capsys.readouterr().out
    assert main(["checkpoints", "--job", "nope", *registered]) == 2
    assert "job 'nope' is not registered" in capsys.readouterr().err


@pytest.mark.slow
def test_run_then_list_checkpoints_and_show_the_state_of_one_key(spark, lake, registered, capsys):
    lake.write_events("e0.json", events(0))
    lake.write_events("e1.json", events(1))
    assert main(["run", "--job", "cli-counts", "--max-microbatches", "1", *registered]) == 0
    assert "1 microbatches" in capsys.readouterr().out
    assert main(["run", "--job", "cli-counts", *registered]) == 0
    out = capsys.readouterr().out
    assert "restored checkpoint 1" in out and "source drained" in out

    assert main(["checkpoints", "--job", "cli-counts", *registered]) == 0
    table = capsys.readouterr().out
    assert "keyed@v" in table and table.splitlines()[0].split()[:2] == ["checkpoint", "microbatch"]

    assert main(["state", "--job", "cli-counts", "--state", "count", "--key", "a", *registered]) == 0
    shown = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (shown["value"], shown["microbatch"], shown["kind"]) == (6, 1, "value")
    assert main(["state", "--job", "cli-counts", "--state", "count", "--key", "a", "--checkpoint", "1",
                 *registered]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["value"] == 3
    assert main(["state", "--job", "cli-counts", "--state", "nothing", "--key", "a", *registered]) == 2
    assert "has no keyed state 'count.nothing'" in capsys.readouterr().err


def test_run_refuses_a_non_positive_microbatch_count(registered, capsys):
    assert main(["run", "--job", "cli-counts", "--max-microbatches", "0", *registered]) == 2
    assert "--max-microbatches must be positive" in capsys.readouterr().err
