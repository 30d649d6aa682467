"""SQL jobs (issue 62, part 2), after Flink's ``WindowAggregateITCase`` and ``GroupAggregateITCase``: a query in
Flink's dialect compiles to Lakestate's operators (a windowing function's aggregation to the window operator of
the hand-written dataflow, a GROUP BY to ``aggregate``), its scalar parts evaluated by Spark, its watermark
Flink SQL's; the results equal DuckDB's batch query over the same rows, and unsupported SQL is refused naming
the construct."""
from __future__ import annotations

import json
import re
from datetime import timedelta

import duckdb
import pytest

from bench.nexmark.tables import count_char  # Nexmark's q14 function
from state_store import (
    ColumnAggregate,
    ConfigError,
    Dataflow,
    FileSource,
    LakestateError,
    SqlJob,
    SqlTable,
    TumblingEventTimeWindows,
    Types,
    WatermarkStrategy,
)
from state_store.catalog.job_store import JobStore
from state_store.graph import as_job
from state_store.sql.compile import explain, watermark_strategy
from state_store.sql.dialect import parse
from tests.support.helpers import delta_rows as table
from tests.support.helpers import duckdb_rows, materialized
from tests.support.helpers import run as run_job
from tests.support.lake import Lake

CLICK = Types.ROW_NAMED(["user", "country", "amount", "ts"],
                        [Types.STRING(), Types.STRING(), Types.LONG(), Types.LONG()])
CLICKS = [  # a file a microbatch; ts in ms: windows of 10 s; the last click closes every window before it
    [("al", "fr", 5, 1_000), ("bo", "de", 1, 2_500), ("al", "fr", -2, 9_999)],
    [("cy", "fr", 7, 10_000), ("bo", "de", 4, 6_000), ("dee", "it", None, 15_000), ("bo", "de", -1, 7_000)],
    [("al", "fr", 3, 21_000), ("eve", "de", 2, 29_999), ("zz", "xx", 0, 100_000)],
]
PER_WINDOW = """
    SELECT country, window_start, window_end, COUNT(*) AS clicks, SUM(amount) AS spent, MAX(amount) AS top
    FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '10' SECOND))
    WHERE amount IS NULL OR amount > 0
    GROUP BY country, window_start, window_end"""


def write_clicks(folder, batches=CLICKS) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, batch in enumerate(batches):
        path = folder / f"part-{i:03d}.json"
        if not path.exists():
            path.write_text("".join(json.dumps(dict(zip(CLICK.fields, row))) + "\n" for row in batch))


def duck(query: str, batches=CLICKS) -> list[tuple]:
    return duckdb_rows('CREATE TABLE clicks ("user" VARCHAR, country VARCHAR, amount BIGINT, ts BIGINT)',
                       [r for b in batches for r in b], query)


def input_table(lake, name: str, row_type, batches: list) -> FileSource:
    """Table ``name`` of ``batches`` (a JSON file a microbatch) under the inputs, read a file a microbatch."""
    (lake.inputs / name).mkdir(parents=True, exist_ok=True)
    for i, rows in enumerate(batches):
        (lake.inputs / name / f"{i:03d}.json").write_text("".join(json.dumps(dict(zip(row_type.fields, r))) + "\n"
                                                                for r in rows))
    return FileSource(str(lake.inputs / name), "json", row_type, max_files_per_batch=1)


def duck_tables(tables: dict, query: str) -> list[tuple]:
    """DuckDB's answer to ``query`` (sorted) over ``tables`` (name -> (its columns' DDL, its rows))."""
    con = duckdb.connect()
    for name, (columns, rows) in tables.items():
        con.execute(f"CREATE TABLE {name} ({columns})")
        con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    return sorted(con.execute(query).fetchall(), key=repr)


def clicks_table(lake, watermark: str | None = "ts - INTERVAL '4' SECOND"):
    write_clicks(lake.inputs / "clicks")
    return SqlTable(FileSource(str(lake.inputs / "clicks"), "json", CLICK, max_files_per_batch=1), watermark)


