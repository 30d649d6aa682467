"""The floor under any Spark-based run of workload R or L on this machine: the same one pass with no user code.

    source scripts/env.sh
    python bench/floor.py              # workload R: 5 files x 100,000 events over 100,000 keys
    python bench/floor.py --workload L

Reads the workload's files, hashes each key to its key group, shuffles the
records to 2 partitions (one per subtask), sorts each by (key group, key,
file, position) and streams it through a ``mapInArrow`` function that only
counts rows: what Lakestate's pass does before any state, user function or
write. Printed twice in one session (a fresh JVM, then a warm one), as
events/s: no engine that runs per-key Python over Spark on this machine can
go faster than this.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.workload import WORKLOADS, write_workload


def count_rows(batches):
    import pyarrow as pa

    rows = sum(b.num_rows for b in batches)
    yield pa.RecordBatch.from_pydict({"rows": [rows]})


def floor_pass(spark, input_dir: Path) -> tuple[int, float]:
    """The floor's one pass over the Parquet files in ``input_dir``: (rows, seconds)."""
    from pyspark.sql import functions as F

    from state_store.key_groups import key_group_column

    started = time.time()
    df = (spark.read.parquet(str(input_dir))
          .select("*", F.col("_metadata.file_name").alias("file"), F.monotonically_increasing_id().alias("pos")))
    df = df.withColumn("key_group", key_group_column(F.col("key"), 128))
    df = (df.repartition(2, F.floor(F.col("key_group") * 2 / 128))
          .sortWithinPartitions("key_group", "key", "file", "pos"))
    rows = sum(r["rows"] for r in df.mapInArrow(count_rows, "rows long").collect())
    return rows, time.time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="R")
    args = parser.parse_args()
    files, events, keys = WORKLOADS[args.workload]
    from state_store.spark.session import build_spark

    base = Path(tempfile.mkdtemp(prefix="lakestate-floor-"))
    write_workload(base / "input", files, events, keys)
    spark = build_spark("lakestate-floor", extra_conf={"spark.driver.memory": "6g"})
    for attempt in ("fresh JVM", "warm JVM"):
        rows, seconds = floor_pass(spark, base / "input")
        print(f"floor ({attempt}): {rows} events through read, shuffle, sort and a no-op mapInArrow in "
              f"{seconds:.1f}s = {rows / seconds:,.0f} events/s", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
