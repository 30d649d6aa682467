"""Dataflows (issue 24): the two-stage job of demo/sessions_per_country.py as one Lakestate job of two chained
operators, beside the same two stages as two Lakestate jobs glued by a Delta table, and beside Spark Structured
Streaming with the two stages chained in one query, on the same files, in one run.

    source scripts/env.sh
    python bench/dataflow.py                  # R: 5 files x 100,000 clicks over 100,000 users (~13 min, mostly Spark)
    python bench/dataflow.py --rounds 3       # the same, the Lakestate variants' best of 3 rounds each (~16 min)
    python bench/dataflow.py --peers none --rounds 3   # the two Lakestate variants only, best of 3 each (~2-3 min)
    python bench/dataflow.py --files 2 --events 2000 --keys 500   # a tiny run
    python bench/dataflow.py --peers none --rounds 3 --submits   # and each job as a spark-submit of its own

The input is ``demo.sessions_per_country.write_clicks``: ``--files`` Parquet files of ``--events`` clicks each
(``user_id, country, ts, seq``; ``--keys`` users, 7 countries, a user's country fixed), file n = minute n of event
time. Every engine reads them one file per microbatch (Lakestate's ``max_files_per_batch=1``, Spark's
``maxFilesPerTrigger=1``) and does the same two stages: per user, sessions of clicks with a 30 s gap, closed when
the watermark (max event time - 5 s) passes the last click + 30 s or when the user's next click comes after the
gap; then per country the running totals of closed sessions and their clicks, one row per country per microbatch
in which they changed.

1. ``lakestate chained``: ``demo.sessions_per_country.dataflow`` (operators "sessions", parallelism 2, and
   "per-country", parallelism 3), every microbatch in one ``run_job``; what flows between the operators stays in
   the run (``EdgeSource``: the first operator's output files of the run).
2. ``lakestate glued``: job A = the operator "sessions" alone (a one-operator ``Dataflow``, the same source and
   watermark strategy) into the Delta table ``sinks/glue-sessions`` (created first with
   ``delta.enableChangeDataFeed = true``: SESSION's columns and ``_microbatch bigint``), all its microbatches in
   one run; then job B = the operator "per-country" alone reading that table through ``DeltaSource`` (one
   microbatch per run of its source's new Delta versions: a run of A is one commit, so B has one microbatch).
   Time: A's seconds + B's.
3. ``spark transformWithStateInPandas x2``: one query, ``groupBy("user_id").transformWithStateInPandas``
   (timeMode EventTime; ``eventTimeColumnName``, the column the next operator's watermark reads, is the
   session's emit time: its closing click or the watermark that closed it) then
   ``groupBy("country").transformWithStateInPandas`` (timeMode None), Append, RocksDB state store,
   ``availableNow``, into a Delta table. Spark 4.0.1 refuses the same chain with ``applyInPandasWithState``
   (``AnalysisException: Multiple applyInPandasWithStates are not supported on a streaming
   DataFrames/Datasets``): the bench tries it on the warm-up files and prints the error. Event time is ``ts``
   moved by 2026-01-01 (Spark's watermark starts at the epoch and drops events at or before it; file 0 of clicks
   may have ts 0); the sessions' ``start`` and ``end`` are in ``ts``'s own milliseconds.
4. With ``--submits``, after those: the chained job as one ``spark-submit`` of this file (``--as-submit chained``)
   and the glued jobs as two in turn (``glued-a``, then ``glued-b``), each a process of its own as a scheduler
   runs a job (JVM and session start, then the run); time = wall seconds of each process, start to exit.

Each engine is timed as bench/throughput.py times it (Lakestate: its run from its first plan to its last commit;
Spark: its query from ``start()`` to the end of ``awaitTermination()``), after a warm-up of every engine on 2 files of
2,000 clicks. Outputs: the final totals per country (Lakestate: each country's row of the latest microbatch; Spark,
whose sink has no microbatch column: each country's largest totals, as they only grow) of every engine are checked
equal to each other and to ``demo.sessions_per_country.expected`` over all the input.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from pyspark.sql.streaming import StatefulProcessor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.costs import spark_submit
from bench.peers import ROCKSDB, dir_size
from bench.workload import workload_parser, workload_sizes
from demo.sessions_per_country import (
    BOUND_MS,
    COUNTS,
    GAP_MS,
    LATE,
    SESSION,
    CountrySessions,
    CountSessions,
    dataflow,
    expected,
    latest_totals,
    read_clicks,
    write_clicks,
)

EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: Spark's event time is ts + this (see the docstring)
COUNTRIES = 7  # write_clicks' default
CHAINED, GLUED = "lakestate chained", "lakestate glued"
SPARK = "spark transformWithStateInPandas x2"


def _progress(quiet: bool):
    return (lambda line: None) if quiet else (lambda line: print("   ", line, flush=True))


# -- Lakestate ------------------------------------------------------------------------------------------------------
def run_chained(spark, input_dir: Path, root: Path, quiet: bool = False) -> dict:
    """The two-operator job (``demo.sessions_per_country.dataflow``), every microbatch in one run."""
    from state_store.run.runtime import run_job
    from state_store.settings import Settings

    settings = Settings.load(root=root)
    spec = dataflow(input_dir, job_id="bench-chained", sink="sinks/bench-chained", parallelism=(2, 3),
                    backend="delta", max_files_per_batch=1)
    result = run_job(spark, spec, settings, progress=_progress(quiet))
    return {"engine": CHAINED, "events": result.records_in, "seconds": result.seconds,
            "events_per_s": round(result.records_in / result.seconds), "microbatches": len(result.batches),
            "sessions": sum(b.records_out for b in result.batches), "rows_out": result.records_out,
            "phases": result.phases, "sink": str(settings.sink(spec.sink))}


def create_cdf_sink(spark, path: Path) -> None:
    """Job A's sink, made before A's first run: the columns a Lakestate sink of SESSION has (its own and
    ``_microbatch bigint``), with the change data feed a ``DeltaSource`` reads."""
    from state_store.sources import SINK_MICROBATCH

    ddl = f"{SESSION.spark_schema_ddl()}, {SINK_MICROBATCH} bigint"
    (spark.createDataFrame([], ddl).write.format("delta").option("delta.enableChangeDataFeed", "true")
     .save(str(path)))


def glued_jobs(input_dir: Path, glue_sink: str):
    """Job A (the operator "sessions" alone, the chain's source and watermark strategy) and a function of A's sink
    path giving job B (the operator "per-country" alone, reading A's sink through ``DeltaSource``)."""
    from state_store import Dataflow, DeltaSource, Types

    chain = dataflow(input_dir, max_files_per_batch=1)
    a = (Dataflow.from_source(chain.source, job_id="bench-glue-sessions", backend="delta",
                              watermark_strategy=chain.watermark_strategy)
         .key_by("user_id")
         .process(CountrySessions(), uid="sessions", output_type=SESSION, parallelism=2, order_by=["ts", "seq"],
                  side_outputs=[LATE])
         .sink_to(glue_sink))

    def b(a_sink: Path):
        return (Dataflow.from_source(DeltaSource(str(a_sink)), job_id="bench-glue-per-country", backend="delta")
                .key_by("country", Types.STRING())
                .process(CountSessions(), uid="per-country", output_type=COUNTS, parallelism=3)
                .sink_to("sinks/bench-glue-per-country"))

    return a, b


def run_glued(spark, input_dir: Path, root: Path, quiet: bool = False) -> dict:
    """Job A over every microbatch, then job B over what A committed; time = the sum of the two runs'."""
    from state_store.run.runtime import run_job
    from state_store.settings import Settings

    settings = Settings.load(root=root)
    a, make_b = glued_jobs(input_dir, "sinks/glue-sessions")
    a_sink = settings.sink(a.sink)
    create_cdf_sink(spark, a_sink)
    ra = run_job(spark, a, settings, progress=_progress(quiet))
    b = make_b(a_sink)
    rb = run_job(spark, b, settings, progress=_progress(quiet))
    seconds = round(ra.seconds + rb.seconds, 2)
    return {"engine": GLUED, "events": ra.records_in, "seconds": seconds,
            "events_per_s": round(ra.records_in / seconds), "microbatches": len(ra.batches),
            "a_seconds": ra.seconds, "b_seconds": rb.seconds, "a_microbatches": len(ra.batches),
            "b_microbatches": len(rb.batches), "sessions": rb.records_in, "rows_out": rb.records_out,
            "a_phases": ra.phases, "b_phases": rb.phases, "sink": str(settings.sink(b.sink))}


def as_submit(mode: str, input_dir: Path, root: Path) -> None:
    """The body of one ``spark-submit`` of this file (``--as-submit MODE INPUT ROOT``): the chained job, glued job
    A (its sink made first) or glued job B, alone in a JVM of its own; prints the run's summary as a JSON line."""
    from state_store.run.runtime import run_job
    from state_store.settings import Settings
    from state_store.spark.session import build_spark

    spark = build_spark(f"lakestate-bench-dataflow-{mode}")
    settings = Settings.load(root=root)
    if mode == "chained":
        out = run_chained(spark, input_dir, root, quiet=True)
    else:
        a, make_b = glued_jobs(input_dir, "sinks/glue-sessions")
        if mode == "glued-a":
            create_cdf_sink(spark, settings.sink(a.sink))
        spec = a if mode == "glued-a" else make_b(settings.sink(a.sink))
        result = run_job(spark, spec, settings, progress=lambda line: None)
        out = {"seconds": result.seconds, "records_in": result.records_in, "sink": str(settings.sink(spec.sink))}
    spark.stop()
    print(json.dumps(out))


def run_submitted(mode: str, input_dir: Path, root: Path) -> tuple[float, dict]:
    """``spark-submit`` of ``as_submit(mode, ...)``, as a scheduler runs a job (each job a process of its own: the
    JVM and session start, then the run): its wall seconds and the run's summary."""
    wall, done = spark_submit(Path(__file__), "--as-submit", mode, str(input_dir), str(root),
                              options=("--driver-memory", "6g"))
    if done.returncode != 0:
        raise RuntimeError(f"spark-submit of {mode} exited {done.returncode}: {done.stderr[-3000:]}")
    return wall, json.loads(done.stdout.strip().splitlines()[-1])


def submitted(spark, base: Path, want: pd.DataFrame) -> dict:
    """The chained job as one ``spark-submit``, the glued jobs as two in turn (A, then B), on fresh copies of the
    files: wall seconds of each, outputs checked against ``want``."""
    walls, equal = {}, {}
    for name, modes in ((CHAINED, ["chained"]), (GLUED, ["glued-a", "glued-b"])):
        work = base / f"submit-{name.split()[-1]}"
        shutil.copytree(base / "input", work / "input")
        each = [run_submitted(mode, work / "input", work / "root") for mode in modes]
        walls[name] = round(sum(w for w, _ in each), 1)
        equal[f"{name} (spark-submit) == expected()"] = same(lakestate_totals(spark, each[-1][1]["sink"]), want)
        print(f"{name} as spark-submit: {walls[name]:.1f}s wall ("
              + " + ".join(f"{m} {w:.1f}s, run {r['seconds']}s" for m, (w, r) in zip(modes, each)) + ")", flush=True)
    ratio = round(walls[GLUED] / walls[CHAINED], 2)
    print(f"chained / glued, each job a spark-submit: {ratio:.2f}x", flush=True)
    return {"submit_walls": walls, "chained_over_glued_submitted": ratio, "submit_outputs_equal": equal}


def lakestate_totals(spark, sink: str) -> pd.DataFrame:
    """Per country, the totals of the latest microbatch that changed them."""
    return latest_totals(spark.read.format("delta").load(sink).toPandas())


# -- Spark ----------------------------------------------------------------------------------------------------------
SPARK_CLICKS = "user_id long, country string, ts long, seq long"
SPARK_SESSION = "user_id long, country string, start long, `end` long, clicks long, emitted timestamp"
SPARK_SESSION_COLUMNS = ["user_id", "country", "start", "end", "clicks", "emitted"]
SPARK_COUNTS = "country string, sessions long, clicks long"


class SparkSessions(StatefulProcessor):
    """Stage 1 in Spark's StatefulProcessor API: per user a ValueState (country, start, last, clicks) and one
    event-time timer at last + gap (+ ``EPOCH_MS``), moved as the session grows; a session closes in
    ``handleExpiredTimer`` or when a click comes after the gap. ``emitted`` is the row's event time for the next
    operator: the closing click's, or the watermark that fired the timer (so that no row is behind the
    watermark: Spark has an error for that, ``EMITTING_ROWS_OLDER_THAN_WATERMARK_NOT_ALLOWED``)."""

    def init(self, handle) -> None:
        self.handle = handle
        self.session = handle.getValueState("session", "country string, start long, last long, clicks long")

    def handleInputRows(self, key, rows, timerValues):
        frames = list(rows)
        country = frames[0]["country"].iat[0]  # a user's country is fixed
        stamps = np.sort(np.concatenate([pdf["ts"].to_numpy() for pdf in frames])).tolist()
        stored = self.session.get()
        s = list(stored) if stored is not None else None
        closed = []
        for ts in stamps:  # none is late: Spark drops those before they get here
            if s is not None and ts > s[2] + GAP_MS:
                closed.append((key[0], s[0], s[1], s[2] + GAP_MS, s[3], pd.Timestamp(ts + EPOCH_MS, unit="ms")))
                s = None
            if s is None:
                s = [country, ts, ts, 0]
            s[3] += 1
            s[2] = max(s[2], ts)
        if stored is not None and stored[2] != s[2]:
            self.handle.deleteTimer(stored[2] + GAP_MS + EPOCH_MS)
        if stored is None or stored[2] != s[2]:
            self.handle.registerTimer(s[2] + GAP_MS + EPOCH_MS)
        self.session.update(tuple(s))
        if closed:
            yield pd.DataFrame(closed, columns=SPARK_SESSION_COLUMNS)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        s = self.session.get()
        if s is not None and expiredTimerInfo.getExpiryTimeInMs() == s[2] + GAP_MS + EPOCH_MS:
            self.session.clear()
            emitted = pd.Timestamp(timerValues.getCurrentWatermarkInMs(), unit="ms")
            yield pd.DataFrame([(key[0], s[0], s[1], s[2] + GAP_MS, s[3], emitted)], columns=SPARK_SESSION_COLUMNS)

    def close(self) -> None:
        pass


class SparkCountSessions(StatefulProcessor):
    """Stage 2: per country a ValueState (sessions, clicks); one row of totals per microbatch with sessions."""

    def init(self, handle) -> None:
        self.totals = handle.getValueState("totals", "sessions long, clicks long")

    def handleInputRows(self, key, rows, timerValues):
        stored = self.totals.get()
        sessions, clicks = (stored[0], stored[1]) if stored is not None else (0, 0)
        for pdf in rows:
            sessions += len(pdf)
            clicks += int(pdf["clicks"].sum())
        self.totals.update((sessions, clicks))
        yield pd.DataFrame({"country": [key[0]], "sessions": [sessions], "clicks": [clicks]})

    def close(self) -> None:
        pass


def spark_clicks(spark, input_dir: Path):
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    return (spark.readStream.schema(SPARK_CLICKS).option("maxFilesPerTrigger", 1).parquet(str(input_dir))
            .withColumn("event_time", F.timestamp_millis(F.col("ts") + F.lit(EPOCH_MS)))
            .withWatermark("event_time", f"{BOUND_MS} milliseconds"))


def spark_chained(spark, input_dir: Path):
    """The two stages chained in one streaming DataFrame (transformWithStateInPandas twice)."""
    return (spark_clicks(spark, input_dir)
            .groupBy("user_id").transformWithStateInPandas(
                statefulProcessor=SparkSessions(), outputStructType=SPARK_SESSION, outputMode="Append",
                timeMode="EventTime", eventTimeColumnName="emitted")
            .groupBy("country").transformWithStateInPandas(
                statefulProcessor=SparkCountSessions(), outputStructType=SPARK_COUNTS, outputMode="Append",
                timeMode="None"))


def _start(out, work: Path):
    return (out.writeStream.format("delta").outputMode("append")
            .option("checkpointLocation", str(work / "checkpoint")).trigger(availableNow=True)
            .start(str(work / "sink")))


def apply_in_pandas_with_state_chain_error(spark, input_dir: Path, work: Path) -> str | None:
    """Try the same chain with applyInPandasWithState (EventTimeTimeout, then NoTimeout, both Append); None when
    Spark takes it, else its error (Spark 4.0.1 refuses it when the query starts, before reading anything)."""
    from pyspark.errors import AnalysisException
    from pyspark.sql.streaming.state import GroupStateTimeout

    def sessions(key, frames, state):
        if state.hasTimedOut:
            country, start, last, clicks = state.get
            state.remove()
            yield pd.DataFrame([(key[0], country, start, last + GAP_MS, clicks)],
                               columns=SPARK_SESSION_COLUMNS[:-1])
            return
        raise NotImplementedError("not run: Spark refuses the chain")

    def totals(key, frames, state):
        raise NotImplementedError("not run: Spark refuses the chain")

    out = (spark_clicks(spark, input_dir).groupBy("user_id").applyInPandasWithState(
        sessions, "user_id long, country string, start long, `end` long, clicks long",
        "country string, start long, last long, clicks long", "Append", GroupStateTimeout.EventTimeTimeout)
        .groupBy("country").applyInPandasWithState(totals, SPARK_COUNTS, "sessions long, clicks long", "Append",
                                                   GroupStateTimeout.NoTimeout))
    try:
        query = _start(out, work)
    except AnalysisException as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    query.stop()
    return None


def run_spark(spark, input_dir: Path, work: Path) -> dict:
    """The chained query, to a Delta sink, availableNow; timed from start() to its end."""
    out = spark_chained(spark, input_dir)
    started = time.time()
    query = _start(out, work)
    query.awaitTermination()
    seconds = time.time() - started
    progress = query.recentProgress
    events = sum(p["numInputRows"] for p in progress)
    state_bytes, state_files = dir_size(work / "checkpoint" / "state")
    return {"engine": SPARK, "events": events, "seconds": round(seconds, 1),
            "events_per_s": round(events / seconds), "microbatches": len(progress),
            "data_microbatches": sum(1 for p in progress if p["numInputRows"]),
            "per_microbatch_s": [round(p["durationMs"].get("triggerExecution", 0) / 1000, 2) for p in progress],
            "sink": str(work / "sink"), "state_bytes": state_bytes, "state_files": state_files}


def spark_totals(spark, sink: str) -> pd.DataFrame:
    """Per country its largest totals: the latest, as they only grow (the sink has no microbatch column)."""
    from pyspark.sql import functions as F

    rows = (spark.read.format("delta").load(sink).groupBy("country")
            .agg(F.max("sessions").alias("sessions"), F.max("clicks").alias("clicks")).toPandas())
    return rows.sort_values("country").reset_index(drop=True)


def same(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    try:
        pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_dtype=False)
        return True
    except AssertionError:
        return False


# -- the bench ------------------------------------------------------------------------------------------------------
def main() -> None:
    parser = workload_parser(__doc__)
    parser.add_argument("--peers", default="transform", help="transform (Spark's chained query), or none")
    parser.add_argument("--rounds", type=int, default=1,
                        help="time the two Lakestate variants this many times each, on fresh copies of the files, "
                             "each going first in turn; each one's best is reported (Spark runs once)")
    parser.add_argument("--no-warmup", action="store_true", help="time each engine in the JVM as it finds it")
    parser.add_argument("--submits", action="store_true",
                        help="also run the chained job as one spark-submit and the glued jobs as two, wall time each")
    args = parser.parse_args()
    if args.peers not in ("transform", "none"):
        parser.error("--peers: transform or none")
    files, events, users = workload_sizes(args)
    peers = args.peers == "transform"

    os.environ["PYTHONWARNINGS"] = "ignore::FutureWarning"  # the peer's pandas deprecation noise
    from state_store.spark.session import build_spark

    base = Path(tempfile.mkdtemp(prefix="lakestate-bench-dataflow-"))
    try:
        write_clicks(base / "input", files, events, users)
        clicks = read_clicks(base / "input")
        spark = build_spark("lakestate-bench-dataflow", extra_conf={"spark.driver.memory": "6g"})
        print(f"data: {files} files x {events} clicks over {users} users, {COUNTRIES} countries (file n = minute n "
              f"of event time); session gap {GAP_MS:,} ms, watermark max event time - {BOUND_MS:,} ms; "
              f"spark {spark.version}, {os.cpu_count()} cores", flush=True)
        refused = None
        if not args.no_warmup or peers:
            warm = base / "warmup"
            write_clicks(warm / "input", 2, 2_000, 500)
            started = time.time()
            if peers:  # only analysed: Spark refuses it when the query starts
                refused = apply_in_pandas_with_state_chain_error(spark, warm / "input", warm / "apply-chain")
            if not args.no_warmup:
                run_chained(spark, warm / "input", warm / "chained", quiet=True)
                run_glued(spark, warm / "input", warm / "glued", quiet=True)
                if peers:
                    run_spark(spark, warm / "input", warm / "spark")
                print(f"warm-up: every engine ran 2 x 2,000 clicks first ({time.time() - started:.0f}s)", flush=True)
        if peers:
            print("spark, applyInPandasWithState (EventTimeTimeout) then applyInPandasWithState in one query: "
                  + (f"refused: {refused}" if refused else "accepted"), flush=True)
            print("spark, transformWithStateInPandas (EventTime, eventTimeColumnName) then "
                  "transformWithStateInPandas in one query: accepted (the peer below)", flush=True)

        rounds: dict[str, list] = {}
        for round_ in range(args.rounds):
            tag = f" (round {round_ + 1} of {args.rounds})" if args.rounds > 1 else ""
            order = ((CHAINED, run_chained), (GLUED, run_glued))
            # Each goes first in turn: a round's first run on R's sizes is slower (the JVM is warm only from
            # the warm-up's small files), whichever engine it is.
            for name, run in order if round_ % 2 == 0 else order[::-1]:
                work = base / f"{name.split()[-1]}-{round_}"
                shutil.copytree(base / "input", work / "input")
                print(f"{name}{tag}", flush=True)
                rounds.setdefault(name, []).append(run(spark, work / "input", work / "root"))
        if peers:
            print(f"{SPARK}: one query, {files} files, one a trigger", flush=True)
            shutil.copytree(base / "input", base / "spark" / "input")
            rounds[SPARK] = [run_spark(spark, base / "spark" / "input", base / "spark")]
        if args.rounds > 1:
            for engine, each in rounds.items():
                print(f"{engine}: " + ", ".join(f"{r['seconds']:.2f}s" for r in each) + " over the rounds")
        best = {engine: min(each, key=lambda r: r["seconds"]) for engine, each in rounds.items()}
        chained, glued, peer = best[CHAINED], best[GLUED], best.get(SPARK)

        print()
        for r in best.values():
            detail = ""
            if r["engine"] == GLUED:
                detail = (f" (A: {r['a_microbatches']} microbatches {r['a_seconds']:.1f}s, B: {r['b_microbatches']} "
                          f"microbatch{'es' if r['b_microbatches'] != 1 else ''} {r['b_seconds']:.1f}s)")
            elif r["engine"] == SPARK:
                detail = f" ({r['data_microbatches']} with data), per microbatch {r['per_microbatch_s']}s"
            print(f"{r['engine']:36s} {r['events']:>9d} events {r['seconds']:>7.1f}s {r['events_per_s']:>8d} ev/s "
                  f"in {r['microbatches']} microbatches{detail}", flush=True)
        print(f"phases: chained {chained['phases']}; glued A {glued['a_phases']}, B {glued['b_phases']}")
        figures = {"chained_over_glued": round(glued["seconds"] / chained["seconds"], 2)}
        print(f"chained / glued: {figures['chained_over_glued']:.2f}x (target >= 1.3x: "
              f"{'met' if figures['chained_over_glued'] >= 1.3 else 'not met'})")
        if peer:
            figures["chained_over_spark"] = round(chained["events_per_s"] / peer["events_per_s"], 1)
            print(f"chained / spark: {figures['chained_over_spark']:.1f}x (target >= 20x: "
                  f"{'met' if figures['chained_over_spark'] >= 20 else 'not met'})")

        want = expected(clicks)
        totals = {CHAINED: lakestate_totals(spark, chained["sink"]), GLUED: lakestate_totals(spark, glued["sink"])}
        if peer:
            totals[SPARK] = spark_totals(spark, peer["sink"])
        equal = {}
        for engine, got in totals.items():
            equal[f"{engine} == expected()"] = same(got, want)
        for engine in (GLUED, SPARK):
            if engine in totals:
                equal[f"{engine} == {CHAINED}"] = same(totals[engine], totals[CHAINED])
        print(f"final totals per country ({len(want)} countries, {int(want['sessions'].sum())} sessions closed, "
              f"{int(want['clicks'].sum())} of their clicks):")
        for what, ok in equal.items():
            print(f"  {what}: {ok}")
        if args.submits:
            figures.update(submitted(spark, base, want))
        for r in best.values():
            r.pop("sink", None)
        print(json.dumps({"files": files, "events_per_file": events, "users": users, "rounds": args.rounds,
                          "spark_apply_in_pandas_with_state_chain": refused or ("accepted" if peers else None),
                          "engines": list(best.values()), **figures, "outputs_equal": equal}))
        spark.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--as-submit"]:
        as_submit(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))
    else:
        main()
