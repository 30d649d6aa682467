"""The files a run's subtasks write and the Delta commits that add them (real Spark and Delta)."""
from __future__ import annotations

import os

import pytest

from state_store.catalog.job_store import JobStore
from state_store.delta.log import sink_version
from state_store.errors import ConfigError, InputError
from state_store.records.layout import OPERATOR_TABLE
from state_store.subtask.run_files import OutputTable, remove_uncommitted, write_batches
from tests.support.helpers import run, sink_rows
from tests.support.jobs import CountOnly, count_job, events


class FailsOnC(CountOnly):
    def process(self, key, records, ctx):
        if key == "c":
            raise ValueError("no c here")
        yield from super().process(key, records, ctx)


def _part_files(root) -> list[str]:
    return sorted(os.path.join(d, n) for d, _, names in os.walk(root) for n in names if n.startswith("part-"))


def test_a_failed_run_leaves_no_files_behind_and_a_fixed_rerun_writes_each_row_once(spark, lake):
    lake.write_events("e0.json", events(0))
    failing = count_job(lake, job_id="fails", function=FailsOnC())
    with pytest.raises(InputError, match="no c here"):
        run(spark, failing, lake)
    job_dir, sink = lake.settings.job_dir("fails"), lake.settings.in_warehouse(failing.sink, "sink")
    assert _part_files(job_dir) == [] and not sink.exists()  # the subtasks' files were removed, folders too

    fixed = count_job(lake, job_id="fails")
    result = run(spark, fixed, lake)
    assert [b.records_in for b in result.batches] == [15]
    assert len(sink_rows(spark, lake, fixed)) == 5
    # Every file left is one a commit names: one sink file per subtask, one keyed file per touched partition.
    history = spark.sql(f"DESCRIBE HISTORY delta.`{sink}`").select("operation", "operationMetrics").collect()
    assert [(h[0], h[1]["numOutputRows"]) for h in history] == [("WRITE", "5")]
    assert len(_part_files(sink)) == int(history[0][1]["numFiles"])


