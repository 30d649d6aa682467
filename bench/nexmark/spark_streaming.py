"""Nexmark's queries that Spark SQL can express, run by Spark Structured Streaming over the same events: the third
column of ``run.py``'s table (issue 63).

The events are read as Lakestate reads them (the same files, ``maxFilesPerTrigger`` 1, so a microbatch a file,
trigger ``availableNow``); ``person``, ``auction`` and ``bid`` are temporary views of the stream with ``dateTime``
computed as ``ddl_gen.sql`` does and Nexmark's watermark (``withWatermark("dateTime", "4 seconds")``). A query's
text is Nexmark's SELECT read by Lakestate's Flink dialect and written as Spark SQL (``SPLIT_INDEX`` and
``REGEXP_EXTRACT`` as Spark has them), but for q11, whose Flink group window ``SESSION(...)`` is Spark's
``session_window``. Its rows go to a Delta table in append mode, the state in RocksDB (as ``bench/peers.py``'s
peers). Spark fires no window its watermark has not passed when its input ends (it has no end of input), so q11's
last sessions are missing from its table; the other queries' tables are compared with Flink's.
"""
from __future__ import annotations

import time
from pathlib import Path

from bench.nexmark.tables import DATE_TIME, EVENT, VIEWS, count_char, select_text

SPARK_QUERIES = (0, 1, 2, 3, 11, 14, 21, 22)  # stateless, a regular join of insert-only streams, sessions
FIRES_AT_END = (11,)  # windows: Spark's table lacks those its watermark has not passed when the input ends
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
Q11 = """
SELECT B.bidder, count(*) AS bid_count, session_window.start AS starttime, session_window.end AS endtime
FROM bid B GROUP BY B.bidder, session_window(B.`dateTime`, '10 seconds')
"""


def spark_text(n: int) -> str:
    """Query ``n`` as Spark SQL."""
    if n == 11:
        return Q11
    from state_store.sql.dialect import parse

    return parse(select_text(n))[-1].sql(dialect="spark")


def _views(spark, events_dir: Path) -> None:
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    events = (spark.readStream.schema(EVENT.spark_schema_ddl())
              .option("maxFilesPerTrigger", 1).json(str(events_dir / "part-*.json"))
              .withColumn("dateTime", F.expr(DATE_TIME)))
    for name, (event_type, schema) in VIEWS.items():
        columns = [F.col("dateTime") if c.strip("`") == "dateTime" else F.col(f"{name}.{c.strip('`')}")
                   for c in (part.split()[0] for part in schema.split(", "))]
        (events.where(F.col("event_type") == event_type).select(*columns)
         .withWatermark("dateTime", "4 seconds").createOrReplaceTempView(name))


def run_spark(spark, n: int, events_dir: Path, work: Path) -> dict:
    """Query ``n`` over the events of ``events_dir``: its span (from ``start()`` to its end), events and final
    table (``engines.lakestate_table``'s shape)."""
    from bench.nexmark.engines import lakestate_table

    if n == 14:
        spark.udf.register("count_char", count_char.function, "bigint")
    _views(spark, events_dir)
    out = spark.sql(spark_text(n))
    sink = work / f"spark-q{n}"
    writer = (out.writeStream.format("delta").outputMode("append")
              .option("checkpointLocation", str(work / f"spark-q{n}-checkpoint")).trigger(availableNow=True))
    started = time.time()
    query = writer.start(str(sink))
    query.awaitTermination()
    seconds = time.time() - started
    events = sum(p["numInputRows"] for p in query.recentProgress)
    return {"seconds": seconds, "events": events, "table": lakestate_table(spark, sink, out.columns)}
