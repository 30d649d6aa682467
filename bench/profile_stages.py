"""Where a run's time goes in Spark: the run's phases, then every stage over 0.3 s (0.05 s for the tiny run),
from the Spark UI's REST API.

    source scripts/env.sh
    python bench/profile_stages.py [files]    # files of 100,000 events over 100,000 keys (default 5)
    python bench/profile_stages.py tiny       # a 10-event run on 100,000 keys of state: its stages only
    python bench/profile_stages.py timers     # bench/sessions.py's 1% run after R's files, and the same file on R's job
    python bench/profile_stages.py union3     # R's job over one source, then over a union of three holding its events
    python bench/profile_stages.py composite  # R's job, then R's job keyed by two columns whose pair is its key
"""
from __future__ import annotations

import json
import sys
import tempfile
import urllib.request
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.jobs import count_sum_job
from bench.workload import write_workload


def main() -> None:
    from state_store.run.runtime import run_job
    from state_store.settings import Settings
    from state_store.spark.session import build_spark

    spark = build_spark("lakestate-stages", extra_conf={"spark.driver.memory": "6g", "spark.ui.enabled": "true",
                                                         "spark.ui.port": "4051"})
    base = Path(tempfile.mkdtemp(prefix="lakestate-stages-"))
    tiny = sys.argv[1:] == ["tiny"]
    if sys.argv[1:] == ["timers"]:
        return timers(spark, base)
    if sys.argv[1:] in (["union3"], ["composite"]):
        return beside_one_source(spark, base, sys.argv[1])
    url = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}/stages"
    spec, settings, before = count_sum_job(str(base / "input")), Settings.load(root=base / "root"), -1
    if tiny:
        write_workload(base / "input", 1, 100_000, 100_000)
        run_job(spark, spec, settings, progress=lambda line: None)
        before = max(s["stageId"] for s in json.load(urllib.request.urlopen(url)))
        write_workload(base / "input", 1, 10, 100_000)
    else:
        write_workload(base / "input", int(sys.argv[1]) if len(sys.argv) > 1 else 5, 100_000, 100_000)
    result = run_job(spark, spec, settings, progress=lambda line: None)
    print(f"run: {result.records_in} records in {result.seconds}s, phases {result.phases}")
    stages = [s for s in json.load(urllib.request.urlopen(url)) if s["stageId"] > before]

    print_stages(stages, 0.05 if tiny else 0.3)


def _at(s: str) -> float:
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fGMT").timestamp()


def print_stages(stages: list[dict], floor: float) -> None:
    for st in sorted(stages, key=lambda s: s["stageId"]):
        if "completionTime" in st and _at(st["completionTime"]) - _at(st["submissionTime"]) > floor:
            print(f"stage {st['stageId']:>3}: {_at(st['completionTime']) - _at(st['submissionTime']):5.2f}s wall, "
                  f"{st['numTasks']} tasks, executor run {st['executorRunTime'] / 1000:.2f}s, JVM CPU "
                  f"{st['executorCpuTime'] / 1e9:.2f}s, {st['outputRecords']} rows out, {st['name'][:60]}")


def beside_one_source(spark, base: Path, mode: str) -> None:
    """R's 5 files through R's job, then the same events dealt into three sources through their union
    (``union3``) or with the key split in two columns through R's job keyed by both (``composite``), each run with
    its stages (after warm-up runs of each: on 2 small files, then on 5 files of their own)."""
    from bench.jobs import count_sum_union_job, split_keys, split_sources
    from state_store.run.runtime import run_job
    from state_store.settings import Settings

    url = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}/stages"
    for size, files, quiet in ((2_000, 2, True), (100_000, 5, True), (100_001, 5, False)):
        inputs = base / f"in-{size}"
        write_workload(inputs, files, size, size)
        if mode == "union3":
            other = ("union of 3", count_sum_union_job(split_sources(inputs, base / f"split-{size}")))
        else:
            split_keys(inputs, base / f"split-{size}")
            other = ("composite", count_sum_job(str(base / f"split-{size}"), composite=True))
        for name, spec in (("one source", count_sum_job(str(inputs))), other):
            before = max([s["stageId"] for s in json.load(urllib.request.urlopen(url))] or [-1])
            result = run_job(spark, spec, Settings.load(root=base / f"root-{name[:3]}-{size}"),
                             progress=lambda line: None)
            if not quiet:
                print(f"{name}: {result.records_in} records in {result.seconds}s, phases {result.phases}")
                print_stages([s for s in json.load(urllib.request.urlopen(url)) if s["stageId"] > before], 0.1)


def timers(spark, base: Path) -> None:
    """R's 5 files through bench/sessions.py's job and through R's job (each its own copy), then twice: a file
    making ~1% of the stored timers due (bench/sessions.py's 1% case) through both, with each run's stages."""
    import shutil

    from bench.sessions import EPOCH_MS, sessions_job, stored_timers, write_one_percent_file, write_sessions_workload
    from state_store.run.runtime import run_job
    from state_store.settings import Settings

    url = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}/stages"
    write_sessions_workload(base / "input", 5, 100_000, 100_000, 100_000, EPOCH_MS)
    jobs = {}
    for name, folder, make in (("sessions", "sessions", sessions_job), ("R's job", "r", count_sum_job)):
        shutil.copytree(base / "input", base / folder / "input")
        jobs[name] = (make(str(base / folder / "input")), Settings.load(root=base / folder / "root"))
        run_job(spark, *jobs[name], progress=lambda line: None)
    spec, settings = jobs["sessions"]
    for _ in range(2):
        write_one_percent_file(base / "sessions" / "input", stored_timers(spark, settings, spec.job_id), 0, 0.01, 100)
        shutil.copy(sorted((base / "sessions" / "input").glob("part-*.parquet"))[-1], base / "r" / "input")
        for name, (job_spec, job_settings) in jobs.items():
            before = max(s["stageId"] for s in json.load(urllib.request.urlopen(url)))
            result = run_job(spark, job_spec, job_settings, progress=lambda line: None)
            print(f"{name}: {result.records_in} records in {result.seconds}s, phases {result.phases}; timers loaded "
                  f"{sum(b.timers_in for b in result.batches)}, fired {sum(b.timers_fired for b in result.batches)}")
            print_stages([s for s in json.load(urllib.request.urlopen(url)) if s["stageId"] > before], 0.05)


if __name__ == "__main__":
    main()
