"""A run's commits and state reads go through delta-rs (``state_store.delta.delta_rs``): the tables they give are the
ones Delta's own transaction gives, for Spark, ``DESCRIBE HISTORY``, delta-rs and ``delta.log``; a table
delta-rs cannot write or read so takes Delta's own way."""
from __future__ import annotations

import json
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from state_store.delta import delta_rs
from state_store.delta.log import app_transaction_version, table_snapshot
from state_store.delta.state_tables import _commit_files_on_jvm, commit_files, read_version
from state_store.records.layout import KEYED_TABLE
from state_store.records.stats import WrittenFile

DDL = KEYED_TABLE.schema
PARTS = KEYED_TABLE.partition_columns
NAMES = ("u.count", "u.items-2")  # state names (letters, digits, "_", "-", qualified by a uid and ".")


def _write(table, version: int) -> list[WrittenFile]:
    """Two Parquet files of microbatch ``version`` in two partitions, as a run writes them (hive folders)."""
    files = []
    for i, name in enumerate(NAMES):
        kg = (version + i) % 4
        folder = f"state_name={name}/key_group={kg}"
        rel = f"{folder}/part-{version}-{i}.parquet"
        (table / folder).mkdir(parents=True, exist_ok=True)
        rows = {"key": [f"k{version}", f"k{version + 1}"], "namespace": ["", ""], "user_key": [None, None],
                "value": [json.dumps(version), None], "expiry": [None, 5], "batch_id": [version, version],
                "generation": [0, 0]}
        schema = pa.schema([("key", pa.string()), ("namespace", pa.string()), ("user_key", pa.string()),
                            ("value", pa.string()), ("expiry", pa.int64()), ("batch_id", pa.int64()),
                            ("generation", pa.int64())])
        pq.write_table(pa.table(rows, schema=schema), table / rel)
        files.append(WrittenFile("keyed", rel, {"state_name": name, "key_group": str(kg)},
                                 os.path.getsize(table / rel), 2, version, version))
    return files


def _rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.select(*KEYED_TABLE.columns).collect())


def test_delta_rs_commits_give_the_table_deltas_own_transaction_gives(spark, tmp_path):
    from deltalake import DeltaTable

    mine, theirs = tmp_path / "delta-rs", tmp_path / "jvm"
    for version in range(11):  # up to a log checkpoint (every 10 versions)
        for table, commit in ((mine, commit_files), (theirs, _commit_files_on_jvm)):
            assert commit(spark, table, "app", version, _write(table, version), DDL, PARTS,
                          None if version == 0 else version - 1, "batch_id")
    assert json.loads((mine / "_delta_log" / "_last_checkpoint").read_text())["version"] == 10

    # Spark, delta-rs and delta.log read the same rows, files and app transactions from both.
    read = lambda t: spark.read.format("delta").load(str(t))  # noqa: E731
    assert _rows(read(mine)) == _rows(read(theirs)) and len(_rows(read(mine))) == 44
    other = {t: DeltaTable(str(t)).to_pyarrow_table().select(KEYED_TABLE.columns).to_pylist() for t in (mine, theirs)}
    assert sorted(map(lambda r: tuple(r.values()), other[mine])) == sorted(
        map(lambda r: tuple(r.values()), other[theirs]))
    sizes = {t: table_snapshot(t) for t in (mine, theirs)}
    assert (sizes[mine]["num_files"], sizes[mine]["size_bytes"], sizes[mine]["version"]) == (
        sizes[theirs]["num_files"], sizes[theirs]["size_bytes"], sizes[theirs]["version"]) == (
        22, sizes[mine]["size_bytes"], 10)
    assert app_transaction_version(mine, "app") == app_transaction_version(theirs, "app") == 10
    assert DeltaTable(str(mine)).transaction_version("app") == 10

    # DESCRIBE HISTORY: the same operation, parameters and metrics for every append, the first (the table's
    # creation) included.
    history = {t: {r.version: r for r in spark.sql(f"DESCRIBE HISTORY delta.`{t}`").collect()} for t in (mine, theirs)}
    assert sorted(history[mine]) == sorted(history[theirs]) == list(range(11))
    for version in range(11):
        a, b = history[mine][version], history[theirs][version]
        assert a.operationMetrics == b.operationMetrics == {"numFiles": "2", "numOutputRows": "4",
                                                            "numOutputBytes": a.operationMetrics["numOutputBytes"]}
        assert a.isBlindAppend is True and b.isBlindAppend is True
        assert (a.operation, a.operationParameters) == (b.operation, b.operationParameters) == (
            "WRITE", {"mode": "Append", "partitionBy": json.dumps(list(PARTS)).replace(" ", "")})
    assert [r.asDict() for r in spark.sql(f"DESCRIBE DETAIL delta.`{mine}`").select(
        "format", "partitionColumns", "minReaderVersion", "minWriterVersion", "properties").collect()] == [
        r.asDict() for r in spark.sql(f"DESCRIBE DETAIL delta.`{theirs}`").select(
            "format", "partitionColumns", "minReaderVersion", "minWriterVersion", "properties").collect()]

    # A replay of a committed version commits nothing; a commit another writer took meanwhile is refused.
    assert commit_files(spark, mine, "app", 10, _write(mine, 10), DDL, PARTS, 9) is False
    with pytest.raises(RuntimeError, match=r"took a commit of app \(version 10\) while this run held the job"):
        commit_files(spark, mine, "app", 11, _write(mine, 11), DDL, PARTS, 9)


