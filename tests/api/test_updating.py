"""Updating results (issue 62, part 1), after Flink's ``GroupAggregateITCase``: an unbounded group aggregation
emits a changelog (``+I``, then ``-U``/``+U`` per microbatch that changes a key), which an ``UpsertDeltaSink``
keeps as the current table and a ``DeltaSink`` keeps as every change; an aggregation over that changelog
retracts and deletes. The expected tables are DuckDB's ``GROUP BY`` over the same rows."""
from __future__ import annotations

import json

import duckdb
import pytest

from state_store import ColumnAggregate, ConfigError, Dataflow, FileSource, Types
from state_store.delta.upsert_sink import UpsertDeltaSink
from tests.support.helpers import crashed_and_moved
from tests.support.helpers import run as run_job
from tests.support.lake import Lake

CLICK = Types.ROW_NAMED(["user", "amount", "ts"], [Types.STRING(), Types.LONG(), Types.LONG()])
BATCHES = [  # a file a microbatch; "cy" never spends (its sum null), "al" sits the third out (no change of it)
    [("al", 5), ("bo", 1), ("al", 2), ("cy", None)],
    [("bo", 4), ("dee", 7), ("al", 1)],
    [("cy", None), ("bo", 2), ("eve", 3), ("dee", 1), ("dee", 2)],
    [("al", 9), ("fay", 1)],
]
TOTALS = "SELECT user, count(*) AS clicks, sum(amount) AS spent, max(amount) AS top FROM clicks GROUP BY user"
PER_COUNT = f"SELECT clicks, count(*) AS users, sum(spent) AS spent FROM ({TOTALS}) GROUP BY clicks"


def write_clicks(folder, batches=BATCHES) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, batch in enumerate(batches):
        path = folder / f"part-{i:03d}.json"
        if not path.exists():  # a test's job builder is called again for each run: write the input once
            path.write_text("".join(json.dumps({"user": u, "amount": a, "ts": i * 10 + j}) + "\n"
                                    for j, (u, a) in enumerate(batch)))


def totals(lake, parallelism: int = 2):
    write_clicks(lake.inputs / "clicks")
    return (Dataflow.from_source(FileSource(str(lake.inputs / "clicks"), "json", CLICK, max_files_per_batch=1),
                                 job_id="totals")
            .key_by("user").aggregate(ColumnAggregate(clicks="count(*)", spent="sum(amount)", top="max(amount)"),
                                      uid="per-user", parallelism=parallelism))


def per_count(lake):
    """Users per number of clicks: an aggregation of the per-user changelog, which moves a user from one count
    to the next (-U to the old, +U to the new) and deletes a count no user has any more."""
    return (totals(lake).key_by("clicks").aggregate(ColumnAggregate(users="count(*)", spent="sum(spent)"),
                                                    uid="per-count")
            .sink_to(UpsertDeltaSink("sinks/per_count", key="clicks")))


def expected(query: str, batches=BATCHES) -> list[tuple]:
    con = duckdb.connect()
    con.execute("CREATE TABLE clicks (user VARCHAR, amount BIGINT)")
    con.executemany("INSERT INTO clicks VALUES (?, ?)", [r for batch in batches for r in batch])
    return sorted(con.execute(query).fetchall(), key=repr)


def table(spark, lake, path: str, columns: list[str]) -> list[tuple]:
    df = spark.read.format("delta").load(str(lake.settings.in_warehouse(path, "sink")))
    return sorted((tuple(r) for r in df.select(*columns).collect()), key=repr)


