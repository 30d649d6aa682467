"""State edited with SQL (``lakestate state edit``): one UPDATE, DELETE or INSERT on a keyed state of a savepoint,
written as a new savepoint through the State Processor's writer that a job restores, at another parallelism
too; refused with the fix, before anything is written, when it would break a type or a key."""
from __future__ import annotations

import json

import pytest

from state_store.catalog.savepoints import list_savepoints, load_savepoint
from state_store.cli import main
from state_store.delta.points import StatePoint
from state_store.errors import ConfigError
from state_store.ops.restore import restore_job
from state_store.ops.savepoint import take_savepoint
from state_store.ops.state_edit import _VIEW, edit_state, parse_statement
from state_store.ops.state_processor import SavepointReader
from tests.support.helpers import keyed_values, run, sink_rows, state_at_latest_checkpoint
from tests.support.jobs import TTL_MS, count_job, events, ticking_clock, ttl_job

QUIET = dict(say=lambda m: None)


def test_a_statement_is_parsed_into_its_parts_or_refused_naming_what_it_is():
    update = parse_statement("UPDATE `clicks.count` SET value = value * 2, namespace = 'w' WHERE key LIKE 'bot%'")
    assert (update.verb, update.state, update.where) == ("UPDATE", "clicks.count", "key LIKE 'bot%'")
    assert update.assignments == {"value": "value * 2", "namespace": "'w'"}
    assert parse_statement("DELETE FROM `sql-select`.count_all").state == "sql-select.count_all"
    insert = parse_statement("INSERT INTO count (key, value) SELECT concat(key, '2'), value FROM count WHERE 1 = 1")
    # The state read inside the statement is the table of its entries.
    assert (insert.columns, insert.query) == (
        ["key", "value"], f"SELECT CONCAT(key, '2'), value FROM {_VIEW} WHERE 1 = 1")
    assert parse_statement("INSERT INTO count VALUES ('a', 1)").columns is None
    for text, refusal in [("SELECT * FROM count", "takes one statement: UPDATE .*; got SELECT"),
                          ("DELETE FROM a; DELETE FROM b", "got 2 statements"),
                          ("UPDATE count SET value = = 1", "does not parse"),
                          ("UPDATE count SET", "UPDATE needs SET"),
                          ("UPDATE count SET value = 1 FROM other", r"UPDATE \.\.\. FROM is not supported")]:
        with pytest.raises(ConfigError, match=refusal):
            parse_statement(text)


