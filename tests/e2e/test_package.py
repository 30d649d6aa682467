"""Lakestate installs into an Airflow like any provider: the built wheel, installed into a fresh virtualenv with
Airflow and the Spark provider (``-c constraints.txt``, as the README says), gives the library, the CLI, the
operators and the ``lakestate`` connection type (ProvidersManager) and the Lakestate page (plugins manager),
with the repository on no path: the checks run in a folder outside it with no PYTHONPATH. And it runs a job: a
module of a folder of its own registered, run by the installed ``lakestate`` and its sink read (one wheel and one
virtualenv serve both tests).

pip's cache is the project's (``.cache/pip``), so a second run installs from it; the first fetches from PyPI, but for
the wheels of PyPI's source-only packages (pyspark's 430 MB among them) that the set-up's uv built from the same
sources: pip finds them in uv's cache, when it is there, instead of downloading and building each again.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Run by the fresh virtualenv's interpreter, in a folder outside the repository.
CHECKS = textwrap.dedent("""
    import json, os, subprocess, sys
    from pathlib import Path

    venv, repo = Path(sys.prefix).resolve(), Path(sys.argv[1])
    assert not any(p and Path(p).resolve() == repo for p in sys.path), sys.path
    import state_store, state_store.entrypoint.main as entry
    for module in (state_store, entry):
        assert Path(module.__file__).resolve().is_relative_to(venv), module.__file__

    from state_store.spark.session import delta_jars
    assert delta_jars() == [], delta_jars()  # no checkout, no LAKESTATE_JARS, no `lakestate jars`: Ivy resolves
    from state_store.provider.operators import ENTRYPOINT, LakestateSubmitOperator
    assert Path(ENTRYPOINT).resolve().is_relative_to(venv) and Path(ENTRYPOINT).is_file(), ENTRYPOINT
    task = LakestateSubmitOperator(task_id="run", job_id="clicks", registry="registry.toml")
    command = task._get_hook()._build_spark_submit_command(ENTRYPOINT)
    assert command[:3] == ["spark-submit", "--master", "local[*]"] and "--packages" in command, command
    assert "io.delta:delta-spark_2.13" in command[command.index("--packages") + 1], command
    # `lakestate jars` once (from sys.argv[2], a Maven repository as Maven Central serves it): then every
    # submit gets the jars, and nothing is resolved at start
    lakestate = str(Path(sys.executable).parent / "lakestate")
    subprocess.run([lakestate, "jars", "--repository", sys.argv[2]], check=True, capture_output=True)
    names = sorted(Path(j).name for j in delta_jars())
    assert names == ["delta-spark_2.13-4.0.0.jar", "delta-storage-4.0.0.jar"], names
    command = task._get_hook()._build_spark_submit_command(ENTRYPOINT)
    assert "--packages" not in command and command[command.index("--jars") + 1] == ",".join(delta_jars()), command

    from airflow.providers_manager import ProvidersManager
    manager = ProvidersManager()
    assert "lakestate" in manager.providers, sorted(manager.providers)
    hook = manager.hooks["lakestate"]
    assert hook.hook_class_name == "state_store.provider.hooks.LakestateSparkHook", hook
    assert hook.package_name == "lakestate" and hook.hook_name == "Lakestate Spark", hook
    old = manager.hooks["lakestate_spark"]  # the type's old name still works
    assert old.hook_class_name == "state_store.provider.hooks.LakestateSparkOldTypeHook", old

    airflow = str(Path(sys.executable).parent / "airflow")
    plugins = json.loads(subprocess.run([airflow, "plugins", "-o", "json"], check=True, capture_output=True,
                                        text=True).stdout)
    lakestate = [p for p in plugins if p["name"] == "lakestate"]
    assert lakestate and lakestate[0]["fastapi_apps"] and lakestate[0]["react_apps"], plugins
    from state_store.provider.views import STATIC
    assert (STATIC / "lakestate.js").is_file() and STATIC.resolve().is_relative_to(venv), STATIC  # package data
    assert "lakestate" in lakestate[0]["source"], lakestate  # the entry point, not a plugins folder

    Path("dags").mkdir()
    Path("dags/pipelines.py").write_text(  # a comment naming Airflow, or its safe mode skips the file
        "# Airflow: Lakestate's pipeline DAGs\\n"
        "from state_store.provider.dags import pipeline_dags\\nglobals().update(pipeline_dags())\\n")
    from airflow.models.dagbag import DagBag
    bag = DagBag("dags", include_examples=False)
    assert not bag.import_errors and "lakestate_clicks" in bag.dag_ids, (bag.import_errors, bag.dag_ids)

    cli = subprocess.run([str(Path(sys.executable).parent / "lakestate"), "--help"], capture_output=True, text=True)
    assert cli.returncode == 0 and "checkpoints" in cli.stdout, cli
    print("installed checks passed")
