"""What a tiny run's planning costs, and where it goes (issue 59, item 20).

    source scripts/env.sh
    python bench/plan_cost.py [--rounds 3]

Each job reads three one-record files, one a microbatch (``max_files_per_batch=1``), in one run on a warm
local[2] session: without event time; JSON with a watermark; two JSON sources with their own watermarks (an
interval join); Parquet with a watermark. A round runs each job on a new lake (the first round warms the session
and is not counted). For each job it prints the run's "plan" phase (from the run's start to its plans written:
the sinks' checks, the restore point, the clock, each source's offsets and each microbatch's watermark) and,
from a profile of the counted rounds, the seconds a run spends in each of planning's steps.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MICROBATCHES = 3
# (label, function name as pstats has it, file it is in): planning's steps
STEPS = [
    ("sinks' column checks", "sink_like_output", "commit.py"),
    ("restore point", "restore_point", "planning.py"),
    ("clock restored", "restored_clock", "timing.py"),
    ("source offsets (listing)", "next_offset", "files.py"),
    ("records counted", "count_records", "files.py"),
    ("watermark: max event time", "max_event_time", "files.py"),
    ("plans written", "write_plan", "job_store.py"),
]


def jobs(lake):
    """label -> the job over ``lake``'s inputs (written here)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from state_store import Dataflow, FileSource
    from tests.api.test_joins import BY_AT, BY_TS, LEFT, PAIR, RIGHT, Pairs
    from tests.support.jobs import count_job

    for m in range(MICROBATCHES):
        lake.write_events(f"{m:03d}.json", [{"k": "a", "ts": m, "who": "l", "v": m, "key": "a", "at": m}])
        lake.write_rules(f"{m:03d}.json", [{"key": "a", "at": m, "who": "r"}])
        (lake.inputs / "parquet").mkdir(exist_ok=True)
        pq.write_table(pa.table({"k": ["a"], "ts": pa.array([m], pa.int64()), "who": ["l"]}),
                       lake.inputs / "parquet" / f"{m:03d}.parquet")

    def source(folder, kind, schema, strategy):
        return Dataflow.from_source(FileSource(str(folder), kind, schema, max_files_per_batch=1), job_id="plan",
                                    watermark_strategy=strategy)

    def joined(lake):
        return (source(lake.events, "json", LEFT, BY_TS).key_by("k")
                .interval_join(source(lake.rules, "json", RIGHT, BY_AT).key_by("key")).between(-1, 1)
                .process(Pairs(), uid="ij", output_type=PAIR).sink_to("sinks/plan"))

    def windowed(folder, kind):
        from state_store import ColumnAggregate, TumblingEventTimeWindows

        return (source(folder, kind, LEFT, BY_TS).key_by("k").window(TumblingEventTimeWindows.of(10))
                .aggregate(ColumnAggregate(n="count(*)"), uid="w").sink_to("sinks/plan"))

    return {"no event time": lambda: count_job(lake, job_id="plan"),
            "JSON, a watermark": lambda: windowed(lake.events, "json"),
            "two JSON sources": lambda: joined(lake),
            "Parquet, a watermark": lambda: windowed(lake.inputs / "parquet", "parquet")}


def main() -> None:
    from state_store.spark.session import build_spark
    from tests.conftest import Lake
    from tests.support.helpers import run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="counted rounds (after one warm-up)")
    args = parser.parse_args()
    spark = build_spark("bench-plan-cost", master="local[2]", extra_conf={
        "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2", "spark.ui.enabled": "false"})
    plans: dict[str, list[float]] = {}
    profiles: dict[str, cProfile.Profile] = {}
    for round_ in range(args.rounds + 1):
        for label in jobs(Lake(Path(tempfile.mkdtemp(prefix="plan-cost-")))):
            lake = Lake(Path(tempfile.mkdtemp(prefix="plan-cost-")))
            spec = jobs(lake)[label]()
            profile = profiles.setdefault(label, cProfile.Profile()) if round_ else None
            if profile:
                profile.enable()
            result = run(spark, spec, lake)
            if profile:
                profile.disable()
            assert len(result.batches) == MICROBATCHES, result.batches
            if round_:
                plans.setdefault(label, []).append(result.phases["plan"])
    report = {}
    for label, seconds in plans.items():
        stats = pstats.Stats(profiles[label])
        steps = {}
        for step, function, file in STEPS:
            found = [v for (f, _, name), v in stats.stats.items() if name == function and f.endswith(file)]
            steps[step] = round(sum(v[3] for v in found) / args.rounds, 3)  # cumulative time, a run
        report[label] = {"plan_s_median": round(statistics.median(seconds), 2), "plan_s": seconds,
                         "steps_s_per_run": steps}
        print(f"{label:22} plan {statistics.median(seconds):5.2f} s a run of {MICROBATCHES} microbatches "
              f"(rounds: {', '.join(f'{s:.2f}' for s in seconds)})", flush=True)
        for step, value in steps.items():
            print(f"    {step:28} {value:6.3f} s a run")
    print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
