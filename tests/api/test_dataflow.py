"""Jobs of several operators (issue 24): the Dataflow builder, a chain run against pandas, one checkpoint of
every operator, a run of N microbatches equal to N runs of one, a crash at each fault point between operators,
and an operator added to or removed from a running job."""
from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq
import pytest

from demo.sessions_per_country import (
    CLICK,
    COUNTS,
    SESSION,
    CountrySessions,
    CountSessions,
    dataflow,
    expected,
    expected_longest,
    graph,
    latest_totals,
    read_clicks,
    write_clicks,
)
from state_store import (
    BroadcastProcessFunction,
    ConfigError,
    Dataflow,
    FileSource,
    FilterFunction,
    FlatMapFunction,
    Job,
    JobSpec,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapFunction,
    MapStateDescriptor,
    OutputTag,
    ProcessFunction,
    RestoreError,
    Types,
    ValueStateDescriptor,
)
from state_store.catalog.job_store import JobStore
from state_store.run.runtime import FaultInjector, InjectedFault, run_job
from tests.support.lake import Lake
from tests.support.windows import STRATEGY, TIMED, S, write_window_clicks

# Users of the clicks the tests write: each keeps its key group's state and timers in files of its own, so a
# run's files (and its time) grow with them; 50 users in 7 countries still close sessions in every country
# and microbatch.
USERS = 50


def _quiet(_line):
    pass


def _latest_totals(spark, lake, sink="sinks/sessions_per_country") -> pd.DataFrame:
    """Per country, the totals of the last microbatch that changed them."""
    return latest_totals(spark.read.format("delta").load(str(lake.settings.sink(sink))).toPandas())


def _sink_rows(spark, lake, sink="sinks/sessions_per_country", upto: int | None = None) -> list[tuple]:
    """The sink's rows, sorted; with ``upto``, those of microbatches up to that one."""
    return _sorted(spark.read.format("delta").load(str(lake.settings.sink(sink))).collect(), upto)


def _sorted(rows, upto: int | None = None) -> list[tuple]:
    return sorted(tuple(r) for r in rows if upto is None or r["_microbatch"] <= upto)


def _clicks(lake, files: int = 3):
    directory = lake.inputs / "clicks"
    write_clicks(directory, files, events=300, users=USERS)
    return directory, read_clicks(directory)


# -- the builder (no Spark) ---------------------------------------------------------------------------------
def test_one_operator_dataflow_is_the_jobspec_it_always_was(tmp_path):
    spec = (Dataflow.from_source(FileSource(str(tmp_path), "parquet", CLICK), job_id="one")
            .key_by("user_id").process(CountrySessions(), uid="sessions", output_type=SESSION, parallelism=3)
            .sink_to("sinks/one"))
    assert isinstance(spec, JobSpec)
    assert (spec.uid, spec.key, spec.key_type.name, spec.parallelism, spec.sink) == ("sessions", "user_id", "LONG",
                                                                                     3, "sinks/one")


def test_chain_keys_each_operator_by_a_column_of_what_the_one_before_emits(tmp_path):
    chain = dataflow(tmp_path)
    assert isinstance(chain, Job) and chain.uids == ["sessions", "per-country"]
    second = chain.operator("per-country")
    assert (second.key, second.key_type.name, second.parallelism) == ("country", "STRING", 3)
    assert second.source.schema == SESSION and second.watermark_strategy is None
    assert chain.with_overrides(backend="hashmap").operators[1].backend == "hashmap"
    # Spark SQL between two operators (select_expr) is the later one's reading of the edge; at the end, a step
    # forwards the rows as Spark computed them to the sink.
    wide = Types.ROW_NAMED(["country", "long"], [Types.STRING(), Types.BOOLEAN()])
    sessions = (Dataflow.from_source(FileSource(str(tmp_path), "parquet", CLICK), job_id="sql-between")
                .key_by("user_id").process(CountrySessions(), uid="sessions", output_type=SESSION))
    edge = sessions.select_expr({"country": "upper(country)", "long": "clicks > 3"}, output_type=wide,
                                where="country IS NOT NULL").sink_to("sinks/x").operators[-1].source
    assert (edge.upstream, edge.where, dict(edge.columns), edge.declared_fields()) == (
        "sessions", "country IS NOT NULL", {"country": "upper(country)", "long": "clicks > 3"}, wide.fields)


@pytest.mark.parametrize("build, message", [
    (lambda d: d.process(CountSessions(), uid="x", output_type=COUNTS), "needs a keyed stream"),
    (lambda d: d.key_by("user_id").key_by("country"), "before it is keyed again"),
    (lambda d: d.key_by("user_id").process(CountrySessions(), uid="s", output_type=SESSION).key_by("page"),
     "has no column 'page'"),
    (lambda d: d.key_by("user_id").process(CountrySessions(), uid="s", output_type=SESSION)
     .key_by("country").process(CountSessions(), uid="s", output_type=COUNTS).sink_to("sinks/x"), "given twice"),
    (lambda d: d.key_by("user_id").sink_to("sinks/x"), "not processed"),
    (lambda d: d.sink_to("sinks/x"), "at least one operator"),
    (lambda d: d.key_by("ts", Types.DOUBLE()), "a key is STRING, LONG, INT, BOOLEAN, DATE, TIMESTAMP,"),
    (lambda d: d.key_by("user_id").select_expr({"u": "user_id"}, output_type=Types.ROW_NAMED(["u"], [Types.LONG()])),
     "select_expr\\(...\\) takes a stream before key_by"),
    (lambda d: d.select_expr({"u": "user_id", "p": "page"}, output_type=Types.ROW_NAMED(["p"], [Types.STRING()])),
     "output_type is Types.ROW_NAMED of its columns \\['u', 'p'\\]"),
])
def test_a_dataflow_built_wrong_is_refused_naming_the_fix(tmp_path, build, message):
    start = Dataflow.from_source(FileSource(str(tmp_path), "parquet", CLICK), job_id="bad")
    with pytest.raises(ConfigError, match=message):
        build(start)


def _branches(tmp_path):
    """The sessions of the clicks in ``tmp_path``, keyed by country: a stream to fan out."""
    return (Dataflow.from_source(FileSource(str(tmp_path), "parquet", CLICK), job_id="fan")
            .key_by("user_id").process(CountrySessions(), uid="sessions", output_type=SESSION))


def test_a_graph_computes_a_shared_stream_once_and_ends_each_branch_in_its_own_sink(tmp_path):
    from state_store.provider.reader import job_edges

    sessions = _branches(tmp_path)
    job = Dataflow.graph(sessions.key_by("country").process(CountSessions(), uid="per-country", output_type=COUNTS)
                         .sink_to("sinks/per-country"), sessions.sink_to("sinks/sessions"))
    # The sessions are also read further: an operator that forwards them writes their sink.
    assert job.uids == ["sessions", "per-country", "sessions-to-sink"]
    assert job.sinks == {"per-country": "sinks/per-country", "sessions-to-sink": "sinks/sessions"}
    assert (job.sink, job.sink_of("sessions"), job.inputs_of("sessions-to-sink")) == (
        "sinks/per-country", None, ["sessions"])
    edges = job_edges(job.describe())
    assert ("operator sessions", "per-country") in edges and ("operator sessions", "sessions-to-sink") in edges
    assert ("sessions-to-sink", "sink sinks/sessions") in edges and not [e for e in edges if e[0] == "sessions"
                                                                        and e[1].startswith("sink")]
    # One branch given alone is the plain job it always was.
    assert Dataflow.graph(sessions.sink_to("sinks/s")) == sessions.sink_to("sinks/s")


