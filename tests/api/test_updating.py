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
from tests.support.helpers import crashed_and_moved, duckdb_rows, materialized
from tests.support.helpers import delta_rows as table
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
PER_COUNT = (f"SELECT clicks, count(*) AS users, sum(spent) AS spent, count(DISTINCT top) AS tops FROM ({TOTALS}) "
             f"GROUP BY clicks")


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
    to the next (-U to the old, +U to the new) and deletes a count no user has any more; its distinct top
    amounts lose a user's old top with its -U."""
    return (totals(lake).key_by("clicks").aggregate(ColumnAggregate(users="count(*)", spent="sum(spent)",
                                                                    tops="count_distinct(top)"), uid="per-count")
            .sink_to(UpsertDeltaSink("sinks/per_count", key="clicks")))


def expected(query: str, batches=BATCHES) -> list[tuple]:
    return duckdb_rows("CREATE TABLE clicks (user VARCHAR, amount BIGINT)", [r for b in batches for r in b], query)


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
        assert table(spark, lake, "sinks/per_count", ["clicks", "users", "spent", "tops"]) == expected(
            PER_COUNT, BATCHES[:n]), n
    crashed = Lake(tmp_path / "crashed")
    with pytest.raises(InjectedFault):
        run_job(spark, per_count(crashed), crashed, faults=FaultInjector("after_commit", batch_id=1))
    run_job(spark, per_count(crashed), crashed)
    assert table(spark, crashed, "sinks/per_count", ["clicks", "users", "spent", "tops"]) == expected(PER_COUNT)


@pytest.mark.spark
def test_a_group_aggregates_state_ttl_starts_an_idle_key_over_as_flinks(spark, tmp_path):
    """``state_ttl`` as Flink's ``table.exec.state.ttl``: a key idle past it is seen again as new (``+I``, its
    count from 1), and with TTL on an update is emitted even when the result is unchanged."""
    from datetime import timedelta

    from state_store import StateTtlConfig

    lake = Lake(tmp_path)
    write_clicks(lake.inputs / "clicks", [[("al", 5), ("bo", 1)], [("al", 2), ("bo", None)], [("bo", None)]])
    ttl = StateTtlConfig.new_builder(timedelta(seconds=10)).build()
    spec = (Dataflow.from_source(FileSource(str(lake.inputs / "clicks"), "json", CLICK, max_files_per_batch=1),
                                 job_id="ttl")
            .key_by("user").aggregate(ColumnAggregate(spent="sum(amount)"), uid="per-user", state_ttl=ttl)
            .sink_to("sinks/changes"))
    for at in (0, 60_000, 65_000):  # the second microbatch a minute after the first, the third 5 s after that
        run_job(spark, spec, lake, max_microbatches=1, clock=lambda at=at: 1_700_000_000_000 + at)
    changes = sorted(table(spark, lake, "sinks/changes", ["_microbatch", "user", "_kind", "spent"]),
                     key=lambda c: (c[0], c[1], ["+I", "-U", "+U", "-D"].index(c[2])))
    assert changes == [(0, "al", "+I", 5), (0, "bo", "+I", 1),
                       (1, "al", "+I", 2), (1, "bo", "+I", None),  # idle past the TTL: new again
                       (2, "bo", "-U", None), (2, "bo", "+U", None)]  # unchanged, emitted under TTL


ORDER = Types.ROW_NAMED(["id", "status", "updated", "seq"],
                        [Types.STRING(), Types.STRING(), Types.LONG(), Types.LONG()])
ORDERS = [  # (id, status, updated): "a" updated out of time order; "c" twice at one time
    [("a", "new", 5), ("b", "new", 1), ("a", "paid", 9)],
    [("c", "new", 3), ("a", "sent", 7), ("c", "paid", 3)],
    [("b", "paid", 4), ("a", "late", 2), ("d", "new", 8)],
]


def write_rows(folder, batches, row) -> None:
    """``batches`` of tuples as JSON lines of ``row``'s columns, a file a microbatch, each row's ``seq`` its place
    in the whole input (the order the rows come in)."""
    folder.mkdir(parents=True, exist_ok=True)
    seq = 0
    for i, batch in enumerate(batches):
        lines = []
        for values in batch:
            lines.append(json.dumps(dict(zip(row.fields, (*values, seq)))) + "\n")
            seq += 1
        path = folder / f"part-{i:03d}.json"
        if not path.exists():
            path.write_text("".join(lines))


