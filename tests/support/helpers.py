"""Reading back what a job left: its sink rows and its state at a checkpoint. And the e2e tests' processes: each
started in a process group of its own that ends with the test (``process_group``, the ``process_groups``
fixture), waits that fail only when nothing advances (``wait_advancing``), and what a suite run left running
(``left_by_run``, scripts/test.sh's last step)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

import pytest

from state_store.catalog.job_store import JobStore
from state_store.delta.backends import create_keyed_backend, create_operator_backend
from state_store.run.runtime import JobRunner
from state_store.sinks import sink_name


@contextmanager
def environ(values: dict):
    """``os.environ`` with ``values`` set for the block, then each variable as it was (unset if it was)."""
    import os

    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


FIXED_CLOCK = lambda: 1_700_000_000_000  # noqa: E731  processing time the tests control


def run(spark, spec, lake, max_microbatches=None, max_records=None, **options):
    options.setdefault("clock", FIXED_CLOCK)
    options.setdefault("progress", lambda line: None)
    return JobRunner(spark, spec, lake.settings, **options).run(max_microbatches, max_records)


def sink_rows(spark, lake, spec, with_microbatch: bool = True) -> list[str]:
    path = lake.settings.in_warehouse(sink_name(spec.sink), "sink")
    df = spark.read.format("delta").load(str(path))
    if not with_microbatch:
        df = df.drop("_microbatch")
    return sorted(json.dumps(r.asDict(recursive=True), sort_keys=True) for r in df.collect())


def state_at_checkpoint(spark, lake, spec, checkpoint) -> tuple[list, list]:
    job_dir = lake.settings.job_dir(spec.job_id)
    keyed = create_keyed_backend(checkpoint.backend, spark, job_dir, spec.job_id).read(checkpoint)
    operator = create_operator_backend(checkpoint.backend, spark, job_dir, spec.job_id).read(checkpoint)
    k = sorted(tuple(r)
               for r in keyed.select("state_name", "key_group", "key", "namespace", "user_key", "value").collect())
    o = sorted(tuple(r) for r in operator.select("state_name", "subtask", "mode", "value").collect())
    return k, o


def state_at_latest_checkpoint(spark, lake, spec) -> tuple[list, list]:
    return state_at_checkpoint(spark, lake, spec, JobStore(lake.settings.job_dir(spec.job_id)).latest_checkpoint())


def crashed_and_moved(spark, tmp_path, job_of, job_id: str, crash_batch: int, saved_after: int):
    """The two runs issue 61's tests make of a job beside its clean run: one crashed after the sink write of
    microbatch ``crash_batch`` and run again, and one savepointed after ``saved_after`` microbatches, restored at
    parallelism 3 on the hashmap backend and run on. ``job_of(lake)`` makes the job (and writes its input) in a
    lake; returns the two lakes, "crashed" and "moved"."""
    from state_store.delta.points import StatePoint
    from state_store.ops.restore import restore_job
    from state_store.ops.savepoint import take_savepoint
    from state_store.run.runtime import FaultInjector, InjectedFault
    from tests.support.lake import Lake

    crashed, moved = Lake(tmp_path / "crashed"), Lake(tmp_path / "moved")
    try:
        run(spark, job_of(crashed), crashed, faults=FaultInjector("after_sink_write", batch_id=crash_batch))
        raise AssertionError(f"the fault after microbatch {crash_batch}'s sink write was not reached")
    except InjectedFault:
        pass
    run(spark, job_of(crashed), crashed)
    run(spark, job_of(moved), moved, max_microbatches=saved_after)
    saved = take_savepoint(spark, moved.settings, job_id, say=lambda line: None)
    restore_job(spark, moved.settings, job_of(moved), StatePoint(saved), parallelism=3, backend="hashmap",
                say=lambda line: None)
    run(spark, job_of(moved), moved)
    return crashed, moved


def keyed_values(keyed_rows, state_name: str) -> dict:
    """(key, namespace) -> value of a state; for MapState, (key, namespace, user key) -> value."""
    out = {}
    for name, _, key, ns, user_key, value in keyed_rows:
        if name == state_name:
            out[(key, ns) if user_key is None else (key, ns, json.loads(user_key))] = json.loads(value)
    return out


def write_holder(lease_dir, record: dict, generation: int = 1) -> None:
    """Make `record` the lease holder of a job (as a crashed or remote run would have left it)."""
    from state_store.catalog.lease import generation_path

    lease_dir.mkdir(parents=True, exist_ok=True)
    generation_path(lease_dir, generation).write_text(json.dumps(record))


def write_job_module(directory, module: str, lake, job_id: str, **overrides) -> None:
    """``<directory>/<module>.py`` with a factory ``job()`` building ``all_states_job`` over ``lake``'s inputs
    (with ``overrides``): what ``lakestate register <module>:job`` needs in another process."""
    extra = "".join(f", {k}={v!r}" for k, v in overrides.items())
    (directory / f"{module}.py").write_text(textwrap.dedent(f"""
        from pathlib import Path
        from tests.support.jobs import all_states_job

        class _Lake:
            events, rules = Path({str(lake.events)!r}), Path({str(lake.rules)!r})

        def job():
            return all_states_job(_Lake, job_id={job_id!r}{extra})
    """))


@contextmanager
def read_only(folder):
    """``folder`` on a read-only bind mount for the block: the tests run as root, so chmod would not stop a
    write, and a mount point is what a read-only volume is (removing it fails with EBUSY, as in production)."""
    import pytest

    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True, capture_output=True)
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def write_stored_values(spark, lake, job_id: str, state_name: str, texts: dict) -> None:
    """Something outside the job writes ``texts`` (key -> stored JSON text) as the values of ``state_name``'s
    keys in the job's keyed table, and points the latest checkpoint at that version, as a restore's write
    (a generation of its own, which the checkpoint lists) would."""
    from pyspark.sql import functions as F

    keyed = str(lake.settings.job_dir(job_id) / "state" / "keyed")
    value = F.col("value")
    for key, text in texts.items():
        value = F.when(F.col("key") == key, F.lit(text)).otherwise(value)
    (spark.read.format("delta").load(keyed)
     .filter((F.col("state_name") == state_name) & F.col("key").isin(list(texts)))
     .withColumn("value", value).withColumn("generation", F.lit(1).cast("bigint"))
     .write.format("delta").mode("append").save(keyed))
    meta = JobStore(lake.settings.job_dir(job_id))
    checkpoint = meta.latest_checkpoint()
    checkpoint.state["keyed"].version += 1
    checkpoint.state["keyed"].generations = [1]
    meta.write_checkpoint(checkpoint)


# --- Processes of the e2e tests ---------------------------------------------------------------------------------

RUN_MARK = "LAKESTATE_TEST_RUN"  # scripts/test.sh sets it in each pytest's environment: every process inherits it


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command (state, parent, group, session, ...), or None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _command(pid: int) -> str:
    with suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    return "?"


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def group_members(pgid: int) -> dict[int, str]:
    """The live (not zombie) processes of process group ``pgid``: pid -> start time (a pid used again is another
    process)."""
    found = {}
    for pid in _pids():
        fields = _stat(pid)
        if fields and fields[0] != "Z" and int(fields[2]) == pgid:
            found[pid] = fields[19]
    return found


def still_alive(processes: dict[int, str]) -> list[str]:
    """Those of ``processes`` (pid -> start time, from ``group_members``) that still run, as "pid command"."""
    return [f"{pid} {_command(pid)}" for pid, started in sorted(processes.items())
            if (fields := _stat(pid)) and fields[0] != "Z" and fields[19] == started]


def cpu_seconds(pids) -> float:
    """The CPU time (user and system, with that of their reaped children) of the live ones of ``pids``."""
    ticks = 0
    for pid in pids:
        if fields := _stat(pid):
            ticks += sum(int(f) for f in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def end_group(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    """End the process group ``process`` leads (started with ``start_new_session``) and all its members, however
    deep: SIGTERM, then SIGKILL for what still runs after ``grace_s`` (a JVM busy in GC, a shell that ignores
    TERM). The leader is reaped; members whose parent died are init's to reap."""
    pgid = process.pid
    with suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        process.poll()  # the leader, once dead, is a zombie until reaped: not a member
        if not group_members(pgid):
            break
        time.sleep(0.1)
    else:
        with suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        # A killed process runs until the scheduler gives it a slice to die in: on a loaded machine its state still
        # reads as running for a moment after the signal (a CI run saw three such members). Wait for the group.
        deadline = time.monotonic() + 30
        while group_members(pgid) and time.monotonic() < deadline:
            process.poll()
            time.sleep(0.05)
    with suppress(subprocess.TimeoutExpired):
        process.wait(30)


