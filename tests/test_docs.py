"""The docs (issue 41): the site builds with ``mkdocs build --strict`` (a broken link, a missing page or an
unresolved reference fails it), no page points outside the repository or shows a machine path, and every name
``state_store`` exports and every public method of those names says what it does."""
from __future__ import annotations

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

    # The classes a user calls verbs on show those verbs in an ``Example::`` of their own docstring (issue: "an
    # example on the verbs a user calls"): the state handles, the contexts, the job's builders and the sources.
    import importlib

    with_examples = {
        "state_store.state.handles": ["ValueState", "ListState", "MapState", "ReducingState", "AggregatingState"],
        "state_store.state.operator": ["OperatorStateStore", "OperatorListState", "BroadcastState"],
        "state_store.functions": ["KeyedProcessFunction", "RuntimeContext", "Context", "OnTimerContext",
                                  "BroadcastContext", "FunctionInitializationContext", "FunctionSnapshotContext",
                                  "CoProcessContext"],
        "state_store": ["JobSpec", "Dataflow", "SavepointReader", "SavepointWriter", "StateTtlConfig",
                        "WatermarkStrategy", "OutputTag", "FileSource", "DeltaSource", "KafkaSource", "TimerService"],
    }
    without = [f"{module}.{name}" for module, names in with_examples.items() for name in names
               if "Example::" not in (vars(getattr(importlib.import_module(module), name)).get("__doc__") or "")]
    assert not without, f"{len(without)} without an Example:: in their own docstring: {without}"


@pytest.mark.e2e  # it starts mkdocs, 10 s of the unit tier's minute (conftest: a test that starts processes)
def test_the_site_builds_strict_with_no_link_outside_the_repository(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stderr[-4000:]
    # A member that overrides a documented one without a docstring of its own shows the one it overrides
    # (griffe-inherited-docstrings): FileSource.plan_notes, Source.plan_notes's.
    api = (tmp_path / "reference" / "state_store" / "index.html").read_text()
    shown = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", api.split('id="state_store.FileSource.plan_notes"')[1]))[:200]
    assert "Lines for the run's output about a microbatch's planned range" in shown, shown
    for page in DOCS.rglob("*.md"):
        text = page.read_text()
        outside = [link for link in re.findall(r"\]\(([^)]+)\)", text) if link.startswith(("http", "/", "../../.."))]
        assert not outside, f"{page.relative_to(ROOT)} links outside the repository: {outside}"
        assert not re.search(r"/(?:work|home|tmp)/\w", text), f"{page.relative_to(ROOT)} shows a machine path"


def page_blocks(page: str, language: str) -> list[str]:
    """The fenced ``language`` blocks of ``docs/<page>``, in order, without their fence lines (and without the
    indent of a block inside a list item)."""
    import textwrap

    text = (DOCS / page).read_text()
    return [textwrap.dedent(b.split("\n", 1)[1]) for b in text.split("```")[1::2]
            if b.split("\n", 1)[0].strip() == language]


class Shell:
    """A page's shell lines run as a user would type them, in one folder: ``export`` sets the environment of what
    follows, ``lakestate ...`` runs the CLI in this process (on the test session's Spark), ``python <page
    program>.py`` that program's ``main()`` (``page_module``), anything else runs in bash; the output of each
    line run in this process is kept."""

    def __init__(self, cwd: Path):
        self.cwd, self.env, self.said = cwd, {**os.environ, "PWD": str(cwd)}, []

    def run(self, block: str, capsys, monkeypatch) -> None:
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
            elif command.startswith("python ") and command.endswith(".py"):  # a page's program, run in-process
                sys.modules[Path(command.split()[1]).stem].main()
                self.said.append(capsys.readouterr().out)
            elif command.startswith("lakestate "):
                args = subprocess.run(["bash", "-c", f'printf "%s\\0" {command[len("lakestate "):]}'], env=self.env,
                                      capture_output=True, text=True, check=True).stdout.split("\0")[:-1]
                assert main(args) == 0, (command, capsys.readouterr())
                self.said.append(capsys.readouterr().out)
            else:
                subprocess.run(["bash", "-c", command], cwd=self.cwd, env=self.env, check=True)


def page_module(page: str, name: str, request):
    """The page's Python program ``<name>.py`` (its block's first line says so), as module ``name`` (importable
    here, and shipped to Spark's workers by value: the test session's workers cannot see a folder added to the
    path after they started)."""
    import types

    from pyspark import cloudpickle

    (program,) = [b for b in page_blocks(page, "python") if b.startswith(f"# {name}.py")]
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(program, page, "exec"), module.__dict__)  # the project's own docs, run as a test
    cloudpickle.register_pickle_by_value(module)
    request.addfinalizer(lambda: (cloudpickle.unregister_pickle_by_value(module), sys.modules.pop(name)))
    return module


def page_input(lake, monkeypatch, folder: str, files: list[list[dict]]) -> None:
    """What a page's program reads: ``LAKESTATE_ROOT`` set to ``lake``'s root, and ``files`` (each a list of
    rows) as JSON-lines files in its ``input/<folder>``, in order."""
    import json

    monkeypatch.setenv("LAKESTATE_ROOT", str(lake.root))
    directory = lake.inputs / folder
    directory.mkdir()
    for n, rows in enumerate(files):
        (directory / f"{n:03d}.json").write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_the_keyed_functions_page_keeps_every_kind_of_keyed_state_as_its_program_says(spark, lake, monkeypatch,
                                                                                     request):
    """docs/writing/keyed-functions.md's program over two files of clicks: each user's last row holds what its
    five states say of all its clicks (pandas computes the same)."""
    import pandas as pd

    from tests.support.helpers import run

    clicks = [{"user_id": u, "page": p, "amount": a} for u, p, a in [
        (1, "home", 1.0), (2, "cart", 4.0), (1, "cart", 2.0), (1, "home", 3.5), (2, "home", 0.5), (1, "about", 1.5)]]
    page_input(lake, monkeypatch, "user-clicks", [clicks[:3], clicks[3:]])
    spec = page_module("writing/keyed-functions.md", "user_activity", request).job()
    assert [b.batch_id for b in run(spark, spec, lake).batches] == [0, 1]
    rows = spark.read.format("delta").load(str(lake.settings.sink(spec.sink))).toPandas()
    last = rows.sort_values("_microbatch").groupby("user_id").tail(1).set_index("user_id")
    df = pd.DataFrame(clicks)
    for user, mine in df.groupby("user_id"):
        got = last.loc[user]
        assert (got["clicks"], got["spend"], got["mean_amount"]) == (len(mine), mine["amount"].sum(),
                                                                     mine["amount"].mean())
        assert list(got["last_pages"]) == list(mine["page"])[-3:]
        assert dict(got["per_page"]) == mine["page"].value_counts().to_dict()


