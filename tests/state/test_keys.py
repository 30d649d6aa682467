"""Keys of every kind (issue 61, item 1), after Flink's KeyedStateBackend tests of composite keys: a key of
several columns and keys of every type Spark hashes stably run, replay a crash, restore rescaled on the other
backend, and are read back by the State Processor and ``lakestate state``; the key group is Flink's rule over
Spark's hash of the whole key, computed in the JVM."""
from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from state_store import FileSource, Types
from state_store.errors import RestoreError
from tests.support.helpers import run as run_job
from tests.support.helpers import sink_rows, state_at_latest_checkpoint
from tests.support.keys import (
    CLICK,
    KEYS,
    TYPED_KEY,
    Total,
    VectorizedTotal,
    device_job,
    typed_job,
    write_clicks,
    write_typed,
)
from tests.support.lake import Lake


def _rows(spark, lake, spec) -> list[tuple]:
    """The sink's rows as Arrow gives them (a TIMESTAMP in UTC, a row a tuple), sorted."""
    table = spark.read.format("delta").load(str(lake.settings.in_warehouse(spec.sink, "sink")))
    rows = table.drop("_microbatch").toArrow().to_pylist()
    return sorted((tuple(tuple(v.values()) if isinstance(v, dict) else v for v in r.values()) for r in rows),
                  key=repr)


def _key_groups(spark, lake, spec, source_folder, reader_format: str) -> tuple[dict, dict]:
    """The key group of each stored key's entries, and Spark's pmod(hash(key columns), max parallelism) of the
    source's records, both by the key's text."""
    from state_store.keys import key_text_of

    keyed, _ = state_at_latest_checkpoint(spark, lake, spec)
    stored = {key: key_group for _, key_group, key, *_ in keyed}
    columns = [F.col(c) for c in (spec.key if isinstance(spec.key, tuple) else (spec.key,))]
    records = spark.read.schema(spec.source.schema.spark_schema_ddl()).format(reader_format).load(str(source_folder))
    expected = {r[0]: r[1] for r in records.select(
        key_text_of(spec.key, spec.key_type),
        F.pmod(F.hash(*columns), F.lit(spec.effective_max_parallelism))).distinct().collect()}
    return stored, expected


def _typed_keys(spark, path) -> tuple[str, dict]:
    """What any Delta reader sees of the keyed table at ``path``: the type of its ``typed_key`` column, and each
    key text's typed key (a row a tuple; a raw keyed row's ``""`` key null)."""
    table = spark.read.format("delta").load(str(path))
    typed = {r["key"]: r["typed_key"] for r in table.select("key", "typed_key").distinct().collect()}
    return (table.schema["typed_key"].dataType.simpleString(),
            {k: tuple(v) if v is not None and hasattr(v, "__fields__") else v for k, v in typed.items()})


def _latest_keyed_table(lake, spec):
    from state_store.catalog.job_store import JobStore

    return JobStore(lake.settings.job_dir(spec.job_id)).latest_checkpoint().table("keyed").path