@contextmanager
def process_group(args, grace_s: float = 10.0, **popen):
    """``subprocess.Popen(args, **popen)`` in a session and process group of its own for the block, all of which
    ``end_group`` ends when the block ends, a failure's too: a failed test must not leave its ``airflow dags test``
    and the spark-submit under it running (issue 59 found them 37 minutes after the test)."""
    process = subprocess.Popen(args, start_new_session=True, **popen)
    try:
        yield process
    finally:
        end_group(process, grace_s)


def children() -> dict[int, str]:
    """This process's own children (started by any of its threads): pid -> start time."""
    found = {}
    for listing in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        with suppress(OSError):
            for pid in map(int, listing.read_text().split()):
                if (fields := _stat(pid)) and fields[0] != "Z":
                    found[pid] = fields[19]
    return found


END_GRACE_S = 10.0  # how long what a failed test left gets after SIGTERM (a JVM's shutdown hooks), before SIGKILL


def end_children_since(before: dict[int, str], grace_s: float | None = None) -> list[str]:
    """End this process's children that ``before`` (from ``children``) did not list, as "pid command": those
    leading a group of their own with the whole group, the others with their children at any depth (in this
    process's group, a group kill would end pytest too). SIGTERM, then SIGKILL after ``grace_s``."""
    new = {pid: started for pid, started in children().items() if before.get(pid) != started}
    if not new:
        return []
    stats = {pid: fields for pid in _pids() if (fields := _stat(pid)) and fields[0] != "Z"}
    groups = {pid for pid in new if int(stats.get(pid, [0, 0, 0])[2]) == pid}
    single = set(new) - groups
    while more := {pid for pid, fields in stats.items() if int(fields[1]) in single} - single:
        single |= more
    ended = [f"{pid} {_command(pid)}" for pid in sorted(groups | single)]
    members = {pid: stats[pid][19] for pid in single if pid in stats}
    for signal_, wait_s in ((signal.SIGTERM, END_GRACE_S if grace_s is None else grace_s), (signal.SIGKILL, 30)):
        for pgid in [g for g in groups if group_members(g)]:
            with suppress(ProcessLookupError):
                os.killpg(pgid, signal_)
        for pid in [int(line.split()[0]) for line in still_alive(members)]:
            with suppress(ProcessLookupError):
                os.kill(pid, signal_)
        deadline = time.monotonic() + wait_s
        while (any(group_members(g) for g in groups) or still_alive(members)) and time.monotonic() < deadline:
            time.sleep(0.1)
    return ended


