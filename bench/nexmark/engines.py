"""Nexmark's queries run by each engine over the same generated files, and their final tables, for ``run.py`` and
the tests (issue 63).

- Flink SQL 2.3 (``java/NexmarkSql.java``): the query's own statements after ``ddl_gen.sql``'s table (its
  ``WITH`` a filesystem table of the JSON files) and ``ddl_views.sql``'s views, streaming mode, parallelism 2.
  Timed: the INSERT INTO the query's blackhole sink, in a JVM of its own, less the same on a 2,000-event slice
  (``bench/flink.py``'s fixed cost). Its table: the SELECT collected, its changes applied.
- Lakestate: ``SqlJob`` of the query's SELECT (``tables.select_text``) over ``tables.nexmark_tables``, a microbatch
  per file, a checkpoint after each, its span what the run prints (first plan to last commit). Its table: the
  sink's rows less the ones a change took back.

A table is a sorted list of rows, each value as text (timestamps ``yyyy-MM-dd HH:mm:ss.SSS``, decimals plain,
numbers as Java prints them), so that the two compare row for row.
"""
from __future__ import annotations

import json
import re
import subprocess
import tempfile
import time
from collections import Counter
from decimal import Decimal
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


def flink_script(n: int, events_dir: Path, side_input: Path, work: Path, collect: bool) -> str:
    """Query ``n``'s script for ``NexmarkSql``: ``ddl_gen.sql``'s table over the JSON files of ``events_dir``,
    ``ddl_views.sql``, then the query's statements (q13's side input and q10's output folder in this machine's
    places); its last, the INSERT, or its SELECT for ``collect``."""
    (ddl_gen,) = statements((QUERIES / "ddl_gen.sql").read_text())
    ddl_gen = ddl_gen[:ddl_gen.rindex("WITH (")] + (
        f"WITH ('connector' = 'filesystem', 'path' = 'file://{events_dir}', 'format' = 'json')")
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


def run_flink(classpath: str, n: int, events_dir: Path, side_input: Path, collect: bool = False) -> dict:
    """One JVM running query ``n`` over ``events_dir``: its wall time and net runtime, and for ``collect`` its
    final table."""
    with tempfile.TemporaryDirectory(prefix="nexmark-flink-") as work:
        script, out = Path(work) / "query.sql", Path(work) / "rows.json"
        script.write_text(flink_script(n, events_dir, side_input, Path(work), collect))
        started = time.perf_counter()
        done = subprocess.run(["java", "-Xmx6g", "-cp", classpath, "NexmarkSql", "collect" if collect else "run",
                               str(script), "2", str(out), UPSERT_KEYS.get(n, "")], capture_output=True, text=True)
        wall = time.perf_counter() - started
        if done.returncode:
            raise RuntimeError(f"Flink's q{n} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        got = {"wall": wall}
        if collect:
            got["rows"] = sorted(tuple(json.loads(line)) for line in out.read_text().splitlines())
            got["kinds"] = re.search(r"kinds=(\{.*?\})", done.stdout).group(1)
        else:
            got["net"] = int(re.search(r"net_ms=(\d+)", done.stdout).group(1)) / 1000
        return got


def as_text(value) -> str | None:
    """A value as ``NexmarkSql`` writes Flink's: timestamps to the millisecond, decimals plain, Java's floats."""
    if value is None:
        return None
    if hasattr(value, "strftime"):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value) if value != int(value) or abs(value) >= 1e7 else f"{value:.1f}"
    return str(value)


def sql_job(n: int, events_dir: Path, side_input: Path, files_per_batch: int = 1):
    """Lakestate's job of query ``n``: its SELECT over Nexmark's tables, into ``sinks/q<n>``."""
    from state_store import SqlJob

    return SqlJob(f"nexmark-q{n}", select_text(n), tables=nexmark_tables(str(events_dir), str(side_input),
                                                                          files_per_batch),
                  sink=f"sinks/q{n}", functions={"count_char": count_char})


def run_lakestate(spark, job, root: Path, sink: str) -> dict:
    """``job`` run to the end of its files under ``root``: its span, events, state size and final table (of its
    ``sink``)."""
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
            "rows": final_rows(spark, settings.in_warehouse(sink, "sink"), columns)}


def final_rows(spark, sink: Path, columns: list[str]) -> list[tuple]:
    """The rows a sink's changes leave (+I/+U add a row, -U/-D take one back), sorted, as text."""
    frame = spark.read.format("delta").load(str(sink))
    left = Counter()
    kinds = "_kind" in frame.columns
    for row in frame.select(*columns, *(["_kind"] if kinds else [])).toLocalIterator():
        left[tuple(as_text(row[c]) for c in columns)] += 1 if not kinds or row["_kind"] in ("+I", "+U") else -1
    if any(count < 0 for count in left.values()):
        raise AssertionError(f"a change retracted a row that was not there in {sink}")
    return sorted(row for row, count in left.items() for _ in range(count))


def differences(flink: list[tuple], lakestate: list[tuple], limit: int = 5) -> list[str]:
    """How two final tables differ (empty: row for row the same): rows only one has, at most ``limit`` each."""
    ours, theirs = Counter(lakestate), Counter(flink)
    only_flink, only_ours = list((theirs - ours).elements()), list((ours - theirs).elements())
    lines = [f"only Flink's: {row}" for row in sorted(only_flink)[:limit]]
    lines += [f"only Lakestate's: {row}" for row in sorted(only_ours)[:limit]]
    if only_flink or only_ours:
        lines.append(f"{len(only_flink)} rows only Flink's, {len(only_ours)} only Lakestate's, of {len(flink)} and "
                     f"{len(lakestate)}")
    return lines