def expected_rows(table_name: str, row, batches, query: str) -> list[tuple]:
    con = duckdb.connect()
    names = list(row.fields)
    con.execute(f"CREATE TABLE {table_name} ({', '.join(f'{n} {DUCK[t.name]}' for n, t in row.fields.items())})")
    seq = 0
    for batch in batches:
        for values in batch:
            con.execute(f"INSERT INTO {table_name} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                        [*values, seq])
            seq += 1
    return sorted(con.execute(query).fetchall(), key=repr)


DUCK = {"STRING": "VARCHAR", "LONG": "BIGINT"}


@pytest.mark.spark
@pytest.mark.parametrize("keep, time_column, order", [
    ("first", None, "seq"), ("last", None, "seq DESC"), ("first", "updated", "updated, seq"),
    ("last", "updated", "updated DESC, seq DESC")])
def test_deduplication_keeps_each_keys_first_or_last_row_as_duckdbs_row_number(spark, tmp_path, keep, time_column,
                                                                                order):
    """After Flink's ``DeduplicateITCase``: per order id its first or last row, in processing time (the order the
    rows come in) or event time (``updated``; ties to the later row for the last, the earlier for the first), equal to
    DuckDB's ``ROW_NUMBER() ... = 1`` after each microbatch; the first row in processing time is insert-only (an
    append sink holds each id once), the others a changelog kept by an upsert sink."""
    lake = Lake(tmp_path)
    write_rows(lake.inputs / "orders", ORDERS, ORDER)
    deduplicated = (Dataflow.from_source(FileSource(str(lake.inputs / "orders"), "json", ORDER, max_files_per_batch=1),
                                         job_id="orders")
                    .key_by("id").deduplicate(uid="orders", keep=keep, time_column=time_column))
    insert_only = keep == "first" and time_column is None
    spec = deduplicated.sink_to("sinks/orders" if insert_only else UpsertDeltaSink("sinks/orders", key="id"))
    assert ("_kind" in spec.output_type.fields) is not insert_only
    for n in range(1, len(ORDERS) + 1):
        run_job(spark, spec, lake, max_microbatches=1)
        assert table(spark, lake, "sinks/orders", list(ORDER.fields)) == expected_rows(
            "orders", ORDER, ORDERS[:n], f"SELECT * FROM orders QUALIFY row_number() OVER (PARTITION BY id ORDER BY "
                                         f"{order}) = 1"), n


BID = Types.ROW_NAMED(["auction", "bidder", "price", "seq"], [Types.STRING(), Types.STRING(), Types.LONG(),
                                                              Types.LONG()])
BIDS = [  # a price tie in "x" (the earlier bid ranks first), "y" pushed out of the top two and back in
    [("x", "al", 10), ("y", "bo", 5), ("x", "cy", 12)],
    [("x", "dee", 10), ("y", "al", 7), ("y", "eve", 9)],
    [("x", "fay", 15), ("y", "bo", 8)],
    [("y", "cy", 1), ("x", "al", 11)],
]
TOP_TWO = "SELECT *, row_number() OVER (PARTITION BY auction ORDER BY price DESC, seq) AS rank FROM bids"


@pytest.mark.spark
def test_top_n_keeps_each_keys_first_rows_with_or_without_their_rank_as_duckdbs_row_number(spark, tmp_path):
    """After Flink's ``RankITCase``: the two highest bids per auction (ties to the earlier bid), by rank (an
    upsert table keyed by auction and rank, each rank's row updated as it changes) and as rows (keyed by the
    bid: a bid pushed out deleted), equal to DuckDB's ``ROW_NUMBER() ... <= 2`` after each microbatch; a crash
    after the sink's commit replays to the clean table."""
    from state_store.run.runtime import FaultInjector, InjectedFault

    def top(lake, rank_column):
        write_rows(lake.inputs / "bids", BIDS, BID)
        ranked = (Dataflow.from_source(FileSource(str(lake.inputs / "bids"), "json", BID, max_files_per_batch=1),
                                       job_id="top-bids")
                  .key_by("auction").top_n(2, [("price", False)], uid="top-bids", rank_column=rank_column))
        key = ["auction", "rank"] if rank_column else ["seq"]
        return ranked.sink_to(UpsertDeltaSink("sinks/top", key=key))

    for rank_column in ("rank", None):
        lake = Lake(tmp_path / f"rank-{rank_column}")
        columns = [*BID.fields] + ([rank_column] if rank_column else [])
        for n in range(1, len(BIDS) + 1):
            run_job(spark, top(lake, rank_column), lake, max_microbatches=1)
            wanted = expected_rows("bids", BID, BIDS[:n],
                                   f"SELECT {', '.join(columns)} FROM ({TOP_TWO}) WHERE rank <= 2")
            assert table(spark, lake, "sinks/top", columns) == wanted, (rank_column, n)
    crashed = Lake(tmp_path / "crashed")
    with pytest.raises(InjectedFault):
        run_job(spark, top(crashed, "rank"), crashed, faults=FaultInjector("after_commit", batch_id=2))
    run_job(spark, top(crashed, "rank"), crashed)
    assert table(spark, crashed, "sinks/top", [*BID.fields, "rank"]) == expected_rows(
        "bids", BID, BIDS, f"SELECT * FROM ({TOP_TWO}) WHERE rank <= 2")


PAYMENT = Types.ROW_NAMED(["user", "paid", "seq"], [Types.STRING(), Types.LONG(), Types.LONG()])
USER = Types.ROW_NAMED(["id", "country", "seq"], [Types.STRING(), Types.STRING(), Types.LONG()])
PAYMENTS = [[("al", 5), ("bo", 1)], [("cy", 2), ("al", 4)], [("zed", 9)], [("bo", 3), ("eve", 1)]]
USERS = [[("al", "fr")], [("bo", "de"), ("dee", "it")], [("al", "uk"), ("cy", "fr")], [("eve", "es")]]
SQL_JOIN = {"inner": "JOIN", "left": "LEFT JOIN", "right": "RIGHT JOIN", "full": "FULL JOIN"}


@pytest.mark.spark
@pytest.mark.parametrize("how", ["inner", "left", "right", "full"])
def test_a_regular_join_of_two_sources_and_of_a_changelog_leaves_duckdbs_join(spark, tmp_path, how):
    """After Flink's ``JoinITCase``: payments joined with users by user id, each side kept whole, inner and outer
    (null-padded rows retracted once a match comes), its changelog leaving DuckDB's join of the rows so far after
    each microbatch; and the per-user totals' changelog joined with the users, its retractions going through."""
    lake = Lake(tmp_path)
    write_rows(lake.inputs / "payments", PAYMENTS, PAYMENT)
    write_rows(lake.inputs / "users", USERS, USER)

    def stream(folder, row):
        return Dataflow.from_source(FileSource(str(lake.inputs / folder), "json", row, max_files_per_batch=1),
                                    job_id="joined")

    joined = (stream("payments", PAYMENT).key_by("user")
              .regular_join(stream("users", USER).key_by("id"), how=how, uid="pay-users", right_prefix="u_"))
    spec = joined.sink_to("sinks/joined")
    columns = ["user", "paid", "u_id", "u_country"]
    assert list(spec.output_type.fields) == ["user", "paid", "seq", "u_id", "u_country", "u_seq", "_kind"]
    for n in range(1, len(PAYMENTS) + 1):
        run_job(spark, spec, lake, max_microbatches=1)
        con = duckdb.connect()
        con.execute("CREATE TABLE p (user VARCHAR, paid BIGINT)")
        con.execute("CREATE TABLE u (id VARCHAR, country VARCHAR)")
        con.executemany("INSERT INTO p VALUES (?, ?)", [r for b in PAYMENTS[:n] for r in b])
        con.executemany("INSERT INTO u VALUES (?, ?)", [r for b in USERS[:n] for r in b])
        wanted = sorted(con.execute(f"SELECT * FROM p {SQL_JOIN[how]} u ON p.user = u.id").fetchall(), key=repr)
        assert materialized(spark, lake, "sinks/joined", columns) == wanted, n

    totals_lake = Lake(tmp_path / "totals")
    write_clicks(totals_lake.inputs / "clicks")
    write_rows(totals_lake.inputs / "users", USERS, USER)
    users = Dataflow.from_source(FileSource(str(totals_lake.inputs / "users"), "json", USER, max_files_per_batch=1),
                                 job_id="totals")
    spec = (totals(totals_lake).key_by("user")
            .regular_join(users.key_by("id"), how=how, uid="totals-users", right_prefix="u_")
            .sink_to("sinks/totals_users"))
    run_job(spark, spec, totals_lake)
    con = duckdb.connect()
    con.execute("CREATE TABLE clicks (user VARCHAR, amount BIGINT)")
    con.executemany("INSERT INTO clicks VALUES (?, ?)", [r for b in BATCHES for r in b])
    con.execute("CREATE TABLE u (id VARCHAR, country VARCHAR)")
    con.executemany("INSERT INTO u VALUES (?, ?)", [r for b in USERS for r in b])
    wanted = sorted(con.execute(f"SELECT t.user, t.clicks, t.spent, u.id, u.country FROM ({TOTALS}) t "
                                f"{SQL_JOIN[how]} u ON t.user = u.id").fetchall(), key=repr)
    assert materialized(spark, totals_lake, "sinks/totals_users",
                        ["user", "clicks", "spent", "u_id", "u_country"]) == wanted


READING = Types.ROW_NAMED(["sensor", "value", "ts", "seq"], [Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG()])
READINGS = [  # (sensor, value, ts): out of order within the bound; two of "a" at one time; "zz" moves time on
    [("a", 1, 100), ("b", 5, 105), ("a", 2, 110)],
    [("a", 4, 108), ("a", 3, 120), ("b", 6, 125), ("a", 7, 120)],
    [("b", 1, 131), ("a", 2, 140), ("zz", 0, 10_000)],
]


@pytest.mark.spark
@pytest.mark.parametrize("frame, preceding, window", [
    ("range", 15, "RANGE BETWEEN 15 PRECEDING AND CURRENT ROW"),
    ("range", None, "RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"),
    ("rows", 2, "ROWS BETWEEN 2 PRECEDING AND CURRENT ROW"),
    ("rows", None, "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW")])
def test_an_over_aggregation_emits_each_row_with_its_windows_aggregates_as_duckdb(spark, tmp_path, frame, preceding,
                                                                                  window):
    """After Flink's ``OverAggregateITCase``: each reading with the count, sum and max of its sensor's readings in
    its RANGE or ROWS window (ties in time in the order they came), emitted once the watermark passes it, equal
    to DuckDB's OVER over the same rows; the reading past every other's time is not emitted yet."""
    from state_store import WatermarkStrategy

    lake = Lake(tmp_path)
    write_rows(lake.inputs / "readings", READINGS, READING)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(20).with_timestamp_column("ts")
    spec = (Dataflow.from_source(FileSource(str(lake.inputs / "readings"), "json", READING, max_files_per_batch=1),
                                 job_id="readings", watermark_strategy=strategy)
            .key_by("sensor").over(ColumnAggregate(n="count(*)", total="sum(value)", top="max(value)"),
                                   uid="readings", frame=frame, preceding=preceding)
            .sink_to("sinks/readings"))
    run_job(spark, spec, lake)
    order = "ts" if frame == "range" else "ts, seq"
    aggregates = ", ".join(f"{f}(value) OVER (PARTITION BY sensor ORDER BY {order} {window})"
                           for f in ("count", "sum", "max"))
    wanted = expected_rows("readings", READING, READINGS,
                           f"SELECT *, {aggregates} FROM readings WHERE sensor != 'zz'")
    assert table(spark, lake, "sinks/readings", [*READING.fields, "n", "total", "top"]) == wanted


@pytest.mark.spark
def test_a_window_top_n_emits_each_windows_first_rows_once_as_duckdbs_row_number(spark, tmp_path):
    """After Flink's ``WindowRankITCase``: the two highest bids per auction in each 20 ms tumbling window (ties to
    the earlier bid), emitted once as the window fires, with its bounds and rank, equal to DuckDB's
    ``ROW_NUMBER() OVER (PARTITION BY auction, window_start ...) <= 2``; an open window emits nothing yet."""
    from state_store import TumblingEventTimeWindows, WatermarkStrategy

    timed = Types.ROW_NAMED(["auction", "price", "ts", "seq"], [Types.STRING(), Types.LONG(), Types.LONG(),
                                                                Types.LONG()])
    bids = [[("x", 3, 1), ("x", 9, 5), ("y", 2, 7), ("x", 9, 12)],
            [("x", 4, 21), ("y", 8, 19), ("x", 1, 30), ("y", 5, 25)],
            [("x", 7, 45), ("zz", 0, 1_000)]]
    lake = Lake(tmp_path)
    write_rows(lake.inputs / "bids", bids, timed)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(10).with_timestamp_column("ts")
    spec = (Dataflow.from_source(FileSource(str(lake.inputs / "bids"), "json", timed, max_files_per_batch=1),
                                 job_id="window-top", watermark_strategy=strategy)
            .key_by("auction").window(TumblingEventTimeWindows.of(20))
            .top_n(2, [("price", False)], uid="window-top", rank_column="rank")
            .sink_to("sinks/window_top"))
    assert "_kind" not in spec.output_type.fields  # insert-only
    run_job(spark, spec, lake)
    wanted = expected_rows("bids", timed, bids, "SELECT * FROM (SELECT *, ts - ts % 20 AS window_start, "
                           "ts - ts % 20 + 20 AS window_end, row_number() OVER (PARTITION BY auction, ts - ts % 20 "
                           "ORDER BY price DESC, seq) AS rank FROM bids WHERE auction != 'zz') WHERE rank <= 2")
    assert table(spark, lake, "sinks/window_top", [*timed.fields, "window_start", "window_end", "rank"]) == wanted


@pytest.mark.parametrize("build, message", [
    (lambda lake: totals(lake).key_by("clicks").aggregate(ColumnAggregate(most="max(spent)"), uid="x"),
     r"over an updating stream .* most='max\(\.\.\.\)' cannot \(only count, sum, avg, count_distinct can\)"),
    (lambda lake: Dataflow.from_source(FileSource(str(lake.inputs), "json", CLICK), job_id="j")
     .aggregate(ColumnAggregate(n="count(*)"), uid="x"), r"aggregate\(uid='x'\) needs a keyed stream"),
    (lambda lake: totals(lake).sink_to(UpsertDeltaSink("sinks/t", key="account")),
     r"operator 'per-user''s output has no column 'account' .*key the sink by the result's key columns"),
    (lambda lake: UpsertDeltaSink("sinks/t", key=[]), r"name the column \(or columns\) that names a result row"),
    (lambda lake: totals(lake).key_by("user").regular_join(Dataflow.from_source(
        FileSource(str(lake.inputs), "json", CLICK), job_id="totals").key_by("user"), uid="x"),
     r"both streams have a column 'user'; give the right stream's columns a prefix"),
    (lambda lake: totals(lake).key_by("user").deduplicate(uid="x"),
     r"deduplicate\(uid='x'\) reads an insert-only stream, and this one is updating"),
    (lambda lake: Dataflow.from_source(FileSource(str(lake.inputs), "json", CLICK), job_id="j").key_by("user")
     .deduplicate(uid="x", keep="latest"), r"keep is 'first' or 'last', got 'latest'"),
    (lambda lake: Dataflow.from_source(FileSource(str(lake.inputs), "json", CLICK), job_id="j").key_by("user")
     .top_n(3, ["price"], uid="x"), r"top_n\(uid='x'\): the stream has no column 'price'"),
    (lambda lake: Dataflow.from_source(FileSource(str(lake.inputs), "json", CLICK), job_id="j").key_by("user")
     .top_n(0, ["amount"], uid="x"), r"n is how many rows a key keeps, a positive int, got 0"),
])
def test_updating_results_built_wrong_are_refused_naming_the_fix(tmp_path, build, message):
    with pytest.raises(ConfigError, match=message):
        build(Lake(tmp_path))


def test_a_keys_records_folded_at_once_equal_them_added_one_by_one():
    """``ColumnAggregate.add_all`` (a group aggregate's fold of a key's records in a microbatch) against ``add`` of
    each in turn, over records with nulls, from an empty and a filled accumulator."""
    import random

    fields = {"a": Types.LONG(), "b": Types.DOUBLE(), "k": Types.STRING()}
    agg = ColumnAggregate(n="count(*)", na="count(a)", s="sum(a)", lo="min(a)", hi="max(b)", av="avg(a)",
                          la="last(b)").bind(fields, "k", Types.STRING())
    draw = random.Random(62)
    for _ in range(300):
        values = [{"a": draw.choice([None, 1, 5, -3]), "b": draw.choice([None, 1.5, 2.0])}
                  for _ in range(draw.randint(0, 6))]
        acc = agg.create_accumulator() if draw.random() < 0.5 else agg.add({"a": 2, "b": None},
                                                                          agg.create_accumulator())
        one_by_one = acc
        for value in values:
            one_by_one = agg.add(value, one_by_one)
        assert agg.add_all(values, acc) == one_by_one, (values, acc)