class ProcessGroups:
    """What the ``process_groups`` fixture gives: ``start(args, **popen)``, a ``process_group`` that lasts until
    the test ends."""

    def __init__(self, stack: ExitStack):
        self._stack = stack

    def start(self, args, **popen) -> subprocess.Popen:
        return self._stack.enter_context(process_group(args, **popen))


@pytest.fixture
def process_groups():
    """Start a test's processes through this (``process_groups.start(args, **popen)``): each leads a process group
    of its own, ended with all its members when the test ends, passed or failed."""
    with ExitStack() as stack:
        yield ProcessGroups(stack)


class Stalled(AssertionError):
    """A wait saw nothing advance for its whole stall window."""


def wait_advancing(done, progress, what: str, stall_s: float = 300, ceiling_s: float = 1200,
                   every_s: float = 1.0):
    """``done()``'s first true value, asked every ``every_s`` while ``progress()`` (a snapshot of what should be
    moving: task states, log sizes, processes, CPU time in coarse steps) changes. It fails (``Stalled``) only
    once ``stall_s`` pass with the same snapshot, or at ``ceiling_s`` in all however it moves: on a loaded machine
    every step is slower, and a fixed deadline made the suite red there (issue 59); a stuck run still fails
    within a stall window, and nothing waits past the ceiling (the suite's budget is 30 minutes)."""
    started = changed = time.monotonic()
    seen = progress()
    while not (result := done()):
        now = time.monotonic()
        if (now_seen := progress()) != seen:
            seen, changed = now_seen, now
        if now - changed > stall_s:
            raise Stalled(f"{what}: nothing advanced in {stall_s:.0f} s (after {now - started:.0f} s; "
                          f"last seen: {seen!r})"[:4000])
        if now - started > ceiling_s:
            raise Stalled(f"{what}: not done in {ceiling_s:.0f} s, though it advanced (last seen: {seen!r})"[:4000])
        time.sleep(every_s)
    return result


def run_advancing(args, what: str, watch=(), stall_s: float = 120, ceiling_s: float = 600,
                  **popen) -> subprocess.CompletedProcess:
    """``subprocess.run(args, capture_output=True, text=True, **popen)``, waited for while it advances (its
    output and the files under ``watch`` grow, its session's processes use CPU, in 2 s steps) instead of for a
    fixed time. It leads a session of its own: on a stall or a failure of the test meanwhile, the whole group is
    ended; once it has exited by itself, what it started in the background (a script's daemons) is left as it
    would be by ``subprocess.run``."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lakestate-run-") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        with open(out, "w") as stdout, open(err, "w") as stderr:
            process = subprocess.Popen(args, start_new_session=True, stdout=stdout, stderr=stderr,
                                       stdin=subprocess.DEVNULL, text=True, **popen)
        try:
            wait_advancing(lambda: process.poll() is not None,
                           lambda: (file_sizes(out, err, *watch), int(cpu_seconds(group_members(process.pid)) // 2)),
                           what, stall_s=stall_s, ceiling_s=ceiling_s, every_s=0.2)
        except BaseException:
            end_group(process)
            raise
        return subprocess.CompletedProcess(args, process.returncode, out.read_text(), err.read_text())


def file_sizes(*paths) -> tuple:
    """(path, size) of each file at or under ``paths``: a snapshot for ``wait_advancing`` that changes as logs
    grow and files appear."""
    found = []
    for path in map(Path, paths):
        for file in ([path] if path.is_file() else sorted(path.rglob("*")) if path.is_dir() else []):
            with suppress(OSError):
                if file.is_file():
                    found.append((str(file), file.stat().st_size))
    return tuple(found)


def marked(pid: int, value: str) -> bool:
    """Whether process ``pid``'s environment has ``RUN_MARK=value``."""
    try:
        return f"{RUN_MARK}={value}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # gone, or another user's
        return False


