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
    CountSessions,
    CountrySessions,
    dataflow,
    expected,
    write_clicks,
)
from state_store import ChainSpec, ConfigError, Dataflow, FileSource, JobSpec, RestoreError, Types
from state_store.job_store import JobStore
from state_store.runtime import FAULT_POINTS, FaultInjector, InjectedFault, run_job


def _quiet(_line):
    pass


def _latest_totals(spark, lake, sink="sinks/sessions_per_country") -> pd.DataFrame:
    """Per country, the totals of the last microbatch that changed them."""
    rows = spark.read.format("delta").load(str(lake.settings.sink(sink))).toPandas()
    last = rows.sort_values("_microbatch").groupby("country").tail(1)
    return last[["country", "sessions", "clicks"]].sort_values("country").reset_index(drop=True)


def _sink_rows(spark, lake, sink="sinks/sessions_per_country") -> list[tuple]:
    rows = spark.read.format("delta").load(str(lake.settings.sink(sink))).collect()
    return sorted(tuple(r) for r in rows)


def _clicks(lake, files: int = 3):
    directory = lake.inputs / "clicks"
    write_clicks(directory, files, events=300, users=200)
    return directory, pd.concat([pq.read_table(f).to_pandas() for f in sorted(directory.glob("*.parquet"))])


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
    assert isinstance(chain, ChainSpec) and chain.uids == ["sessions", "per-country"]
    second = chain.operator("per-country")
    assert (second.key, second.key_type.name, second.parallelism) == ("country", "STRING", 3)
    assert second.source.schema == SESSION and second.watermark_strategy is None
    assert chain.with_overrides(backend="hashmap").operators[1].backend == "hashmap"


@pytest.mark.parametrize("build, message", [
    (lambda d: d.process(CountSessions(), uid="x", output_type=COUNTS), "needs a keyed stream"),
    (lambda d: d.key_by("user_id").key_by("country"), "before it is keyed again"),
    (lambda d: d.key_by("user_id").process(CountrySessions(), uid="s", output_type=SESSION).key_by("page"),
     "has no column 'page'"),
    (lambda d: d.key_by("user_id").process(CountrySessions(), uid="s", output_type=SESSION)
     .key_by("country").process(CountSessions(), uid="s", output_type=COUNTS).sink_to("sinks/x"), "given twice"),
    (lambda d: d.key_by("user_id").sink_to("sinks/x"), "not processed"),
    (lambda d: d.sink_to("sinks/x"), "at least one operator"),
    (lambda d: d.key_by("ts", Types.DOUBLE()), "STRING, LONG or INT"),
])
def test_a_dataflow_built_wrong_is_refused_naming_the_fix(tmp_path, build, message):
    start = Dataflow.from_source(FileSource(str(tmp_path), "parquet", CLICK), job_id="bad")
    with pytest.raises(ConfigError, match=message):
        build(start)


def test_an_operators_own_parallelism_is_not_overridden_for_the_whole_job(tmp_path):
    with pytest.raises(ConfigError, match="each with its own"):
        dataflow(tmp_path).with_overrides(parallelism=4)


# -- runs ----------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["delta", "hashmap"])
def test_two_operators_give_what_pandas_computes_and_one_checkpoint_pins_both(spark, lake, backend):
    directory, clicks = _clicks(lake)
    chain = dataflow(directory, backend=backend)
    first = run_job(spark, chain, lake.settings, max_microbatches=1, progress=_quiet)
    rest = run_job(spark, chain, lake.settings, progress=_quiet)
    assert len(first.batches) == 1 and len(rest.batches) == 2
    pd.testing.assert_frame_equal(_latest_totals(spark, lake), expected(clicks), check_dtype=False)

    store = JobStore(lake.settings.job_dir(chain.job_id))
    checkpoint = store.latest_checkpoint()
    second = checkpoint.of_operator("per-country")
    assert (checkpoint.uid, checkpoint.parallelism, checkpoint.batch_id) == ("sessions", 2, 2)
    assert (second.parallelism, second.batch_id, second.backend, second.source_offsets) == (3, 2, backend, {})
    assert second.entries["per-country.totals"] == len(expected(clicks))
    assert checkpoint.sink is not None and second.sink == checkpoint.sink
    assert not any(store.operator_dir("per-country").joinpath("staging").glob("edge-*")), "edge files left"


@pytest.mark.slow
def test_a_run_of_three_microbatches_equals_three_runs_of_one(spark, lake):
    directory, _ = _clicks(lake)
    run_job(spark, dataflow(directory, job_id="at-once", sink="sinks/at-once"), lake.settings, progress=_quiet)
    for _ in range(3):
        run_job(spark, dataflow(directory, job_id="one-by-one", sink="sinks/one-by-one"), lake.settings,
                max_microbatches=1, progress=_quiet)
    assert _sink_rows(spark, lake, "sinks/at-once") == _sink_rows(spark, lake, "sinks/one-by-one")


# Where a crash can stop a run of two operators: every step of the first, and the second's own writes and
# commits, between the first's and the checkpoint.
CRASHES = [(point, "sessions") for point in FAULT_POINTS] + [
    (point, "per-country") for point in FAULT_POINTS if point not in ("after_plan", "before_checkpoint",
                                                                     "after_checkpoint")]


@pytest.mark.slow
def test_a_crash_at_each_fault_point_of_either_operator_replays_to_a_clean_runs_sink_and_state(spark, lake):
    directory, clicks = _clicks(lake, files=2)
    run_job(spark, dataflow(directory, job_id="clean", sink="sinks/clean"), lake.settings, progress=_quiet)
    clean = _sink_rows(spark, lake, "sinks/clean")
    for i, (point, operator) in enumerate(CRASHES):
        job_id, sink = f"crash-{i}", f"sinks/crash-{i}"
        chain = dataflow(directory, job_id=job_id, sink=sink)
        run_job(spark, chain, lake.settings, max_microbatches=1, progress=_quiet)
        with pytest.raises(InjectedFault):
            run_job(spark, chain, lake.settings, progress=_quiet,
                    faults=FaultInjector(point, batch_id=1, operator=operator))
        run_job(spark, chain, lake.settings, progress=_quiet)
        assert _sink_rows(spark, lake, sink) == clean, (point, operator)
        state = JobStore(lake.settings.job_dir(job_id)).latest_checkpoint()
        assert (state.batch_id, state.of_operator("per-country").entries) == (
            1, JobStore(lake.settings.job_dir("clean")).latest_checkpoint().of_operator("per-country").entries)


@pytest.mark.slow
def test_an_operator_added_starts_empty_and_one_removed_is_refused(spark, lake):
    directory, clicks = _clicks(lake, files=2)
    chain = dataflow(directory, job_id="grows")
    alone = chain.operators[0].with_overrides(sink="sinks/sessions-only")
    run_job(spark, alone, lake.settings, max_microbatches=1, progress=_quiet)
    grown = ChainSpec([op.with_overrides(sink="sinks/grown") for op in chain.operators])
    said = []
    run_job(spark, grown, lake.settings, progress=said.append)
    checkpoint = JobStore(lake.settings.job_dir("grows")).latest_checkpoint()
    assert checkpoint.of_operator("per-country").batch_id == 1
    assert any("operator per-country" in line for line in said)
    with pytest.raises(RestoreError, match=r"operators \['per-country'\] that the job no longer has"):
        run_job(spark, alone, lake.settings, progress=_quiet)