@pytest.mark.spark
def test_a_composite_key_keeps_each_pairs_state_and_timers_replays_a_crash_and_restores_rescaled(spark, tmp_path):
    """Sessions per (user, device): value, list and map state and event-time timers per pair of columns, the key
    a tuple in the function; its key groups Spark's hash of both columns; a crash after the sink write replays to
    the clean run; a savepoint restores at parallelism 3 on the hashmap backend and goes on as the clean run; the
    State Processor reads the key as typed columns and one pair's entries; any Delta reader of the keyed tables
    (the run's, the savepoint's, the hashmap snapshot's, a compacted one's) sees the key as the struct of its
    columns, ``typed_key``; a changed key type is refused."""
    from state_store.delta.points import StatePoint
    from state_store.ops.compaction import compact_job
    from state_store.ops.restore import restore_job
    from state_store.ops.savepoint import take_savepoint
    from state_store.ops.state_processor import SavepointReader
    from state_store.run.runtime import FaultInjector, InjectedFault

    def lake_of(name):
        lake = Lake(tmp_path / name)
        return lake, write_clicks(lake.inputs / "clicks")

    clean, folder = lake_of("clean")
    spec = device_job(folder)
    run_job(spark, spec, clean)
    assert spec.key == ("user", "device") and spec.describe()["key"] == ["user", "device"]
    rows = _rows(spark, clean, spec)
    assert sorted(r for r in rows if r[:2] == ("alice", 1)) == [
        ("alice", 1, "2 clicks"), ("alice", 1, "3 clicks"),
        ("alice", 1, "timer 11: ['home', 'cart'] cart@4,home@1"),
        ("alice", 1, "timer 14: ['home', 'cart'] cart@4,home@1")]
    assert ("bob", 2, "1 clicks") in rows and ("alice", 2, "2 clicks") in rows
    stored, expected = _key_groups(spark, clean, spec, folder, "json")
    assert set(stored) >= set(expected) and {k: stored[k] for k in expected} == expected
    assert '["alice","1"]' in stored
    struct, typed = _typed_keys(spark, _latest_keyed_table(clean, spec))
    assert struct == "struct<user:string,device:int>" and typed['["alice","1"]'] == ("alice", 1)
    assert all(typed[k] == (json.loads(k)[0], int(json.loads(k)[1])) for k in stored)
    typed_before_compaction = typed

    reader = SavepointReader.for_checkpoint(spark, spec.job_id, None, clean.settings)
    counts = {tuple(r["key"]): r["value"] for r in reader.keyed_state("count").collect()}
    assert counts == {("alice", 1): 3, ("alice", 2): 2, ("bob", 1): 2, ("bob", 2): 1, ("carol", 7): 2}
    assert reader.keyed_state("count").schema["key"].dataType.simpleString() == "struct<user:string,device:int>"
    assert reader.keyed_entries("pages", ("alice", 2)) == [{"index": 0, "value": "cart"},
                                                           {"index": 1, "value": "home"}]

    crashed, crashed_folder = lake_of("crashed")
    with pytest.raises(InjectedFault):
        run_job(spark, device_job(crashed_folder), crashed, faults=FaultInjector("after_sink_write", batch_id=1))
    run_job(spark, device_job(crashed_folder), crashed)
    assert sink_rows(spark, crashed, device_job(crashed_folder)) == sink_rows(spark, clean, spec)
    assert state_at_latest_checkpoint(spark, crashed, spec) == state_at_latest_checkpoint(spark, clean, spec)

    moved, moved_folder = lake_of("moved")
    run_job(spark, device_job(moved_folder), moved, max_microbatches=1)
    saved = take_savepoint(spark, moved.settings, spec.job_id, say=lambda line: None)
    struct, typed = _typed_keys(spark, saved.table_path("keyed"))
    assert struct == "struct<user:string,device:int>" and typed['["alice","1"]'] == ("alice", 1)
    wider = device_job(moved_folder, parallelism=3)
    restore_job(spark, moved.settings, wider, StatePoint(saved), backend="hashmap", say=lambda line: None)
    run_job(spark, wider.with_overrides(backend="hashmap"), moved)
    assert _rows(spark, moved, wider) == rows
    struct, typed = _typed_keys(spark, _latest_keyed_table(moved, wider))
    assert struct == "struct<user:string,device:int>" and typed['["carol","7"]'] == ("carol", 7)
    compact_job(spark, clean.settings, spec.job_id, say=lambda line: None)
    assert _typed_keys(spark, _latest_keyed_table(clean, spec))[1] == typed_before_compaction

    wide = Types.ROW_NAMED(list(CLICK.fields), [Types.LONG() if n == "device" else t for n, t in CLICK.fields.items()])
    retyped = device_job(folder, key_type=[Types.STRING(), Types.LONG()],
                         source=FileSource(str(folder), "json", wide, max_files_per_batch=1))
    with pytest.raises(RestoreError, match=r"keys records by ROW\(user STRING, device INT\) but the job now declares "
                                           r"key_type ROW\(user STRING, device LONG\)"):
        run_job(spark, retyped, clean)


