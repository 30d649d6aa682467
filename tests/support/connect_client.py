"""A Spark Connect client in a process of its own, for tests/e2e/test_spark_connect.py: PySpark marks a whole process
as Connect once it opens a remote session (``SPARK_CONNECT_MODE_ENABLED``), after which the classic session the
other tests share would get Connect columns. Prints its result as one JSON line.

    python -m tests.support.connect_client <sc:// url> delta <table path>           write twice, read, history
    python -m tests.support.connect_client <sc:// url> two-runs <lake dir> <backend> the all-states job, two runs
    python -m tests.support.connect_client <sc:// url> failing <lake dir>            a run whose function raises
    python -m tests.support.connect_client <sc:// url> sweep <lake dir> <backend>    TTL incremental cleanup, three runs
    python -m tests.support.connect_client <sc:// url> chain <lake dir> <backend>    the two-operator dataflow, two runs

``pausing_job`` is a job factory for ``lakestate run --remote``: a run the test kills the server in the middle of.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from tests.support.jobs import CountOnly


class PausingCount(CountOnly):
    """CountOnly that pauses in microbatch ``pause_at``, once (the first task to create ``marker`` does): the
    server's Python worker is then in the middle of the run's pass, for as long as a test needs to kill it. The
    pausing worker ignores the hangup its daemon sends all workers when the server dies, as a worker stuck in a
    call does: it outlives a killed server, as the processes of one may."""

    def __init__(self, marker: str, pause_at: int = 1):
        super().__init__()
        self.marker, self.pause_at = marker, pause_at

    def process(self, key, records, ctx):
        if ctx.batch_id == self.pause_at:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                signal.signal(signal.SIGHUP, signal.SIG_IGN)
                time.sleep(600)
        yield from super().process(key, records, ctx)


def pausing_job():
    """tests/support/jobs.py's count job on ``$LAKESTATE_ROOT/input/events``, pausing once in microbatch 1 (the marker
    ``$LAKESTATE_ROOT/paused`` says it did)."""
    from types import SimpleNamespace

    from tests.support.jobs import count_job

    root = Path(os.environ["LAKESTATE_ROOT"])
    return count_job(SimpleNamespace(events=root / "input" / "events"), job_id="paused",
                     function=PausingCount(str(root / "paused")))


def two_runs(session, lake, backend: str):
    """The all-states job (every state kind, broadcast input, raw state) in two runs: one microbatch, then one
    more restored from the first run's checkpoint. Returns (sink rows, keyed rows, operator rows)."""
    from tests.support.helpers import run, sink_rows, state_at_latest_checkpoint
    from tests.support.jobs import all_states_job, events

    lake.write_rules("r0.json", [{"name": "factor", "factor": 2}])
    spec = all_states_job(lake, job_id=f"warm-{backend}", backend=backend, checkpoint_interval=1)
    for b in range(2):
        lake.write_events(f"e{b}.json", events(b))
        assert [m.batch_id for m in run(session, spec, lake, max_microbatches=1).batches] == [b]
    return (sink_rows(session, lake, spec), *state_at_latest_checkpoint(session, lake, spec))


def sweep(session, lake, backend: str):
    """The incremental cleanup job (tests/support/jobs.py's sweep_job, as tests/state/test_ttl_tables.py runs it) in
    runs of 1, 3 and 2 microbatches: the entries each run's cleanup removed, and the keyed state at the latest
    checkpoint."""
    from tests.support.helpers import run, state_at_latest_checkpoint
    from tests.support.jobs import sweep_job, ticking_clock

    spec, clock, said = sweep_job(lake, f"sweep-{backend}", backend), ticking_clock(), []
    for n in (1, 3, 2):
        run(session, spec, lake, max_microbatches=n, clock=clock, progress=said.append)
    removed = [int(line.split("removed ")[1].split()[0]) for line in said if "TTL incremental cleanup" in line]
    return removed, state_at_latest_checkpoint(session, lake, spec)[0]