@pytest.mark.parametrize("build, message", [
    (lambda s, o: Dataflow.graph(), "takes the branches of a job"),
    (lambda s, o: Dataflow.graph(s.sink_to("sinks/a"), s.sink_to("sinks/b")), "two branches end at operator"),
    (lambda s, o: Dataflow.graph(s.sink_to("sinks/a"), o.sink_to("sinks/b")), "belong to jobs"),
    (lambda s, o: Dataflow.graph(s.sink_to("sinks/a"), s.key_by("country").process(
        CountSessions(), uid="sessions", output_type=COUNTS).sink_to("sinks/b")), "given twice|two different"),
    (lambda s, o: Dataflow.graph(s.sink_to("sinks/a"), "sinks/b"), "takes what sink_to"),
])
def test_a_graph_built_wrong_is_refused_naming_the_fix(tmp_path, build, message):
    other = (Dataflow.from_source(FileSource(str(tmp_path), "parquet", CLICK), job_id="other")
             .key_by("user_id").process(CountrySessions(), uid="sessions", output_type=SESSION))
    with pytest.raises(ConfigError, match=message):
        build(_branches(tmp_path), other)


LATE_SESSION = OutputTag("late", SESSION)


def _two_writers(tmp_path, first: str, second: str):
    """A graph of two branches: per-country counts (with a side output, the table ``<first>_late``) into
    ``first``, the sessions themselves into ``second``."""
    sessions = _branches(tmp_path)
    return Dataflow.graph(sessions.key_by("country").process(CountSessions(), uid="per-country", output_type=COUNTS,
                                                             side_outputs=[LATE_SESSION]).sink_to(first),
                          sessions.sink_to(second))


