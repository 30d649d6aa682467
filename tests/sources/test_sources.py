"""Sources: a Delta table read through its change data feed, a range of versions per microbatch."""
from __future__ import annotations

import pytest

from state_store import ConfigError, DeltaSource, InputError
from state_store.ops.restore import rescale_job
from state_store.run.runtime import FaultInjector, InjectedFault
from state_store.sources import Source
from tests.support.helpers import run, sink_rows, state_at_latest_checkpoint
from tests.support.jobs import EVENT, count_job, events


def _append(spark, path, rows):
    spark.createDataFrame(rows, "k string, v long, op string, seq long").write.format("delta").mode("append").save(path)


def test_a_delta_source_is_read_version_range_by_version_range(spark, lake):
    path = str(lake.inputs / "delta-events")
    spark.createDataFrame([], "k string, v long, op string, seq long").write.format("delta") \
        .option("delta.enableChangeDataFeed", "true").save(path)
    _append(spark, path, [("a", 1, "add", 1), ("b", 2, "add", 2)])
    _append(spark, path, [("a", 3, "add", 3)])
    spec = count_job(lake, job_id="from-delta", source=DeltaSource(path, max_versions_per_batch=1))
    first = run(spark, spec, lake)
    # Version 0 creates the empty table, 1 and 2 append: one microbatch per version.
    assert [b.records_in for b in first.batches] == [0, 2, 1]
    _append(spark, path, [("b", 4, "add", 4)])
    second = run(spark, spec, lake)
    assert [b.records_in for b in second.batches] == [1]
    assert sink_rows(spark, lake, spec, with_microbatch=False) == sorted(
        ['{"k": "a", "n": 1}', '{"k": "b", "n": 1}', '{"k": "a", "n": 2}', '{"k": "b", "n": 2}'])


def test_a_delta_source_without_change_data_feed_is_refused_with_the_fix(spark, lake):
    path = str(lake.inputs / "plain")
    _append(spark, path, [("a", 1, "add", 1)])
    spec = count_job(lake, job_id="no-cdf", source=DeltaSource(path))
    with pytest.raises(InputError, match=r"no change data feed; run ALTER TABLE .*enableChangeDataFeed = true"):
        run(spark, spec, lake)


def test_a_source_file_rewritten_between_a_crash_and_the_replay_is_refused_naming_it(spark, lake):
    from state_store.catalog.job_store import JobStore
    from state_store.run.runtime import FaultInjector, InjectedFault
    from tests.support.jobs import events

    for b in range(2):
        lake.write_events(f"e{b}.json", events(b))
    spec = count_job(lake, job_id="rewritten")
    with pytest.raises(InjectedFault):
        run(spark, spec, lake, faults=FaultInjector("after_sink_write", batch_id=1))
    sink_before = sink_rows(spark, lake, spec)
    lake.write_events("e1.json", events(1, keys=("a", "z")))  # same name, other data
    with pytest.raises(InputError, match=r"source file .*e1\.json changed after microbatch 1 was planned .*"
                                         r"Put the original file back"):
        run(spark, spec, lake)
    assert sink_rows(spark, lake, spec) == sink_before  # never processed
    assert JobStore(lake.settings.job_dir(spec.job_id)).read_plan(1) is not None  # the recorded plan stays


def test_an_empty_file_is_neither_read_nor_marked_and_is_read_once_it_has_content(spark, lake):
    from tests.support.jobs import events

    lake.write_events("e0.json", events(0))
    (lake.events / "e1.json").write_text("")  # a producer has created it, not yet written it
    spec = count_job(lake, job_id="empty-file")
    assert [b.records_in for b in run(spark, spec, lake).batches] == [15]
    lake.write_events("e1.json", events(1))
    assert [b.records_in for b in run(spark, spec, lake).batches] == [15]


def test_a_file_grown_after_it_was_read_gets_one_warning_naming_it_and_is_not_read_again(spark, lake):
    from tests.support.jobs import events

    lake.write_events("e0.json", events(0))
    spec = count_job(lake, job_id="grown")
    run(spark, spec, lake)
    with open(lake.events / "e0.json", "a") as f:  # a producer appends to a file already read
        f.write('{"k": "a", "v": 99, "op": "add", "seq": 99}\n')
    for b in (1, 2):
        lake.write_events(f"e{b}.json", events(b))
    said = []
    result = run(spark, spec, lake, progress=said.append)
    assert [b.records_in for b in result.batches] == [15, 15]  # e1 and e2; the appended line is not read
    warnings = [line for line in said if "e0.json" in line]
    assert len(warnings) == 1 and "warning: source file " in warnings[0], said
    assert "grew after a run read it (" in warnings[0] and "is never read" in warnings[0]
    said.clear()
    lake.write_events("e3.json", events(3))
    run(spark, spec, lake, progress=said.append)
    assert len([line for line in said if "e0.json" in line]) == 1  # every run says so again