@pytest.mark.spark
def test_a_window_aggregation_in_sql_is_the_hand_written_dataflow_and_duckdbs_group_by(spark, tmp_path):
    """A TUMBLE aggregation with a WHERE: the same rows as the hand-written ColumnAggregate window over the
    filtered clicks, and as DuckDB's GROUP BY of the windows the final watermark closed; its operator's uid is the
    query's structure, unchanged by another filter or another output column."""
    lake = Lake(tmp_path / "sql")
    job = SqlJob("per-window", PER_WINDOW, tables={"clicks": clicks_table(lake)}, sink="sinks/per_window")
    run_job(spark, job, lake)
    columns = ["country", "window_start", "window_end", "clicks", "spent", "top"]
    got = table(spark, lake, "sinks/per_window", columns)
    assert got == duck("SELECT country, ts - ts % 10000 AS ws, ts - ts % 10000 + 10000, count(*), sum(amount), "
                       "max(amount) FROM clicks WHERE (amount IS NULL OR amount > 0) AND country != 'xx' "
                       "GROUP BY country, ws")

    by_hand = Lake(tmp_path / "hand")
    write_clicks(by_hand.inputs / "clicks")
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(3_999).with_timestamp_column("ts")
    # The filter by hand keeps "zz", which moves the watermark on: SQL's watermark is the table's, before WHERE.
    kept = [[r for r in b if r[2] is None or r[2] > 0 or r[0] == "zz"] for b in CLICKS]
    write_clicks(by_hand.inputs / "kept", kept)
    spec = (Dataflow.from_source(FileSource(str(by_hand.inputs / "kept"), "json", CLICK, max_files_per_batch=1),
                                 job_id="per-window", watermark_strategy=strategy)
            .key_by("country").window(TumblingEventTimeWindows.of(timedelta(seconds=10)))
            .aggregate(ColumnAggregate(clicks="count(*)", spent="sum(amount)", top="max(amount)"), uid="w")
            .sink_to("sinks/per_window"))
    run_job(spark, spec, by_hand)
    assert table(spark, by_hand, "sinks/per_window", columns) == got
    changed = SqlJob("per-window", PER_WINDOW.replace("amount > 0", "amount > 1").replace(
        "MAX(amount) AS top", "MAX(amount) AS top, MIN(amount) AS least"), tables={"clicks": clicks_table(lake)},
        sink="sinks/other")
    uid = "sql-window-clicks-country-tumble-10000-10000"
    # The aggregates' AS names are the window's columns: one operator, no renaming step.
    assert [o.uid for o in as_job(changed).operators] == [o.uid for o in as_job(job).operators] == [uid]
    assert explain(job).splitlines() == [f"{uid}: VectorizedWindowAggregate, keyed by 'country'; state "
                                         f"{uid}.window-contents"]

    # A savepoint taken before any window closed restores into the query with another filter and a column renamed
    # (the same operator and state), at parallelism 3: it goes on from the savepoint's windows.
    from state_store.delta.points import StatePoint
    from state_store.ops.restore import restore_job
    from state_store.ops.savepoint import take_savepoint

    moved = Lake(tmp_path / "moved")
    run_job(spark, SqlJob("per-window", PER_WINDOW, tables={"clicks": clicks_table(moved)},
                          sink="sinks/per_window"), moved, max_microbatches=1)
    saved = take_savepoint(spark, moved.settings, "per-window", say=lambda line: None)
    renamed = SqlJob("per-window", PER_WINDOW.replace("amount > 0", "amount > -5").replace(
        "COUNT(*) AS clicks", "COUNT(*) AS n"), tables={"clicks": clicks_table(moved)}, sink="sinks/renamed",
        parallelism=3)  # a sink of its own: the renamed column is another table's
    # A change the state cannot follow, an aggregate taken out of the window's accumulator (or the window's size
    # changed: another operator), is refused naming the operator and what changed, before anything is written.
    for changed_sql, said in (
            (PER_WINDOW.replace(", MAX(amount) AS top", ""), rf"state '{uid}\.window-contents': row fields "
                                                             rf"\['max_amount'\] were removed"),
            (PER_WINDOW.replace("'10' SECOND", "'20' SECOND"), rf"would not restore: '{uid}\.__timers_event__'.*"
                                                                 rf"--uid-map {uid}=sql-window-[\w-]+-20000")):
        with pytest.raises(LakestateError, match=said):
            restore_job(spark, moved.settings, SqlJob("per-window", changed_sql, tables={"clicks": clicks_table(
                moved)}, sink="sinks/other_change"), StatePoint(saved), say=lambda line: None)
        assert not (moved.settings.warehouse / "sinks" / "other_change").exists()
    restore_job(spark, moved.settings, renamed, StatePoint(saved), say=lambda line: None)
    run_job(spark, renamed, moved)
    later = table(spark, moved, "sinks/renamed", ["country", "window_start", "n"])
    # de's first window: bo's 1 before the savepoint, then bo's 4 and bo's -1, which only the new filter keeps
    assert later == sorted([("fr", 0, 1), ("de", 0, 3), ("fr", 10_000, 1), ("it", 10_000, 1), ("fr", 20_000, 1),
                            ("de", 20_000, 1)], key=repr)

    all_windows = SqlJob("all", "SELECT window_start, COUNT(*) AS clicks FROM TABLE(TUMBLE(TABLE clicks, "
                                "DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end",
                         tables={"clicks": clicks_table(Lake(tmp_path / "all"))}, sink="sinks/all")
    first = as_job(all_windows).operators[0]
    assert first.parallelism == 1 and first.uid == "sql-window-clicks-tumble-10000-10000"


@pytest.mark.spark
def test_a_group_by_in_sql_keeps_an_upsert_table_equal_to_duckdbs(spark, tmp_path):
    """An unbounded GROUP BY with its columns renamed: an updating result, kept by an UpsertDeltaSink by the
    group's columns, equal to DuckDB's after each microbatch; a stateless SELECT's Spark expressions and filter
    equal DuckDB's for the same rows."""
    lake = Lake(tmp_path / "group")
    job = SqlJob("per-user", "SELECT user AS who, COUNT(amount) AS paid, SUM(amount) AS spent FROM clicks "
                             "GROUP BY user", tables={"clicks": clicks_table(lake, None)}, sink="sinks/per_user")
    assert list(job.operators[-1].output_type.fields) == ["who", "paid", "spent", "_kind"]
    # A GROUP BY without aggregates is the groups themselves (SELECT DISTINCT), not the rows.
    groups = SqlJob("groups", "SELECT country FROM clicks WHERE amount > 0 GROUP BY country",
                    tables={"clicks": clicks_table(lake, None)}, sink="sinks/groups")
    for n in range(1, len(CLICKS) + 1):
        run_job(spark, job, lake, max_microbatches=1)
        assert table(spark, lake, "sinks/per_user", ["who", "paid", "spent"]) == duck(
            'SELECT "user", count(amount), sum(amount) FROM clicks GROUP BY "user"', CLICKS[:n]), n
        run_job(spark, groups, lake, max_microbatches=1)
        assert table(spark, lake, "sinks/groups", ["country"]) == duck(
            "SELECT DISTINCT country FROM clicks WHERE amount > 0", CLICKS[:n]), n

    # A GROUP BY of an expression, aggregates of expressions, FILTER and COUNT(DISTINCT ...), as Nexmark's q15-q17.
    days = SqlJob("per-country", "SELECT upper(country) AS c, COUNT(*) AS n, COUNT(*) FILTER (WHERE amount > 2) AS "
                  "big, COUNT(DISTINCT user) AS users, COUNT(DISTINCT user) FILTER (WHERE amount > 0) AS payers, "
                  "SUM(amount * 2) AS twice, MAX(concat(user, '!')) AS top FROM clicks GROUP BY upper(country)",
                  tables={"clicks": clicks_table(lake, None)}, sink="sinks/days")
    for n in range(1, len(CLICKS) + 1):
        run_job(spark, days, lake, max_microbatches=1)
        assert table(spark, lake, "sinks/days", ["c", "n", "big", "users", "payers", "twice", "top"]) == duck(
            'SELECT upper(country), count(*), count(*) FILTER (WHERE amount > 2), count(DISTINCT "user"), '
            'count(DISTINCT "user") FILTER (WHERE amount > 0), sum(amount * 2), max(concat("user", \'!\')) '
            "FROM clicks GROUP BY upper(country)", CLICKS[:n]), n

    plain = Lake(tmp_path / "plain")
    job = SqlJob("big", "SELECT user, amount * 2 + 1 AS twice, upper(country) AS c, SPLIT_INDEX(user, 'l', 1) AS "
                        "piece FROM clicks WHERE amount >= 3 AND country <> 'it'",
                 tables={"clicks": clicks_table(plain, None)}, sink="sinks/big")
    run_job(spark, job, plain)
    assert table(spark, plain, "sinks/big", ["user", "twice", "c", "piece"]) == duck(
        "SELECT \"user\", amount * 2 + 1, upper(country), string_split(\"user\", 'l')[2] FROM clicks "
        "WHERE amount >= 3 AND country <> 'it'")
    # UNION ALL of two stateless SELECTs (the same table read twice): both SELECTs' rows, as DuckDB's.
    both = SqlJob("both", "SELECT user, amount FROM clicks WHERE amount > 3 UNION ALL SELECT upper(country) AS user, "
                          "amount FROM clicks WHERE amount < 0", tables={"clicks": clicks_table(plain, None)},
                  sink="sinks/both")
    run_job(spark, both, plain)
    assert table(spark, plain, "sinks/both", ["user", "amount"]) == duck(
        'SELECT "user", amount FROM clicks WHERE amount > 3 UNION ALL SELECT upper(country), amount FROM clicks '
        "WHERE amount < 0")