def left_by_run(value: str, allowed=()) -> dict[int, str]:
    """The processes a run marked ``value`` left running (pid -> start time): those whose environment carries the
    mark, and their children at any depth (a process title can overwrite the environment /proc shows, as
    Airflow's LocalExecutor workers' does), but for ``allowed`` (substrings of a command line: what may outlive
    the suite by design) and their children."""
    stats = {pid: fields for pid in _pids() if (fields := _stat(pid)) and fields[0] != "Z"}
    found = {pid for pid in stats if marked(pid, value)}
    while more := {pid for pid, fields in stats.items() if int(fields[1]) in found} - found:
        found |= more
    spared = {pid for pid in found if any(a in _command(pid) for a in allowed)}
    while more := {pid for pid in found if int(stats[pid][1]) in spared} - spared:
        spared |= more
    return {pid: stats[pid][19] for pid in sorted(found - spared)}


def end_left_by_run(value: str, allowed=(), grace_s: float = 30.0) -> int:
    """scripts/test.sh's last step: 1 if processes the run marked ``value`` still run ``grace_s`` after both pytest
    sides ended (a JVM may take a few seconds to go), each printed and then killed, so a failed run does not
    leave them to the machine's next run; else 0."""
    deadline = time.monotonic() + grace_s
    while (left := left_by_run(value, allowed)) and time.monotonic() < deadline:
        time.sleep(1)
    if not left:
        print("[test] no process of the suite is left running")
        return 0
    print(f"[test] FAILED: the suite left {len(left)} process(es) running (killed now):")
    for line in still_alive(left):
        print(f"  {line[:300]}")
    for pid in left:
        with suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while still_alive(left) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in [int(line.split()[0]) for line in still_alive(left)]:
        with suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return 1


def maven_layout(folder: Path, jars: dict[str, bytes]) -> str:
    """A Maven repository of ``jars`` (file name -> bytes; Delta's, under io/delta/) as Maven Central serves
    them, each with its .sha1; its file:// URL."""
    import hashlib

    for name, data in jars.items():
        artifact, version = name[:-len(".jar")].rsplit("-", 1)
        path = folder / "io" / "delta" / artifact / version / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        (path.parent / (name + ".sha1")).write_text(hashlib.sha1(data).hexdigest() + "  " + name + "\n")
    return folder.as_uri()


def delta_rows(spark, lake, path: str, columns: list[str]) -> list[tuple]:
    """The rows of the warehouse's Delta table ``path``, as tuples of ``columns``, sorted (a multiset)."""
    df = spark.read.format("delta").load(str(lake.settings.in_warehouse(path, "sink")))
    return sorted((tuple(r) for r in df.select(*columns).collect()), key=repr)


def duckdb_rows(ddl: str, rows: list[tuple], query: str) -> list[tuple]:
    """DuckDB's answer to ``query`` (sorted, a multiset) over one table made by ``ddl`` (``CREATE TABLE t (...)``)
    holding ``rows``: an independent batch engine's expected result for a streaming job's."""
    import duckdb

    con = duckdb.connect()
    con.execute(ddl)
    if rows:
        con.executemany(f"INSERT INTO {ddl.split()[2]} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    return sorted(con.execute(query).fetchall(), key=repr)


def materialized(spark, lake, path: str, columns: list[str]) -> list[tuple]:
    """The rows a changelog table's changes leave (+I/+U add a row, -U/-D take one back; a table without
    ``_kind`` only inserts), as tuples of ``columns``, a sorted multiset."""
    from collections import Counter

    left = Counter()
    for row in spark.read.format("delta").load(str(lake.settings.in_warehouse(path, "sink"))).collect():
        kind = row["_kind"] if "_kind" in row.asDict() else "+I"
        left[tuple(row[c] for c in columns)] += 1 if kind in ("+I", "+U") else -1
    assert all(n >= 0 for n in left.values()), "a change retracted a row that was not there"
    return sorted((v for v, n in left.items() for _ in range(n)), key=repr)