@pytest.mark.spark
@pytest.mark.parametrize("function", [Total, VectorizedTotal], ids=["per-record", "vectorised"])
def test_a_key_of_every_typed_kind_runs_on_both_paths_and_hashes_as_spark_does(spark, tmp_path, function):
    """BOOLEAN, DATE, TIMESTAMP, DECIMAL, BYTES and a row, as one composite key: five keys that differ in one
    column each keep their own totals on the per-record and the vectorised path, emitted as typed columns, in
    the key groups of Spark's hash; a savepoint restores rescaled on the other backend."""
    from state_store.delta.points import StatePoint
    from state_store.ops.restore import restore_job
    from state_store.ops.savepoint import take_savepoint

    lake = Lake(tmp_path / "typed")
    folder = lake.inputs / "typed"
    records = write_typed(folder)
    spec = typed_job(folder, function(), "typed")
    run_job(spark, spec, lake)
    totals, expected = {}, []
    for batch in records:
        for r in sorted(batch, key=lambda r: KEYS.index(tuple(r[c] for c in TYPED_KEY))):
            key = tuple(tuple(r[c].values()) if isinstance(r[c], dict) else r[c] for c in TYPED_KEY)
            totals[key] = totals.get(key, 0) + r["v"]
            expected.append((*key, totals[key]))
    assert _rows(spark, lake, spec) == sorted(expected, key=repr) and len(totals) == len(KEYS)
    stored, hashed = _key_groups(spark, lake, spec, folder, "parquet")
    assert stored == hashed
    keyed = spark.read.format("delta").load(_latest_keyed_table(lake, spec)).filter("key != ''")
    seen = [r["typed_key"] for r in keyed.select("typed_key").distinct().toArrow().to_pylist()]
    assert sorted(seen, key=repr) == sorted((dict(zip(TYPED_KEY, k)) for k in KEYS), key=repr)

    moved = Lake(tmp_path / "moved")
    moved_folder = moved.inputs / "typed"
    write_typed(moved_folder)
    run_job(spark, typed_job(moved_folder, function(), "typed"), moved, max_microbatches=1)
    saved = take_savepoint(spark, moved.settings, "typed", say=lambda line: None)
    wider = typed_job(moved_folder, function(), "typed", parallelism=3, backend="hashmap")
    restore_job(spark, moved.settings, wider, StatePoint(saved), backend="hashmap", say=lambda line: None)
    run_job(spark, wider, moved)
    assert _rows(spark, moved, wider) == _rows(spark, lake, spec)