def test_the_keyed_functions_pages_key_of_two_columns_counts_each_pair_as_pandas_does(spark, lake, monkeypatch,
                                                                                       request):
    """docs/writing/keyed-functions.md's ``device_clicks.py``: a key of two columns, each pair counted alone; the
    page's Spark SQL reads a savepoint's counts by the key's typed columns."""
    import pandas as pd

    from state_store.ops.savepoint import take_savepoint
    from tests.support.helpers import run

    clicks = [{"user_id": u, "device": d, "page": "home"} for u, d in [
        (1, "phone"), (1, "laptop"), (2, "phone"), (1, "phone"), (2, "phone"), (1, "laptop"), (1, "phone")]]
    page_input(lake, monkeypatch, "device-clicks", [clicks[:4], clicks[4:]])
    spec = page_module("writing/keyed-functions.md", "device_clicks", request).job()
    run(spark, spec, lake)
    rows = spark.read.format("delta").load(str(lake.settings.sink(spec.sink))).toPandas()
    last = rows.sort_values("_microbatch").groupby(["user_id", "device"])["clicks"].last().to_dict()
    assert last == pd.DataFrame(clicks).groupby(["user_id", "device"]).size().to_dict()
    # The page's Spark SQL over a savepoint's keyed table: the key's typed columns.
    saved = take_savepoint(spark, lake.settings, spec.job_id, say=lambda line: None)
    query = re.search(r"```sql\n(.*?)```", (DOCS / "writing/keyed-functions.md").read_text(), re.S).group(1)
    read = spark.sql(query.replace("<savepoints>/device-clicks/<savepoint>/keyed", saved.table_path("keyed")))
    assert read.schema.simpleString() == "struct<user_id:bigint,device:string,clicks:string>"
    assert {(r.user_id, r.device): int(r.clicks) for r in read.collect()} == {
        k: v for k, v in last.items() if k[1] == "phone"}


def test_the_updating_pages_spend_per_user_keeps_the_table_current_and_logs_its_changes(spark, lake, monkeypatch,
                                                                                       request):
    """docs/writing/updating.md's ``spend_per_user.py``: the upsert table is pandas' groupby of the clicks; the
    changelog has one +I per user, then a -U and +U pair for each microbatch that changes it."""
    import pandas as pd

    from tests.support.helpers import run

    clicks = [{"user": u, "amount": a} for u, a in [("ann", 3), ("bob", 1), ("ann", 2), ("cat", 5), ("bob", 4)]]
    page_input(lake, monkeypatch, "spend", [clicks[:3], clicks[3:]])
    program = page_module("writing/updating.md", "spend_per_user", request)
    for spec in (program.job(), program.changes()):
        run(spark, spec, lake)
    table = spark.read.format("delta").load(str(lake.settings.sink("sinks/spend_per_user"))).toPandas()
    grouped = pd.DataFrame(clicks).groupby("user")["amount"].agg(["count", "sum"])
    assert {r.user: (r.clicks, r.spent) for r in table.itertuples()} == {
        u: (r["count"], r["sum"]) for u, r in grouped.iterrows()}
    changes = spark.read.format("delta").load(str(lake.settings.sink("sinks/spend_changes"))).toPandas()
    assert sorted(zip(changes["_microbatch"], changes["user"], changes["_kind"], changes["clicks"])) == [
        (0, "ann", "+I", 2), (0, "bob", "+I", 1), (1, "bob", "+U", 2), (1, "bob", "-U", 1), (1, "cat", "+I", 1)]


