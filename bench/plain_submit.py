"""Plain Spark as a ``spark-submit``, the baselines ``bench/costs.py tiny`` prints beside a 10-event Lakestate run
submitted the same way (same jars, same confs):

    spark-submit ... bench/plain_submit.py count DIR   # counts range(10)
    spark-submit ... bench/plain_submit.py delta DIR   # appends 10 rows twice to a Delta table in DIR, reads it
    spark-submit ... bench/plain_submit.py copy TABLE OUT   # reads a Delta table, writes it to OUT partitioned alike

``copy`` is bench/operations.py's baseline for a savepoint submitted the same way: the same files read and
written again, with none of a savepoint's newest-entry selection or metadata.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    from state_store.spark.session import build_spark

    mode, folder = sys.argv[1], sys.argv[2]
    spark = build_spark("plain-spark")
    if mode == "copy":
        table = spark.read.format("delta").load(folder)
        table.write.format("delta").partitionBy("state_name", "key_group").save(sys.argv[3])
        print(f"plain: copied {folder} to {sys.argv[3]}")
    elif mode == "count":
        print(f"plain: counted {spark.range(10).count()} rows")
    else:
        for _ in range(2):
            spark.range(10).write.format("delta").mode("append").save(f"{folder}/plain-delta")
        print(f"plain: read {spark.read.format('delta').load(f'{folder}/plain-delta').count()} rows back")
    spark.stop()


if __name__ == "__main__":
    main()