def test_remove_uncommitted_keeps_committed_files_and_other_runs_files(tmp_path):
    for name in ("a/part-tok-1.parquet", "a/part-tok-2.parquet", "a/part-other-1.parquet", "b/part-tok-3.parquet"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    assert remove_uncommitted(tmp_path, "tok", {"a/part-tok-1.parquet"}) == 2
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == [
        "a/part-other-1.parquet", "a/part-tok-1.parquet"]
    assert not (tmp_path / "b").exists()


def test_a_tasks_batches_of_restored_rows_are_one_file_per_partition_past_what_the_table_committed(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    # Operator rows of a restore: generation is the batch column; generation 3 is already in the table.
    table = OutputTable(OPERATOR_TABLE.name, str(tmp_path), OPERATOR_TABLE.schema, OPERATOR_TABLE.partition_columns,
                        3, "generation")
    rows = {"state_name": ["b", "a", "b", "a"], "subtask": [1, 0, 0, 1], "mode": ["split"] * 4,
            "value": ["1", "2", "3", "4"], "batch_id": [7, 7, 7, 7], "generation": [5, 5, 5, 3]}
    batch = pa.RecordBatch.from_pydict(rows, schema=pa.schema([
        ("state_name", pa.large_string()), ("subtask", pa.int32()), ("mode", pa.string()), ("value", pa.string()),
        ("batch_id", pa.int64()), ("generation", pa.int64())]))
    files = sorted(write_batches(table, "tok", 2, [batch.slice(0, 0), batch]), key=lambda f: f.path)
    assert [(f.partition, f.rows, f.min_batch, f.max_batch) for f in files] == [
        ({"state_name": "a"}, 1, 5, 5), ({"state_name": "b"}, 2, 5, 5)]
    assert all(f.path.startswith(f"state_name={f.partition['state_name']}/part-tok-00002-") for f in files)
    b = pq.ParquetFile(tmp_path / files[1].path).read()  # the file alone: its folder names the partition
    assert (b.column_names, b.column("subtask").to_pylist()) == (["subtask", "mode", "value", "batch_id",
                                                                  "generation"], [0, 1])  # ordered by entry


def test_a_failed_runs_cleanup_deletes_only_the_files_it_wrote_to_that_table(tmp_path):
    # A table nested in another's folder (a sink once pointed into a job's state): the run wrote files of both
    # with its token, and only the nested table's commit went through.
    for name in ("part-tok-0.parquet", "state_name=c/key_group=1/part-tok-1.parquet",
                 "state_name=c/key_group=2/part-tok-2.parquet", "other/part-tok-3.parquet"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    assert remove_uncommitted(tmp_path, "tok", set(), partition_columns=()) == 1  # the outer table: its own file
    assert remove_uncommitted(tmp_path, "tok", {"state_name=c/key_group=1/part-tok-1.parquet"},
                              partition_columns=("state_name", "key_group")) == 1
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == [
        "other/part-tok-3.parquet", "state_name=c/key_group=1/part-tok-1.parquet"]


def test_a_sink_with_a_check_constraint_is_written_by_deltas_writer_so_the_constraint_holds(spark, lake):
    for b in range(2):
        lake.write_events(f"e{b}.json", events(b))
    spec = count_job(lake, job_id="checked")
    run(spark, spec, lake, max_microbatches=1)  # counts 3 per key
    sink = lake.settings.in_warehouse(spec.sink, "sink")
    spark.sql(f"ALTER TABLE delta.`{sink}` ADD CONSTRAINT small CHECK (n < 5)")
    with pytest.raises(Exception, match="(?i)check constraint"):
        run(spark, spec, lake)  # counts 6 break it
    assert sorted(r["n"] for r in spark.read.format("delta").load(str(sink)).collect()) == [3] * 5
    spark.sql(f"ALTER TABLE delta.`{sink}` DROP CONSTRAINT small")
    run(spark, spec, lake)  # the replay writes microbatch 1 once
    assert sorted(r["n"] for r in spark.read.format("delta").load(str(sink)).collect()) == [3] * 5 + [6] * 5


def test_a_sink_whose_columns_are_not_the_output_type_is_refused_before_anything_is_planned(spark, lake):
    lake.write_events("e0.json", events(0))
    spec = count_job(lake, job_id="other-sink")
    sink = lake.settings.in_warehouse(spec.sink, "sink")
    spark.createDataFrame([("a", "x")], "k string, n string").write.format("delta").save(str(sink))
    with pytest.raises(InputError, match=r"sink .* has columns \['k', 'n'\].*do not match the job's output_type"):
        run(spark, spec, lake)
    plans = lake.settings.job_dir("other-sink") / "_meta" / "plans"
    assert not plans.exists() or not any(plans.iterdir())
    assert spark.read.format("delta").load(str(sink)).count() == 1


def test_a_sink_made_with_other_columns_while_the_run_processed_is_refused_at_the_commit(spark, lake):
    """Issue 59: a table the run's commit was to create, made meanwhile by another writer with other columns, was
    appended to unchecked (delta-rs adds to a table that exists when it goes to create it)."""
    from state_store.run.runtime import FaultInjector

    lake.write_events("e0.json", events(0))
    spec = count_job(lake, job_id="raced")
    sink = lake.settings.in_warehouse(spec.sink, "sink")
    made = lambda: spark.createDataFrame([("a", "x")], "k string, n string").write.format("delta").save(str(sink))  # noqa: E731
    with pytest.raises(InputError, match=r"sink .* has columns \['k', 'n'\].*do not match the job's output_type"):
        run(spark, spec, lake, faults=FaultInjector("before_sink_write", 0, made))
    assert [tuple(r) for r in spark.read.format("delta").load(str(sink)).collect()] == [("a", "x")]


def test_a_sink_is_a_plain_path_a_delta_sink_or_a_sink_of_ones_own_which_a_run_asks_in_the_contracts_order(
        spark, lake):
    """The Sink protocol (issue 60): ``sink="sinks/x"`` and ``sink=DeltaSink("sinks/x")`` are one sink; a sink
    written from the base class alone (here recording what the run asks, its rows kept by a DeltaSink) is asked
    to check, then for its output, to commit the run's microbatches once, and for its version at each
    checkpoint; anything else as a sink is refused, naming the fix."""
    from state_store import DeltaSink, Sink

    class Recording(Sink):
        def __init__(self, path):
            self.rows, self.calls = DeltaSink(path), []

        @property
        def name(self):
            return self.rows.name

        def check(self, run):
            self.calls.append("check")
            self.rows.check(run)

        def output(self, run, token):
            self.calls.append("output")
            return self.rows.output(run, token)

        def commit(self, run, table, files, last_batch):
            self.calls.append(("commit", last_batch))
            self.rows.commit(run, table, files, last_batch)

        def version(self, run):
            self.calls.append("version")
            return self.rows.version(run)

    for i in range(2):
        lake.write_events(f"e{i}.json", events(i))
    plain, delta = count_job(lake, job_id="plain"), count_job(lake, job_id="delta", sink=DeltaSink("sinks/delta"))
    recording = Recording("sinks/recorded")
    own = count_job(lake, job_id="own", sink=recording)
    for spec in (plain, delta, own):
        run(spark, spec, lake)
    assert sink_rows(spark, lake, plain) == sink_rows(spark, lake, delta) == sink_rows(spark, lake, own)
    assert delta.describe()["sink"] == "sinks/delta" and own.describe()["sink"] == "sinks/recorded"
    assert recording.calls == ["check", "output", ("commit", 1), "version", "version"]
    latest = JobStore(lake.settings.job_dir("own")).latest_checkpoint()
    assert latest.sink == sink_version(lake.settings.sink("sinks/recorded")) and latest.sink.version is not None
    for bad in (42, "", None):
        with pytest.raises(ConfigError, match=r"sink must be a path inside the warehouse .* state_store\.DeltaSink"):
            count_job(lake, job_id="bad", sink=bad).validate()


def test_a_runs_clean_up_keeps_every_file_a_commit_of_the_run_names_in_a_folder_two_operators_share(tmp_path):
    """Issue 59: each operator removed the run's files its own commits did not name, so two operators writing
    one folder deleted each other's committed files (all of a run's files carry its one token)."""
    from types import SimpleNamespace

    from state_store.run.operator_run import OperatorRun, close_all
    from state_store.subtask.run_files import RunOutputs

    for name in ("mine", "theirs", "neither"):
        (tmp_path / f"part-tok-{name}.parquet").write_bytes(b"x")
    operators = []
    for name in ("mine", "theirs"):
        op = object.__new__(OperatorRun)  # the real close, on what a run's open and write leave
        op.ctx, op.backends = SimpleNamespace(edge=False, side_edges={}), {}
        op.outputs = RunOutputs("tok", {"sink": OutputTable("sink", f"{tmp_path}/", "", (), None)})
        op.written = {"sink": {f"part-tok-{name}.parquet"}}
        operators.append(op)
    close_all(operators)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part-tok-mine.parquet", "part-tok-theirs.parquet"]


def test_a_log_without_commits_is_no_table_yet(tmp_path):
    """What a kill -9 during a table's first commit leaves: the next run must create the table, not fail."""
    from state_store.delta.log import app_transaction_version, table_metadata

    (tmp_path / "sink" / "_delta_log").mkdir(parents=True)
    assert table_metadata(tmp_path / "sink") is None and table_metadata(tmp_path / "none") is None
    assert app_transaction_version(tmp_path / "sink", "app") is None


def test_a_run_creates_a_sink_whose_first_commit_never_completed(spark, lake):
    lake.write_events("e0.json", events(0))
    spec = count_job(lake, job_id="half-made")
    (lake.settings.in_warehouse(spec.sink, "sink") / "_delta_log").mkdir(parents=True)
    run(spark, spec, lake)
    assert len(sink_rows(spark, lake, spec)) == 5
