"""Nexmark's queries run by each engine over the same generated files, and their final tables, for ``run.py`` and
the tests (issue 63).

- Flink SQL 2.3 (``java/NexmarkSql.java``): the query's own statements after ``ddl_gen.sql``'s table (its
  ``WITH`` a filesystem table of the JSON files) and ``ddl_views.sql``'s views, streaming mode, parallelism 2.
  Timed: the INSERT INTO the query's blackhole sink, in a JVM of its own, less the same on a 2,000-event slice
  (``bench/flink.py``'s fixed cost). Its table: the SELECT collected, its changes applied.
- Lakestate: ``SqlJob`` of the query's SELECT (``tables.select_text``) over ``tables.nexmark_tables``, a microbatch
  per file, a checkpoint after each, its span what the run prints (first plan to last commit). Its table: the
  sink's rows less the ones a change took back.

A final table is a Spark DataFrame of one column, ``row``, an array of each value as text (timestamps
``yyyy-MM-dd HH:mm:ss.SSS``, decimals plain, numbers as Java prints them), a row as many times as the changes
leave it, so that the two compare row for row at any size (``differences``: Spark's ``exceptAll`` both ways).
"""
from __future__ import annotations

import re
import subprocess
import tempfile
import time
from pathlib import Path

from bench.nexmark.tables import QUERIES, count_char, nexmark_tables, query_text, select_text

FLINK_FIXES = {  # Nexmark's texts that Flink 2.3's parser refuses, as they mean (the same text for Lakestate's)
    23: ("A.dateTime AS", "A.`dateTime` AS"),  # dateTime is a reserved word: quoted everywhere else
    # Flink 2.3 has no lookup source of a file (its processing-time temporal join wants one, or a versioned table
    # with a key): the side input, a table that never changes, joined as a regular join, which gives the lookup
    # join's rows
    13: ("JOIN side_input FOR SYSTEM_TIME AS OF B.p_time AS S", "JOIN side_input AS S"),
}
UPSERT_KEYS = {9: "0"}  # the queries whose changes Flink gives as upserts (+U alone): their key's columns
NEXMARK_JAVA = Path(__file__).resolve().parent / "java"
FLINK_SIDE_INPUT = """CREATE TABLE side_input (
  key BIGINT,
  `value` VARCHAR
) WITH ('connector' = 'filesystem', 'path' = 'file://{path}', 'format' = 'csv')"""


