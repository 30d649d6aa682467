"""The State Processor API against real Spark and Delta: read a checkpoint's or savepoint's state as typed
DataFrames, bootstrap a savepoint from DataFrames that a job restores and carries on from, and change one."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from state_store import ListStateDescriptor, MapStateDescriptor, Types, ValueStateDescriptor
from state_store.catalog.savepoints import load_savepoint
from state_store.cli import main
from state_store.delta.points import StatePoint
from state_store.errors import ConfigError
from state_store.ops.restore import restore_job
from state_store.ops.savepoint import take_savepoint
from state_store.ops.state_processor import SavepointReader, SavepointWriter
from state_store.spark.session import PROJECT_ROOT
from tests.support.helpers import keyed_values, run, sink_rows, state_at_latest_checkpoint
from tests.support.jobs import all_states_job, count_job, events

QUIET = dict(say=lambda m: None)


def test_the_state_processor_comes_from_the_package_without_loading_spark_with_it():
    code = ("import sys, state_store; assert 'pyspark' not in sys.modules; "
            "from state_store import SavepointReader, SavepointWriter; "
            "assert SavepointReader is state_store.ops.state_processor.SavepointReader, SavepointReader; "
            "assert SavepointWriter.__module__ == 'state_store.ops.state_processor'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_reader_gives_every_kind_of_state_as_typed_rows(spark, lake):
    spec = all_states_job(lake)
    lake.write_rules("r0.json", [{"name": "factor", "factor": 2}])
    for batch in range(2):
        lake.write_events(f"e{batch}.json", events(batch))
    run(spark, spec, lake)
    keyed, _ = state_at_latest_checkpoint(spark, lake, spec)
    reader = SavepointReader.for_checkpoint(spark, spec.job_id, settings=lake.settings)
    counts = {(r["key"], r["namespace"]): r["value"] for r in reader.keyed_state("count").collect()}
    assert counts == keyed_values(keyed, "all.count") and counts[("a", "")] == 6
    items = reader.keyed_state("items").filter("key = 'a'").orderBy("index").collect()
    assert [r["value"] for r in items] == keyed_values(keyed, "all.items")[("a", "")]
    tags = {(r["key"], r["user_key"]): r["value"] for r in reader.keyed_state("tags").collect()}
    assert tags == {(k, u): v for (k, _, u), v in keyed_values(keyed, "all.tags").items()}
    # One key's entries, decoded as keyed_state gives them: what `lakestate state` shows.
    assert reader.keyed_entries("count", "a") == [{"value": 6}]
    assert [e["value"] for e in sorted(reader.keyed_entries("items", "a"), key=lambda e: e["index"])] == \
        [r["value"] for r in items]
    assert {e["user_key"]: e["value"] for e in reader.keyed_entries("tags", "a")} == \
        {u: v for (k, u), v in tags.items() if k == "a"}
    assert reader.keyed_state("mean").schema.simpleString() == (
        "struct<key_group:int,key:string,namespace:string,value:array<bigint>>")
    seen = reader.list_state("batches_seen").collect()
    assert sorted((r["subtask"], r["value"]) for r in seen) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert sorted((r["subtask"], r["value"]) for r in reader.list_state("subtasks").collect()) == [(0, 0), (1, 1)]
    # Registered only in process_broadcast_element, yet recorded by the run with its type.
    assert reader.states()["all.factors"]["lazy"] is True
    factors = reader.broadcast_state("factors")
    assert {(r["subtask"], r["key"], r["value"]) for r in factors.collect()} == {(0, "factor", 2), (1, "factor", 2)}
    with pytest.raises(ConfigError, match=r"state 'all.factors' is stored as \{\"MAP\": \[\"STRING\", \"LONG\"\]\}"):
        reader.broadcast_state("factors", descriptor=MapStateDescriptor("factors", Types.STRING(), Types.STRING()))
    with pytest.raises(ConfigError, match=r"has no keyed state 'all.nope'; it has \['all.count'"):
        reader.keyed_state("nope")
    # The same through a savepoint, and through the CLI.
    take_savepoint(spark, lake.settings, spec.job_id, label="sp", **QUIET)
    from_savepoint = SavepointReader.for_savepoint(spark, f"{spec.job_id}/sp", lake.settings)
    assert sorted(from_savepoint.keyed_state("count").collect()) == sorted(reader.keyed_state("count").collect())


def test_bootstrap_a_savepoint_from_dataframes_restore_a_job_from_it_and_process(spark, lake):
    counts = spark.createDataFrame([("a", 100), ("b", 200), ("z", 7)], "user string, n bigint")
    writer = SavepointWriter.bootstrap(spark, "counts", uid="count", key_type=Types.STRING(), max_parallelism=8,
                                       parallelism=2, settings=lake.settings)
    with pytest.raises(ConfigError, match=r"key column 'n' is bigint but the savepoint's key type is STRING"):
        writer.with_keyed_state(ValueStateDescriptor("count", Types.LONG()), counts, key="n", value="n")
    savepoint = writer.with_keyed_state(ValueStateDescriptor("count", Types.LONG()), counts, key="user",
                                        value="n").write("bootstrapped", **QUIET)
    assert savepoint.entries == {"count.count": 3} and savepoint.batch_id == -1
    spec = count_job(lake)
    restored = restore_job(spark, lake.settings, spec, StatePoint(savepoint), **QUIET)
    assert (restored.batch_id, restored.parallelism) == (-1, 2)
    lake.write_events("e0.json", events(0))
    result = run(spark, spec, lake)
    assert [b.batch_id for b in result.batches] == [0]  # the source is read from its beginning
    rows = {json.loads(r)["k"]: json.loads(r)["n"] for r in sink_rows(spark, lake, spec)}
    assert rows == {"a": 103, "b": 203, "c": 3, "d": 3, "e": 3}
    final = keyed_values(state_at_latest_checkpoint(spark, lake, spec)[0], "count.count")
    assert final[("z", "")] == 7  # untouched bootstrapped state is kept


def test_a_changed_copy_renames_a_uid_or_removes_an_operator_and_the_original_stays(spark, lake, capsys,
                                                                                    monkeypatch):
    spec = count_job(lake)
    lake.write_events("e0.json", events(0))
    run(spark, spec, lake)
    take_savepoint(spark, lake.settings, spec.job_id, label="v1", **QUIET)
    renamed = SavepointWriter.from_savepoint(spark, "counts/v1", lake.settings).rename_uid("count", "counter") \
        .with_operator_state(ListStateDescriptor("notes", Types.STRING()), ["x", "y", "z"]) \
        .with_operator_state(MapStateDescriptor("rules", Types.STRING(), Types.LONG()), {"r": 1}) \
        .write("v2", **QUIET)
    assert renamed.uid == "counter" and renamed.entries["counter.count"] == 5
    assert renamed.entries["counter.notes"] == 2 and renamed.entries["counter.rules"] == 2  # rows per subtask
    reader = SavepointReader.for_savepoint(spark, "counts/v2", lake.settings)
    assert sorted((r["subtask"], r["value"]) for r in reader.list_state("notes").collect()) == [
        (0, "x"), (0, "y"), (1, "z")]
    moved = count_job(lake, job_id="moved", uid="counter")
    restore_job(spark, lake.settings, moved, StatePoint.of_savepoint(lake.settings, "counts/v2"),
                allow_non_restored_state=True, **QUIET)
    assert keyed_values(state_at_latest_checkpoint(spark, lake, moved)[0], "counter.count")[("a", "")] == 3
    removed = SavepointWriter.from_savepoint(spark, "counts/v1", lake.settings).remove_operator("count") \
        .write("v3", **QUIET)
    assert removed.entries == {"__source__.offsets": 2}
    assert load_savepoint(lake.settings, "counts/v1").entries["count.count"] == 5  # the original stays
    # `lakestate state` reads through the same API, from a savepoint too (the CLI needs the job registered).
    monkeypatch.setenv("LAKESTATE_TEST_EVENTS", str(lake.events))
    capsys.readouterr()
    lake_args = ["--root", str(lake.root)]
    assert main(["register", "tests.ops.test_state_processor:registered_counts", *lake_args]) == 0
    assert main(["state", "--job", "counts", "--state", "count", "--key", "a", "--savepoint", "counts/v1",
                 *lake_args]) == 0
    shown = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (shown["value"], shown["microbatch"], shown["from"].startswith("savepoint ")) == (3, 0, True)


def registered_counts():
    import os
    from pathlib import Path

    class _L:
        events = Path(os.environ.get("LAKESTATE_TEST_EVENTS", "/nonexistent"))

    return count_job(_L)
