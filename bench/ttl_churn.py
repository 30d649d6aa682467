"""State under TTL, bounded by compaction and by incremental cleanup: a churn workload, three ways, in one run.

    source scripts/env.sh
    python bench/ttl_churn.py [--microbatches 50] [--keys 2000] [--every 10]

Each microbatch brings ``--keys`` new keys (all of one length, so bytes per entry compare across microbatches),
each written once (a ValueState with a TTL of 5 microbatches: microbatch m is planned at m * 1000 ms, the TTL
is 5000 ms), so about 5 microbatches' keys are live at any time.
The same input runs three times, one microbatch per run (``delta`` backend, parallelism 2, max parallelism 8):
without compaction; with ``compact_job`` after every ``--every``-th microbatch; and the same with incremental
cleanup per record (``cleanup_incrementally(5, True)``) instead of Flink's default (5 entries per subtask per
microbatch). After each microbatch (and
after each compaction) it prints live entries (not expired at that microbatch's time), stored entries (rows
in the keyed table's current version), table bytes and file count, then the largest stored/live and
bytes-per-live-entry ratios of each variant (bytes against the fewest per live entry any compaction left).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TTL_MS, TICK_MS = 5000, 1000


def _job(input_dir: str, job_id: str, every_record: bool):
    from state_store import FileSource, JobSpec, KeyedProcessFunction, StateTtlConfig, Types, ValueStateDescriptor

    class Touch(KeyedProcessFunction):
        def open(self, ctx):
            ttl = StateTtlConfig.new_builder(TTL_MS)  # Flink's defaults: incremental cleanup (5) and compaction
            if every_record:
                ttl = ttl.cleanup_incrementally(5, True)
            ttl = ttl.build()
            self.seen = ctx.get_state(ValueStateDescriptor("seen", Types.LONG()).enable_time_to_live(ttl))

        def process(self, key, records, ctx):
            self.seen.update(len(records) + (self.seen.value() or 0))
            return []

    event = Types.ROW_NAMED(["k", "v"], [Types.STRING(), Types.LONG()])
    return JobSpec(job_id=job_id, function=Touch(), source=FileSource(input_dir, "json", event, max_files_per_batch=1),
                   key="k", key_type=Types.STRING(), output_type=Types.ROW_NAMED(["k"], [Types.STRING()]),
                   sink=f"sinks/{job_id}", uid="churn", parallelism=2, max_parallelism=8, checkpoint_interval=1,
                   num_retained=2)


def _measure(spark, settings, job_id: str, now: int) -> dict:
    from pyspark.sql import functions as F

    from state_store.catalog.job_store import JobStore
    from state_store.delta.log import table_snapshot
    from state_store.delta.state_tables import latest_live
    from state_store.records.layout import KEYED_TABLE as KEYED

    latest = JobStore(settings.job_dir(job_id)).latest_checkpoint()
    path = latest.state["keyed"].path
    df = spark.read.format("delta").load(path)
    live = latest_live(df, KEYED).filter(F.coalesce(F.col("expiry") > now, F.lit(True))).count()
    snap = table_snapshot(path)
    return {"live": live, "stored": df.count(), "bytes": snap["size_bytes"], "files": snap["num_files"]}


def variant(spark, base: Path, name: str, microbatches: int, every: int | None, every_record: bool) -> list[dict]:
    from state_store.ops.compaction import compact_job
    from state_store.run.runtime import JobRunner
    from state_store.settings import Settings

    settings = Settings.load(root=base / name)
    spec = _job(str(base / "input"), f"churn-{name}", every_record)
    lines = []
    for m in range(microbatches):
        now = m * TICK_MS
        started = time.perf_counter()
        JobRunner(spark, spec, settings, clock=lambda now=now: now, progress=lambda line: None).run(1)
        row = {"variant": name, "microbatch": m, "after": "run", "seconds": round(time.perf_counter() - started, 1),
               **_measure(spark, settings, spec.job_id, now)}
        print(json.dumps(row), flush=True)
        lines.append(row)
        if every and (m + 1) % every == 0:
            started = time.perf_counter()
            compact_job(spark, settings, spec.job_id, say=lambda line: None)
            row = {"variant": name, "microbatch": m, "after": "compaction",
                   "seconds": round(time.perf_counter() - started, 1), **_measure(spark, settings, spec.job_id, now)}
            print(json.dumps(row), flush=True)
            lines.append(row)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--microbatches", type=int, default=50)
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--every", type=int, default=10)
    args = parser.parse_args()
    from state_store.spark.session import build_spark

    spark = build_spark("bench-ttl-churn", master="local[2]", extra_conf={"spark.ui.enabled": "false",
                                                                          "spark.sql.shuffle.partitions": "2"})
    base = Path(tempfile.mkdtemp(prefix="lakestate-churn-"))
    try:
        (base / "input").mkdir()
        for m in range(args.microbatches):
            rows = "".join(json.dumps({"k": f"m{m:03d}-k{i:04d}", "v": i}) + "\n" for i in range(args.keys))
            (base / "input" / f"e{m:04d}.json").write_text(rows)
        variants = (("never", None, False), (f"every-{args.every}", args.every, False),
                    (f"every-{args.every}-per-record", args.every, True))
        results = {name: variant(spark, base, name, args.microbatches, every, every_record)
                   for name, every, every_record in variants}
        print()
        compacted = [r["bytes"] / r["live"] for lines in results.values() for r in lines if r["after"] == "compaction"]
        floor = min(compacted)  # bytes per live entry when they are all in one compacted file per key group
        for name, lines in results.items():
            steady = [r for r in lines if r["microbatch"] >= 5]  # once the TTL window is full
            worst = max(steady, key=lambda r: r["stored"] / r["live"])
            per_entry = max(r["bytes"] / r["live"] for r in steady)
            first = min(r["bytes"] / r["live"] for r in steady)
            runs = [r for r in steady if r["after"] == "run"]
            files = [r["files"] for r in steady]
            print(f"{name:>19}: live {steady[-1]['live']:,} at the end; stored/live at most "
                  f"{worst['stored'] / worst['live']:.2f} (microbatch {worst['microbatch']}, after {worst['after']}); "
                  f"bytes per live entry {first:.1f}..{per_entry:.1f} (at most {per_entry / floor:.2f}x compacted); "
                  f"files {min(files)}..{max(files)}; run {sum(r['seconds'] for r in runs) / len(runs):.1f} s on "
                  f"average; stored at the end {lines[-1]['stored']:,}, {lines[-1]['bytes']:,} bytes in "
                  f"{lines[-1]['files']} files")
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
