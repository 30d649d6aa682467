"""One SparkSession (real Spark, real Delta jars) for the whole test session, and small lakes."""
from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.helpers import (
    children,
    end_children_since,
    process_groups,  # noqa: F401 - a fixture of every module: a test's own process groups
)
from tests.support.lake import Lake
from tests.support.servers import broker, s3, standalone_cluster  # noqa: F401 - fixtures of every module


@pytest.fixture(scope="session")
def spark():
    from state_store.spark.session import build_spark

    # scripts/test.sh gives the suite's short JVMs (spark-submits, servers) C1 alone, and keeps the options without
    # it for this one JVM: it serves the whole session, where C2's code pays for its compiling (bench/README.md,
    # "Cold JVMs").
    with pytest.MonkeyPatch.context() as env:
        if "LAKESTATE_SESSION_SUBMIT_OPTS" in os.environ:
            env.setenv("SPARK_SUBMIT_OPTS", os.environ["LAKESTATE_SESSION_SUBMIT_OPTS"])
        session = build_spark("lakestate-tests", master="local[2]", extra_conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
            "spark.sql.adaptive.coalescePartitions.enabled": "true",
            # One JVM serves the whole session's ~500 tests (Delta logs cached, 200,000-deep values decoded): the
            # default 1 GiB heap ran out near the end of a full run.
            "spark.driver.memory": "4g",
            # Spark's interpreted expressions and operators, not code generated and compiled per query: the tests'
            # data is tiny, and compiling each of their thousands of query shapes (Janino, then the JVM's C2 on
            # the new classes) cost more than it saved: a fifth of the spark tier's wall and CPU (issue 38's
            # note). Users' runs, and the e2e tier's spark-submits and servers, generate code as Spark does.
            "spark.sql.codegen.wholeStage": "false",
            "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        }, s3=True)  # hadoop-aws on the classpath for tests/e2e/test_s3.py, which points s3a:// at its server
    yield session
    session.stop()


@pytest.fixture
def lake(tmp_path) -> Lake:
    return Lake(tmp_path)


@pytest.fixture
def registered(lake, monkeypatch, tmp_path):
    """A count job registered as 'cli-counts' from a module of its own; the CLI's root arguments."""
    from state_store.cli import main

    module = tmp_path / "cli_job_module.py"
    module.write_text(textwrap.dedent(f"""
        from pathlib import Path
        from tests.support.lake import Lake
        from tests.support.jobs import count_job

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


# --- Tiers: unit (no JVM), spark (the shared session), e2e (other processes: Airflow, a browser, a broker, a
# cluster, spark-submit, a wheel's venv). Set here, not by hand in each file: a test that requests one of these
# fixtures is e2e, one that requests `spark` (directly or through another fixture) is spark, any other is unit.
# A test that starts processes itself says `@pytest.mark.e2e`. Tiers run in that order, so `-m unit` is the
# first minute of a full run and a failing pure test is seen before the slow ones start.
TIERS = ("unit", "spark", "e2e")
_TIER = pytest.StashKey[str]()  # each collected test's tier
E2E_FIXTURES = {"broker", "connect_server", "s3", "standalone_cluster", "installed", "airflow_with_a_job",
                "browser", "parsed_forms", "airflow_home", "process_groups"}


def _tier(item) -> str:
    for name in TIERS:
        if item.get_closest_marker(name):
            return name
    names = set(getattr(item, "fixturenames", ()))
    if names & E2E_FIXTURES:
        return "e2e"
    return "spark" if "spark" in names else "unit"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    order = {name: i for i, name in enumerate(TIERS)}
    for item in items:
        tier = _tier(item)
        item.add_marker(getattr(pytest.mark, tier))
        item.stash[_TIER] = tier
    items.sort(key=lambda item: order[item.stash[_TIER]])  # stable: file order holds within a tier


def pytest_runtest_teardown(item, nextitem):
    """A unit test must not start a JVM: one that does (without the `spark` fixture) fails here, naming the fix."""
    if item.stash.get(_TIER, None) != "unit":
        return
    pyspark = sys.modules.get("pyspark")
    if pyspark is not None and pyspark.SparkContext._active_spark_context is not None:
        pytest.fail(f"{item.nodeid} started Spark but is in the unit tier: request the `spark` fixture",
                    pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A test that fails ends the processes it started and left running (its own children, with their groups
    or children): a failed test's `airflow dags test` and spark-submit were found 37 minutes later (issue 59).
    Those its fixtures started are theirs to stop; a test's own are best started through `process_groups`."""
    before = children()
    try:
        return (yield)
    except BaseException:
        if ended := end_children_since(before):
            sys.stderr.write(f"[conftest] {item.nodeid} failed: ended what it left running: {ended}\n")
        raise


# --- Durations: setup + call + teardown per test, summed by tier, kept in test-artifacts/durations.txt (CI prints
# its head), so where the suite's time goes is read from a file, not guessed.
_DURATIONS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    _DURATIONS[report.nodeid] = _DURATIONS.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    if not _DURATIONS:
        return
    tiers = {item.nodeid: item.stash.get(_TIER, "?") for item in session.items}
    totals: dict[str, list] = {}
    for nodeid, seconds in _DURATIONS.items():
        total = totals.setdefault(tiers.get(nodeid, "?"), [0, 0.0])
        total[0] += 1
        total[1] += seconds
    lines = [f"{tier:5} {n:4} tests {seconds:8.1f} s" for tier, (n, seconds) in sorted(
        totals.items(), key=lambda kv: TIERS.index(kv[0]) if kv[0] in TIERS else 9)]
    lines.append(f"all   {len(_DURATIONS):4} tests {sum(_DURATIONS.values()):8.1f} s")
    lines.append("")
    lines += [f"{seconds:8.2f} s  {tiers.get(nodeid, '?'):5} {nodeid}"
              for nodeid, seconds in sorted(_DURATIONS.items(), key=lambda kv: -kv[1])]
    # scripts/test.sh runs the tiers in two processes side by side: each names its own file.
    out = Path(session.config.rootpath) / "test-artifacts" / os.environ.get("LAKESTATE_DURATIONS", "durations.txt")
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