@pytest.mark.spark
def test_lakestate_state_takes_a_composite_key_one_column_a_flag(spark, tmp_path, monkeypatch, capsys):
    """``lakestate state --key alice --key 2``: a composite key's columns in order, each parsed as its type; as
    many as the key has, or an error naming the columns."""
    import textwrap

    from state_store.cli import main

    lake = Lake(tmp_path / "cli")
    folder = write_clicks(lake.inputs / "clicks")
    (tmp_path / "device_job_module.py").write_text(textwrap.dedent(f"""
        from tests.support.keys import device_job

        def job():
            return device_job({str(folder)!r}, job_id="cli-devices")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["--root", str(lake.root)]
    assert main(["register", "device_job_module:job", *args]) == 0
    assert main(["run", "--job", "cli-devices", *args]) == 0
    capsys.readouterr()
    assert main(["state", "--job", "cli-devices", "--state", "count", "--key", "alice", "--key", "2", *args]) == 0
    shown = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (shown["key"], shown["value"]) == (["alice", 2], 2)
    assert main(["state", "--job", "cli-devices", "--state", "last", "--key", "bob", "--key", "01", *args]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["value"] == {"home": 3, "pay": 12}
    assert main(["state", "--job", "cli-devices", "--state", "count", "--key", "alice", *args]) == 2
    assert "is keyed by 2 column(s) ['user', 'device']; give one --key each" in capsys.readouterr().err
    assert main(["state", "--job", "cli-devices", "--state", "count", "--key", "alice", "--key", "two", *args]) == 2
    assert "key 'two' is not a INT, the key type of job" in capsys.readouterr().err


@pytest.mark.spark
@pytest.mark.parametrize("vectorized", [True, False], ids=["vectorised", "per-record"])
def test_a_window_keyed_by_two_columns_emits_both_as_columns(spark, tmp_path, vectorized):
    """``key_by(["user", "device"]).window(...)`` with a ColumnAggregate: each (user, device, window) counted,
    the key's columns first in its rows, on the vectorised path and per record alike."""
    from state_store import ColumnAggregate, Dataflow, TumblingEventTimeWindows, WatermarkStrategy
    from tests.support.keys import CLICKS

    lake = Lake(tmp_path / "windows")
    folder = write_clicks(lake.inputs / "clicks")
    spec = (Dataflow.from_source(FileSource(str(folder), "json", CLICK, max_files_per_batch=1), job_id="w",
                                 watermark_strategy=WatermarkStrategy.for_bounded_out_of_orderness(0)
                                 .with_timestamp_column("ts"))
            .key_by(["user", "device"]).window(TumblingEventTimeWindows.of(10))
            .aggregate(ColumnAggregate(n="count(*)"), uid="w", vectorized=vectorized).sink_to("sinks/w"))
    assert list(spec.output_type.fields)[:4] == ["user", "device", "window_start", "window_end"]
    run_job(spark, spec, lake)
    counts: dict = {}
    for u, d, ts, _ in (c for batch in CLICKS for c in batch):
        counts[(u, d, ts // 10 * 10)] = counts.get((u, d, ts // 10 * 10), 0) + 1
    closed = {k: n for k, n in counts.items() if k[2] + 10 <= 40}  # the last watermark, 40 - 1, closes [30, 40)
    assert _rows(spark, lake, spec) == sorted(((u, d, s, s + 10, n) for (u, d, s), n in closed.items()), key=repr)


@pytest.mark.spark
def test_an_interval_join_keyed_by_two_columns_of_other_names_on_each_side_pairs_by_position(spark, tmp_path):
    """``a.key_by(["user", "device"]).interval_join(b.key_by(["who", "dev"]))``: the second input's key columns
    have the first's types by position, whatever their names, and records meet by the whole key."""
    import json as json_

    from state_store import Dataflow, ProcessJoinFunction, WatermarkStrategy

    class Pair(ProcessJoinFunction):
        def process_element(self, left, right, ctx):
            yield {"user": left["user"], "device": left["device"], "what": f"{left['ts']}-{right['at']}"}

    lake = Lake(tmp_path / "join")
    folder = write_clicks(lake.inputs / "clicks")
    buys = lake.inputs / "buys"
    buys.mkdir()
    (buys / "000.json").write_text("".join(json_.dumps({"who": w, "dev": d, "at": at}) + "\n" for w, d, at in [
        ("alice", 1, 5), ("alice", 2, 5), ("bob", 2, 41), ("carol", 1, 17)]))
    buy = Types.ROW_NAMED(["who", "dev", "at"], [Types.STRING(), Types.INT(), Types.LONG()])

    def stream(source, column):
        return Dataflow.from_source(source, job_id="join", watermark_strategy=WatermarkStrategy
                                    .for_bounded_out_of_orderness(0).with_timestamp_column(column))

    clicks = stream(FileSource(str(folder), "json", CLICK), "ts").key_by(["user", "device"])
    bought = stream(FileSource(str(buys), "json", buy), "at").key_by(["who", "dev"])
    spec = (clicks.interval_join(bought).between(0, 5)
            .process(Pair(), uid="pairs", output_type=Types.ROW_NAMED(
                ["user", "device", "what"], [Types.STRING(), Types.INT(), Types.STRING()])).sink_to("sinks/pairs"))
    run_job(spark, spec, lake)
    assert _rows(spark, lake, spec) == [("alice", 1, "1-5"), ("alice", 1, "4-5"), ("alice", 2, "2-5"),
                                        ("bob", 2, "40-41")]
