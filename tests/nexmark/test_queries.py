"""Nexmark's queries run by Lakestate's SQL (bench/nexmark, issue 63) on a slice of the generator's events (3,000
at 200 events/s, 3 files), each final table equal to Flink SQL 2.3's over the same events: its row count and
digest, stored by ``python bench/nexmark/run.py --store tests/fixtures/nexmark_flink.json`` (the same in each of
its runs). q12, in processing time, is
checked for its invariants; q6 is not valid in Flink 2.3. A crash of q8 at each step of a microbatch, replayed,
gives the clean run's table. q5, q7, q8 and q11 written by hand as dataflows give Flink's tables too, and q6, as
Nexmark means it, DuckDB's over the same files."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bench.nexmark import dataflows
from bench.nexmark.engines import rows_of, run_lakestate, sql_job
from bench.nexmark.generate import parse_base_time, write_files
from bench.nexmark.run import (
    BASE_TIME,
    PROCESSING_TIME,
    QUERIES,
    SLICE,
    digest,
    lakestate_q12_invariants,
    processing_time_table,
)
from bench.nexmark.tables import write_side_input
from state_store.run.context import FAULT_POINTS, FaultInjector, InjectedFault

EXPECTED = json.loads((Path(__file__).parent.parent / "fixtures" / "nexmark_flink.json").read_text())


@pytest.fixture(scope="module")
def nexmark(tmp_path_factory):
    """The slice's events and q13's side input."""
    where = tmp_path_factory.mktemp("nexmark")
    write_files(where / "events", SLICE["events"], SLICE["files"], SLICE["seed"], SLICE["rate"],
                parse_base_time(BASE_TIME))
    return where / "events", write_side_input(where / "side")


def expected(n: int) -> tuple:
    stored = EXPECTED["queries"][f"q{n}"]
    return stored["rows"], stored["sha256"]


@pytest.mark.spark
@pytest.mark.parametrize("n", QUERIES)
def test_each_query_gives_flinks_final_table(spark, tmp_path, nexmark, n):
    events, side = nexmark
    started = time.time()
    rows = rows_of(run_lakestate(spark, sql_job(n, events, side), tmp_path / "root", f"sinks/q{n}")["table"])
    if n in PROCESSING_TIME:  # windows of the run's processing time: none has passed when the input ends
        assert rows == [] and expected(n) == (0, digest([]))  # Flink's none either, on this short slice
        rows = rows_of(processing_time_table(spark, n, events, side, tmp_path / "root", started))
        bids = sum(line.startswith('{"event_type":2') for p in events.glob("part-*.json") for line in p.open())
        assert lakestate_q12_invariants(rows, bids) == [] and len(rows) > 10
        return
    assert (len(rows), digest(rows)) == expected(n), (rows[:3], EXPECTED["queries"][f"q{n}"]["head"])


@pytest.mark.spark
@pytest.mark.parametrize("n", dataflows.HAND_WRITTEN)
def test_each_query_written_by_hand_gives_flinks_final_table(spark, tmp_path, nexmark, n):
    job = getattr(dataflows, f"q{n}")(str(nexmark[0]))
    rows = rows_of(run_lakestate(spark, job, tmp_path / "root", f"sinks/q{n}")["table"])
    assert (len(rows), digest(rows)) == expected(n), (rows[:3], EXPECTED["queries"][f"q{n}"]["head"])


@pytest.mark.spark
def test_q6_as_nexmark_means_it_gives_duckdbs_rows(spark, tmp_path, nexmark):
    import duckdb

    rows = rows_of(run_lakestate(spark, dataflows.q6(str(nexmark[0])), tmp_path / "root", "sinks/q6")["table"])
    files = str(nexmark[0] / "part-*.json")
    duckdbs = duckdb.sql(dataflows.DUCKDB_Q6.format(files=files)).fetchall()
    theirs = sorted(tuple(str(v) for v in row) for row in duckdbs)
    assert rows == theirs and len(rows) > 50


# The replays a crash can leave: the sink written and not the state, both written without a commit, a commit
# without its checkpoint, a checkpoint. Every one of FAULT_POINTS is crashed at by tests/run/test_exactly_once.py
# (a job of every state kind); tests/api/test_dataflow.py crashes either operator of a chain.
REPLAYS = ("after_sink_write", "before_commit", "after_commit", "after_checkpoint")


@pytest.mark.spark
def test_q8_crashed_at_each_step_of_a_microbatch_replays_to_flinks_table(spark, tmp_path, nexmark):
    events, side = nexmark
    assert set(REPLAYS) <= set(FAULT_POINTS)
    for point in REPLAYS:
        root = tmp_path / point
        with pytest.raises(InjectedFault):
            run_lakestate_crashing(spark, sql_job(8, events, side), root, FaultInjector(point, batch_id=1))
        rows = rows_of(run_lakestate(spark, sql_job(8, events, side), root, "sinks/q8")["table"])
        assert (len(rows), digest(rows)) == expected(8), point


def run_lakestate_crashing(spark, job, root: Path, faults: FaultInjector) -> None:
    from state_store.run.runtime import run_job
    from state_store.settings import Settings

    run_job(spark, job, Settings.load(root=root), progress=lambda line: None, end_of_input=True, faults=faults)