def chain(session, lake, backend: str) -> dict:
    """The demo's two-operator dataflow (per user sessions, then per country totals) in two runs: one of two
    microbatches, then one more restored from its checkpoint. Its sink's rows and what pandas computes."""
    from demo.sessions_per_country import dataflow, expected, latest_totals, read_clicks, write_clicks
    from tests.support.helpers import run

    directory = lake.inputs / "clicks"
    write_clicks(directory, 3, events=300, users=50)
    spec = dataflow(directory, job_id=f"chain-{backend}", sink=f"sinks/chain-{backend}", backend=backend)
    runs = [[b.batch_id for b in run(session, spec, lake, max_microbatches=n).sink_batches] for n in (2, 1)]
    latest = latest_totals(session.read.format("delta").load(str(lake.settings.sink(spec.sink))).toPandas())

    def totals(df):
        return [[str(c), int(s), int(n)] for c, s, n in df.itertuples(index=False)]

    return {"runs": runs, "latest": totals(latest), "expected": totals(expected(read_clicks(directory)))}


def failing(session, lake) -> dict:
    """A run whose function raises: its error, and the files left in the warehouse (none may be)."""
    from state_store.errors import InputError
    from tests.support.helpers import run
    from tests.support.jobs import FailingCount, count_job, events

    lake.write_events("e0.json", events(0))
    try:
        run(session, count_job(lake, job_id="failing", function=FailingCount()), lake)
    except InputError as e:
        error = str(e)
    else:
        error = None
    return {"error": error, "parquet": sorted(str(p) for p in lake.settings.warehouse.rglob("*.parquet"))}


def state_processor(session, lake) -> dict:
    """The State Processor over Connect: a savepoint bootstrapped from a DataFrame (SavepointWriter), its keyed
    state read back (SavepointReader), and a changed copy (a uid renamed) read again."""
    from state_store import SavepointReader, SavepointWriter, Types, ValueStateDescriptor

    counts = session.createDataFrame([("a", 100), ("b", 200)], "user string, n bigint")
    written = SavepointWriter.bootstrap(session, "counts", uid="count", key_type=Types.STRING(), max_parallelism=8,
                                        parallelism=2, settings=lake.settings) \
        .with_keyed_state(ValueStateDescriptor("count", Types.LONG()), counts, key="user", value="n") \
        .write("bootstrapped", say=lambda m: None)
    SavepointWriter.from_savepoint(session, "counts/bootstrapped", lake.settings).rename_uid("count", "counter") \
        .write("renamed", say=lambda m: None)
    read = {}
    for name, _uid in (("bootstrapped", "count"), ("renamed", "counter")):
        reader = SavepointReader.for_savepoint(session, f"counts/{name}", lake.settings)
        read[name] = [reader.uid, sorted([r["key"], r["value"]] for r in reader.keyed_state("count").collect())]
    return {"entries": written.entries, "read": read}


def _delta(session, path: str) -> dict:
    session.range(3).selectExpr("id", "id * 10 AS v").write.format("delta").save(path)
    session.range(3, 4).selectExpr("id", "id * 10 AS v").write.format("delta").mode("append").save(path)
    rows = session.read.format("delta").load(path).orderBy("id").collect()
    history = session.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version", "operation").collect()
    return {"session": type(session).__module__, "rows": [[r.id, r.v] for r in rows],
            "history": sorted([r.version, r.operation] for r in history)}


def job_sessions(url: str) -> dict:
    """A job's runs share its session of the hour; once the server closed it, a run gets a new one."""
    from state_store.spark.connect import job_session_id, remote_session

    first = remote_session(url, job_id="shared")
    again = remote_session(url, job_id="shared")
    same = [first.session_id, again.session_id, job_session_id("shared")]
    first.range(1).collect()
    first.stop()  # releases the session on the server: its id is closed there from now on
    after = remote_session(url, job_id="shared")
    rows = after.range(2).count()
    after.stop()
    return {"same": same, "after": after.session_id, "rows": rows}


def main(argv: list[str]) -> None:
    from pyspark.sql import SparkSession

    url, what, *args = argv
    if what == "job-sessions":
        print(json.dumps(job_sessions(url)))
        return
    session = SparkSession.builder.remote(url).create()
    try:
        if what == "delta":
            out = _delta(session, args[0])
        else:
            from tests.support.lake import Lake

            lake = Lake(Path(args[0]))
            out = (failing(session, lake) if what == "failing" else
                   state_processor(session, lake) if what == "state-processor" else
                   sweep(session, lake, args[1]) if what == "sweep" else
                   chain(session, lake, args[1]) if what == "chain" else two_runs(session, lake, args[1]))
    finally:
        session.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