@pytest.mark.spark
def test_top_n_and_deduplication_in_sql_keep_duckdbs_row_numbers(spark, tmp_path):
    """After Flink's ``RankITCase`` and ``DeduplicateITCase``: ``ROW_NUMBER() ... <= 2`` with the row number
    selected is a Top-N kept by (country, rank); ``= 1`` ordered by the event time, the number not selected, is a
    deduplication keeping each user's last click; each table equals DuckDB's ``QUALIFY`` after each microbatch."""
    top = Lake(tmp_path / "top")
    job = SqlJob("top", "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY country ORDER BY amount DESC) "
                        "AS rn FROM clicks WHERE country <> 'xx') WHERE rn <= 2",
                 tables={"clicks": clicks_table(top)}, sink="sinks/top")
    assert explain(job).startswith("sql-top-clicks-country: TopN")
    last = Lake(tmp_path / "last")
    dedup = SqlJob("last", "SELECT user, country, amount, ts FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY user "
                           "ORDER BY ts DESC) AS rn FROM clicks) WHERE rn = 1",
                   tables={"clicks": clicks_table(last)}, sink="sinks/last")
    assert explain(dedup).startswith("sql-dedup-clicks-user: Deduplicate")
    for n in range(1, len(CLICKS) + 1):
        run_job(spark, job, top, max_microbatches=1)
        assert table(spark, top, "sinks/top", ["user", "country", "amount", "ts", "rn"]) == duck(
            "SELECT *, row_number() OVER (PARTITION BY country ORDER BY amount DESC NULLS LAST) AS rn FROM clicks "
            "WHERE country <> 'xx' QUALIFY rn <= 2", CLICKS[:n]), n
        run_job(spark, dedup, last, max_microbatches=1)
        assert table(spark, last, "sinks/last", ["user", "country", "amount", "ts"]) == duck(
            'SELECT * FROM clicks QUALIFY row_number() OVER (PARTITION BY "user" ORDER BY ts DESC) = 1',
            CLICKS[:n]), n

    # Over a query's rows: the top country of each window by its clicks (a window Top-N after a window
    # aggregation, insert-only), and the top two users by their sum (a retracting Top-N over a GROUP BY's
    # updating rows, without PARTITION BY: one subtask), each equal to DuckDB's.
    windows = Lake(tmp_path / "windows")
    per_window = SqlJob("top-window", "SELECT window_start, country, clicks, rn FROM (SELECT *, ROW_NUMBER() OVER "
                        "(PARTITION BY window_start, window_end ORDER BY clicks DESC, country) AS rn FROM (SELECT "
                        "window_start, window_end, country, COUNT(*) AS clicks FROM TABLE(TUMBLE(TABLE clicks, "
                        "DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end, country)) "
                        "WHERE rn <= 1", tables={"clicks": clicks_table(windows)}, sink="sinks/top_window")
    assert [o.uid for o in per_window.operators][2:4] == ["sql-window-rows", "sql-window-top-tumble-10000-10000"]
    run_job(spark, per_window, windows)
    assert table(spark, windows, "sinks/top_window", ["window_start", "country", "clicks", "rn"]) == duck(
        "SELECT ws, country, n, 1 FROM (SELECT ts - ts % 10000 AS ws, country, count(*) AS n FROM clicks WHERE "
        "country <> 'xx' GROUP BY ws, country) QUALIFY row_number() OVER (PARTITION BY ws ORDER BY n DESC, "
        "country) = 1")
    spenders = Lake(tmp_path / "spenders")
    top_spenders_sql = ("SELECT user, spent, rn FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY spent DESC) AS rn FROM "
                        "(SELECT user, SUM(amount) AS spent FROM clicks WHERE amount IS NOT NULL GROUP BY user)) "
                        "WHERE rn <= 2")
    top_spenders = SqlJob("spenders", top_spenders_sql, tables={"clicks": clicks_table(spenders, None)},
                          sink="sinks/spenders")
    assert explain(top_spenders).splitlines()[2] == ("sql-top-group-clicks-user: RetractTopN, keyed by '_all'; state "
                                                     "sql-top-group-clicks-user.rows")
    # A crash at each fault point of the second microbatch's run, then a rerun: the clean run's table.
    from state_store.run.runtime import FaultInjector, InjectedFault

    for point in ("after_sink_write", "after_commit", "before_checkpoint"):
        crashed = Lake(tmp_path / f"crashed-{point}")
        job_of = lambda lake: SqlJob("spenders", top_spenders_sql, tables={  # noqa: E731
            "clicks": clicks_table(lake, None)}, sink="sinks/spenders")
        with pytest.raises(InjectedFault):
            run_job(spark, job_of(crashed), crashed, faults=FaultInjector(point, batch_id=1))
        run_job(spark, job_of(crashed), crashed)
        assert table(spark, crashed, "sinks/spenders", ["user", "spent", "rn"]) == duck(
            'SELECT "user", s, row_number() OVER (ORDER BY s DESC) FROM (SELECT "user", sum(amount) AS s FROM '
            'clicks WHERE amount IS NOT NULL GROUP BY "user") QUALIFY row_number() OVER (ORDER BY s DESC) <= 2'), point
    for n in range(1, len(CLICKS) + 1):
        run_job(spark, top_spenders, spenders, max_microbatches=1)
        assert table(spark, spenders, "sinks/spenders", ["user", "spent", "rn"]) == duck(
            'SELECT "user", s, row_number() OVER (ORDER BY s DESC) FROM (SELECT "user", sum(amount) AS s FROM '
            'clicks WHERE amount IS NOT NULL GROUP BY "user") QUALIFY row_number() OVER (ORDER BY s DESC) <= 2',
            CLICKS[:n]), n


OVER_QUERIES = {  # a query reading a query's rows, over the clicks
    # a filter of an updating result: a user's row enters the upsert table and leaves it as its sum crosses 3
    "having": ("SELECT user, n FROM (SELECT user, COUNT(*) AS n, SUM(amount) AS s FROM clicks GROUP BY user) "
               "WHERE s > 3", 'SELECT "user", count(*) FROM clicks GROUP BY "user" HAVING sum(amount) > 3',
               ["user", "n"]),
    # q14: a user's scalar function, in a table's filter and on a query's rows between two operators
    "udf": ("SELECT user, count_char(user, 'l') AS ls, n FROM (SELECT user, COUNT(*) AS n FROM clicks WHERE "
            "count_char(country, 'r') > 0 GROUP BY user) q",
            "SELECT \"user\", length(\"user\") - length(replace(\"user\", 'l', '')), count(*) FROM clicks WHERE "
            "length(country) - length(replace(country, 'r', '')) > 0 GROUP BY \"user\"", ["user", "ls", "n"]),
}