def test_a_state_read_of_delta_rs_file_lists_is_the_version_delta_reads(spark, tmp_path):
    table = tmp_path / "t"
    for version in range(4):
        commit_files(spark, table, "app", version, _write(table, version), DDL, PARTS,
                     None if version == 0 else version - 1)
    at = lambda v: spark.read.format("delta").option("versionAsOf", v).load(str(table))  # noqa: E731
    for version in range(4):
        assert _rows(read_version(spark, table, version, KEYED_TABLE)) == _rows(at(version))
    # Only the partitions asked for are read (the caller filters rows; here the partitions are the rows).
    some = read_version(spark, table, 3, KEYED_TABLE, [[("key_group", "in", [1])], [("state_name", "=", "u.items-2")]])
    expected = at(3).filter("key_group = 1 OR state_name = 'u.items-2'")
    assert _rows(some) == _rows(expected) and len(_rows(expected)) == 10
    assert len(delta_rs.parquet_files(table, 3, PARTS, [[("key_group", "in", [1])]])) == 2


def test_tables_delta_rs_cannot_write_or_read_as_parquet_take_deltas_own_way(spark, tmp_path):
    """A sink with row tracking is committed through Delta's own transaction; deletion vectors
    make the read go through Delta's reader (its files are not plain Parquet of the table's rows)."""
    for name, prop, writes, reads in (("rows", "delta.enableRowTracking", False, True),
                                      ("dv", "delta.enableDeletionVectors", True, False)):
        table = tmp_path / name
        spark.sql(f"CREATE TABLE delta.`{table}` ({DDL}) USING delta PARTITIONED BY (state_name, key_group) "
                  f"TBLPROPERTIES ('{prop}' = 'true')")
        if writes:
            delta_rs.commit_files(spark, table, "app", 0, _write(table, 0), DDL, PARTS, None, "batch_id")
        else:
            with pytest.raises(delta_rs.NotWritable, match="RowTracking"):
                delta_rs.commit_files(spark, table, "app", 0, _write(table, 0), DDL, PARTS, None, "batch_id")
            assert commit_files(spark, table, "app", 0, _write(table, 0), DDL, PARTS, None)
        assert (delta_rs.parquet_files(table, 1, PARTS) is not None) == reads
        assert len(_rows(read_version(spark, table, 1, KEYED_TABLE))) == 4


def test_a_jobs_spark_connect_session_id_is_its_own_and_changes_every_hour():
    from state_store.spark.connect import _with_params, job_session_id

    hour = 1_795_550_400.0  # a whole UTC hour
    assert job_session_id("a", hour) == job_session_id("a", hour + 3599) != job_session_id("a", hour + 3600)
    assert job_session_id("a", hour) != job_session_id("b", hour)
    assert _with_params("sc://h:1", "session_id=x") == "sc://h:1/;session_id=x"
    assert _with_params("sc://h:1/;token=t", "session_id=x") == "sc://h:1/;token=t;session_id=x"


def test_live_entries_in_arrow_follow_the_same_rules_as_spark():
    """``live_arrow.latest_live`` (a small savepoint's rows, read by the driver): per entry the newest row by
    (batch_id, generation) up to the checkpoint's microbatch, removed entries dropped, rows of generations the
    checkpoint does not pin unseen; map entries are entries of their own. The same rows through Spark:
    test_savepoint's first test, whose savepoint is taken both ways."""
    import pyarrow as pa

    from state_store.delta.live_arrow import latest_live
    from state_store.records.layout import KEYED_TABLE
    from state_store.subtask.run_files import arrow_schema

    def row(name, key, value, batch, generation=0, user_key=None, key_group=0):
        return {"state_name": name, "key_group": key_group, "key": key, "namespace": "", "user_key": user_key,
                "value": value, "batch_id": batch, "generation": generation}

    rows = [row("s", "a", "1", 0), row("s", "a", "2", 1),                       # updated: the newest
            row("s", "b", "x", 0), row("s", "b", None, 1),                      # removed
            row("s", "c", "c0", 0, key_group=1), row("s", "c", "c7", 0, 7, key_group=1),   # a restore's write
            row("m", "a", "v1", 0, user_key='"k1"'), row("m", "a", "v2", 1, user_key='"k2"'),
            row("s", "d", "later", 3)]                                          # after the checkpoint
    schema = arrow_schema(KEYED_TABLE.schema)
    table = pa.Table.from_pylist([{c: r.get(c) for c in schema.names} for r in rows], schema=schema)

    def live(generations):
        got = latest_live(table, KEYED_TABLE, 2, generations).to_pylist()
        return sorted((r["state_name"], r["key"], r["user_key"] or "", r["value"]) for r in got)

    assert live([7]) == live(None) == [("m", "a", '"k1"', "v1"), ("m", "a", '"k2"', "v2"), ("s", "a", "", "2"),
                                       ("s", "c", "", "c7")]
    assert ("s", "c", "", "c0") in live([])  # generation 7 not pinned: the microbatch's row is live