@pytest.mark.spark
def test_a_group_aggregate_upserts_the_current_table_and_logs_each_change_exactly_once(spark, tmp_path):
    """Per user, count, sum and max of all clicks so far: the upsert table equals DuckDB's GROUP BY after every
    run; the changelog sink holds Flink's changes (one per key and microbatch that changes it); a crash between
    the sink's commit and the checkpoint, and at the other fault points, replays to the clean tables; four runs of
    one microbatch equal one run of four; a savepoint restored at parallelism 3 on the hashmap backend goes on."""
    from state_store.run.runtime import FaultInjector, InjectedFault

    def upserted(lake):
        return totals(lake).sink_to(UpsertDeltaSink("sinks/totals", key="user"))

    columns = ["user", "clicks", "spent", "top"]
    clean = Lake(tmp_path / "clean")
    run_job(spark, upserted(clean), clean)
    assert table(spark, clean, "sinks/totals", columns) == expected(TOTALS)
    rows = spark.read.format("delta").load(str(clean.settings.in_warehouse("sinks/totals", "sink")))
    assert sorted(rows.columns) == sorted(columns + ["_microbatch"])
    assert {r["user"]: r["_microbatch"] for r in rows.collect()} == {  # the microbatch of each row's last change
        "al": 3, "bo": 2, "cy": 2, "dee": 2, "eve": 2, "fay": 3}

    logged = Lake(tmp_path / "logged")
    run_job(spark, totals(logged).sink_to("sinks/changes"), logged)
    changes = sorted(table(spark, logged, "sinks/changes", ["_microbatch", "user", "_kind", "clicks", "spent"]),
                     key=lambda c: (c[0], ["+I", "-U", "+U", "-D"].index(c[2])))  # a microbatch's in their order
    assert [c[1:] for c in changes if c[1] == "al"] == [
        ("al", "+I", 2, 7), ("al", "-U", 2, 7), ("al", "+U", 3, 8), ("al", "-U", 3, 8), ("al", "+U", 4, 17)]
    assert [c for c in changes if c[1] == "cy"] == [(0, "cy", "+I", 1, None), (2, "cy", "-U", 1, None),
                                                     (2, "cy", "+U", 2, None)]
    assert {c[2] for c in changes} == {"+I", "-U", "+U"}

    stepped = Lake(tmp_path / "stepped")
    for n in range(1, len(BATCHES) + 1):
        run_job(spark, upserted(stepped), stepped, max_microbatches=1)
        assert table(spark, stepped, "sinks/totals", columns) == expected(TOTALS, BATCHES[:n])

    for point in ("after_sink_write", "after_commit", "before_checkpoint"):
        crashed = Lake(tmp_path / f"crashed-{point}")
        with pytest.raises(InjectedFault):
            run_job(spark, upserted(crashed), crashed, faults=FaultInjector(point, batch_id=2))
        run_job(spark, upserted(crashed), crashed)
        assert table(spark, crashed, "sinks/totals", columns) == expected(TOTALS), point

    _, moved = crashed_and_moved(spark, tmp_path / "rescaled", upserted, "totals", 1, 2)
    assert table(spark, moved, "sinks/totals", columns) == expected(TOTALS)


@pytest.mark.spark
def test_an_aggregate_of_a_changelog_retracts_and_deletes_as_flinks(spark, tmp_path):
    """Users per click count, over the per-user changelog: each -U takes a user out of its old count, and a count
    left with no user is deleted from the upsert table; equal to DuckDB's nested GROUP BY after each microbatch,
    and after a crash replayed."""
    from state_store.run.runtime import FaultInjector, InjectedFault

    lake = Lake(tmp_path / "steps")
    for n in range(1, len(BATCHES) + 1):
        run_job(spark, per_count(lake), lake, max_microbatches=1)
        assert table(spark, lake, "sinks/per_count", ["clicks", "users", "spent"]) == expected(
            PER_COUNT, BATCHES[:n]), n
    crashed = Lake(tmp_path / "crashed")
    with pytest.raises(InjectedFault):
        run_job(spark, per_count(crashed), crashed, faults=FaultInjector("after_commit", batch_id=1))
    run_job(spark, per_count(crashed), crashed)
    assert table(spark, crashed, "sinks/per_count", ["clicks", "users", "spent"]) == expected(PER_COUNT)


@pytest.mark.parametrize("build, message", [
    (lambda lake: totals(lake).key_by("clicks").aggregate(ColumnAggregate(most="max(spent)"), uid="x"),
     r"over an updating stream .* most='max\(\.\.\.\)' cannot \(only count, sum, avg can\)"),
    (lambda lake: Dataflow.from_source(FileSource(str(lake.inputs), "json", CLICK), job_id="j")
     .aggregate(ColumnAggregate(n="count(*)"), uid="x"), r"aggregate\(uid='x'\) needs a keyed stream"),
    (lambda lake: totals(lake).sink_to(UpsertDeltaSink("sinks/t", key="account")),
     r"operator 'per-user''s output has no column 'account' .*key the sink by the result's key columns"),
    (lambda lake: UpsertDeltaSink("sinks/t", key=[]), r"name the column \(or columns\) that names a result row"),
])
def test_updating_results_built_wrong_are_refused_naming_the_fix(tmp_path, build, message):
    with pytest.raises(ConfigError, match=message):
        build(Lake(tmp_path))