@pytest.mark.spark
@pytest.mark.parametrize("shape", sorted(OVER_QUERIES))
def test_a_query_over_a_querys_rows_filters_them_and_calls_functions_as_duckdb(spark, tmp_path, shape):
    """A HAVING and a user's function on a subquery's rows (``FROM (SELECT ...) q``), evaluated by Spark on the
    rows between the operators; the table the changes leave equals DuckDB's batch query. Joins of subqueries,
    aggregates of joins and Top-N of joins: Nexmark's q4, q5, q7, q9 and q23 themselves, equal to Flink's
    (tests/nexmark/test_queries.py)."""
    sql, expected, columns = OVER_QUERIES[shape]
    lake = Lake(tmp_path)
    job = SqlJob(shape, sql, tables={"clicks": clicks_table(lake)}, sink=f"sinks/{shape}",
                 functions={"count_char": count_char})
    run_job(spark, job, lake)
    assert materialized(spark, lake, f"sinks/{shape}", columns) == duck(expected)


AUCTION = Types.ROW_NAMED(["id", "seller", "category"], [Types.LONG(), Types.LONG(), Types.LONG()])
PERSON = Types.ROW_NAMED(["id", "name", "state"], [Types.LONG(), Types.STRING(), Types.STRING()])
AUCTIONS = [[(1, 10, 10), (2, 11, 10)], [(3, 10, 7), (4, 12, 10)], [(5, 13, 10), (6, 10, 10)]]
PERSONS = [[(10, "ann", "OR")], [(11, "bob", "CA"), (12, "cy", "ID")], [(14, "dee", "OR")]]


@pytest.mark.spark
@pytest.mark.parametrize("how", ["INNER", "LEFT"])
def test_a_join_in_sql_is_a_regular_join_equal_to_duckdbs(spark, tmp_path, how):
    """After Flink's ``JoinITCase`` and Nexmark's q3: auctions joined with their sellers, each table's filter
    pushed to its read (inner), or a LEFT JOIN's changelog (a seller's null-padded rows retracted when the seller
    comes); after each microbatch, the rows left equal DuckDB's join of the rows so far."""
    lake = Lake(tmp_path)
    for folder, row, batches in (("auction", AUCTION, AUCTIONS), ("person", PERSON, PERSONS)):
        (lake.inputs / folder).mkdir(parents=True)
        for i, batch in enumerate(batches):
            (lake.inputs / folder / f"{i:03d}.json").write_text(
                "".join(json.dumps(dict(zip(row.fields, r))) + "\n" for r in batch))
    tables = {n: FileSource(str(lake.inputs / n), "json", r, max_files_per_batch=1)
              for n, r in (("auction", AUCTION), ("person", PERSON))}
    where = " WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID')" if how == "INNER" else ""
    sql = f"SELECT P.name, P.state, A.id FROM auction AS A {how} JOIN person AS P ON A.seller = P.id{where}"
    job = SqlJob("q3", sql, tables=tables, sink="sinks/q3")
    assert explain(job).splitlines()[0].startswith(f"sql-join-auction-person-{how.lower()}-seller-id: RegularJoin")
    for n in range(1, len(AUCTIONS) + 1):
        run_job(spark, job, lake, max_microbatches=1)
        con = duckdb.connect()
        con.execute("CREATE TABLE auction (id BIGINT, seller BIGINT, category BIGINT)")
        con.execute("CREATE TABLE person (id BIGINT, name VARCHAR, state VARCHAR)")
        con.executemany("INSERT INTO auction VALUES (?, ?, ?)", [r for b in AUCTIONS[:n] for r in b])
        con.executemany("INSERT INTO person VALUES (?, ?, ?)", [r for b in PERSONS[:n] for r in b])
        wanted = sorted(con.execute(sql).fetchall(), key=repr)
        assert materialized(spark, lake, "sinks/q3", ["name", "state", "id"]) == wanted, n


@pytest.mark.spark
@pytest.mark.parametrize("frame, batch", [
    ("ROWS BETWEEN 1 PRECEDING AND CURRENT ROW", "ROWS BETWEEN 1 PRECEDING AND CURRENT ROW"),
    ("RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW", "RANGE BETWEEN 10000 PRECEDING AND CURRENT ROW"),
])
def test_an_over_aggregation_in_sql_gives_each_row_duckdbs_window_aggregates(spark, tmp_path, frame, batch):
    """After Flink's ``OverAggregateITCase``: SUM, COUNT and MAX OVER one window of ROWS or RANGE preceding, each
    row emitted once the watermark passes it (all but "zz", whose time the watermark never reaches), equal to
    DuckDB's window functions over the same rows."""
    lake = Lake(tmp_path)
    over = f"OVER (PARTITION BY user ORDER BY ts {frame})"
    job = SqlJob("over", f"SELECT user, ts, SUM(amount) {over} AS spent, COUNT(amount) {over} AS paid, MAX(amount) "
                         f"{over} AS top FROM clicks WHERE country <> 'it'", tables={"clicks": clicks_table(lake)},
                 sink="sinks/over")
    assert explain(job).startswith("sql-over-clicks-user-")
    run_job(spark, job, lake)
    window = f'OVER (PARTITION BY "user" ORDER BY ts {batch})'
    assert table(spark, lake, "sinks/over", ["user", "ts", "spent", "paid", "top"]) == duck(
        f'SELECT "user", ts, sum(amount) {window}, count(amount) {window}, max(amount) {window} FROM clicks '
        f"WHERE country <> 'it' AND \"user\" <> 'zz'")


SHOW = Types.ROW_NAMED(["ad", "ts"], [Types.STRING(), Types.LONG()])
SHOWS = [[("a", 1_000), ("b", 2_000)], [("a", 9_000), ("c", 12_000)], [("b", 30_000), ("a", 31_000)]]
TAPS = [[("a", 1_500), ("b", 1_000)], [("a", 10_500), ("a", 19_000), ("c", 11_000)], [("a", 30_000), ("b", 45_000)]]