@pytest.mark.parametrize("second", ["sinks/x/", "sinks/./x", "sinks/y/../x", "sinks/x_late", "ABSOLUTE"])
def test_two_writers_of_one_table_however_spelled_are_refused_naming_both_before_anything_is_written(
        tmp_path, monkeypatch, second):
    """Issue 59: two branches ending in one table spelled two ways (or a branch's sink that is the job's own side
    output table) ran, and each writer's clean-up removed the other's committed files. Refused where the graph is
    built (spellings of one path), and at ``register`` and at a run's start (resolved in the warehouse)."""
    from state_store.catalog.jobs import JobCatalog
    from state_store.run.runtime import JobRunner

    lake = Lake(tmp_path)
    named = {"sinks/x_late": "side output 'late' of operator 'per-country'",
             }.get(second, "the sink of the branch ending at operator 'per-country'")
    message = rf"{named} and the sink of the branch ending at operator 'sessions-to-sink' both write table|" \
              rf"the sink of the branch ending at operator 'sessions-to-sink' and {named} both write table"
    if second != "ABSOLUTE":
        with pytest.raises(ConfigError, match=message):
            _two_writers(tmp_path, "sinks/x", second)
        return
    spec = _two_writers(tmp_path, "sinks/x", str(lake.settings.warehouse / "sinks" / "x"))  # one spelling each
    (tmp_path / "two_writers.py").write_text(
        "from tests.api.test_dataflow import _two_writers\n\n\ndef job():\n"
        f"    return _two_writers({str(tmp_path)!r}, 'sinks/x', {str(lake.settings.warehouse / 'sinks' / 'x')!r})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=message):
        JobCatalog(lake.settings).register("two_writers:job")
    with pytest.raises(ConfigError, match=message):
        JobRunner(None, spec, lake.settings).run()  # refused before Spark is asked anything
    assert not (lake.settings.warehouse / "sinks").exists() and not JobCatalog(lake.settings).ids()


def test_an_operators_own_parallelism_is_not_overridden_for_the_whole_job(tmp_path, monkeypatch, capsys):
    """Nor by the pipeline registry: an entry of a dataflow of several operators that sets ``parallelism`` is
    refused at its run, before Spark starts, naming the entry and the two ways to set an operator's."""
    from state_store.cli import main

    with pytest.raises(ConfigError, match="each with its own"):
        dataflow(tmp_path).with_overrides(parallelism=4)
    registry = tmp_path / "lakestate.toml"
    registry.write_text('[jobs.sessions-per-country]\nentrypoint = "demo.sessions_per_country:job"\n'
                        'parallelism = 3\n')
    monkeypatch.setenv("LAKESTATE_ROOT", str(tmp_path / "root"))
    assert main(["run", "--job", "sessions-per-country", "--registry", str(registry)]) == 2
    err = capsys.readouterr().err
    assert "remove parallelism from its pipeline registry entry [jobs.sessions-per-country]" in err, err
    assert "process(..., parallelism=N)" in err and "--operator UID --parallelism N" in err, err


# -- runs ----------------------------------------------------------------------------------------------------
# Where a crash can stop a run of two operators: between the steps the operators take in turn (plan; each one's
# pass, files staged; the first's tables written, then the second's; the first's commit markers, then the
# second's; the checkpoint), one point each; the points left out sit next to one kept with nothing durable
# between them, or inside one operator's writes, which run at once (every point of a one-operator job:
# tests/run/test_exactly_once.py). The plan and the checkpoint are one file each for the whole chain, written as a
# one-operator job's are: test_exactly_once[after_plan] and [after_checkpoint] prove those two points.
# The job is ``graph``: sessions fanned out to per-country totals (the job's sink) and the longest session per
# country (a sink of its own), so a crash can fall between two sinks' commits.
# A crash before the first operator writes, after a second one wrote its sink and state (uncommitted), after a
# branch wrote its sink, and after a commit: the four replays a graph's crash can leave (each point of a one-operator
# job is crashed at by tests/run/test_exactly_once.py).
CRASHES = [("before_sink_write", "sessions"), ("after_state_write", "per-country"), ("after_sink_write", "longest"),
           ("after_commit", "per-country")]
COMPACTED_AFTER = 2  # the microbatch after which the crashed job is compacted: two crashes come after it


class Clean:
    """A run of the graph without faults, over clicks of microbatch 0 and one more microbatch per crash of
    CRASHES: one microbatch, then the rest in one pass."""

    def __init__(self, spark, lake, backend="delta"):
        self.lake, self.backend = lake, backend
        self.directory, self.clicks = _clicks(lake, files=1 + len(CRASHES))
        self.chain = graph(self.directory, job_id="sessions-per-country", sink="sinks/sessions_per_country",
                           backend=backend)
        self.first = run_job(spark, self.chain, lake.settings, max_microbatches=1, progress=_quiet)
        self.rest = run_job(spark, self.chain, lake.settings, progress=_quiet)
        self.rows = spark.read.format("delta").load(str(lake.settings.sink(self.chain.sink))).collect()
        self.longest = _sink_rows(spark, lake, "sinks/sessions_per_country-longest")
        self.checkpoint = JobStore(lake.settings.job_dir(self.chain.job_id)).latest_checkpoint()


@pytest.fixture(scope="module")
def clean(spark, tmp_path_factory) -> Clean:
    """The delta backend's clean run, shared read-only (its clicks too): what the crashed and the killed job must
    end with."""
    return Clean(spark, Lake(tmp_path_factory.mktemp("clean")))


@pytest.mark.parametrize("backend", ["delta", "hashmap"])
def test_two_operators_give_what_pandas_computes_and_one_checkpoint_pins_both(spark, lake, clean, backend):
    done = clean if backend == clean.backend else Clean(spark, lake, backend)  # delta: the module's clean run
    assert len(done.first.batches) == 1 and len(done.rest.batches) == len(CRASHES)
    pd.testing.assert_frame_equal(_latest_totals(spark, done.lake), expected(done.clicks), check_dtype=False)
    longest = pd.DataFrame(done.longest, columns=["country", "longest", "_microbatch"])
    pd.testing.assert_frame_equal(longest.sort_values("_microbatch").groupby("country").tail(1)[
        ["country", "longest"]].sort_values("country").reset_index(drop=True), expected_longest(done.clicks),
        check_dtype=False)
    # A graph's run says each sink's rows; the pipeline DAG's Asset of the other branch's sink carries its own.
    from state_store.provider.dags import branch_sink_asset
    from state_store.provider.operators import outlet_extras

    summary = done.rest.summary("x")
    assert summary["sinks"] == {
        "per-country": {"table": str(done.lake.settings.sink("sinks/sessions_per_country")),
                        "records_out": done.rest.records_out},
        "longest": {"table": str(done.lake.settings.sink("sinks/sessions_per_country-longest")),
                    "records_out": len([r for r in done.longest if r[2] > 0])}}
    ((_, extra),) = outlet_extras(summary, [branch_sink_asset("x", "longest")])
    assert (extra["operator"], extra["records_out"]) == ("longest", summary["sinks"]["longest"]["records_out"])

    store = JobStore(done.lake.settings.job_dir(done.chain.job_id))
    checkpoint = store.latest_checkpoint()
    second = checkpoint.of_operator("per-country")
    assert (checkpoint.uid, checkpoint.parallelism, checkpoint.batch_id) == ("sessions", 2, len(CRASHES))
    assert (second.parallelism, second.batch_id, second.backend, second.source_offsets) == (3, len(CRASHES),
                                                                                            backend, {})
    assert second.entries["per-country.totals"] == len(expected(done.clicks))
    assert checkpoint.sink is not None and second.sink == checkpoint.sink
    assert not any(store.operator_dir("per-country").joinpath("staging").glob("edge-*")), "edge files left"


def test_a_crash_at_each_fault_point_of_either_operator_replays_to_a_clean_runs_sink_and_state(spark, lake, clean):
    """One job run a microbatch at a time, crashed in each of microbatches 1.. at one point of CRASHES, each
    rerun replaying that microbatch: after each, its sink so far and its state equal the clean run's. So its runs
    of one microbatch also equal the clean run's pass of the rest, and compaction halfway changes nothing after it."""
    chain = graph(clean.directory, job_id="crashed", sink="sinks/crashed")
    store = JobStore(lake.settings.job_dir("crashed"))
    run_job(spark, chain, lake.settings, max_microbatches=1, progress=_quiet)
    for batch_id, (point, operator) in enumerate(CRASHES, start=1):
        with pytest.raises(InjectedFault):
            run_job(spark, chain, lake.settings, max_microbatches=1, progress=_quiet,
                    faults=FaultInjector(point, batch_id=batch_id, operator=operator))
        run_job(spark, chain, lake.settings, max_microbatches=1, progress=_quiet)
        assert _sink_rows(spark, lake, "sinks/crashed", upto=batch_id) == _sorted(clean.rows, batch_id), point
        assert _sink_rows(spark, lake, "sinks/crashed-longest", upto=batch_id) == [
            r for r in clean.longest if r[2] <= batch_id], point
        # Every country has closed sessions from microbatch 0 on (USERS users in 7 countries): the clean run's
        # per-country entries are those of each microbatch.
        state = store.latest_checkpoint()
        assert (state.batch_id, state.of_operator("per-country").entries) == (
            batch_id, clean.checkpoint.of_operator("per-country").entries), (point, operator)
        if batch_id == COMPACTED_AFTER:
            _compaction_rewrites_every_operators_tables_and_keeps_the_entries(spark, lake, "crashed")
    assert _sink_rows(spark, lake, "sinks/crashed") == _sorted(clean.rows)
    assert _sink_rows(spark, lake, "sinks/crashed-longest") == clean.longest
    assert (state.batch_id, state.entries) == (clean.checkpoint.batch_id, clean.checkpoint.entries)


def _compaction_rewrites_every_operators_tables_and_keeps_the_entries(spark, lake, job_id):
    """The runs of one microbatch left superseded rows in every operator's tables: compaction removes them and
    pins the rewritten versions in a new checkpoint of the same entries; at once again, it has nothing to do."""
    from state_store.ops.compaction import compact_job

    store = JobStore(lake.settings.job_dir(job_id))
    before = store.latest_checkpoint()
    report = compact_job(spark, lake.settings, job_id, say=_quiet)
    assert report["tables"]["per-country:keyed"]["superseded_removed"] > 0  # deletion: test_compaction's first
    after = store.latest_checkpoint()
    assert after.checkpoint_id == report["new_checkpoint"] and after.of_operator("per-country").entries == \
        before.of_operator("per-country").entries
    assert after.of_operator("per-country").table("keyed").version > before.of_operator("per-country").table(
        "keyed").version
    assert compact_job(spark, lake.settings, job_id, say=_quiet).get("nothing_to_do")


@pytest.mark.e2e
@pytest.mark.beside_spark  # scripts/test.sh: on the spark tier's side
def test_kill_9_of_spark_submit_between_the_operators_writes_then_a_rerun_equals_a_clean_run(spark, lake, tmp_path,
                                                                                             clean):
    """The graph's run killed once the first operator's state is committed: the two branches' tables, the commit
    markers and the checkpoint are not written yet; the rerun replays to the clean run's sinks and state."""
    from tests.support.kill_harness import kill_job_of

    kill_job_of(lake, tmp_path, "killed", "from demo.sessions_per_country import graph\n\n\ndef job():\n"
                f"    return graph({str(clean.directory)!r}, job_id='killed', sink='sinks/killed')\n")
    killed = graph(clean.directory, job_id="killed", sink="sinks/killed")
    assert run_job(spark, killed, lake.settings, progress=_quiet, lease_wait_s=20).batches
    assert _sink_rows(spark, lake, "sinks/killed") == _sorted(clean.rows)
    assert _sink_rows(spark, lake, "sinks/killed-longest") == clean.longest
    state = JobStore(lake.settings.job_dir("killed")).latest_checkpoint()
    assert (state.batch_id, state.entries, state.of_operator("per-country").entries) == (
        clean.checkpoint.batch_id, clean.checkpoint.entries, clean.checkpoint.of_operator("per-country").entries)


def test_an_operator_added_starts_empty_and_one_removed_is_refused(spark, lake):
    directory, clicks = _clicks(lake, files=2)
    chain = dataflow(directory, job_id="grows")
    alone = chain.operators[0].with_overrides(sink="sinks/sessions-only")
    run_job(spark, alone, lake.settings, max_microbatches=1, progress=_quiet)
    grown = Job([op.with_overrides(sink="sinks/grown") for op in chain.operators])
    said = []
    run_job(spark, grown, lake.settings, progress=said.append)
    checkpoint = JobStore(lake.settings.job_dir("grows")).latest_checkpoint()
    assert checkpoint.of_operator("per-country").batch_id == 1
    assert any("operator per-country" in line for line in said)
    with pytest.raises(RestoreError, match=r"operators \['per-country'\] that the job no longer has"):
        run_job(spark, alone, lake.settings, progress=_quiet)


# -- savepoints, restore, rescale and the State Processor, per operator ----------------------------------------
def _totals_state(reader, uid="per-country") -> pd.DataFrame:
    rows = reader.keyed_state("totals", uid=uid).toPandas()
    return pd.DataFrame({"country": rows["key"], "sessions": rows["value"].map(lambda v: v["sessions"]),
                         "clicks": rows["value"].map(lambda v: v["clicks"])}).sort_values("country").reset_index(
        drop=True)


def test_a_dataflows_savepoint_holds_every_operator_and_restores_by_uid(spark, lake):
    from state_store.delta.points import StatePoint
    from state_store.ops.restore import restore_job
    from state_store.ops.savepoint import take_savepoint
    from state_store.ops.state_processor import SavepointReader, SavepointWriter

    directory, clicks = _clicks(lake, files=2)
    chain = dataflow(directory, job_id="orig", sink="sinks/orig")
    run_job(spark, chain, lake.settings, progress=_quiet)
    saved = take_savepoint(spark, lake.settings, "orig", label="sp", say=_quiet)
    assert sorted(saved.operators) == ["per-country"] and saved.operators["per-country"].parallelism == 3
    reader = SavepointReader.for_savepoint(spark, "orig/sp", lake.settings)
    assert reader.uids == ["sessions", "per-country"]
    pd.testing.assert_frame_equal(_totals_state(reader), expected(clicks), check_dtype=False)
    # The State Processor writes any operator's part: one removed, one renamed and given a state.
    without = SavepointWriter.from_savepoint(spark, "orig/sp", lake.settings).remove_operator("per-country")
    assert without.write("without", say=_quiet).operators is None
    moved = SavepointWriter.from_savepoint(spark, "orig/sp", lake.settings).rename_uid("per-country", "counts")
    bonus = spark.createDataFrame([("DE", 5), ("FR", 7)], "key string, value bigint")  # added to that operator
    moved.operator_part("counts").with_keyed_state(ValueStateDescriptor("bonus", Types.LONG()), bonus)
    with pytest.raises(ConfigError, match=r"the savepoint has no operator 'per-country'; its operators are"):
        moved.operator_part("per-country")
    written = moved.write("moved", say=_quiet)
    assert list(written.operators) == ["counts"]
    assert set(written.operators["counts"].entries) == {"counts.totals", "counts.bonus"}
    got = SavepointReader.for_savepoint(spark, "orig/moved", lake.settings).keyed_state("bonus", uid="counts")
    assert sorted((r["key"], r["value"]) for r in got.collect()) == [("DE", 5), ("FR", 7)]
    point = StatePoint.of_savepoint(lake.settings, "orig/sp")

    def restored(job_id, spec, **changes):
        restore_job(spark, lake.settings, spec, point, say=_quiet, **changes)
        return JobStore(lake.settings.job_dir(job_id)).latest_checkpoint()

    # (Into a new job with an operator rescaled, going on as the original does: the graph's test below.)
    copy = dataflow(directory, job_id="copy", sink="sinks/copy")
    # An operator removed: refused, then allowed (its state dropped).
    alone = copy.operators[0].with_overrides(job_id="alone", sink="sinks/alone")
    with pytest.raises(RestoreError, match=r"operators \['per-country'\] that no operator of job 'alone' takes"):
        restore_job(spark, lake.settings, alone, point, say=_quiet)
    assert restored("alone", alone, allow_non_restored_state=True).uids == [alone.uid]
    # Renamed through a uid map: the state moves; renamed without one and allowed: it starts empty.
    renamed = Job([copy.operators[0].with_overrides(job_id="renamed", sink="sinks/renamed"),
                         copy.operators[1].with_overrides(job_id="renamed", sink="sinks/renamed", uid="counts")])
    checkpoint = restored("renamed", renamed, uid_map={"per-country": "counts"})
    assert set(checkpoint.of_operator("counts").entries) == {"counts.totals"}
    moved = SavepointReader.for_checkpoint(spark, "renamed", settings=lake.settings)
    pd.testing.assert_frame_equal(_totals_state(moved, "counts"), expected(clicks), check_dtype=False)
    fresh = Job([op.with_overrides(job_id="fresh", sink="sinks/fresh") for op in renamed.operators])
    assert restored("fresh", fresh, allow_non_restored_state=True).of_operator("counts") is None


def test_a_graphs_savepoint_restores_with_a_branch_rescaled_and_another_renamed_through_a_uid_map(spark, lake):
    """The graph's savepoint restored into a new job whose per-country branch runs at parallelism 2 (was 3)
    and whose 'longest' operator is now 'longest-session': both continue as the original job does."""
    from state_store.delta.points import StatePoint
    from state_store.ops.restore import restore_job
    from state_store.ops.savepoint import take_savepoint
    from state_store.ops.state_processor import SavepointReader

    directory, clicks = _clicks(lake, files=2)
    fan = graph(directory, job_id="fan", sink="sinks/fan")
    run_job(spark, fan, lake.settings, progress=_quiet)
    saved = take_savepoint(spark, lake.settings, "fan", label="sp", say=_quiet)
    assert sorted(saved.operators) == ["longest", "per-country"]
    moved = graph(directory, job_id="moved", sink="sinks/moved", longest_uid="longest-session")
    with pytest.raises(RestoreError, match=r"operators \['longest'\] that no operator of job 'moved' takes"):
        restore_job(spark, lake.settings, moved, StatePoint.of_savepoint(lake.settings, "fan/sp"), say=_quiet)
    restore_job(spark, lake.settings, moved, StatePoint.of_savepoint(lake.settings, "fan/sp"), say=_quiet,
                parallelism={"per-country": 2}, uid_map={"longest": "longest-session"})
    checkpoint = JobStore(lake.settings.job_dir("moved")).latest_checkpoint()
    assert [checkpoint.of_operator(u).parallelism for u in ("sessions", "per-country", "longest-session")] == [
        2, 2, 2]
    assert set(checkpoint.of_operator("longest-session").entries) == {"longest-session.longest"}
    write_clicks(directory, 1, events=300, users=USERS)
    for job in (fan, moved):
        run_job(spark, job, lake.settings, progress=_quiet)
    assert _latest_totals(spark, lake, "sinks/moved").equals(_latest_totals(spark, lake, "sinks/fan"))
    after_restore = [_sink_rows(spark, lake, f"sinks/{job}-longest") for job in ("fan", "moved")]
    assert [r for r in after_restore[0] if r[2] == 2] == after_restore[1] != []
    states = [SavepointReader.for_checkpoint(spark, job, settings=lake.settings).keyed_state("longest", uid=uid)
              for job, uid in (("fan", "longest"), ("moved", "longest-session"))]
    assert sorted(map(tuple, states[0].collect())) == sorted(map(tuple, states[1].collect()))
    clicks = read_clicks(directory)
    assert dict(zip(*[states[1].toPandas()[c] for c in ("key", "value")])) == dict(
        zip(*[expected_longest(clicks)[c] for c in ("country", "longest")]))


def test_lakestate_rescale_operator_rescales_only_that_operator_and_the_job_goes_on(spark, lake, monkeypatch,
                                                                                  tmp_path, capsys):
    import textwrap

    from state_store.cli import main

    directory, clicks = _clicks(lake, files=2)
    module = tmp_path / "dataflow_job_module.py"
    module.write_text(textwrap.dedent(f"""
        from demo.sessions_per_country import dataflow

        def job():
            return dataflow({str(directory)!r}, job_id="chained")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    root = ["--root", str(lake.root)]
    assert main(["register", "dataflow_job_module:job", *root]) == 0
    assert main(["run", "--job", "chained", "--max-microbatches", "1", *root]) == 0
    assert main(["rescale", "chained", "--operator", "nope", "--parallelism", "4", *root]) == 2
    assert "no operator 'nope'" in capsys.readouterr().err
    assert main(["rescale", "chained", "--operator", "per-country", "--parallelism", "4", *root]) == 0
    assert "at parallelism sessions 2, per-country 4" in capsys.readouterr().out
    # Asked again: the answer is that operator's parallelism, not the first operator's (issue 37 #9).
    assert main(["rescale", "chained", "--operator", "per-country", "--parallelism", "4", *root]) == 0
    assert "job chained operator per-country: already at parallelism 4, nothing to do" in capsys.readouterr().out
    assert main(["run", "--job", "chained", *root]) == 0
    checkpoint = JobStore(lake.settings.job_dir("chained")).latest_checkpoint()
    assert (checkpoint.batch_id, checkpoint.parallelism, checkpoint.of_operator("per-country").parallelism) == (1, 2, 4)
    pd.testing.assert_frame_equal(_latest_totals(spark, lake), expected(clicks), check_dtype=False)
    # The Lakestate page shows the operators and their state.
    from state_store.provider.reader import job_overviews
    from state_store.provider.views import job_section

    (job,), _ = job_overviews(lake.settings)
    assert [(o["uid"], o["parallelism"]) for o in job.operators] == [("sessions", 2), ("per-country", 4)]
    assert job.operators[1]["entries"] == len(expected(clicks)) and job.operators[1]["bytes"] > 0
    page = job_section(job)
    assert "Operators at the latest checkpoint" in page and "per-country.totals" in page
    assert job.state_bytes["per-country.totals"][0] > 0


# -- time in a later operator --------------------------------------------------------------------------------
SINGLES = OutputTag("single_click_sessions", SESSION)


class HoldSessions(KeyedProcessFunction):
    """Per country: each session held until the watermark passes its end + 60 s (an event-time timer), then
    emitted; a session of one click also goes to a side output at once."""

    def open(self, ctx):
        self.held = ctx.get_map_state(MapStateDescriptor("held", Types.STRING(), SESSION))

    def process(self, country, sessions, ctx):
        for s in sessions:
            self.held.put(f"{s['user_id']}:{s['start']}", s)
            ctx.timer_service().register_event_time_timer(s["end"] + 60_000)
            if s["clicks"] == 1:
                ctx.output(SINGLES, s)
        return ()

    def on_timer(self, timestamp, ctx):
        for name, s in sorted(self.held.items()):
            if s["end"] + 60_000 == timestamp:
                self.held.remove(name)
                yield s


def test_timers_and_side_outputs_work_in_a_later_operator(spark, lake):
    from datetime import timedelta

    from state_store import WatermarkStrategy

    directory, clicks = _clicks(lake, files=3)
    head = dataflow(directory, job_id="sessions-only", sink="sinks/sessions-only").operators[0]
    run_job(spark, head, lake.settings, progress=_quiet)  # the first operator alone: every session it closes
    chain = (Dataflow.from_source(head.source, job_id="held", watermark_strategy=WatermarkStrategy
                                  .for_bounded_out_of_orderness(timedelta(seconds=5)).with_timestamp_column("ts"))
             .key_by("user_id").process(CountrySessions(), uid="sessions", output_type=SESSION,
                                        order_by=["ts", "seq"], side_outputs=head.side_outputs)
             .key_by("country").process(HoldSessions(), uid="held", output_type=SESSION, side_outputs=[SINGLES])
             .sink_to("sinks/held"))
    run_job(spark, chain, lake.settings, max_microbatches=2, progress=_quiet)
    run_job(spark, chain, lake.settings, progress=_quiet)
    sessions = spark.read.format("delta").load(str(lake.settings.sink("sinks/sessions-only"))).toPandas()
    watermark = int(clicks["ts"].max()) - 5_000 - 1
    columns = ["user_id", "start", "end", "clicks"]

    def rows(df):
        return sorted(map(tuple, df[columns].to_numpy().tolist()))

    held = spark.read.format("delta").load(str(lake.settings.sink("sinks/held"))).toPandas()
    assert rows(held) == rows(sessions[sessions["end"] + 60_000 <= watermark]) and len(held) > 0
    singles = spark.read.format("delta").load(str(lake.settings.sink(chain.side_output_sink(SINGLES)))).toPandas()
    assert rows(singles) == rows(sessions[sessions["clicks"] == 1]) and len(singles) > 0


# -- non-keyed operators -------------------------------------------------------------------------------------
class Dedupe(FlatMapFunction):
    """Drops a click seen before: the same click always comes to the same subtask, which keeps the seqs it has
    seen in operator state; union list state, so that after a rescale, where clicks come to other subtasks than
    before, every subtask starts from every seq seen (Flink's pattern)."""

    def initialize_state(self, ctx):
        store = ctx.get_operator_state_store()
        self.seen_state = store.get_union_list_state(ListStateDescriptor("seen", Types.LONG()))
        self.seen = set(self.seen_state.get())
        if ctx.is_restored():
            self.seen_state.update(sorted(self.seen))  # the union holds each subtask's copy: one is enough

    def flat_map(self, click):
        if click["seq"] not in self.seen:
            self.seen.add(click["seq"])
            self.seen_state.add(click["seq"])
            yield click


class NotEveryFifth(FilterFunction):
    def filter(self, click):
        return click["seq"] % 5 != 0


class Shout(MapFunction):
    def map(self, session):
        return {**session, "country": session["country"].upper()}


class ShoutColumns(Shout):
    """``Shout`` over a table: a ``map_batch``, so the step runs on the vectorised path."""

    def map_batch(self, sessions):
        import pyarrow.compute as pc

        country = sessions.column_names.index("country")
        return sessions.set_column(country, "country", pc.utf8_upper(sessions.column("country")))


def _deduped(directory, job_id="deduped", sink="sinks/deduped", dedupe_parallelism=2, shout=None):
    from datetime import timedelta

    from state_store import WatermarkStrategy

    return (Dataflow.from_source(FileSource(str(directory), "parquet", CLICK, max_files_per_batch=1), job_id=job_id,
                                 watermark_strategy=WatermarkStrategy.for_bounded_out_of_orderness(
                                     timedelta(seconds=5)).with_timestamp_column("ts"))
            .flat_map(Dedupe(), output_type=CLICK, uid="dedupe", parallelism=dedupe_parallelism)
            .filter(NotEveryFifth())
            .key_by("user_id").process(CountrySessions(), uid="sessions", output_type=SESSION, order_by=["ts", "seq"])
            .map(shout or Shout(), output_type=SESSION)
            .key_by("country").process(CountSessions(), uid="per-country", output_type=COUNTS, parallelism=3)
            .sink_to(sink))


def test_non_keyed_operators_with_and_without_operator_state_in_a_chain(spark, lake):
    from state_store.ops.restore import rescale_job
    from state_store.ops.state_processor import SavepointReader

    directory, _ = _clicks(lake, files=2)
    again = directory / "clicks-00002.parquet"  # file 1's clicks again (a producer's retry), then new ones
    again.write_bytes((directory / "clicks-00001.parquet").read_bytes())
    write_clicks(directory, 1, events=300, users=USERS, first_minute=3)
    chain = _deduped(directory)
    assert chain.uids == ["dedupe", "filter-2", "sessions", "map-4", "per-country"]
    run_job(spark, chain, lake.settings, max_microbatches=2, progress=_quiet)
    rescale_job(spark, lake.settings, chain, {"dedupe": 3}, say=_quiet)  # every new subtask gets the whole union
    run_job(spark, chain, lake.settings, progress=_quiet)
    unique = pd.concat([pq.read_table(f).to_pandas() for f in sorted(directory.glob("*.parquet")) if f != again])
    kept = unique[unique["seq"] % 5 != 0]
    want = expected(kept).assign(country=lambda d: d["country"].str.upper())
    pd.testing.assert_frame_equal(_latest_totals(spark, lake, "sinks/deduped"), want, check_dtype=False)
    seen = SavepointReader.for_checkpoint(spark, "deduped", settings=lake.settings).list_state("seen", uid="dedupe")
    assert {r["value"] for r in seen.collect()} == set(unique["seq"])
    # The same microbatches cut into other runs (0 | 1, 2 | 3 against 0, 1 | 2, 3): each step from one microbatch
    # to the next is taken inside a pass in one job and through a restore in the other; the same sink, with the
    # map's step vectorised (``map_batch``) in the cut job.
    for microbatches in (1, 2, 1):
        run_job(spark, _deduped(directory, "cut", "sinks/cut", shout=ShoutColumns()), lake.settings,
                max_microbatches=microbatches, progress=_quiet)
    assert _sink_rows(spark, lake, "sinks/cut") == _sink_rows(spark, lake, "sinks/deduped")


class LateAside(ProcessFunction):
    """Each click on, or (at or below the operator's watermark) to the side output: Flink's ProcessFunction."""

    def process_element(self, click, ctx):
        if click["ts"] <= ctx.current_watermark():
            ctx.output(LATE_TIMED, click)
        else:
            yield click


class CountTimed(KeyedProcessFunction):
    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("n", Types.LONG()))

    def process(self, key, records, ctx):
        self.n.update((self.n.value() or 0) + len(records))
        yield {"k": key, "n": self.n.value()}


LATE_TIMED = OutputTag("late", TIMED)
TIMED_COUNT = Types.ROW_NAMED(["k", "n"], [Types.STRING(), Types.LONG()])


def _aside(lake, job_id="aside"):
    return (Dataflow.from_source(FileSource(str(lake.events), "json", TIMED, max_files_per_batch=1), job_id=job_id,
                                 watermark_strategy=STRATEGY)
            .process(LateAside(), uid="aside", output_type=TIMED, side_outputs=[LATE_TIMED])
            .key_by("k").process(CountTimed(), uid="count", output_type=TIMED_COUNT)
            .sink_to(f"sinks/{job_id}"))


def test_a_process_function_on_a_stream_not_keyed_sends_late_records_aside_replays_and_restores_rescaled(
        spark, tmp_path):
    """Flink's ProcessFunction (issue 61, item 4 in part): on a stream that is not keyed, each record's rows and
    side outputs, with the operator's watermark; no timers. A crash after the sink write replays to the clean
    run's sink, side output and state; a savepoint restores at parallelism 3 on the other backend and goes on
    as the clean run."""
    from state_store.delta.points import StatePoint
    from state_store.functions import ProcessContext
    from state_store.job import SHARE_KEY
    from state_store.ops.restore import restore_job
    from state_store.ops.savepoint import take_savepoint
    from tests.support.helpers import run as run_in
    from tests.support.helpers import sink_rows, state_at_latest_checkpoint

    def outputs(lake, spec):
        late = spark.read.format("delta").load(str(lake.settings.in_warehouse(spec.side_output_sink(LATE_TIMED),
                                                                               "sink")))
        return sink_rows(spark, lake, spec), sorted((r["k"], r["ts"], r["_microbatch"]) for r in late.collect())

    clean = Lake(tmp_path / "clean")
    write_window_clicks(clean)
    spec = _aside(clean)
    assert spec.uids == ["aside", "count"] and spec.operator("aside").key == SHARE_KEY
    run_in(spark, spec, clean)
    sink, late = outputs(clean, spec)
    assert late == [("a", 1 * S, 2), ("a", 8 * S, 1)]  # at or below W = 12 s - 1, then 25 s - 1
    assert sorted((r["k"], r["n"], r["_microbatch"]) for r in spark.read.format("delta").load(
        str(clean.settings.in_warehouse(spec.sink, "sink"))).collect()) == [
        ("a", 3, 0), ("b", 1, 0), ("b", 2, 1), ("c", 1, 2)]

    crashed = Lake(tmp_path / "crashed")
    write_window_clicks(crashed)
    with pytest.raises(InjectedFault):
        run_in(spark, _aside(crashed), crashed, faults=FaultInjector("after_sink_write", batch_id=1))
    run_in(spark, _aside(crashed), crashed)
    assert outputs(crashed, _aside(crashed)) == (sink, late)
    assert state_at_latest_checkpoint(spark, crashed, _aside(crashed)) == state_at_latest_checkpoint(spark, clean,
                                                                                                     spec)
    moved = Lake(tmp_path / "moved")
    write_window_clicks(moved)
    run_in(spark, _aside(moved), moved, max_microbatches=1)
    saved = take_savepoint(spark, moved.settings, "aside", say=_quiet)
    restore_job(spark, moved.settings, _aside(moved), StatePoint(saved), parallelism=3, backend="hashmap", say=_quiet)
    run_in(spark, _aside(moved), moved)
    assert outputs(moved, _aside(moved)) == (sink, late)
    assert JobStore(moved.settings.job_dir("aside")).latest_checkpoint().of_operator("aside").parallelism == 3
    with pytest.raises(ConfigError, match="a ProcessFunction on a stream that is not keyed has no timers"):
        ProcessContext.__new__(ProcessContext).timer_service()


def test_a_non_keyed_operator_has_no_keyed_state_and_needs_its_kind_of_function(tmp_path):
    from state_store.dataflow import RecordOperator
    from state_store.functions import RuntimeContext
    from state_store.state.store import KeyedStateStore

    class Keyed(MapFunction):
        def open(self, ctx):
            ctx.get_state(ValueStateDescriptor("x", Types.LONG()))

        def map(self, r):
            return r

    with pytest.raises(ConfigError, match="has no keyed state"):
        RecordOperator(Keyed()).open(RuntimeContext("m", KeyedStateStore(), 0, 2, 128))
    start = Dataflow.from_source(FileSource(str(tmp_path), "parquet", CLICK), job_id="bad")
    with pytest.raises(ConfigError, match="takes a state_store.MapFunction"):
        start.map(NotEveryFifth(), output_type=CLICK)
    with pytest.raises(ConfigError, match="a keyed stream takes .process"):
        start.key_by("user_id").filter(NotEveryFifth())


def test_flinks_broadcast_spelling_is_the_broadcast_input_of_the_operator_it_feeds_keyed_or_not(tmp_path):
    """``stream.connect(rules.broadcast(DESCRIPTOR)).process(...)`` (Flink's spelling, issue 61 item 4) builds the
    job the ``broadcast_source`` spelling builds, for a ``KeyedBroadcastProcessFunction`` on a keyed stream and a
    ``BroadcastProcessFunction`` on one that is not; after operators, the broadcast stream is the next operator's
    (a source, or an operator's output); what it cannot be is refused naming the fix."""
    from dataclasses import fields

    from state_store import BroadcastProcessFunction, KeyedBroadcastProcessFunction

    limits_type = Types.ROW_NAMED(["country", "limit"], [Types.STRING(), Types.DOUBLE()])
    limits = MapStateDescriptor("limits", Types.STRING(), Types.DOUBLE())
    (tmp_path / "clicks").mkdir()
    (tmp_path / "limits").mkdir()
    clicks_source, limits_source = (FileSource(str(tmp_path / "clicks"), "json", TIMED),
                                    FileSource(str(tmp_path / "limits"), "json", limits_type))

    class Keyed(KeyedBroadcastProcessFunction):
        def process_broadcast_element(self, value, ctx):
            ctx.get_broadcast_state(limits).put(value["country"], value["limit"])

        def process(self, key, records, ctx):
            yield from records

    class NotKeyed(BroadcastProcessFunction):
        def process_broadcast_element(self, value, ctx):
            ctx.get_broadcast_state(limits).put(value["country"], value["limit"])

        def process_element(self, value, ctx):
            yield value

    def clicks(**settings):
        return Dataflow.from_source(clicks_source, job_id="b", **settings)

    rules = Dataflow.from_source(limits_source, job_id="b")
    for function, keyed in ((Keyed(), True), (NotKeyed(), False)):
        flink = (clicks().key_by("k") if keyed else clicks()).connect(rules.broadcast(limits)).process(
            function, uid="op", output_type=TIMED).sink_to("sinks/b")
        ours = clicks(broadcast_source=limits_source)
        ours = (ours.key_by("k") if keyed else ours).process(function, uid="op", output_type=TIMED).sink_to("sinks/b")
        differ = [f.name for f in fields(JobSpec) if getattr(flink, f.name) != getattr(ours, f.name)]
        assert differ == ([] if keyed else ["function"]) and flink.broadcast_source == limits_source
        assert getattr(flink.function, "function", flink.function) is function  # a non-keyed one: wrapped
    with pytest.raises(ConfigError, match="each a MapStateDescriptor"):
        rules.broadcast(ValueStateDescriptor("x", Types.LONG()))
    with pytest.raises(ConfigError, match="no watermark_strategy"):
        Dataflow.from_source(limits_source, job_id="b", watermark_strategy=STRATEGY).broadcast(limits)
    # At a later operator: a source of the job (planned with the others), or what an operator of the graph emits
    first = clicks().key_by("k").process(Keyed(), uid="first", output_type=TIMED)
    job = first.key_by("k").connect(rules.broadcast(limits)).process(Keyed(), uid="op", output_type=TIMED) \
        .sink_to("sinks/b")
    assert job.operator("op").broadcast_source == limits_source and job.operator("first").broadcast_source is None
    assert [i.name for i in job.planned_inputs()] == ["main", "op:broadcast"]
    fed = first.connect(first.broadcast(limits)).process(NotKeyed(), uid="op", output_type=TIMED).sink_to("s/b")
    assert fed.operator("op").broadcast_source.upstream == "first" and fed.inputs_of("op") == ["first", "first"]
    with pytest.raises(ConfigError, match="a stream of operators is broadcast to a later operator"):
        clicks().connect(first.broadcast(limits)).process(NotKeyed(), uid="op", output_type=TIMED)
    with pytest.raises(ConfigError, match="give both the same job_id"):
        clicks().connect(Dataflow.from_source(limits_source, job_id="other").broadcast(limits)).process(
            NotKeyed(), uid="op", output_type=TIMED)


class CountLate(KeyedProcessFunction):
    """A running count of a key's late records, with the latest one's time."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("late", Types.LONG()))

    def process(self, key, records, ctx):
        self.count.update((self.count.value() or 0) + len(records))
        yield {"k": key, "late": self.count.value(), "ts": records[-1]["ts"]}


LATE_COUNT = Types.ROW_NAMED(["k", "late", "ts"], [Types.STRING(), Types.LONG(), Types.LONG()])


def _late_recounted(lake):
    """Clicks per key and 10 s window, their late clicks a stream counted per key (Flink's SideOutputITCase's
    late data, processed further in the job)."""
    from state_store import ColumnAggregate, TumblingEventTimeWindows

    counted = (Dataflow.from_source(FileSource(str(lake.events), "json", TIMED, max_files_per_batch=1),
                                    job_id="late", watermark_strategy=STRATEGY)
               .key_by("k").window(TumblingEventTimeWindows.of(10 * S)).side_output_late_data(LATE_TIMED)
               .aggregate(ColumnAggregate(n="count(*)"), uid="per-window"))
    recounted = counted.get_side_output(LATE_TIMED).key_by("k").process(CountLate(), uid="late-count",
                                                                        output_type=LATE_COUNT)
    return counted, recounted, Dataflow.graph(counted.sink_to("sinks/per_window"), recounted.sink_to("sinks/late"))


def test_a_side_output_is_a_stream_the_job_processes_further_exactly_once(spark, tmp_path):
    """``get_side_output(tag)`` (issue 61, item 3): a window's late records keyed and counted by a later operator;
    a side output read so goes to that operator, not to a table; a crash after a sink write replays to the clean
    run's sinks and state; a savepoint restores at parallelism 3 on the other backend and goes on as the clean
    run. Reading a side output the operator does not declare, or sinking one unprocessed, is refused."""
    from state_store.delta.points import StatePoint
    from state_store.ops.restore import restore_job
    from state_store.ops.savepoint import take_savepoint
    from tests.support.helpers import run as run_in
    from tests.support.helpers import state_at_latest_checkpoint

    def sinks(lake):
        return [sorted(tuple(r) for r in spark.read.format("delta").load(
            str(lake.settings.in_warehouse(f"sinks/{name}", "sink"))).collect()) for name in ("per_window", "late")]

    clean = Lake(tmp_path / "clean")
    write_window_clicks(clean)
    counted, recounted, job = _late_recounted(clean)
    assert job.uids == ["per-window", "late-count"] and job.streamed_side_outputs("per-window") == ["late"]
    assert job.operator("late-count").describe()["source"] == {"type": "operator", "uid": "per-window",
                                                               "side_output": "late"}
    described = job.describe()  # the catalog, the page and lineage see no table for the streamed side output
    assert described["side_outputs"] == {} and described["operators"][0]["streamed_side_outputs"] == ["late"]
    run_in(spark, job, clean)
    per_window, late = sinks(clean)
    # a's 8 s click comes in microbatch 1, after [0, 10 s) fired at W = 12 s - 1; its 1 s click in microbatch 2
    assert late == [("a", 1, 8 * S, 1), ("a", 2, 1 * S, 2)]
    assert [r[:3] for r in per_window] == [("a", 0, 10 * S), ("a", 10 * S, 20 * S), ("b", 0, 10 * S),
                                           ("b", 20 * S, 30 * S)]
    assert not clean.settings.sink(job.side_output_sink(LATE_TIMED)).exists()  # a stream, not a table

    crashed = Lake(tmp_path / "crashed")
    write_window_clicks(crashed)
    with pytest.raises(InjectedFault):
        run_in(spark, _late_recounted(crashed)[2], crashed, faults=FaultInjector("after_sink_write", batch_id=1))
    run_in(spark, _late_recounted(crashed)[2], crashed)
    assert sinks(crashed) == [per_window, late]
    assert state_at_latest_checkpoint(spark, crashed, job.head) == state_at_latest_checkpoint(spark, clean, job.head)

    moved = Lake(tmp_path / "moved")
    write_window_clicks(moved)
    run_in(spark, _late_recounted(moved)[2], moved, max_microbatches=1)
    saved = take_savepoint(spark, moved.settings, "late", say=_quiet)
    restore_job(spark, moved.settings, _late_recounted(moved)[2], StatePoint(saved), parallelism=3,
                backend="hashmap", say=_quiet)
    run_in(spark, _late_recounted(moved)[2], moved)
    assert sinks(moved) == [per_window, late]

    other = OutputTag("other", TIMED)
    with pytest.raises(ConfigError, match=r"operator 'per-window' declares side outputs \['late'\]; add the tag"):
        counted.get_side_output(other)
    with pytest.raises(ConfigError, match="a side output nobody reads goes to its own table already"):
        counted.get_side_output(LATE_TIMED).sink_to("sinks/x")


LATEST_COUNTS = MapStateDescriptor("counts", Types.STRING(), Types.LONG())
SEEN = Types.ROW_NAMED(["k", "n", "all"], [Types.STRING(), Types.LONG(), Types.STRING()])


class EveryCount(BroadcastProcessFunction):
    """Every key's latest count, broadcast: each count row with all the counts its subtask knows."""

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(LATEST_COUNTS).put(value["k"], value["n"])

    def process_element(self, value, ctx):
        counts = ctx.get_broadcast_state(LATEST_COUNTS)
        yield {**value, "all": ",".join(f"{k}={counts.get(k)}" for k in sorted(counts.keys()))}


def _broadcast_counts_job(lake):
    if not (lake.events / "000.json").exists():  # an input rewritten after planning is refused, rightly
        write_window_clicks(lake)
    counted = (Dataflow.from_source(FileSource(str(lake.events), "json", TIMED, max_files_per_batch=1),
                                    job_id="counts", watermark_strategy=STRATEGY)
               .key_by("k").process(CountTimed(), uid="count", output_type=TIMED_COUNT))
    return counted.connect(counted.broadcast(LATEST_COUNTS)).process(EveryCount(), uid="every", output_type=SEEN) \
        .sink_to("sinks/counts")


@pytest.mark.spark
def test_an_operators_output_broadcast_to_a_later_operator_reaches_every_subtask_first(spark, tmp_path):
    """Issue 61, item 4: ``counted.connect(counted.broadcast(LATEST_COUNTS))``: a stream of the graph broadcast to a
    later operator, each microbatch's counts on every subtask before that microbatch's count rows (so each row
    sees its own count, and every count before it); a crash replays to the clean run, a savepoint restored at
    parallelism 3 on the hashmap backend gives every new subtask the counts."""
    from tests.support.helpers import crashed_and_moved, sink_rows

    clean = Lake(tmp_path / "clean")
    spec = _broadcast_counts_job(clean)
    assert spec.inputs_of("every") == ["count", "count"]
    run_job(spark, spec, clean.settings)
    rows = sorted((r["_microbatch"], r["k"], r["n"], r["all"]) for r in spark.read.format("delta").load(
        str(clean.settings.sink("sinks/counts"))).collect())
    assert rows == [(0, "a", 3, "a=3,b=1"), (0, "b", 1, "a=3,b=1"), (1, "a", 4, "a=4,b=2"),
                    (1, "b", 2, "a=4,b=2"), (2, "a", 5, "a=5,b=2,c=1"), (2, "c", 1, "a=5,b=2,c=1")]
    crashed, moved = crashed_and_moved(spark, tmp_path, _broadcast_counts_job, "counts", crash_batch=1,
                                       saved_after=1)
    assert sink_rows(spark, crashed, spec) == sink_rows(spark, clean, spec)
    assert sink_rows(spark, moved, spec) == sink_rows(spark, clean, spec)