""")


# The test venv's pip, as a user would upgrade it first: the one scripts/setup.sh installs (pinned there, once).
INSTALLER = re.search(r"^INSTALLER=(\S+)$", (REPO / "scripts" / "setup.sh").read_text(), re.M).group(1)


def _checkout_jars_as_maven(folder: Path) -> str:
    """The checkout's Delta jars (scripts/setup.sh's) as a Maven repository: its file:// URL."""
    from tests.support.helpers import maven_layout

    return maven_layout(folder, {j.name: j.read_bytes() for j in (REPO / ".cache" / "jars").glob("delta-*.jar")})


def _build_wheel(tmp: Path, env: dict) -> Path:
    """The wheel of the working tree's package, built from a copy (pip builds in the source folder)."""
    src = tmp / "src"
    src.mkdir()
    shutil.copy(REPO / "pyproject.toml", src)
    shutil.copytree(REPO / "state_store", src / "state_store", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"), str(src)],
                   check=True, env=env)
    (wheel,) = (tmp / "dist").glob("lakestate-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel built once and installed with its ``airflow`` extra into a fresh virtualenv, with the shipped
    ``constraints.txt`` as the README says; the environment for it with no checkout on any path."""
    tmp = tmp_path_factory.mktemp("package")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "LAKESTATE_JARS", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
           and not k.startswith(("AIRFLOW", "LAKESTATE"))}
    env.update(PIP_CACHE_DIR=str(REPO / ".cache" / "pip"), PIP_DISABLE_PIP_VERSION_CHECK="1")
    built = sorted({str(w.parent) for w in (REPO / ".cache" / "uv").glob("sdists-v*/pypi/*/*/*/*.whl")})
    env["PIP_FIND_LINKS"] = " ".join([env.get("PIP_FIND_LINKS", ""), *built]).strip()
    wheel = _build_wheel(tmp, env)
    venv = tmp / "venv"
    base = Path(getattr(sys, "_base_executable", sys.executable))
    subprocess.run([str(base), "-m", "venv", str(venv)], check=True)
    # The pip that `venv` bundles (23.2) took ~146 s to resolve and unpack Airflow's tree here; 26.3 takes ~64 s.
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", INSTALLER], check=True, env=env)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"lakestate[airflow] @ {wheel.as_uri()}",
                    "-c", str(REPO / "constraints.txt")], check=True, env=env)
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    return venv, env


@pytest.mark.beside_spark  # scripts/test.sh: on the spark tier's side (pip and spark-submits, ~100 s)
def test_the_wheel_installed_with_airflow_gives_the_plugin_operators_and_cli_without_the_repository(
        installed, tmp_path):
    venv, env = installed
    maven = _checkout_jars_as_maven(tmp_path / "maven")
    env = {**env, "LAKESTATE_JARS_DIR": str(tmp_path / "jars")}  # this machine's jar cache, empty
    work = tmp_path / "elsewhere"
    (work / "plugins").mkdir(parents=True)
    (work / "registry.toml").write_text('[jobs.clicks]\nentrypoint = "mypipeline:job"\n')
    env = {**env, "AIRFLOW_HOME": str(work / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__PLUGINS_FOLDER": str(work / "plugins"), "LAKESTATE_REGISTRY": str(work / "registry.toml"),
           "LAKESTATE_ROOT": str(work / "root")}
    checks = subprocess.run([str(venv / "bin" / "python"), "-c", CHECKS, str(REPO.resolve()), maven], cwd=work,
                            env=env, capture_output=True, text=True)
    assert checks.returncode == 0, checks.stdout[-3000:] + checks.stderr[-6000:]
    assert "installed checks passed" in checks.stdout


# A user's job module, in a folder of its own: counts per key, its sink a Delta table of the warehouse.
TINY_JOB = textwrap.dedent("""
    from pathlib import Path
    from state_store import FileSource, JobSpec, KeyedProcessFunction, Types, ValueStateDescriptor

    class Count(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

        def process(self, key, records, ctx):
            n = (self.count.value() or 0) + len(records)
            self.count.update(n)
            yield {"k": key, "n": n}

    def job():
        event = Types.ROW_NAMED(["k", "v"], [Types.STRING(), Types.LONG()])
        return JobSpec(job_id="tiny", function=Count(), source=FileSource(str(Path(__file__).parent / "input"),
                       "json", event), key="k", key_type=Types.STRING(), sink="sinks/tiny", uid="count",
                       output_type=Types.ROW_NAMED(["k", "n"], [Types.STRING(), Types.LONG()]), parallelism=1)
""")

# Ends with os._exit once the rows are printed: at a normal exit, a thread pool of the native libraries was once
# torn down while running ("terminate called without an active exception", SIGABRT) after the read had succeeded.
READ_SINK = ("import os, sys; from deltalake import DeltaTable; rows = DeltaTable(sys.argv[1]).to_pandas(); "
             "print(sorted(map(tuple, rows[['k', 'n']].values.tolist())), flush=True); os._exit(0)")


@pytest.mark.beside_spark  # scripts/test.sh: on the spark tier's side (pip and spark-submits, ~100 s)
def test_the_installed_wheel_registers_and_runs_a_job_outside_the_repository_and_its_sink_holds_the_counts(
        installed, tmp_path):
    venv, env = installed
    work = tmp_path / "myjobs"
    (work / "input").mkdir(parents=True)
    (work / "tinyjob.py").write_text(TINY_JOB)
    (work / "input" / "p0.json").write_text("".join(f'{{"k": "{k}", "v": {v}}}\n' for k, v in
                                                    [("a", 1), ("b", 2), ("a", 3)]))
    # The job's module on PYTHONPATH as the README asks (its folder, never the checkout); Spark's Python workers
    # are the virtualenv's; the Delta jars fetched once by `lakestate jars` as the install page says (from a
    # Maven layout of the checkout's jars: the test does not reach Maven Central), so the run resolves nothing.
    env = {**env, "PYTHONPATH": str(work), "LAKESTATE_ROOT": str(work / "root"),
           "PYSPARK_PYTHON": str(venv / "bin" / "python"), "PYSPARK_DRIVER_PYTHON": str(venv / "bin" / "python"),
           "LAKESTATE_JARS_DIR": str(tmp_path / "jars")}
    lakestate = str(venv / "bin" / "lakestate")
    for command in (["jars", "--repository", _checkout_jars_as_maven(tmp_path / "maven")], ["register", "tinyjob:job"],
                    ["run", "--job", "tiny"]):
        done = subprocess.run([lakestate, *command], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"lakestate {command}:\n{done.stdout[-3000:]}{done.stderr[-6000:]}"
    sink = subprocess.run([str(venv / "bin" / "python"), "-c", READ_SINK, str(work / "root/warehouse/sinks/tiny")],
                          cwd=work, env=env, capture_output=True, text=True, check=True)
    assert sink.stdout.strip() == "[('a', 2), ('b', 1)]", sink
    # The running page's by-hand spark-submit of an installed package: `lakestate submit -- <run's arguments>`
    # submits the package's entrypoint with the fetched jars; the next run continues from the checkpoint.
    (work / "input" / "p1.json").write_text('{"k": "a", "v": 4}\n{"k": "c", "v": 5}\n')
    done = subprocess.run([lakestate, "submit", "--", "--job", "tiny"], cwd=work, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and "[lakestate] summary:" in done.stdout, done.stdout[-3000:] + done.stderr[-6000:]
    sink = subprocess.run([str(venv / "bin" / "python"), "-c", READ_SINK, str(work / "root/warehouse/sinks/tiny")],
                          cwd=work, env=env, capture_output=True, text=True, check=True)
    assert sink.stdout.strip() == "[('a', 2), ('a', 3), ('b', 1), ('c', 1)]", sink