@pytest.mark.spark
def test_an_interval_join_in_sql_pairs_what_duckdbs_join_pairs(spark, tmp_path):
    """After Flink's ``IntervalJoinITCase``: a join whose conditions bound one table's event time by the other's,
    in ``ON`` with ``BETWEEN`` (inclusive) or in ``WHERE`` with ``<`` and ``>`` (exclusive), is an interval join;
    its pairs equal DuckDB's join of all the rows (none is late)."""
    lake = Lake(tmp_path)
    for folder, batches in (("shows", SHOWS), ("taps", TAPS)):
        (lake.inputs / folder).mkdir(parents=True)
        for i, batch in enumerate(batches):
            (lake.inputs / folder / f"{i:03d}.json").write_text(
                "".join(json.dumps(dict(zip(SHOW.fields, r))) + "\n" for r in batch))
    tables = {n: SqlTable(FileSource(str(lake.inputs / n), "json", SHOW, max_files_per_batch=1),
                          "ts - INTERVAL '4' SECOND") for n in ("shows", "taps")}
    con = duckdb.connect()
    for n, batches in (("shows", SHOWS), ("taps", TAPS)):
        con.execute(f"CREATE TABLE {n} (ad VARCHAR, ts BIGINT)")
        con.executemany(f"INSERT INTO {n} VALUES (?, ?)", [r for b in batches for r in b])
    for i, (sql, ms) in enumerate([
        ("SELECT s.ad, s.ts AS shown, t.ts AS tapped FROM shows AS s JOIN taps AS t ON s.ad = t.ad AND t.ts "
         "BETWEEN s.ts - INTERVAL '1' SECOND AND s.ts + INTERVAL '10' SECOND", (-1_000, 10_000, True, True)),
        ("SELECT s.ad, s.ts AS shown, t.ts AS tapped FROM shows AS s, taps AS t WHERE t.ad = s.ad AND s.ts < t.ts "
         "AND t.ts - INTERVAL '10' SECOND < s.ts AND s.ad <> 'c'", (0, 10_000, False, False)),
    ]):
        job = SqlJob(f"tapped-{i}", sql, tables=tables, sink=f"sinks/tapped_{i}")
        assert explain(job).startswith(f"sql-interval-join-shows-taps-inner-ad-ad-{ms[0]}-{ms[1]}: "
                                       f"IntervalJoinOperator")
        run_job(spark, job, lake)
        batch = sql.replace("INTERVAL '1' SECOND", "1000").replace("INTERVAL '10' SECOND", "10000")
        assert table(spark, lake, f"sinks/tapped_{i}", ["ad", "shown", "tapped"]) == sorted(
            con.execute(batch).fetchall(), key=repr), sql


@pytest.mark.spark
def test_a_window_join_in_sql_pairs_each_windows_rows_as_duckdb_does(spark, tmp_path):
    """After Flink's ``WindowJoinITCase``: two tables' TUMBLE windows joined on their key and window (one side a
    windowing function, the other a query of one with its own WHERE), each pair once its window closes, with the
    window's bounds; equal to DuckDB's join of the rows by key and window for every closed window."""
    lake = Lake(tmp_path)
    for folder, batches in (("shows", SHOWS), ("taps", TAPS)):
        (lake.inputs / folder).mkdir(parents=True)
        for i, batch in enumerate(batches):
            (lake.inputs / folder / f"{i:03d}.json").write_text(
                "".join(json.dumps(dict(zip(SHOW.fields, r))) + "\n" for r in batch))
    tables = {n: SqlTable(FileSource(str(lake.inputs / n), "json", SHOW, max_files_per_batch=1),
                          "ts - INTERVAL '4' SECOND") for n in ("shows", "taps")}
    sql = ("SELECT s.ad, s.window_start, t.window_end, s.ts AS shown, t.ts AS tapped "
           "FROM TABLE(TUMBLE(TABLE shows, DESCRIPTOR(ts), INTERVAL '10' SECOND)) AS s "
           "JOIN (SELECT * FROM TABLE(TUMBLE(TABLE taps, DESCRIPTOR(ts), INTERVAL '10' SECOND)) WHERE ad <> 'c') AS t "
           "ON s.window_start = t.window_start AND s.window_end = t.window_end AND s.ad = t.ad")
    job = SqlJob("window-join", sql, tables=tables, sink="sinks/window_join")
    assert explain(job).startswith("sql-window-join-shows-taps-inner-ad-ad-tumble-10000-10000: WindowJoinOperator")
    run_job(spark, job, lake)
    con = duckdb.connect()
    for n, batches in (("shows", SHOWS), ("taps", TAPS)):
        con.execute(f"CREATE TABLE {n} (ad VARCHAR, ts BIGINT)")
        con.executemany(f"INSERT INTO {n} VALUES (?, ?)", [r for b in batches for r in b])
    # The job's watermark is the lower of its tables' (shows: 31,000 - 4,000): windows up to [10 s, 20 s) closed.
    wanted = con.execute("SELECT s.ad, s.ts - s.ts % 10000 AS ws, s.ts - s.ts % 10000 + 10000, s.ts, t.ts FROM shows "
                         "s JOIN taps t ON s.ad = t.ad AND s.ts // 10000 = t.ts // 10000 WHERE t.ad <> 'c' AND "
                         "s.ts < 20000").fetchall()
    got = table(spark, lake, "sinks/window_join", ["ad", "window_start", "window_end", "shown", "tapped"])
    assert got == sorted(wanted, key=repr) and len(got) == 3


SESSIONS = """
    WITH o AS (SELECT *, CASE WHEN ts - lag(ts) OVER (PARTITION BY country ORDER BY ts) <= 5000 THEN 0 ELSE 1 END
                         AS new FROM clicks WHERE country != 'xx'),
         s AS (SELECT *, sum(new) OVER (PARTITION BY country ORDER BY ts ROWS UNBOUNDED PRECEDING) AS sid FROM o)
    SELECT country, min(ts), max(ts) + 5000, count(*), sum(amount) FROM s GROUP BY country, sid"""