def test_a_file_that_is_not_parquet_is_refused_before_anything_is_written(spark, lake):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from state_store import FileSource
    from state_store.catalog.job_store import JobStore
    from tests.support.jobs import EVENT

    folder = lake.inputs / "pq"
    folder.mkdir()
    pq.write_table(pa.table({"k": ["a"], "v": [1], "op": ["add"], "seq": [1]}), folder / "p0.parquet")
    (folder / "p1.parquet").write_bytes(b"PAR1 half written")
    spec = count_job(lake, job_id="not-parquet", source=FileSource(str(folder), "parquet", EVENT))
    with pytest.raises(InputError, match=r"p1\.parquet is not a complete Parquet file .*write to a name starting "
                                         r"with '\.' or '_' and rename"):
        run(spark, spec, lake)
    assert JobStore(lake.settings.job_dir(spec.job_id)).read_plan(0) is None


def test_a_delta_source_recreated_between_a_crash_and_the_replay_is_refused(spark, lake):
    import shutil

    from state_store.run.runtime import FaultInjector, InjectedFault

    path = str(lake.inputs / "delta-recreated")
    spark.createDataFrame([], "k string, v long, op string, seq long").write.format("delta") \
        .option("delta.enableChangeDataFeed", "true").save(path)
    _append(spark, path, [("a", 1, "add", 1)])
    spec = count_job(lake, job_id="recreated", source=DeltaSource(path))
    with pytest.raises(InjectedFault):
        run(spark, spec, lake, faults=FaultInjector("after_sink_write", batch_id=0))
    shutil.rmtree(path)
    spark.createDataFrame([], "k string, v long, op string, seq long").write.format("delta") \
        .option("delta.enableChangeDataFeed", "true").save(path)
    _append(spark, path, [("z", 9, "add", 9), ("y", 8, "add", 8)])
    with pytest.raises(InputError, match=r"source table .*delta-recreated changed after microbatch 0 was planned"):
        run(spark, spec, lake)


class ListSource(Source):
    """A source written from ``Source`` alone: the records of a list, ``per_batch`` a microbatch, its offset an
    index into the list (what a checkpoint keeps, so a replay and a restore read on from there)."""

    def __init__(self, rows: list[dict], schema, per_batch: int):
        self.rows, self.schema, self.per_batch = rows, schema, per_batch

    def validate(self, what: str) -> None:
        if self.per_batch <= 0:
            raise ConfigError(f"{what}: per_batch must be positive")

    def describe(self) -> dict:
        return {"type": "list", "rows": len(self.rows)}

    def declared_fields(self) -> dict:
        return self.schema.fields

    def initial_offset(self) -> dict:
        return {"index": 0}

    def next_offset(self, spark, start: dict) -> dict | None:
        end = min(start["index"] + self.per_batch, len(self.rows))
        return {"index": end} if end > start["index"] else None

    def record_ddl(self, spark) -> str:
        return self.schema.spark_ddl()

    def read_run(self, spark, ranges):
        rows = [(*(self.rows[i][c] for c in self.schema.fields), batch_id, 0, 0, i)
                for batch_id, start, end in ranges for i in range(start["index"], end["index"])]
        ddl = f"{self.schema.spark_schema_ddl()}, batch_id bigint, file_idx int, block bigint, row bigint"
        return spark.createDataFrame(rows, ddl) if rows else None


def test_a_source_written_from_its_base_class_alone_runs_replays_a_crash_and_restores_as_a_file_source(spark,
                                                                                                      tmp_path):
    from tests.support.lake import Lake

    lakes = {name: Lake(tmp_path / name) for name in ("files", "list")}
    for batch in range(4):
        lakes["files"].write_events(f"e{batch}.json", events(batch))
    reference = count_job(lakes["files"])
    run(spark, reference, lakes["files"])
    rows = [e for batch in range(4) for e in events(batch)]
    spec = count_job(lakes["list"], source=ListSource(rows, EVENT, per_batch=len(events(0))))
    with pytest.raises(InjectedFault):
        run(spark, spec, lakes["list"], max_microbatches=2, faults=FaultInjector("after_sink_write", batch_id=1))
    run(spark, spec, lakes["list"], max_microbatches=2)  # the crashed microbatches again, from their plans
    rescale_job(spark, lakes["list"].settings, spec, 3, say=lambda m: None)  # a restore at another parallelism
    assert [b.batch_id for b in run(spark, spec, lakes["list"]).batches] == [2, 3]
    assert sink_rows(spark, lakes["list"], spec) == sink_rows(spark, lakes["files"], reference)
    assert state_at_latest_checkpoint(spark, lakes["list"], spec)[0] == \
        state_at_latest_checkpoint(spark, lakes["files"], reference)[0]
