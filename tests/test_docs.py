"""The docs (issue 41): the site builds with ``mkdocs build --strict`` (a broken link, a missing page or an
unresolved reference fails it), no page points outside the repository or shows a machine path, and every name
``state_store`` exports and every public method of those names says what it does."""
from __future__ import annotations

import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _undocumented(obj, name: str) -> list[str]:
    """``name`` (without a docstring of its own) and its public methods and properties (those it defines) without a
    docstring, their own or the one of the method they implement (a ``Trigger``'s ``on_element``: ``Trigger``'s)."""
    missing = [] if obj.__doc__ and (not inspect.isclass(obj) or "__doc__" in vars(obj)) else [name]
    if inspect.isclass(obj):
        for attr, value in vars(obj).items():
            if attr.startswith("_"):
                continue
            function = getattr(value, "__func__", value)
            if (inspect.isfunction(function) or isinstance(function, property)) and not inspect.getdoc(
                    getattr(obj, attr) if not isinstance(function, property) else function):
                missing.append(f"{name}.{attr}")
    return missing


def test_every_exported_name_and_public_method_has_a_docstring():
    import state_store
    from state_store.provider import dags, hooks, operators

    missing = []
    for name in state_store.__all__:
        missing += _undocumented(getattr(state_store, name), name)
    for module in (operators, hooks, dags):
        for name, obj in vars(module).items():
            if not name.startswith("_") and getattr(obj, "__module__", None) == module.__name__ and (
                    inspect.isclass(obj) or inspect.isfunction(obj)):
                missing += _undocumented(obj, f"{module.__name__}.{name}")
    assert not missing, f"{len(missing)} without a docstring: {missing}"


def test_the_site_builds_strict_with_no_link_outside_the_repository(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stderr[-4000:]
    for page in DOCS.rglob("*.md"):
        text = page.read_text()
        outside = [link for link in re.findall(r"\]\(([^)]+)\)", text) if link.startswith(("http", "/", "../../.."))]
        assert not outside, f"{page.relative_to(ROOT)} links outside the repository: {outside}"
        assert not re.search(r"/(?:work|home|tmp)/\w", text), f"{page.relative_to(ROOT)} shows a machine path"


def page_blocks(page: str, language: str) -> list[str]:
    """The fenced ``language`` blocks of ``docs/<page>``, in order, without their fence lines."""
    text = (DOCS / page).read_text()
    return [b.split("\n", 1)[1] for b in text.split("```")[1::2] if b.split("\n", 1)[0].strip() == language]


class Shell:
    """A page's shell lines run as a user would type them, in one folder: ``export`` sets the environment of what
    follows, ``lakestate ...`` runs the CLI in this process (on the test session's Spark), anything else runs in
    bash; each ``lakestate`` line's output is kept."""

    def __init__(self, cwd: Path):
        self.cwd, self.env, self.said = cwd, {**os.environ, "PWD": str(cwd)}, []

    def run(self, block: str, capsys, monkeypatch) -> None:
        import shlex

        from state_store.cli import main

        for line in block.splitlines():
            command = line.split("  #")[0].strip()
            if not command:
                continue
            if command.startswith("export "):
                name, _, value = command[len("export "):].partition("=")
                self.env[name] = subprocess.run(["bash", "-c", f'printf %s "{value}"'], env=self.env,
                                                capture_output=True, text=True, check=True).stdout
                monkeypatch.setenv(name, self.env[name])
            elif command.startswith("lakestate "):
                args = shlex.split(subprocess.run(["bash", "-c", f'printf "%s\\n" {command[len("lakestate "):]}'],
                                                  env=self.env, capture_output=True, text=True,
                                                  check=True).stdout.strip().replace("\n", " "))
                assert main(args) == 0, (command, capsys.readouterr())
                self.said.append(capsys.readouterr().out)
            else:
                subprocess.run(["bash", "-c", command], cwd=self.cwd, env=self.env, check=True)


def test_the_first_job_page_runs_as_written(spark, tmp_path, monkeypatch, capsys, request):
    """docs/get-started/first-job.md, literally: its input, its ``first_job.py``, its commands; ada's count is 2
    after the first run and 3 after the second, which read only the new file."""
    import json

    (program,) = page_blocks("get-started/first-job.md", "python")
    assert program.startswith("# first_job.py")
    (tmp_path / "first_job.py").write_text(program)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    # The page's `export PYTHONPATH=$PWD` lets a new Spark's Python workers import first_job; the test session's
    # workers started before it, so the module travels with the function instead (by value, as cloudpickle can).
    from pyspark import cloudpickle

    module = importlib.import_module("first_job")
    cloudpickle.register_pickle_by_value(module)
    request.addfinalizer(lambda: (cloudpickle.unregister_pickle_by_value(module), sys.modules.pop("first_job")))
    shell = Shell(tmp_path)
    setup, first, second = page_blocks("get-started/first-job.md", "bash")
    shell.run(setup, capsys, monkeypatch)
    shell.run(first, capsys, monkeypatch)
    assert json.loads(shell.said[-1].strip().splitlines()[-1])["value"] == 2
    shell.run(second, capsys, monkeypatch)
    assert json.loads(shell.said[-1].strip().splitlines()[-1])["value"] == 3
    run = [line for line in shell.said[-2].splitlines() if line.startswith("[lakestate] summary:")]
    assert json.loads(run[0].split(":", 1)[1])["records_in"] == 1