@pytest.mark.spark
def test_cumulate_and_session_windows_and_sparks_window_grouping_give_duckdbs_groups(spark, tmp_path):
    """CUMULATE and SESSION (the windowing function with PARTITION BY, and the GROUP BY window of Nexmark's q11
    with SESSION_START / SESSION_END), and Spark's window() / session_window() grouping: each the rows of
    DuckDB's GROUP BY of the same windows closed by the final watermark (after Flink's WindowAggregateITCase)."""
    lake = Lake(tmp_path)
    clicks = clicks_table(lake)
    queries = {
        "cumulate": ("SELECT country, window_start, window_end, COUNT(*) AS n, SUM(amount) AS spent FROM TABLE("
                     "CUMULATE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '20' SECOND)) "
                     "GROUP BY country, window_start, window_end"),
        "session": ("SELECT country, window_start, window_end, COUNT(*) AS n, SUM(amount) AS spent FROM TABLE("
                    "SESSION(TABLE clicks PARTITION BY country, DESCRIPTOR(ts), INTERVAL '5' SECOND)) "
                    "GROUP BY country, window_start, window_end"),
        "legacy": ("SELECT country, SESSION_START(ts, INTERVAL '5' SECOND) AS s, SESSION_END(ts, INTERVAL '5' SECOND) "
                   "AS e, COUNT(*) AS n, SUM(amount) AS spent FROM clicks GROUP BY country, SESSION(ts, INTERVAL '5' "
                   "SECOND)"),
        "spark-session": ("SELECT country, session_window.start AS s, session_window.end AS e, COUNT(*) AS n, "
                          "SUM(amount) AS spent FROM clicks GROUP BY session_window(ts, '5 seconds'), country"),
        "spark-window": ("SELECT country, window.start AS s, window.end AS e, COUNT(*) AS n, SUM(amount) AS spent "
                         "FROM clicks GROUP BY window(ts, '10 seconds', '5 seconds'), country"),
    }
    got = {}
    for name, sql in queries.items():
        run_job(spark, SqlJob(name, sql, tables={"clicks": clicks}, sink=f"sinks/{name}"), lake)
        got[name] = table(spark, lake, f"sinks/{name}", ["country", *(["window_start", "window_end"] if name in (
            "cumulate", "session") else ["s", "e"]), "n", "spent"])
    assert got["cumulate"] == duck(
        "SELECT country, ts - ts % 20000 AS ws, ts - ts % 20000 + k * 5000 AS we, count(*), sum(amount) FROM "
        "clicks, (SELECT range AS k FROM range(1, 5)) WHERE ts - ts % 20000 + k * 5000 > ts AND country != 'xx' "
        "GROUP BY country, ws, we")
    assert got["session"] == got["legacy"] == got["spark-session"] == duck(SESSIONS)
    assert ("de", 2500, 12000, 3, 4) in got["session"]  # three clicks 2.5 s apart at most: one session
    assert got["spark-window"] == duck(
        "SELECT country, s, s + 10000, count(*), sum(amount) FROM clicks, (SELECT range * 5000 AS s FROM "
        "range(-1, 21)) WHERE s <= ts AND ts < s + 10000 AND country != 'xx' GROUP BY country, s")
    assert "sql-window-clicks-country-session-5000-5000: WindowOperator" in explain(SqlJob(
        "x", queries["legacy"], tables={"clicks": clicks}, sink="sinks/x"))


@pytest.mark.spark
def test_a_join_of_window_aggregations_of_two_tables_pairs_their_windows_as_duckdb(spark, tmp_path):
    """Nexmark's q8: a window aggregation of each of two tables, joined on their groups and windows; the tables
    read as one stream (the queries' operators branch from one first operator), whose watermark is the least
    of theirs; the joined windows those closed, as DuckDB's."""
    lake = Lake(tmp_path)
    visit = Types.ROW_NAMED(["who", "ts"], [Types.STRING(), Types.LONG()])
    visits = [[("al", 3000), ("bo", 12000)], [("cy", 11000), ("al", 25000)], [("zz", 101000)]]
    tables = {"clicks": clicks_table(lake),
              "visits": SqlTable(input_table(lake, "visits", visit, visits), "ts - INTERVAL '4' SECOND")}
    tumble = "FROM TABLE(TUMBLE(TABLE {}, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY {}, window_start, window_end"
    sql = (f"SELECT P.user, P.s FROM (SELECT user, window_start AS s, window_end AS e {tumble.format('clicks', 'user')}"
           f") P JOIN (SELECT who, window_start AS s, window_end AS e {tumble.format('visits', 'who')}) A ON P.user = "
           f"A.who AND P.s = A.s AND P.e = A.e")
    job = SqlJob("q8", sql, tables=tables, sink="sinks/q8")
    assert explain(job).startswith("sql-union-clicks-visits: Rows")
    run_job(spark, job, lake)
    closed = "ts // 10000 * 10000 + 10000 <= 96000"  # the least of the two watermarks: 100 s - 4 s
    expected = duck_tables({
        "clicks": ('"user" VARCHAR, ts BIGINT', [(u, t) for b in CLICKS for u, _, _, t in b]),
        "visits": ("who VARCHAR, ts BIGINT", [r for b in visits for r in b])},
        f'SELECT DISTINCT c."user", c.ts // 10000 * 10000 FROM clicks c JOIN visits v ON c."user" = v.who AND '
        f"c.ts // 10000 = v.ts // 10000 WHERE c.{closed} AND v.{closed}")
    assert table(spark, lake, "sinks/q8", ["user", "s"]) == expected and len(expected) == 3


@pytest.mark.spark
def test_a_temporal_join_looks_each_row_up_in_the_table_as_it_is_when_the_row_is_processed(spark, tmp_path):
    """Nexmark's q13: ``FROM (SELECT *, PROCTIME() AS p FROM t) a JOIN s FOR SYSTEM_TIME AS OF a.p`` on a key
    the first table computes: each click joined with the looked-up rows that came in its microbatch or before,
    not with those that come later (a regular join's would), as DuckDB's join of the rows so read."""
    lake = Lake(tmp_path)
    side = [[(0, "zero"), (1, "one"), (1, "uno")], [(2, "two")]]  # a file a microbatch, beside the clicks'
    lookup = Types.ROW_NAMED(["key", "value"], [Types.LONG(), Types.STRING()])
    tables = {"clicks": clicks_table(lake), "side": input_table(lake, "side", lookup, side)}
    sql = ("SELECT c.user, c.amount, s.value FROM (SELECT *, PROCTIME() AS p FROM clicks) c JOIN side FOR "
           "SYSTEM_TIME AS OF c.p AS s ON mod(c.amount, 3) = s.key")
    job = SqlJob("q13", sql, tables=tables, sink="sinks/q13")
    assert explain(job).startswith("sql-lookup-join-c-side-inner-_key0-key: BroadcastRecordOperator")
    run_job(spark, job, lake)
    expected = duck_tables({
        "clicks": ('"user" VARCHAR, amount BIGINT, batch INT', [(u, a, i) for i, b in enumerate(CLICKS)
                                                                for u, _, a, _ in b]),
        "side": ("key BIGINT, value VARCHAR, batch INT", [(k, v, i) for i, b in enumerate(side) for k, v in b])},
        'SELECT c."user", c.amount, s.value FROM clicks c JOIN side s ON c.amount % 3 = s.key AND s.batch <= c.batch')
    assert table(spark, lake, "sinks/q13", ["user", "amount", "value"]) == expected
    # al's 5 came before the key 2 was looked up: a regular join would pair them, a lookup join does not
    assert ("cy", 7, "one") in expected and ("al", 5, "two") not in expected