def test_a_local_table_versions_partition_sizes_are_read_once_and_a_table_made_again_is_read_anew(tmp_path,
                                                                                                monkeypatch):
    """The page asks for the same checkpoint's table versions on every load: ``partition_sizes`` reads a local
    version's log once per process. What a caller adds to its cells never reaches the next caller, and a table
    deleted and written again at the same path (its version 0 another commit) is read again."""
    from deltalake import write_deltalake

    from state_store.delta import log

    table, reads = tmp_path / "t", []
    read = log._partition_sizes
    monkeypatch.setattr(log, "_partition_sizes", lambda *a: reads.append(a) or read(*a))
    write_deltalake(str(table), pa.table({"p": ["a", "b"], "x": [1, 2]}), partition_by=["p"])
    first = log.partition_sizes(table, 0)
    assert sorted(first) == [("a",), ("b",)] and [files for _, files in first.values()] == [1, 1]
    first[("a",)][0] += 1000
    assert log.partition_sizes(table, 0) == read(table, 0) and len(reads) == 1
    shutil.rmtree(table)
    write_deltalake(str(table), pa.table({"p": ["a", "b", "c"], "x": [1, 2, 3]}), partition_by=["p"])
    assert sorted(log.partition_sizes(table, 0)) == [("a",), ("b",), ("c",)] and len(reads) == 2


def test_expire_log_deletes_the_log_before_a_checkpoint_and_every_later_version_still_reads(tmp_path):
    """A compaction deletes each state table's log before the newest Delta checkpoint at or before the oldest
    version a retained checkpoint pins (``expire_log``), as Delta's own log cleanup does: those versions and
    every later one read the same files from what is left (the log reader finds that checkpoint by listing,
    not by ``_last_checkpoint``), in delta-rs too; a table with no checkpoint that early keeps its whole log."""
    from deltalake import DeltaTable, write_deltalake

    from state_store.delta.log import expire_log, partition_sizes, table_files

    table = tmp_path / "t"
    for v in range(25):
        write_deltalake(str(table), pa.table({"p": [f"k{v % 3}"], "x": [v]}), partition_by=["p"], mode="append")
        if v in (10, 20):
            DeltaTable(str(table)).create_checkpoint()
    before = {v: (table_files(table, v), partition_sizes(table, v)) for v in range(25)}
    assert expire_log(table, 9) == (0, 0)  # no checkpoint at or before version 9: the log stays whole
    log = table / "_delta_log"
    deleted, reclaimed = expire_log(table, 15)  # the checkpoint of version 10 serves 15: versions 0-9 go
    assert deleted == 10 and reclaimed > 0
    assert sorted(n for n in os.listdir(log) if n.endswith(".json"))[0] == f"{10:020d}.json"
    assert (log / f"{10:020d}.checkpoint.parquet").exists()
    for v in range(10, 25):
        assert (table_files(table, v), partition_sizes(table, v)) == before[v]
        assert DeltaTable(str(table), version=v).to_pyarrow_table().num_rows == v + 1
    assert expire_log(table, 24)[0] == 10 + 1  # commits 10-19 and the checkpoint of version 10
    assert table_files(table, 20) == before[20][0] and table_files(table) == before[24][0]


def test_a_state_table_is_made_without_a_weeks_tombstones_in_its_log_checkpoints(spark, tmp_path):
    """Compaction deletes what no retained checkpoint pins (never VACUUM), so a state table a run creates asks
    for no tombstone retention: a Delta checkpoint after a compaction's removes carries none of them (with
    Delta's default week, a job compacted every few minutes would carry each removed file for a week)."""
    from deltalake import DeltaTable

    from state_store.delta.state_tables import STATE_TABLE_CONF

    table = tmp_path / "keyed"
    for version in range(3):
        assert delta_rs.commit_files(spark, table, "app", version, _write(table, version), DDL, PARTS,
                                     None if version == 0 else version - 1, "batch_id", STATE_TABLE_CONF)
    dt = DeltaTable(str(table))
    assert dt.metadata().configuration == STATE_TABLE_CONF
    dt.delete()  # a compaction's rewrite removes every file
    dt.create_checkpoint()
    checkpoint = sorted((table / "_delta_log").glob("*.checkpoint.parquet"))[-1]
    removes = pq.read_table(checkpoint).column("remove").to_pylist() if "remove" in pq.read_schema(checkpoint).names \
        else []
    assert not any(removes) and dt.to_pyarrow_table().num_rows == 0
