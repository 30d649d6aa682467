"""What an earlier release wrote on disk still restores, runs and reads: checkpoints (delta and hashmap, a
rescaled and a compacted one, one with a TTL cleanup cursor), recorded plans, a savepoint and the compaction
report, from ``tests/fixtures/formats-<release>.tar.gz`` (``tests/fixtures/make_formats.py`` says how it was
made). Each job goes on with the current code and must end where the same steps taken wholly by the current
code end."""
from __future__ import annotations

import json
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from state_store.catalog.job_store import JobStore
from state_store.catalog.savepoints import load_savepoint
from state_store.delta.points import StatePoint
from state_store.ops.compaction import compact_job
from state_store.ops.restore import rescale_job, restore_job
from state_store.ops.state_processor import SavepointReader
from state_store.records.metadata import CheckpointMetadata, MicrobatchPlan, SavepointMetadata, TableVersion
from tests.fixtures.make_formats import BASE, formats_jobs, write_inputs
from tests.support.helpers import run, sink_rows, state_at_latest_checkpoint
from tests.support.jobs import ticking_clock
from tests.support.lake import Lake

QUIET = lambda line: None  # noqa: E731
RELEASES = ("pre19",)


def _extract(release: str, base: Path) -> Lake:
    """The release's warehouse under ``base``, its recorded absolute paths moved there with it."""
    with tarfile.open(Path(__file__).parents[1] / "fixtures" / f"formats-{release}.tar.gz") as tar:
        tar.extractall(base, filter="data")
    for path in (base / "root").rglob("*.json"):
        text = path.read_text()
        if str(BASE) in text:
            path.write_text(text.replace(str(BASE), str(base)))
    return Lake(base)


def _clock_from(ms: int):
    ticks = iter(range(ms, ms + 100_000, 1000))
    return lambda: next(ticks)


@pytest.mark.parametrize("release", RELEASES)
def test_every_record_an_earlier_release_wrote_reads_into_the_typed_records_and_writes_back_the_same_json(
        tmp_path, release):
    root = _extract(release, tmp_path).root
    kinds = {"checkpoints": CheckpointMetadata, "plans": MicrobatchPlan}
    seen = set()
    for path in sorted(root.rglob("*.json")):
        record = (kinds.get(path.parent.name) if path.parent.parent.name == "_meta" else
                  SavepointMetadata if path.name == "_metadata.json" else None)
        if record is None:
            continue
        data = json.loads(path.read_text())
        assert record.from_dict(data).to_dict() == data, path
        seen.add(record.__name__)
    assert seen == {"CheckpointMetadata", "MicrobatchPlan", "SavepointMetadata"}


@pytest.mark.parametrize("release", RELEASES)
def test_a_checkpoint_of_an_earlier_layout_written_in_layout_3_keeps_the_jobs_fields_once_and_each_operator_by_uid(
        tmp_path, release):
    root = _extract(release, tmp_path).root
    olds = [CheckpointMetadata.from_dict(json.loads(p.read_text())) for p in sorted(root.rglob("_meta/checkpoints/*"))]
    assert olds and {c.layout for c in olds} <= {1, 2}
    for old in olds:  # a job of one operator
        data = replace(old, layout=3).to_dict()
        assert list(data["operators"]) == [old.uid] == [data["uid"]] and "state" not in data
        new = CheckpointMetadata.from_dict(json.loads(json.dumps(data)))
        assert replace(new, layout=old.layout).to_dict() == old.to_dict() and new.to_dict() == data
    # A job of two: the job's fields once (its sink the sink writer's), each operator's own under its uid.
    first = olds[0]
    later = replace(first.of_operator(first.uid), uid="later", parallelism=3, source_offsets={},
                    sink=TableVersion("/sink", 9))
    job = replace(CheckpointMetadata.of_operators([first.of_operator(first.uid), later], "later"), layout=3)
    data = json.loads(json.dumps(job.to_dict(), sort_keys=True))  # as JobStore writes it
    assert sorted(data["operators"]) == sorted([first.uid, "later"]) and data["uid"] == first.uid
    assert data["sink"] == TableVersion("/sink", 9).to_dict()
    assert {k for k in data if k != "operators"} <= {"job_id", "checkpoint_id", "batch_id", "uid", "completed_ms",
                                                    "processing_time", "run_id", "sink", "status", "layout",
                                                    "restored_from", "airflow_run"}
    read = CheckpointMetadata.from_dict(data)
    assert read.uids == [first.uid, "later"] and read.sink == TableVersion("/sink", 9)
    assert read.of_operator("later").parallelism == 3 and read.of_operator("later").sink == TableVersion("/sink", 9)
    assert read.of_operator(first.uid).source_offsets == first.source_offsets and read.of_operator("gone") is None
    assert read.total_entries == 2 * first.total_entries and read.to_dict() == data