@pytest.mark.spark
def test_a_processing_time_window_of_a_view_counts_each_run_once_its_window_has_passed(spark, tmp_path):
    """Nexmark's q12: ``CREATE VIEW v AS SELECT *, PROCTIME() AS p FROM t`` then a TUMBLE of ``DESCRIPTOR(p)``, a
    window in processing time: a microbatch's clicks are in the window of its processing time, which fires once a
    later microbatch's processing time has passed it (a run with no input fires it too), never before."""
    from datetime import datetime, timezone

    lake = Lake(tmp_path)
    sql = ("CREATE VIEW v AS SELECT *, PROCTIME() AS p FROM clicks; SELECT user, COUNT(*) AS n, window_start, "
           "window_end FROM TABLE(TUMBLE(TABLE v, DESCRIPTOR(p), INTERVAL '1' SECOND)) GROUP BY user, window_start, "
           "window_end")
    job = SqlJob("q12", sql, tables={"clicks": clicks_table(lake)}, sink="sinks/q12")
    assert explain(job).startswith("sql-window-v-user-tumble-1000-1000-proctime: WindowOperator")
    t0 = 1_700_000_000_000  # a whole second: the processing time of the first run
    columns = ["user", "n", "window_start", "window_end"]

    def counted(batches, start: int) -> list[tuple]:
        at = [datetime.fromtimestamp(ms / 1000, timezone.utc).replace(tzinfo=None) for ms in (start, start + 1000)]
        return [(u, n, *at) for u, n in duck('SELECT "user", count(*) FROM clicks GROUP BY "user"', batches)]

    run_job(spark, job, lake, max_microbatches=1, clock=lambda: t0)  # microbatch 0 in [t0, t0 + 1 s)
    run_job(spark, job, lake, clock=lambda: t0 + 1500)  # 1 and 2 in the next second; the first window fires
    assert table(spark, lake, "sinks/q12", columns) == sorted(counted(CLICKS[:1], t0), key=repr)
    run_job(spark, job, lake, clock=lambda: t0 + 5000)  # no input: a timer-only microbatch fires the second
    assert table(spark, lake, "sinks/q12", columns) == sorted(counted(CLICKS[:1], t0) + counted(CLICKS[1:], t0 + 1000),
                                                               key=repr)


@pytest.mark.spark
def test_an_event_time_of_type_timestamp_windows_and_deduplicates_as_epoch_milliseconds_do(spark, tmp_path):
    """Nexmark's dateTime is a TIMESTAMP(3): the clicks with their times as TIMESTAMPs (in a JSON file as ISO
    text) give the windows of the same times in epoch milliseconds, window_start and window_end TIMESTAMPs as
    Flink's; a deduplication by that time keeps DuckDB's rows with their TIMESTAMPs; and a stateless query that
    leaves the time column out (Nexmark's q2) still has the table's watermark."""
    import datetime

    base = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)
    at = lambda ms: base + datetime.timedelta(milliseconds=ms)  # noqa: E731
    stamped = Types.ROW_NAMED(CLICK.fields, [*list(CLICK.fields.values())[:3], Types.TIMESTAMP()])
    lake = Lake(tmp_path)
    folder = lake.inputs / "stamped"
    folder.mkdir(parents=True)
    for i, batch in enumerate(CLICKS):
        (folder / f"part-{i:03d}.json").write_text("".join(json.dumps(dict(zip(CLICK.fields, (*row[:3], at(
            row[3]).isoformat(timespec="milliseconds"))))) + "\n" for row in batch))
    clicks = SqlTable(FileSource(str(folder), "json", stamped, max_files_per_batch=1), "ts - INTERVAL '4' SECOND")
    window = ("SELECT country, window_start, window_end, COUNT(*) AS n, SUM(amount) AS spent FROM TABLE(TUMBLE("
              "TABLE clicks, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY country, window_start, window_end")
    queries = {"window": window, "last": "SELECT user, amount, ts FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "
               "user ORDER BY ts DESC) AS rn FROM clicks) WHERE rn = 1", "q2": "SELECT user, amount FROM clicks "
               "WHERE amount > 0"}
    got, said = {}, []
    for name, sql in queries.items():
        job = SqlJob(name, sql, tables={"clicks": clicks}, sink=f"sinks/{name}")
        run_job(spark, job, lake, progress=said.append)
        got[name] = spark.read.format("delta").load(str(lake.settings.in_warehouse(f"sinks/{name}", "sink")))
    # The run's event times, read for its three microbatches in one pass, are those of plans made one a run.
    assert sum(line.endswith("event times of the next 3 microbatches of input 'main' read in one pass")
               for line in said) == 3
    alone = Lake(tmp_path / "one-a-run")
    for _ in CLICKS:
        run_job(spark, SqlJob("window", window, tables={"clicks": clicks}, sink="sinks/window"), alone,
                max_microbatches=1)
    plans = [[JobStore(at.settings.job_dir("window")).read_plan(b).event_time for b in range(len(CLICKS))]
             for at in (lake, alone)]
    assert plans[0] == plans[1] and plans[0][-1]["max_event_time"] > plans[0][0]["max_event_time"]
    assert dict(got["window"].dtypes)["window_start"] == dict(got["last"].dtypes)["ts"] == "timestamp"
    rows = got["window"].selectExpr("country", "unix_millis(window_start)", "unix_millis(window_end)", "n",
                                    "spent").collect()
    assert sorted((r[0], r[1] - at(0).timestamp() * 1000, r[2] - r[1], *r[3:]) for r in rows) == duck(
        "SELECT country, ts - ts % 10000 AS ws, 10000, count(*), sum(amount) FROM clicks WHERE country != 'xx' "
        "GROUP BY country, ws")
    last = got["last"].selectExpr("user", "amount", "unix_millis(ts)").collect()
    assert sorted((r[0], r[1], r[2] - at(0).timestamp() * 1000) for r in last) == duck(
        'SELECT "user", amount, ts FROM clicks QUALIFY row_number() OVER (PARTITION BY "user" ORDER BY ts DESC) = 1')
    assert sorted(map(tuple, got["q2"].select("user", "amount").collect())) == duck(
        'SELECT "user", amount FROM clicks WHERE amount > 0')


def test_flinks_windowing_syntax_parses_and_its_watermark_is_flink_sqls():
    """The dialect parses the windowing functions of every Nexmark-style query shape (TUMBLE, HOP with an
    alias, SESSION in a GROUP BY); ``ts - INTERVAL '4' SECOND`` is a watermark 4 s behind the largest time, as
    Flink SQL's (a bound of 3,999 ms in the DataStream strategy, which trails by 1 ms more)."""
    for sql in ("SELECT * FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))",
                "SELECT * FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, "
                "INTERVAL '10' SECOND)) AS h",
                "SELECT bidder, count(*) FROM bid GROUP BY bidder, SESSION(dateTime, INTERVAL '10' SECOND)"):
        assert len(parse(sql)) == 1
    column, strategy = watermark_strategy("ts - INTERVAL '4' SECOND")
    assert column == "ts" and strategy.timestamp_column == "ts" and strategy.bound_ms == 3_999