def flink_classes() -> str:
    """Flink's jars and ``NexmarkSql`` with Nexmark's ``CountChar`` (q14) compiled against them: a classpath."""
    from bench.flink import CACHE, flink_classpath

    flink_classpath()
    classes = CACHE / "nexmark-classes"
    sources = [NEXMARK_JAVA / "NexmarkSql.java", NEXMARK_JAVA / "com/github/nexmark/flink/udf/CountChar.java"]
    compiled = classes / "NexmarkSql.class"
    if not compiled.is_file() or compiled.stat().st_mtime < max(s.stat().st_mtime for s in sources):
        classes.mkdir(parents=True, exist_ok=True)
        subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", f"{CACHE / 'lib'}/*", *map(str, sources)],
                       check=True, capture_output=True)
    return f"{CACHE / 'lib'}/*:{classes}"


def statements(text: str) -> list[str]:
    """A script's statements, without their ``;``."""
    return [s.strip() for s in text.split(";") if s.strip()]


def flink_script(n: int, events: Path, side_input: Path, work: Path, collect: bool) -> str:
    """Query ``n``'s script for ``NexmarkSql``: ``ddl_gen.sql``'s table over the JSON-lines file ``events``,
    ``ddl_views.sql``, then the query's statements (q13's side input and q10's output folder in this machine's
    places); its last, the INSERT, or its SELECT for ``collect``."""
    (ddl_gen,) = statements((QUERIES / "ddl_gen.sql").read_text())
    ddl_gen = ddl_gen[:ddl_gen.rindex("WITH (")] + (
        f"WITH ('connector' = 'filesystem', 'path' = 'file://{events}', 'format' = 'json')")
    views = statements((QUERIES / "ddl_views.sql").read_text().replace("${NEXMARK_TABLE}", "datagen"))
    own = []
    text = query_text(n).replace(*FLINK_FIXES[n]) if n in FLINK_FIXES else query_text(n)
    for statement in statements(text):
        if statement.startswith("CREATE TABLE side_input"):
            statement = FLINK_SIDE_INPUT.format(path=side_input / "side_input.csv")
        statement = statement.replace("file://${NEXMARK_DIR}/data/output/${SUBMIT_TIME}", f"file://{work}/q10")
        if collect and statement.startswith("INSERT INTO"):
            statement = re.sub(r"^INSERT INTO \w+\s+", "", statement)
        own.append(statement)
    return ";\n".join([ddl_gen, *views, *own]) + "\n"


def flink_events(events_dir: Path) -> Path:
    """The events of ``events_dir``'s files as one file, in a folder beside it, for Flink: over several files its
    two source readers read them side by side, and a reader's later file makes the other's records late to its
    windows (q5 and q7 lose some, differently run to run); one file keeps event time in order, as Nexmark's own
    source does."""
    one = events_dir.parent / f"{events_dir.name}-flink"
    if not (one / "_done").is_file():
        one.mkdir(exist_ok=True)
        with open(one / "events.json", "wb") as out:
            for part in sorted(events_dir.glob("part-*.json")):
                out.write(part.read_bytes())
        (one / "_done").write_text("")
    return one / "events.json"


def run_flink(classpath: str, n: int, events_dir: Path, side_input: Path, changes: Path | None = None) -> dict:
    """One JVM running query ``n`` over ``events_dir``'s events (``flink_events``): its wall time and net runtime;
    given ``changes``, its SELECT's changes collected into that file instead (``flink_table`` reads them)."""
    with tempfile.TemporaryDirectory(prefix="nexmark-flink-") as work:
        script = Path(work) / "query.sql"
        script.write_text(flink_script(n, flink_events(events_dir), side_input, Path(work), changes is not None))
        started = time.perf_counter()
        done = subprocess.run(["java", "-Xmx6g", "-cp", classpath, "NexmarkSql", "run" if changes is None else
                               "collect", str(script), "2", str(changes or ""), UPSERT_KEYS.get(n, "")],
                              capture_output=True, text=True)
        wall = time.perf_counter() - started
        if done.returncode:
            raise RuntimeError(f"Flink's q{n} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        if changes is not None:
            return {"wall": wall, "kinds": re.search(r"kinds=(\{.*?\})", done.stdout).group(1)}
        return {"wall": wall, "net": int(re.search(r"net_ms=(\d+)", done.stdout).group(1)) / 1000}


def _multiset(signed):
    """Rows (``row``, an array of text) with a sign ``s`` (+1 adds the row, -1 takes one back): the rows left, each
    as many times as it is left."""
    from pyspark.sql import functions as F

    counted = signed.groupBy("row").agg(F.sum("s").alias("n"))
    if counted.filter("n < 0").limit(1).count():
        raise AssertionError("a change retracted a row that was not there")
    return counted.filter("n > 0").select(F.explode(F.array_repeat("row", F.col("n").cast("int"))).alias("row"))


def flink_table(spark, changes: Path):
    """Flink's final table: its changes (``NexmarkSql``'s file) applied; a DataFrame of ``row`` (array of text)."""
    from pyspark.sql import functions as F

    lines = spark.read.text(str(changes)).select(F.from_json("value", "array<string>").alias("a"))
    return _multiset(lines.select(F.when(F.col("a")[0] == "+", 1).otherwise(-1).alias("s"),
                                  F.slice("a", 2, F.size("a")).alias("row")))


def as_text(column: str, spark_type) -> str:
    """Spark SQL of a column's value as ``NexmarkSql`` writes Flink's: timestamps to the millisecond, decimals
    plain, numbers as Java prints them."""
    if spark_type.typeName() == "timestamp":
        return f"date_format(`{column}`, 'yyyy-MM-dd HH:mm:ss.SSS')"
    return f"CAST(`{column}` AS STRING)"


def sql_job(n: int, events_dir: Path, side_input: Path, files_per_batch: int = 1):
    """Lakestate's job of query ``n``: its SELECT over Nexmark's tables, into ``sinks/q<n>``."""
    from state_store import SqlJob

    return SqlJob(f"nexmark-q{n}", select_text(n), tables=nexmark_tables(str(events_dir), str(side_input),
                                                                          files_per_batch),
                  sink=f"sinks/q{n}", functions={"count_char": count_char})


def run_lakestate(spark, job, root: Path, sink: str) -> dict:
    """``job`` run to the end of its files under ``root``, with ``end_of_input``: its span, events, state size and
    final table (of its ``sink``, ``lakestate_table``'s)."""
    from bench.peers import dir_size
    from state_store.graph import as_job
    from state_store.run.runtime import run_job
    from state_store.settings import Settings

    settings = Settings.load(root=root)
    result = run_job(spark, job, settings, progress=lambda line: None, end_of_input=True)
    state = settings.job_dir(job.job_id) / "state"
    columns = [c for c in as_job(job).operators[-1].output_type.fields if c != "_kind"]
    return {"seconds": result.seconds, "events": result.records_in, "microbatches": len(result.batches),
            "state_bytes": dir_size(state)[0] if state.exists() else 0,
            "table": lakestate_table(spark, settings.in_warehouse(sink, "sink"), columns)}


def lakestate_table(spark, sink: Path, columns: list[str]):
    """The rows a sink's changes leave (+I/+U add a row, -U/-D take one back): a DataFrame of ``row`` (array of
    text, as ``flink_table``'s)."""
    from pyspark.sql import functions as F

    frame = spark.read.format("delta").load(str(sink))
    types = {f.name: f.dataType for f in frame.schema.fields}
    sign = (F.when(F.col("_kind").isin("+I", "+U"), 1).otherwise(-1) if "_kind" in frame.columns else F.lit(1))
    return _multiset(frame.select(sign.alias("s"), F.array(*[F.expr(as_text(c, types[c])) for c in columns])
                                  .alias("row")))


def rows_of(table) -> list[tuple]:
    """A final table's rows, sorted (a small one's: they are collected)."""
    return sorted(tuple(r["row"]) for r in table.collect())


def differences(flink, lakestate, limit: int = 5) -> list[str]:
    """How two final tables (DataFrames of ``row``) differ (empty: row for row the same): the rows only one has,
    at most ``limit`` each, and how many."""
    only_flink, only_ours = flink.exceptAll(lakestate).cache(), lakestate.exceptAll(flink).cache()
    counts = only_flink.count(), only_ours.count()
    lines = [f"only Flink's: {tuple(r['row'])}" for r in only_flink.limit(limit).collect()]
    lines += [f"only Lakestate's: {tuple(r['row'])}" for r in only_ours.limit(limit).collect()]
    if any(counts):
        lines.append(f"{counts[0]} rows only Flink's, {counts[1]} only Lakestate's, of {flink.count()} and "
                     f"{lakestate.count()}")
    only_flink.unpersist()
    only_ours.unpersist()
    return lines