@pytest.mark.parametrize("release", RELEASES)
def test_an_earlier_releases_checkpoints_plans_and_savepoint_go_on_as_if_written_now(spark, tmp_path, release):
    old = _extract(release, tmp_path / "old")
    now = Lake(tmp_path / "now")
    write_inputs(now)
    old_jobs, new_jobs = formats_jobs(old), formats_jobs(now)
    # What the fixture's maker did, now with the current code.
    run(spark, new_jobs["fmt-delta"], now, max_microbatches=2)
    rescale_job(spark, now.settings, new_jobs["fmt-delta"], 3, say=QUIET)
    run(spark, new_jobs["fmt-delta"], now, max_microbatches=1)
    compact_job(spark, now.settings, "fmt-delta", say=QUIET)
    run(spark, new_jobs["fmt-hashmap"], now, max_microbatches=2)
    run(spark, new_jobs["fmt-ttl"], now, max_microbatches=4, clock=ticking_clock())
    run(spark, new_jobs["fmt-counts"], now, max_microbatches=1)

    # Every catalog file of the old release reads.
    for job_id in old_jobs:
        meta = JobStore(old.settings.job_dir(job_id), warn=pytest.fail)
        assert meta.readable_checkpoints(warn=pytest.fail)
    assert JobStore(old.settings.job_dir("fmt-delta")).last_compaction()["checkpoint"] >= 1
    assert JobStore(old.settings.job_dir("fmt-counts")).read_plan(1) is not None  # recorded, not yet run

    # Both lakes take the same next input, and every job goes on: the old one from what the old release left.
    for lake in (old, now):
        lake.write_events("e3.json", [{"k": k, "v": 7, "op": "add", "seq": 3000 + i} for i, k in enumerate("abz")])
        jobs = formats_jobs(lake)
        said = []
        run(spark, jobs["fmt-counts"], lake, progress=said.append)
        assert any("replayed" in line for line in said) == (lake is old)  # the old plan of microbatch 1 is taken
        for job_id in ("fmt-delta", "fmt-hashmap"):
            run(spark, jobs[job_id], lake)
        run(spark, jobs["fmt-ttl"], lake, clock=_clock_from(4000))
    for job_id, spec in old_jobs.items():
        assert sink_rows(spark, old, spec) == sink_rows(spark, now, new_jobs[job_id]), job_id
        assert state_at_latest_checkpoint(spark, old, spec) == state_at_latest_checkpoint(spark, now,
                                                                                          new_jobs[job_id]), job_id

    # The old savepoint reads in the State Processor and restores into a new job on another backend.
    savepoint = load_savepoint(old.settings, "fmt-delta/sp1")
    reader = SavepointReader.for_savepoint(spark, "fmt-delta/sp1", settings=old.settings)
    counts = {r["key"]: r["value"] for r in reader.keyed_state("count").collect()}
    assert counts and set(counts) <= set("abcde")
    copy = old_jobs["fmt-delta"].with_overrides(job_id="fmt-copy", sink="sinks/fmt-copy")
    restored = restore_job(spark, old.settings, copy, StatePoint(savepoint), backend="hashmap", say=QUIET)
    assert restored.entries == {n: c for n, c in savepoint.entries.items() if c}
    keyed, _ = state_at_latest_checkpoint(spark, old, copy)
    assert {k[2]: json.loads(k[5]) for k in keyed if k[0] == "all.count"} == counts