@pytest.mark.parametrize("sql, message", [
    ("SELECT a.user FROM clicks a LEFT JOIN clicks b ON a.user = b.user AND a.ts > b.ts",
     r"the join condition a.ts > b.ts"),
    ("SELECT a.user FROM clicks a JOIN clicks b ON a.user > b.user", r"a join without an equality"),
    ("SELECT user, count(*) FROM clicks", r"an aggregate without GROUP BY is not supported yet"),
    ("SELECT user, count(DISTINCT amount) FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' SECOND)) "
     "GROUP BY user, window_start, window_end", r"COUNT\(DISTINCT \.\.\.\) in a window aggregation"),
    ("SELECT user, sum(DISTINCT amount) FROM clicks GROUP BY user", r"DISTINCT values other than COUNT\(DISTINCT"),
    ("SELECT count(*) AS n FROM clicks GROUP BY user", r"kept by its GROUP BY columns: select 'user' too"),
    ("SELECT * FROM other", r"reads table 'other' but tables= has \['clicks'\]"),
    ("SELECT country, count(*) FROM TABLE(CUMULATE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '3' SECOND, "
     "INTERVAL '4' SECOND)) GROUP BY country, window_start, window_end", r"max size must be a multiple of its step"),
    ("SELECT country, count(*) FROM TABLE(SESSION(TABLE clicks, DESCRIPTOR(ts), INTERVAL '4' SECOND)) GROUP BY "
     "country, window_start, window_end", r"a SESSION window grouped by \['country'\], not by its PARTITION BY"),
    ("SELECT country, window, count(*) FROM clicks GROUP BY window(ts, '1 minute'), country",
     r"the struct window is not supported yet; select window.start and window.end"),
    ("SELECT country, count(*) FROM clicks GROUP BY window(ts, '1 fortnight'), country", r"the duration '1 fortnight'"),
    ("SELECT country, count(*) FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' SECOND)) "
     "GROUP BY country", r"grouped by window_start and window_end"),
    ("INSERT INTO x SELECT * FROM clicks", r"SQL other than one SELECT"),
    ("SELECT * FROM (SELECT *, RANK() OVER (PARTITION BY user ORDER BY ts) AS r FROM clicks) WHERE r <= 3",
     r"a window function other than one ROW_NUMBER\(\) \.\.\. AS name"),
    ("SELECT user, ts FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY user ORDER BY ts) AS r FROM clicks) "
     "WHERE r <= 3", r"rows have no key to upsert by \(a Top-N without its row number"),
])
def test_unsupported_sql_is_refused_naming_the_construct(tmp_path, sql, message):
    lake = Lake(tmp_path)
    with pytest.raises(ConfigError, match=message):
        SqlJob("bad", sql, tables={"clicks": clicks_table(lake)}, sink="sinks/bad")


SQL_ENTRY = '''
[jobs.per-country]
sql = "SELECT country, COUNT(*) AS clicks FROM clicks GROUP BY country"
sink = "sinks/per_country"
parallelism = 3
{extra}
[jobs.per-country.tables.clicks]
path = "input/clicks"
format = "json"
schema = "user STRING, country STRING, amount BIGINT, ts BIGINT"
{table}
'''


@pytest.mark.parametrize("extra, table, message", [
    ('[jobs.per-country.functions]\ncount_char = "tests.api.test_sql:count_char"', "", None),
    ('functions = {count_char = "nowhere"}', "", r"field 'functions' names each scalar function the query calls"),
    ('entrypoint = "demo.clicks:job"', "", r"either 'entrypoint' \(a factory\) or 'sql' \(a query\), not both"),
    ("", 'source = "demo.clicks:job"', r"either source = .* or path, format and schema, not both"),
    ("", 'watermark = ""', r"table 'clicks': field 'watermark' must be a non-empty string"),
    ("", "max_files_per_batch = 0", r"'max_files_per_batch' must be a positive integer"),
    ("", "columns = 2", r"table 'clicks': unknown field 'columns'"),
])
def test_a_sql_job_in_the_registry_is_checked_field_by_field_and_explained_by_the_cli(tmp_path, capsys, monkeypatch,
                                                                                      extra, table, message):
    """A registry entry with ``sql``, ``sink`` and ``tables``: each bad field refused naming the entry and the
    field, the other entries still loading; a good one explained by ``lakestate sql explain`` (the query, then each
    operator's uid and state) with its parallelism the operators'; its record rebuilds the job."""
    from state_store.catalog.jobs import build_spec
    from state_store.catalog.pipelines import load_registry
    from state_store.cli import main

    registry = tmp_path / "lakestate.toml"
    registry.write_text(SQL_ENTRY.format(extra=extra, table=table) + '\n[jobs.other]\nentrypoint = "demo.clicks:job"\n')
    entries, errors = load_registry(registry)
    assert "other" in entries
    if message is not None:
        assert list(errors) == ["per-country"] and "[jobs.per-country]" in errors["per-country"]
        assert re.search(message, errors["per-country"]), errors
        return
    write_clicks(tmp_path / "root" / "input" / "clicks")
    monkeypatch.setenv("LAKESTATE_ROOT", str(tmp_path / "root"))  # a table's relative path is under the root
    entry = entries["per-country"]
    assert entry.overrides() == {} and entry.sql["parallelism"] == 3
    job = build_spec(entry.entrypoint, entry.sql)
    assert [o.parallelism for o in as_job(job).operators] == [3]  # the aggregate's AS name is its column
    assert main(["sql", "explain", "per-country", "--registry", str(registry)]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0] == "SELECT country, COUNT(*) AS clicks FROM clicks GROUP BY country"
    assert said[2] == ("sql-group-clicks-country: GroupAggregate, keyed by 'country'; state "
                       "sql-group-clicks-country.group")
    assert main(["sql", "explain", "other", "--registry", str(registry)]) == 2
    assert "not a SQL job (field 'sql'): use lakestate run --job other --registry" in capsys.readouterr().err
    # The demo's SQL Top-N (lakestate.toml) compiles to what docs/writing/sql.md says it does.
    from pathlib import Path

    from state_store.catalog.pipelines import registry_entry

    top = registry_entry("sql-top-pages", Path(__file__).parents[2] / "lakestate.toml")
    (tmp_path / "root" / "input" / "clicks").mkdir(exist_ok=True)
    page = (Path(__file__).parents[2] / "docs" / "writing" / "sql.md").read_text()
    assert explain(build_spec(top.entrypoint, top.sql)) + "\n" == re.search(
        r"`explain` prints, for the entry above:\n\n```\n(.*?)```", page, re.S).group(1)