def test_the_sql_pages_clicks_per_minute_counts_each_closed_minute_as_pandas_does(spark, lake, monkeypatch,
                                                                                   request):
    """docs/writing/sql.md's ``clicks_per_minute.py``: a TUMBLE aggregation in SQL; its table is pandas' count
    and sum per country and minute of the positive clicks, for the minutes the watermark closed."""
    import pandas as pd

    from tests.support.helpers import run

    clicks = [{"user": u, "country": c, "amount": a, "ts": t} for u, c, a, t in [
        ("ann", "fr", 3, 1_000), ("bob", "de", 2, 30_000), ("ann", "fr", -1, 59_999), ("cat", "fr", 4, 61_000),
        ("bob", "de", 5, 90_000), ("dan", "it", 1, 200_000)]]
    page_input(lake, monkeypatch, "sql-clicks", [clicks[:3], clicks[3:]])
    spec = page_module("writing/sql.md", "clicks_per_minute", request).job()
    run(spark, spec, lake)
    rows = spark.read.format("delta").load(str(lake.settings.sink("sinks/clicks_per_minute"))).toPandas()
    frame = pd.DataFrame(clicks)
    closed = frame[(frame.amount > 0) & (frame.ts // 60_000 * 60_000 + 60_000 <= 200_000 - 5_000 + 1)]
    wanted = closed.assign(window_start=closed.ts // 60_000 * 60_000).groupby(["country", "window_start"])
    assert {(r.country, r.window_start): (r.clicks, r.spent) for r in rows.itertuples()} == {
        k: (len(g), g.amount.sum()) for k, g in wanted}


def test_the_time_pages_aligned_clicks_pause_the_live_stream_for_the_backfill_and_count_as_pandas_does(
        spark, lake, monkeypatch, request):
    """docs/writing/time.md's ``aligned_clicks.py``: the live stream, minutes ahead of the backfill, reads nothing
    until the backfill is within 30 s of it; every minute's count is pandas' over both streams."""
    import pandas as pd

    from state_store.catalog.job_store import JobStore
    from tests.support.helpers import run

    minute = 60_000
    live = [[("a", 10 * minute), ("b", 10 * minute + 5)], [("a", 11 * minute)]]
    backfill = [[("a", 1_000), ("b", 2_000)], [("a", 5 * minute)], [("b", 9 * minute + 45_000)],
                [("a", 10 * minute), ("a", 11 * minute + 1)]]
    for name, files in (("live", live), ("backfill", backfill)):
        page_input(lake, monkeypatch, name, [[{"user": u, "ts": t} for u, t in f] for f in files])
    spec = page_module("writing/time.md", "aligned_clicks", request).job()
    run(spark, spec, lake)
    store = JobStore(lake.settings.job_dir("aligned-clicks"))
    reads = [store.read_plan(b).sources["main"] for b in range(4)]
    assert [r["start"] != r["end"] for r in reads] == [True, False, False, True]  # paused till 9:45 - 1 ms
    rows = spark.read.format("delta").load(str(lake.settings.sink(spec.sink))).toPandas()
    clicks = pd.DataFrame([{"user": u, "ts": t} for f in live + backfill for u, t in f])
    expected = clicks.assign(window_start=clicks.ts // minute * minute).groupby(["user", "window_start"]).size()
    fired = rows.set_index(["user", "window_start"])["clicks"].sort_index()
    closed = expected[expected.index.get_level_values(1) < 11 * minute]  # the 12th minute is still open
    assert fired.to_dict() == closed.to_dict()


def test_the_time_pages_count_with_timeout_fires_once_a_minute_passes_and_sends_late_records_aside(
        spark, lake, monkeypatch, capsys, request):
    """docs/writing/time.md's program and its shell lines as written (three files, register, run, both tables read
    by deltalake): W(1) = 100,000 - 5,000 - 1 fires a's and b's timers, a record at 50,000 in the third file is
    behind it (late), and W(2) fires c's."""
    monkeypatch.setenv("LAKESTATE_ROOT", str(lake.root))
    monkeypatch.chdir(lake.root)
    spec = page_module("writing/time.md", "timeouts", request).job()
    shell = Shell(lake.root)
    (block,) = page_blocks("writing/time.md", "bash")
    shell.run(block, capsys, monkeypatch)
    assert "timers fired" in shell.said[-1]
    sink = spark.read.format("delta").load(str(lake.settings.sink(spec.sink)))
    assert sorted((r["k"], r["count"], r["_microbatch"]) for r in sink.collect()) == [("a", 2, 1), ("b", 1, 1),
                                                                                     ("c", 1, 2)]
    late = spark.read.format("delta").load(str(lake.settings.sink(spec.side_output_sink("late"))))
    assert [(r["k"], r["ts"]) for r in late.collect()] == [("a", 50_000)]


def test_the_dataflows_pages_graph_gives_what_pandas_gives_in_each_sink(spark, lake, monkeypatch, request):
    """docs/writing/dataflows.md's program: ``job()`` is the chain, ``graph_job()`` the chain and a filter of the
    user totals, run over two files of purchases: each sink holds what pandas computes."""
    import pandas as pd

    from state_store import Job
    from tests.support.helpers import run

    purchases = [{"user_id": u, "country": c, "amount": a} for u, c, a in [
        (1, "DE", 60.0), (2, "DE", 10.0), (3, "FR", 5.0), (1, "DE", 50.0), (3, "FR", 120.0), (4, "FR", 1.0)]]
    page_input(lake, monkeypatch, "purchases", [purchases[:3], purchases[3:]])
    module = page_module("writing/dataflows.md", "spend", request)
    assert isinstance(module.job(), Job) and module.job().uids == ["user-totals", "country-totals"]
    spec = module.graph_job()
    run(spark, spec, lake)

    def latest(sink, key):
        rows = spark.read.format("delta").load(str(lake.settings.sink(sink))).toPandas()
        return rows.sort_values("_microbatch").groupby(key).tail(1).drop(columns="_microbatch").sort_values(
            key).reset_index(drop=True)

    totals = pd.DataFrame(purchases).groupby(["user_id", "country"], as_index=False)["amount"].sum()
    countries = totals.groupby("country", as_index=False).agg(users=("user_id", "size"), total=("amount", "sum"))
    pd.testing.assert_frame_equal(latest("sinks/country_spend_graph", "country"), countries, check_dtype=False)
    big = latest("sinks/big_spenders", "user_id")
    assert sorted(zip(big["user_id"], big["total"])) == [(1, 110.0), (3, 125.0)]


def test_the_dataflows_pages_late_clicks_are_counted_by_window_and_recounted_per_user(spark, lake, monkeypatch,
                                                                                      request):
    """docs/writing/dataflows.md's ``late_clicks.py``: a side output read as a stream by a later operator."""
    from tests.support.helpers import run

    files = [[("a", 1_000), ("a", 12_000)], [("a", 2_000), ("b", 3_000), ("b", 25_000)], [("a", 5_000)]]
    page_input(lake, monkeypatch, "late-clicks", [[{"user": u, "ts": t} for u, t in f] for f in files])
    job = page_module("writing/dataflows.md", "late_clicks", request).job()
    run(spark, job, lake)

    def rows(sink):
        return sorted(tuple(r) for r in spark.read.format("delta").load(str(lake.settings.sink(sink))).collect())

    # [0, 10 s) fires at W = 12 s - 1: a's 2 s and 5 s clicks and b's 3 s one come after it
    assert rows("sinks/late_per_user") == [("a", 1, 1), ("a", 2, 2), ("b", 1, 1)]
    assert [r[:4] for r in rows("sinks/clicks_per_10s")] == [("a", 0, 10_000, 1), ("a", 10_000, 20_000, 1)]


def test_the_operator_state_pages_broadcast_limits_reach_every_subtask_before_the_purchases(spark, lake,
                                                                                          monkeypatch, request):
    """docs/writing/operator-state.md's program: the first microbatch's limits flag user 1 (110 > 100); the second
    lowers DE's limit to 20, which flags user 3's first purchase of 30, and user 2 passes FR's 50."""
    from tests.support.helpers import run

    purchases = [[{"user_id": 1, "country": "DE", "amount": 60.0}, {"user_id": 2, "country": "FR", "amount": 40.0},
                  {"user_id": 1, "country": "DE", "amount": 50.0}],
                 [{"user_id": 2, "country": "FR", "amount": 20.0}, {"user_id": 3, "country": "DE", "amount": 30.0}]]
    page_input(lake, monkeypatch, "purchases", purchases)
    page_input(lake, monkeypatch, "limits", [[{"country": "DE", "limit": 100.0}, {"country": "FR", "limit": 50.0}],
                                             [{"country": "DE", "limit": 20.0}]])
    spec = page_module("writing/operator-state.md", "spend_limits", request).job()
    run(spark, spec, lake)
    alerts = spark.read.format("delta").load(str(lake.settings.sink(spec.sink))).collect()
    assert sorted(tuple(r) for r in alerts) == [(1, 110.0, 100.0, 0), (2, 60.0, 50.0, 1), (3, 30.0, 20.0, 1)]


@pytest.mark.parametrize("program", ["big_purchases", "valid_big_purchases"])
def test_the_operator_state_pages_big_purchases_are_flagged_by_broadcast_limits_replayed_and_restored_rescaled(
        spark, tmp_path, monkeypatch, request, program):
    """docs/writing/operator-state.md's ``big_purchases.py``, Flink's BroadcastProcessFunction (issue 61, item 4):
    each purchase over its country's limit as the microbatch's limits stand, on a stream that is not keyed; a crash
    after the sink write replays to the clean run's sink and state, and a savepoint after microbatch 0 restored at
    parallelism 3 on the hashmap backend gives every new subtask the limits (FR's 50 flags 70, 80 and 90). The
    same of ``valid_big_purchases.py``, where the limits are broadcast to a later operator, after a filter."""
    from state_store import Dataflow
    from state_store.delta.points import StatePoint
    from state_store.errors import ConfigError
    from state_store.functions import NonKeyedBroadcastContext
    from state_store.ops.restore import restore_job
    from state_store.ops.savepoint import take_savepoint
    from state_store.run.runtime import FaultInjector, InjectedFault
    from tests.support.helpers import run, sink_rows, state_at_latest_checkpoint
    from tests.support.lake import Lake

    purchases = [[(1, "DE", 60.0), (2, "FR", 40.0), (3, "DE", 50.0)],
                 [(4, "FR", 70.0), (5, "FR", 80.0), (6, "FR", 90.0), (7, "FR", 10.0), (3, "DE", 30.0),
                  (8, "FR", -75.0)]]  # a refund, flagged by no limit either way
    limits = [[("DE", 55.0), ("FR", 50.0)], [("DE", 20.0)]]
    module = page_module("writing/operator-state.md", "big_purchases", request)
    if program != "big_purchases":
        module = page_module("writing/operator-state.md", program, request)

    def job_in(name):
        lake = Lake(tmp_path / name)
        if not (lake.inputs / "limits").exists():
            page_input(lake, monkeypatch, "purchases", [[{"user_id": u, "country": c, "amount": a} for u, c, a in f]
                                                        for f in purchases])
            page_input(lake, monkeypatch, "limits", [[{"country": c, "limit": x} for c, x in f] for f in limits])
        monkeypatch.setenv("LAKESTATE_ROOT", str(lake.root))
        return lake, module.job()

    clean, spec = job_in("clean")
    run(spark, spec, clean)
    flagged = sorted((r["user_id"], r["amount"], r["_microbatch"]) for r in spark.read.format("delta").load(
        str(clean.settings.sink(spec.sink))).collect())
    assert flagged == [(1, 60.0, 0), (3, 30.0, 1), (4, 70.0, 1), (5, 80.0, 1), (6, 90.0, 1)]

    crashed, again = job_in("crashed")
    with pytest.raises(InjectedFault):
        run(spark, again, crashed, faults=FaultInjector("after_sink_write", batch_id=1))
    crashed, again = job_in("crashed")
    run(spark, again, crashed)
    assert sink_rows(spark, crashed, again) == sink_rows(spark, clean, spec)
    assert state_at_latest_checkpoint(spark, crashed, again) == state_at_latest_checkpoint(spark, clean, spec)

    moved, later = job_in("moved")
    run(spark, later, moved, max_microbatches=1)
    saved = take_savepoint(spark, moved.settings, spec.job_id, say=lambda line: None)
    restore_job(spark, moved.settings, later, StatePoint(saved), parallelism=3, backend="hashmap",
                say=lambda line: None)
    moved, later = job_in("moved")
    run(spark, later, moved)
    assert sink_rows(spark, moved, later) == sink_rows(spark, clean, spec)

    with pytest.raises(ConfigError, match="a BroadcastProcessFunction reads a broadcast stream"):
        Dataflow.from_source(spec.source, job_id="no-broadcast").process(module.OverLimit(), uid="x",
                                                                         output_type=module.PURCHASE)
    with pytest.raises(ConfigError, match="has no keyed state to apply to"):
        NonKeyedBroadcastContext(None).apply_to_keyed_state(module.LIMITS, print)


def test_the_windows_pages_minutes_fire_when_the_watermark_passes_them_and_a_too_late_click_goes_aside(
        spark, lake, monkeypatch, request):
    """docs/writing/windows.md's program: W(1) = 130 s - 5 s - 1 ms fires DE's and FR's first minute and DE's
    second; DE's click at 40 s in the third file is past its window's end + 30 s of lateness (late); W(2) fires
    FR's third minute."""
    from tests.support.helpers import run

    page_input(lake, monkeypatch, "country-clicks", [[{"country": c, "ts": s * 1000} for c, s in events] for events in
                                                     [[("DE", 10), ("DE", 20), ("FR", 30)], [("DE", 65), ("FR", 130)],
                                                      [("DE", 40), ("FR", 200)]]])
    spec = page_module("writing/windows.md", "clicks_per_minute", request).job()
    run(spark, spec, lake)
    rows = spark.read.format("delta").load(str(lake.settings.sink(spec.sink))).collect()
    assert sorted((r["country"], r["start"], r["clicks"], r["_microbatch"]) for r in rows) == [
        ("DE", 0, 2, 1), ("DE", 60_000, 1, 1), ("FR", 0, 1, 1), ("FR", 120_000, 1, 2)]
    late = spark.read.format("delta").load(str(lake.settings.sink(spec.side_output_sink("late")))).collect()
    assert [(r["country"], r["ts"]) for r in late] == [("DE", 40_000)]


def test_the_joins_pages_click_through_pairs_clicks_with_the_impressions_ten_minutes_before_them(spark, lake,
                                                                                                  monkeypatch, request):
    """docs/writing/joins.md's programs: impressions and clicks in two microbatches each; a click pairs with its
    ad's impressions 0..10 minutes before it, across microbatches (the bounds inclusive). ``paid_click_through.py``
    filters the impressions first, so its join reads the clicks' source as a later operator: the pairs of the
    paid impressions, as the first program's."""
    from tests.support.helpers import run

    minute = 60_000
    page_input(lake, monkeypatch, "impressions", [[{"ad": "a", "ts": 0, "paid": True},
                                                   {"ad": "b", "ts": minute, "paid": True}],
                                                  [{"ad": "a", "ts": 5 * minute, "paid": False}]])
    page_input(lake, monkeypatch, "ad-clicks", [[{"ad": "a", "ts": 2 * minute}],
                                                [{"ad": "a", "ts": 10 * minute}, {"ad": "b", "ts": 12 * minute}]])
    pairs = {}
    for name in ("click_through", "paid_click_through"):
        spec = page_module("writing/joins.md", name, request).job()
        run(spark, spec, lake)
        rows = spark.read.format("delta").load(str(lake.settings.sink(spec.sink))).collect()
        pairs[name] = sorted((r["ad"], r["shown"] // minute, r["clicked"] // minute) for r in rows)
    assert pairs["click_through"] == [("a", 0, 2), ("a", 0, 10), ("a", 5, 10)]  # b's click: 11 minutes after
    assert pairs["paid_click_through"] == [p for p in pairs["click_through"] if p[1] != 5]  # a@5 is not paid


def test_the_first_job_and_state_processor_pages_run_as_written(spark, tmp_path, monkeypatch, capsys, request):
    """docs/get-started/first-job.md, literally: its input, its ``first_job.py``, its commands; ada's count is 2
    after the first run and 3 after the second, which read only the new file. Then the State Processor page's
    program reads that job's state from a savepoint and from its latest checkpoint."""
    import json

    (program,) = page_blocks("get-started/first-job.md", "python")
    assert program.startswith("# first_job.py")
    (tmp_path / "first_job.py").write_text(program)  # as the page says; its `export PYTHONPATH=$PWD` finds it
    monkeypatch.chdir(tmp_path)
    page_module("get-started/first-job.md", "first_job", request)
    shell = Shell(tmp_path)
    setup, first, second = page_blocks("get-started/first-job.md", "bash")
    shell.run(setup, capsys, monkeypatch)
    shell.run(first, capsys, monkeypatch)
    assert json.loads(shell.said[-1].strip().splitlines()[-1])["value"] == 2
    assert shell.said[-2].splitlines()[0].split()[:3] == ["checkpoint", "microbatch", "parallelism"]  # as it says
    shell.run(second, capsys, monkeypatch)
    assert json.loads(shell.said[-1].strip().splitlines()[-1])["value"] == 3
    run = [line for line in shell.said[-2].splitlines() if line.startswith("[lakestate] summary:")]
    assert json.loads(run[0].split(":", 1)[1])["records_in"] == 1
    # docs/operating/state-processor.md, on the job as the page leaves it: a savepoint, then its program
    page_module("operating/state-processor.md", "inspect_first_job", request)
    commands, edits = page_blocks("operating/state-processor.md", "bash")
    shell.run(commands, capsys, monkeypatch)
    said = shell.said[-1]
    assert "savepoint: {'ada': 3, 'bob': 1}" in said and "'main.count'" in said
    assert "latest checkpoint: {'ada': 3, 'bob': 1} ada: [{'value': 3}]" in said
    # Its state edited with SQL, into a savepoint the job restores: ada credited, bob taken out.
    shell.run(edits, capsys, monkeypatch)
    dry_run, _, _, ada, _ = shell.said[-5:]
    assert json.loads(dry_run.strip().splitlines()[-1])["touched"] == 1
    assert json.loads(ada.strip().splitlines()[-1])["value"] == 13
    from state_store.ops.state_processor import SavepointReader
    restored = SavepointReader.for_checkpoint(spark, "first-job").keyed_state("count").collect()
    assert {r["key"]: r["value"] for r in restored} == {"ada": 13}


def test_a_spark_of_this_process_takes_the_argument_then_the_variable_then_spark_defaults_then_local(
        tmp_path, monkeypatch):
    """The master of ``lakestate run`` by hand (and of an Airflow task whose connection is not defined), as the
    install and running pages say: ``--spark-master`` > ``LAKESTATE_SPARK_MASTER`` > ``spark.master`` of
    ``$SPARK_CONF_DIR/spark-defaults.conf`` (else ``$SPARK_HOME/conf``'s) > ``local[*]``."""
    from state_store.spark.session import spark_defaults, spark_master

    monkeypatch.delenv("LAKESTATE_SPARK_MASTER", raising=False)
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "no-spark-here"))
    assert spark_master() == "local[*]"
    home = tmp_path / "spark-home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "spark-defaults.conf").write_text("spark.master=spark://home-master:7077\n")
    monkeypatch.setenv("SPARK_HOME", str(home))
    assert spark_master() == "spark://home-master:7077"
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("# the cluster's\n\nspark.master        spark://master:7077\n"
                                              "spark.driver.memory 3g\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))  # SPARK_CONF_DIR's file wins over SPARK_HOME's, as spark-submit
    assert spark_defaults() == {"spark.master": "spark://master:7077", "spark.driver.memory": "3g"}
    assert spark_master() == "spark://master:7077"
    from state_store.provider.hooks import LakestateSparkHook

    # An Airflow task's spark-submit without the lakestate_spark connection: the same choice, not local[*]
    assert LakestateSparkHook(conn_id="lakestate_nowhere")._connection["master"] == "spark://master:7077"
    monkeypatch.setenv("LAKESTATE_SPARK_MASTER", "local[2]")
    assert spark_master() == "local[2]"
    assert spark_master("local[1]") == "local[1]"
    for page in ("get-started/install.md", "operating/running.md"):
        text = " ".join((DOCS / page).read_text().split())
        assert "LAKESTATE_SPARK_MASTER" in text and "spark-defaults.conf" in text and "SPARK_CONF_DIR" in text, page


def test_lakestate_submit_prints_the_spark_submit_of_a_run_with_the_jars_the_master_and_the_packaged_entrypoint(
        tmp_path, monkeypatch, capsys):
    """``lakestate submit --print -- <run's arguments>`` (the running page's by-hand ``spark-submit``, for an
    installed package as for a checkout): spark-submit with the master's choice, the Delta jars sessions find
    (LAKESTATE_JARS here; on the workers' class paths with LAKESTATE_JARS_ON_WORKERS=1), this interpreter, and the
    package's own ``entrypoint/main.py`` running ``run`` with the arguments; a bad argument of ``run`` is refused
    before anything is printed or started. A real run of it, from the installed wheel: tests/e2e/test_package.py."""
    import shlex

    from state_store.cli import main

    monkeypatch.setenv("LAKESTATE_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("LAKESTATE_JARS", "/opt/jars/delta-spark_2.13-4.0.0.jar,/opt/jars/delta-storage-4.0.0.jar")
    monkeypatch.setenv("LAKESTATE_SPARK_MASTER", "spark://master:7077")
    monkeypatch.delenv("LAKESTATE_JARS_ON_WORKERS", raising=False)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert main(["submit", "--print", "--driver-memory", "3g", "--conf", "spark.executor.memory=2g", "--",
                 "--job", "clicks", "--max-microbatches", "2"]) == 0
    command = shlex.split(capsys.readouterr().out)
    assert Path(command[0]).name == "spark-submit"
    entrypoint = ROOT / "state_store" / "entrypoint" / "main.py"
    assert command[1:] == ["--master", "spark://master:7077", "--driver-memory", "3g",
                           "--conf", "spark.executor.memory=2g",
                           "--jars", "/opt/jars/delta-spark_2.13-4.0.0.jar,/opt/jars/delta-storage-4.0.0.jar",
                           "--conf", f"spark.pyspark.python={sys.executable}", str(entrypoint),
                           "run", "--job", "clicks", "--max-microbatches", "2"]
    monkeypatch.setenv("LAKESTATE_JARS_ON_WORKERS", "1")
    assert main(["submit", "--print", "--master", "local[2]", "--", "--job", "clicks"]) == 0
    command = shlex.split(capsys.readouterr().out)
    path = os.pathsep.join(os.environ["LAKESTATE_JARS"].split(","))
    assert command[1:3] == ["--master", "local[2]"] and "--jars" not in command
    assert f"spark.driver.extraClassPath={path}" in command and f"spark.executor.extraClassPath={path}" in command
    (block,) = [b for b in page_blocks("operating/running.md", "bash") if b.startswith("lakestate submit --print")]
    shown, printed = block.splitlines()[0], " ".join(line.lstrip("# ") for line in block.splitlines()[1:])
    monkeypatch.delenv("LAKESTATE_SPARK_MASTER")
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)  # no spark-defaults.conf of this machine's
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "no-spark-home"))
    assert main(shlex.split(shown)[1:]) == 0  # the page's line, as it is: what it prints is what the page says
    command = shlex.split(capsys.readouterr().out)
    assert command[1:3] == ["--master", "local[*]"] == shlex.split(printed)[1:3]
    assert command[-5:] == shlex.split(printed)[-5:] == ["run", "--job", "counts", "--max-microbatches", "10"]
    with pytest.raises(SystemExit):  # argparse's usage error, as `lakestate run --bogus` gives
        main(["submit", "--print", "--", "--job", "clicks", "--bogus"])
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err
    assert main(["submit", "--print"]) == 2
    assert "give the arguments of `lakestate run` after --" in capsys.readouterr().err


def _page_code(text: str) -> list[str]:
    """The code a page shows: the lines of its fenced blocks (any language but Python's, TOML's and YAML's) and
    its inline code spans, each line or span on its own."""
    parts = text.split("```")
    code = []
    for n, part in enumerate(parts):
        if n % 2:  # a fenced block: its language line, then its lines
            language, _, body = part.partition("\n")
            if language.strip() not in ("python", "toml", "yaml", "json", "text"):
                code += body.splitlines()
        else:
            code += re.findall(r"`([^`\n]+)`", part)
    return code


def _commands(line: str, name: str) -> list[str]:
    """Each command of ``line`` that runs ``name`` (``scripts/x.sh``, ``lakestate``): what follows it up to the
    end of that command (a comment, ``&&``, ``;``, ``|``, a closing parenthesis)."""
    return [re.split(r"\s#|&&|;|\||\)", rest)[0].strip() for rest in re.split(
        rf"(?:^|(?<=[\s(`$]))(?:bash\s+|source\s+|\.\s+)?{re.escape(name)}(?=\s|$)", line)[1:]]


def _git_mode(path: str) -> str | None:
    """The mode git gives ``path`` in a fresh clone (``100755``: its run bit), None outside a git checkout."""
    done = subprocess.run(["git", "ls-files", "-s", path], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.split()[0] if done.returncode == 0 and done.stdout.strip() else None


def test_every_command_a_page_shows_exists_can_be_run_and_takes_the_arguments_shown():
    """Each ``scripts/<x>.sh`` a page (docs/, README.md, docker/README.md) shows exists, has its run bit where it
    is run as a command (not ``bash``/``source``d: a user would get "Permission denied"), and handles the
    subcommand or option shown (a branch of its ``case``); each ``lakestate <subcommand>`` shown is one of the
    CLI's, with options it takes (``lakestate <subcommand> --help`` lists them)."""
    import argparse

    from state_store.cli import build_parser

    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    pages = sorted(DOCS.rglob("*.md")) + [ROOT / "README.md", ROOT / "docker" / "README.md"]  # docker/: a snippet
    wrong = []
    for page in pages:
        where = page.relative_to(ROOT)
        for line in _page_code(page.read_text()):
            for script in sorted(set(re.findall(r"scripts/[\w.-]+\.sh", line))):
                path = ROOT / script
                if not path.is_file():
                    wrong.append(f"{where}: {script} does not exist")
                    continue
                ran = re.search(rf"(?:^|[\s(`$&;|])(?<!bash )(?<!source )(?<!\. ){re.escape(script)}", line)
                if ran and not (os.access(path, os.X_OK) and _git_mode(script) in ("100755", None)):
                    wrong.append(f"{where}: {script} is run but has no run bit (git update-index --chmod=+x)")
                for command in _commands(line, script):
                    word = command.split()[0] if command.split() else ""
                    if re.fullmatch(r"[a-z][a-z-]*|--[a-z-]+", word) and not re.search(
                            rf"(?m)(^|[\s|(]){re.escape(word)}(\)|\|)", path.read_text()):
                        wrong.append(f"{where}: {script} has no branch for {word!r} ({line.strip()!r})")
            for command in _commands(line, "lakestate"):
                words = command.split()
                if not words or not re.fullmatch(r"[a-z]+", words[0]):
                    continue  # `lakestate` named in prose, `lakestate[airflow]`, `lakestate --help`
                sub = commands.choices.get(words[0])
                if sub is None:
                    wrong.append(f"{where}: lakestate {words[0]} is not a subcommand ({line.strip()!r})")
                    continue
                nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
                if nested and len(words) > 1 and words[1] in nested[0].choices:  # lakestate state edit ...
                    sub = nested[0].choices[words[1]]
                options = set(sub._option_string_actions)
                unknown = [o for o in re.findall(r"(?<![\w-])--[a-z][a-z-]*", command.split(" -- ")[0])
                           if o not in options]
                if unknown:
                    wrong.append(f"{where}: lakestate {words[0]} takes no {unknown} ({line.strip()!r})")
    assert not wrong, "\n".join(wrong)
    for name, sub in commands.choices.items():  # each subcommand's --help works without Spark
        assert sub.format_help().startswith("usage: lakestate " + name), name


def test_the_api_reference_pages_read_as_markdown_naming_each_export_its_methods_and_its_source_file():
    """docs/reference/ reads on GitHub, where mkdocstrings' ``:::`` lines render as nothing: each page's table
    names the classes and functions (every name ``state_store`` exports, on its page), methods each of them has,
    and the file that defines them, which exists."""
    import importlib

    import state_store

    listed = {}
    for page, module_names in (("reference/state_store.md", ["state_store"]),
                               ("reference/provider.md", ["state_store.provider.operators",
                                                          "state_store.provider.hooks", "state_store.provider.dags"])):
        text = (DOCS / page).read_text()
        prose = [line for line in text.split(":::")[0].splitlines() if line.strip()]
        assert len(prose) > 10, f"{page} has no text of its own above its ::: directives"
        modules = [importlib.import_module(m) for m in module_names]
        rows = [line for line in text.splitlines() if line.startswith("| `")]
        for row in rows:
            names, _, methods, source = [cell.strip() for cell in row.strip("|").split("|")]
            objects = {}
            for name in re.findall(r"`(\w+)`", names):
                found = [getattr(m, name) for m in modules if hasattr(m, name)]
                assert found, f"{page}: {name} is not in {module_names}"
                objects[name] = found[0]
                listed[name] = page
            files = re.findall(r"`([^`]+)`", source)
            assert files and all((ROOT / f).is_file() for f in files), f"{page}: {source}"
            assert all(inspect.getsourcefile(o) and Path(inspect.getsourcefile(o)).resolve().relative_to(ROOT)
                       .as_posix() in files for o in objects.values() if inspect.isclass(o) or inspect.isfunction(o)), (
                f"{page}: {names} are not defined in {files}")
            for span in re.findall(r"`([^`]+)`", methods):
                owner = re.match(r"(\w+)\.(\w+)", span)
                calls = [owner[2]] if owner and owner[1] in objects else re.findall(r"(?:^|/)([a-z_]\w*)(?=\(|/|$)",
                                                                                    span)
                for call in calls:
                    if "(" not in span and "/" not in span and call not in ("submit",):
                        continue  # an argument's name, not a method
                    assert any(hasattr(o, call) for o in objects.values()), f"{page}: {names} have no {call}"
    missing = [n for n in [*state_store.__all__, "SavepointReader", "SavepointWriter"]
               if listed.get(n) != "reference/state_store.md"]
    assert not missing, f"docs/reference/state_store.md does not name {missing}"


def test_the_install_pages_short_steps_upgrade_pip_name_the_jars_folder_and_unpause_every_dag_lakestate_makes():
    """docs/get-started/install.md: pip upgraded before the install (the bundled pip takes twice as long over
    Airflow's tree), ``LAKESTATE_JARS_DIR`` among the workers' environment, and an ``airflow dags unpause`` of the
    job's pipeline DAG and of each operation DAG: Airflow creates them paused, and a paused DAG runs nothing."""
    from state_store.catalog.pipelines import OPERATION_DAG_IDS

    text = (DOCS / "get-started/install.md").read_text()
    short, details = text.split("## The details")
    (install, unpause) = [b for b in page_blocks("get-started/install.md", "bash") if "pip install -c" in b
                          or "dags unpause" in b]
    assert install.index("pip install -U pip") < install.index("pip install -c constraints.txt")
    assert "LAKESTATE_JARS_DIR" in short and "`LAKESTATE_JARS_DIR`" in details.split("**The environment of")[1]
    shown = re.findall(r"airflow dags unpause (\S+)", unpause) + list(
        re.findall(r"\band (lakestate_\w+), (lakestate_\w+)", unpause)[0])
    assert shown[0] == "lakestate_first-job" and set(shown[1:]) == set(OPERATION_DAG_IDS), shown


def test_the_connection_type_is_lakestate_which_airflow_never_warns_of_and_the_old_lakestate_spark_still_works(
        monkeypatch):
    """Airflow warns at each use of a connection whose type holds '_' ("shall not contain '_' according to RFC3986",
    three times a task) and turns a '-' of a URI's or JSON connection's type into '_': the type is ``lakestate``,
    which survives both round trips and is never warned of; ``lakestate_spark``, its old name, is still a type the
    provider gives (a hook of its own, the same submit), so existing connections keep working."""
    import logging

    from airflow.sdk.definitions.connection import Connection

    from state_store.provider import get_provider_info, hooks

    types = {t["connection-type"]: t["hook-class-name"] for t in get_provider_info()["connection-types"]}
    assert types == {"lakestate": "state_store.provider.hooks.LakestateSparkHook",
                     "lakestate_spark": "state_store.provider.hooks.LakestateSparkOldTypeHook"}
    for conn_type, path in types.items():  # each hook declares the type the provider registers it under
        hook = getattr(hooks, path.rsplit(".", 1)[1])
        assert hook.conn_type == conn_type and issubclass(hook, hooks.LakestateSparkHook)
    warned = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warned.append(record.getMessage())
    logger = logging.getLogger(Connection.__module__)  # Airflow's logging may not propagate it to the root
    logger.addHandler(handler)
    monkeypatch.setattr(logger, "disabled", False)
    try:
        connection = Connection(conn_id="lakestate_spark", conn_type="lakestate", host="spark://master", port=7077)
        again = Connection.from_uri(connection.get_uri(), conn_id="lakestate_spark")
        from_json = Connection.from_json(connection.as_json(), conn_id="lakestate_spark")
        again.get_uri(), from_json.get_uri()
        assert (again.conn_type, again.host, again.port) == ("lakestate", "spark://master", 7077)
        assert from_json.conn_type == "lakestate" and not warned, warned
        Connection.from_uri("lakestate-spark://master", conn_id="x").get_uri()  # the old name, or a hyphen
        assert warned and "shall not contain '_'" in warned[0], warned
    finally:
        logger.removeHandler(handler)
    for page in ("get-started/install.md", "operating/airflow.md"):
        text = (DOCS / page).read_text()
        assert "--conn-type lakestate " in text and "--conn-type lakestate_spark" not in text, page


def _defined_names(path: Path) -> dict[str, set[str]]:
    """What a module defines, by scope: "" its top-level names (functions, classes, assignments, imports), and each
    class's members by the class's name (methods, attributes, properties)."""
    import ast

    tree = ast.parse(path.read_text())
    scopes: dict[str, set[str]] = {"": set()}

    def targets(node) -> set[str]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return {node.name}
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            found = node.targets if isinstance(node, ast.Assign) else [node.target]
            return {n.id for t in found for n in ast.walk(t) if isinstance(n, ast.Name)}
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return {(a.asname or a.name).split(".")[0] for a in node.names}
        return set()

    for node in tree.body:
        scopes[""] |= targets(node)
        if isinstance(node, ast.ClassDef):
            scopes[node.name] = set().union(*(targets(n) for n in node.body))
    return scopes


def _room(token: str) -> Path | None:
    """The file or folder a recipe's path names (``state/handles``, ``entrypoint/main.py``, ``state_store/ops/``,
    ``tests/sources/test_sources.py``), None when ``token`` is no path of the repository."""
    token = token.rstrip("/")
    for base in (ROOT / "state_store", ROOT):
        for candidate in (base / f"{token}.py", base / token):
            if candidate.exists():
                return candidate
    return None


def test_the_where_things_live_recipes_name_rooms_and_members_that_exist():
    """Each recipe of docs/internals/where-things-live.md (a bullet of "The ... most common changes") names the
    rooms a change touches and the members it edits there; followed, they must exist: every path names a file or
    folder, and every other name is defined in one of the bullet's rooms (a module's name, a class's member as
    ``Class.member`` or a member of a class of its rooms; ``dataflow.RecordOperator.process``)."""
    text = (DOCS / "internals" / "where-things-live.md").read_text()
    recipes = text.split("most common changes", 1)[1].split("Not there yet", 1)[0]
    bullets = [b for b in re.split(r"\n- ", recipes)[1:]]
    assert len(bullets) >= 7, bullets
    modules = {p.relative_to(ROOT / "state_store").with_suffix("").as_posix(): p
               for p in (ROOT / "state_store").rglob("*.py")}
    by_name = {}
    for rel, path in modules.items():
        by_name.setdefault(rel.rsplit("/", 1)[-1], path)
    problems = []
    for bullet in bullets:
        title = re.match(r"\*\*(.+?)\*\*", bullet).group(1)
        tokens = re.findall(r"`([^`]+)`", bullet)
        rooms = {t: _room(t) for t in tokens if "/" in t or t in by_name}
        for token, room in rooms.items():
            if room is None and "<" not in token:
                problems.append(f"{title}: no room {token!r}")
        files = [r for r in rooms.values()
                 if r is not None and r.suffix == ".py" and r.is_relative_to(ROOT / "state_store")]
        scopes = [_defined_names(f) for f in files]
        members = set().union(*(set().union(*s.values()) for s in scopes)) if scopes else set()
        for token in tokens:
            if token in rooms or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", token):
                continue  # a room, or code (``ctx.get_keyed_state(descriptor)``, ``JobSpec(backend=...)``)
            *owner, name = token.split(".")
            if owner and owner[0] in by_name:  # ``module.Class.member`` or ``module.name``
                scope = _defined_names(by_name[owner[0]])
                found = name in scope.get(owner[-1] if len(owner) > 1 else "", set())
            elif owner:  # ``Class.member`` of a class of the bullet's rooms
                found = any(name in s.get(owner[-1], set()) for s in scopes)
            else:
                found = name in members
            if not found:
                problems.append(f"{title}: {token!r} is in none of {[t for t in rooms if rooms[t]]}")
    assert not problems, "\n".join(problems)