def test_a_savepoint_edited_with_sql_restores_at_another_parallelism_and_a_bad_edit_writes_nothing(
        spark, lake, capsys, monkeypatch):
    spec = count_job(lake)  # counts per key: a..e are 3 after microbatch 0
    lake.write_events("e0.json", events(0))
    run(spark, spec, lake)
    take_savepoint(spark, lake.settings, spec.job_id, label="v1", **QUIET)
    edit = edit_state(spark, lake.settings, "counts/v1", "UPDATE count SET value = value * 100 WHERE key IN "
                      "('a', 'b')", into="x1", **QUIET)
    assert (edit.state, edit.touched, edit.entries) == ("count.count", 2, 5)
    edit_state(spark, lake.settings, "counts/x1", "DELETE FROM count WHERE key = 'c'", into="x2", **QUIET)
    # Through the CLI, as users do: a dry run writes nothing; then the INSERT, from a SELECT of the state itself.
    root = ["--root", str(lake.root)]
    insert = "INSERT INTO count (key, value) SELECT concat(key, '2'), value + 1 FROM count WHERE key = 'a'"
    assert main(["state", "edit", "--savepoint", "counts/x2", "--dry-run", insert, *root]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["savepoint"] is None
    assert main(["state", "edit", "--savepoint", "counts/x2", "--into", "x3", insert, *root]) == 0
    said = capsys.readouterr().out
    assert json.loads(said.strip().splitlines()[-2]) == {"state": "count.count", "statement": "INSERT",
                                                          "touched": 1, "entries": 5, "savepoint": "counts/x3"}
    assert "lakestate restore counts --savepoint counts/x3" in said
    edited = SavepointReader.for_savepoint(spark, "counts/x3", lake.settings).keyed_state("count")
    assert {r["key"]: r["value"] for r in edited.collect()} == {"a": 300, "b": 300, "d": 3, "e": 3, "a2": 301}
    # Key groups are computed as a run computes them: the new key's is Spark's pmod(hash(key), max parallelism).
    groups = {r["key"]: r["key_group"] for r in edited.collect()}
    assert groups["a2"] == spark.sql("SELECT pmod(hash('a2'), 8) AS g").first()["g"]
    before = SavepointReader.for_savepoint(spark, "counts/v1", lake.settings).keyed_state("count").collect()
    assert {r["key"]: r["value"] for r in before} == {k: 3 for k in "abcde"}  # the savepoint edited stays
    assert all(groups[r["key"]] == r["key_group"] for r in before if r["key"] in groups)

    # Edits that would break a type or a key are refused naming the fix; no savepoint is written.
    names = {s.name for s in list_savepoints(lake.settings)}
    for statement, refusal in [
        ("UPDATE count SET value = 'many'", r"column 'value' of state 'count.count' is bigint, the expression is "
                                            r"string; give a bigint \(CAST"),
        ("UPDATE count SET key_group = 1", "key_group is computed from the key"),
        ("UPDATE count SET value = NULL WHERE key = 'a'", "1 entries .* with a null value: DELETE the entries"),
        ("INSERT INTO count (key, value) VALUES ('a', 1)", "2 entries of state 'count.count' with key 'a', "
                                                           "namespace '', which holds one: UPDATE the entry"),
        ("UPDATE count SET key = 'd' WHERE key = 'e'", "with key 'd'"),
        ("INSERT INTO count (value) VALUES (1)", r"needs the columns \['key'\]"),
        ("INSERT INTO count VALUES ('q', 1)", r"without a column list takes the state's 3 columns"),
        ("UPDATE count SET value = value + 1 WHERE nosuch = 1", "the WHERE of UPDATE fails in Spark: "
                                                                r"\[UNRESOLVED_COLUMN"),
        ("UPDATE count SET value = 9223372036854775807 + value", "UPDATE fails in Spark: .*OVERFLOW"),
        ("UPDATE nope SET value = 1", r"'count.nope' is not a keyed state of it; .* \['count.count'\]"),
        ("UPDATE `__source__.offsets` SET value = 1", "is not a keyed state"),
    ]:
        with pytest.raises(ConfigError, match=refusal):
            edit_state(spark, lake.settings, "counts/v1", statement, into="bad", **QUIET)
    with pytest.raises(ConfigError, match="a savepoint named 'x1' of job 'counts' already exists: give another "
                                          "--into"):
        edit_state(spark, lake.settings, "counts/v1", "DELETE FROM count", into="x1", **QUIET)
    assert {s.name for s in list_savepoints(lake.settings)} == names
    assert load_savepoint(lake.settings, "counts/v1").entries["count.count"] == 5

    # A job restores the edited savepoint at parallelism 3 and carries on from it.
    restore_job(spark, lake.settings, spec, StatePoint.of_savepoint(lake.settings, "counts/x3"), parallelism=3,
                **QUIET)
    lake.write_events("e1.json", events(1, keys=("a", "c", "a2")))
    run(spark, spec, lake)
    final = keyed_values(state_at_latest_checkpoint(spark, lake, spec)[0], "count.count")
    assert {k: v for (k, _), v in final.items()} == {"a": 303, "b": 300, "c": 3, "d": 3, "e": 3, "a2": 304}
    assert {json.loads(r)["k"]: json.loads(r)["n"] for r in sink_rows(spark, lake, spec)
            if json.loads(r)["k"] in ("a2", "c")} == {"a2": 304, "c": 3}


def test_an_edit_of_a_state_with_ttl_stamps_the_entries_it_writes_and_keeps_the_others(spark, lake):
    # Keys a and b written at 0 ms, b again at 1000 ms: the savepoint's processing time is 1000 ms.
    for batch, keys in {0: ["a", "b"], 1: ["b"]}.items():
        lake.write_events(f"e{batch}.json", [{"k": k, "v": batch * 10 + i, "op": "add", "seq": batch * 100 + i}
                                             for i, k in enumerate(keys)])
    spec = ttl_job(lake, "delta")
    run(spark, spec, lake, clock=ticking_clock())
    take_savepoint(spark, lake.settings, spec.job_id, label="t1", **QUIET)
    reader = SavepointReader.for_savepoint(spark, f"{spec.job_id}/t1", lake.settings)
    assert reader.meta.processing_time == 1000
    edit_state(spark, lake.settings, f"{spec.job_id}/t1", "UPDATE seen SET value = value + 100 WHERE key = 'b' AND "
               "index = 0", into="t2", **QUIET)
    edit_state(spark, lake.settings, f"{spec.job_id}/t2", "INSERT INTO last (key, value) VALUES ('z', 7)",
               into="t3", **QUIET)
    saved = spark.read.format("delta").load(load_savepoint(lake.settings, f"{spec.job_id}/t3").table_path("keyed"))
    rows = {(r["state_name"], r["key"]): (r["value"], r["expiry"]) for r in saved.collect()}
    # The element changed is stamped as a write at 1000 ms; the other keeps the expiry of its own write.
    assert json.loads(rows[("ttl.seen", "b")][0]) == [[1000 + TTL_MS, 101], [1000 + TTL_MS, 10]]
    assert json.loads(rows[("ttl.seen", "a")][0]) == [[TTL_MS, 0]]
    assert rows[("ttl.last", "z")] == ("7", 1000 + TTL_MS) and rows[("ttl.last", "a")] == ("0", TTL_MS)
    with pytest.raises(ConfigError, match="column 'expiry' of state 'ttl.last' is bigint"):
        edit_state(spark, lake.settings, f"{spec.job_id}/t1", "UPDATE last SET expiry = 'never'", into="t4",
                   **QUIET)


def test_a_sql_jobs_state_keyed_by_two_columns_edited_and_restored_at_parallelism_3(spark, lake):
    from state_store import FileSource, SqlJob, SqlTable
    from tests.api.test_sql import CLICK, CLICKS, run_job, write_clicks

    write_clicks(lake.inputs / "clicks", CLICKS[:2])
    clicks = SqlTable(FileSource(str(lake.inputs / "clicks"), "json", CLICK, max_files_per_batch=1))
    job = SqlJob("per-user", "SELECT user, country, COUNT(*) AS n FROM clicks GROUP BY user, country",
                 tables={"clicks": clicks}, sink="sinks/per-user")
    run_job(spark, job, lake)
    take_savepoint(spark, lake.settings, "per-user", label="s1", **QUIET)
    state = "`sql-group-clicks-user-country.group`"  # the query's operator and its state, as `sql explain` names
    with pytest.raises(ConfigError, match=r"is struct<rows:bigint,acc:struct<count_all:bigint>>, the expression "
                                          r"is struct<count_all:int>"):
        edit_state(spark, lake.settings, "per-user/s1", f"UPDATE {state} SET value = named_struct('count_all', 9)",
                   **QUIET)
    edit_state(spark, lake.settings, "per-user/s1", f"UPDATE {state} SET value = named_struct('rows', 100, 'acc', "
               "named_struct('count_all', 100)) WHERE key.user = 'al' AND key.country = 'fr'", **QUIET)
    write_clicks(lake.inputs / "clicks")  # the third microbatch: al (fr) clicks once more
    restore_job(spark, lake.settings, job, StatePoint.of_savepoint(lake.settings, "per-user/s1-edited"),
                parallelism=3, **QUIET)
    run_job(spark, job, lake)
    sink = spark.read.format("delta").load(str(lake.settings.in_warehouse("sinks/per-user", "sink")))
    assert {(r["user"], r["country"]): r["n"] for r in sink.collect()} == {
        ("al", "fr"): 101, ("bo", "de"): 3, ("cy", "fr"): 1, ("dee", "it"): 1, ("eve", "de"): 1, ("zz", "xx"): 1}
