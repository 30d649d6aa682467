"""One run of a job at a time: a lease held through numbered generation files.

    <job>/_meta/lease/<generation>.json   {"run_id", "host", "pid", "heartbeat_ms", "timeout_s", "released"}

The holder is the run whose file has the highest generation and is not
released. A run takes the lease by creating generation ``g + 1`` (``g`` the
highest present, 0 when none) with an exclusive create (``os.link`` of a
complete file: it fails if the name exists). That create is the
compare-and-swap: of any number of runs that saw the same generation ``g`` as
free or stale, exactly one creates ``g + 1``; the others get ``FileExistsError``
and are refused. A run that created a generation below the highest one (it
was slow, and older files had been pruned) withdraws.

A held lease is stale when its process is gone (same host) or its heartbeat is
older than *its holder's* ``timeout_s``: the newcomer's timeout never decides
whether a live run is taken over. The holder renews its heartbeat in the
background and stops writing as soon as a higher generation appears.
Releasing marks the file released instead of deleting it, so generations only
grow and a slow taker can never recreate a generation that was already used.

A reservation (``reserve``) is a generation taken the same way for a holder to
come: Airflow's lease sensor takes one when the job is free and the task after
it, whose ``lakestate`` command names it in ``$LAKESTATE_LEASE_HANDOFF``, takes
the job over from it (its heir). Meanwhile every other taker, and every other
sensor, finds the job held: there is no moment between the sensor's "free" and
the command's JVM start when a second driver can get in. A reservation has no
process to watch (the sensor's task has ended): it holds until its own timeout,
or until it is handed over or released.

Sensors that find the job held wait in a line (``join_line``: ``waiting-*.json`` beside the generations), and
a sensor reserves only when no waiter joined before it (``ahead_in_line``): first come, first served, so a
compaction or savepoint is not starved by pipeline runs triggered back to back.

On object storage the same protocol needs only put-if-absent (S3 conditional
writes with ``If-None-Match: *``, GCS ``ifGenerationMatch=0``, Azure
``If-None-Match: *``) and a listing; README's "The single-writer fence" says so.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from .. import storage
from ..errors import ConfigError, JobLocked
from ..progress import wing_logger
from .job_store import JobStore, read_json

_SAY = wing_logger(__name__).info  # what it says it does, unless given a say of its own (``progress``)

KEEP_GENERATIONS = 2  # the holder's file and the one before it; older ones are pruned on acquire
HANDOFF_ENV = "LAKESTATE_LEASE_HANDOFF"  # the reservation a command takes the job over from (Airflow's sensor's)


def check_lease_timeout(timeout_s: float) -> float:
    if not timeout_s > 0:  # also refuses NaN
        raise ConfigError(f"lease timeout {timeout_s!r} s is not usable: give a number of seconds above 0 "
                          f"(default 60); it is how long this run's silence must last before another run "
                          f"may take it over")
    return float(timeout_s)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed process not yet reaped by its parent (a zombie) is dead too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return True


def generations(directory: Path) -> list[int]:
    """The generation numbers present, lowest first."""
    try:
        names = storage.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())


def generation_path(directory: Path, generation: int) -> Path:
    return directory / f"{generation:012d}.json"


def current_holder(directory: Path) -> dict | None:
    """The record of the highest generation, or None when there is none; ``{}`` if it cannot be read."""
    gens = generations(directory)
    if not gens:
        return None
    try:
        return read_json(generation_path(directory, gens[-1]))
    except (ValueError, OSError):
        return {}


def stale_reason(holder: dict, host: str) -> str | None:
    """Why the lease ``holder`` (a generation's record) no longer holds, as judged on ``host``; None while it does."""
    if holder.get("released"):
        return None
    if not holder.get("reserved") and holder.get("host") == host and not _pid_alive(int(holder.get("pid", -1))):
        return f"its process {holder.get('pid')} is gone"
    # The holder's own timeout decides, so a newcomer cannot shorten it; a record without one
    # (written before timeouts were recorded) gets the default.
    timeout = holder.get("timeout_s")
    timeout = float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else 60.0
    age = time.time() - holder.get("heartbeat_ms", 0) / 1000
    if age > timeout:
        return f"its last heartbeat was {age:.0f}s ago (its lease timeout {timeout:.0f}s)"
    return None


def live_holder(directory: Path) -> dict | None:
    """The record of the run that holds the job now (neither released nor stale), or None."""
    holder = current_holder(directory)
    if not holder or holder.get("released") or stale_reason(holder, socket.gethostname()):
        return None
    return holder


def first_run_note(directory: Path) -> str:
    """The fix for "this job has no checkpoint yet": the run holding it (lease at ``directory``), whose first
    checkpoint is still to come, when one does; else "run it first"."""
    holder = live_holder(directory)
    if not holder:
        return "run it first"
    return (f"its first run, {holder.get('run_id')} (pid {holder.get('pid')} on {holder.get('host')}), holds the "
            f"job now: wait for it to finish, then try again")


def owner_record(directory: Path) -> dict:
    """Who writes something on behalf of a job (a savepoint): this process, and the run holding the job's lease
    at ``directory`` when that run is this process's. ``still_at_work`` judges it later, from any host."""
    holder, host, pid = current_holder(directory) or {}, socket.gethostname(), os.getpid()
    ours = holder.get("host") == host and holder.get("pid") == pid and not holder.get("released")
    return {"host": host, "pid": pid, "run_id": holder.get("run_id") if ours else None}


def still_at_work(owner: dict | None, directory: Path) -> bool:
    """Whether the writer ``owner`` (``owner_record``) may still be at work: on this host, while its process
    lives; on another, while its run holds the job's lease at ``directory`` and is not stale. Without a record
    (an older release's, or one cut short before it wrote it), while any live run holds the job. A writer on
    another host that held no lease cannot be judged from here: it counts as at work."""
    if owner is None:
        return live_holder(directory) is not None
    if owner.get("host") == socket.gethostname():
        return _pid_alive(int(owner.get("pid", -1)))
    if owner.get("run_id") is None:
        return True
    holder = live_holder(directory)
    return holder is not None and holder.get("run_id") == owner["run_id"]


class JobLease:
    def __init__(self, directory: Path, job_id: str, timeout_s: float = 60.0, run_id: str | None = None):
        self.dir, self.job_id, self.timeout_s = storage.location(directory), job_id, check_lease_timeout(timeout_s)
        self.run_id = run_id or f"run-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.generation: int | None = None
        self._stop = threading.Event()
        self._beater: threading.Thread | None = None
        self._lost: str | None = None
        self._write_lock = threading.Lock()
        self._acquired = 0

    @property
    def held(self) -> bool:
        return self.generation is not None

    @property
    def path(self) -> Path:
        """This run's generation file (only while held)."""
        assert self.generation is not None
        return generation_path(self.dir, self.generation)

    def _record(self, released: bool = False) -> dict:
        return {"run_id": self.run_id, "host": self.host, "pid": self.pid, "heartbeat_ms": int(time.time() * 1000),
                "acquired_ms": self._acquired, "timeout_s": self.timeout_s, "released": released}

    def _write(self, path, record: dict, exclusive: bool) -> None:
        """Write a complete file under `path`: exclusively (fails if it exists) or replacing it."""
        text = json.dumps(record)
        if exclusive:
            storage.create_exclusive(path, text)
        else:
            storage.write_atomic(path, text)

    def acquire(self, say=_SAY, heir_of: str | None = None) -> "JobLease":
        """Take the lease or raise JobLocked; a takeover of a crashed or silent holder is told to ``say`` (the
        caller's progress callback, which names the job). The heir of reservation ``heir_of`` takes the job over
        from it while it holds."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self._acquired = int(time.time() * 1000)
        gens = generations(self.dir)
        seen = gens[-1] if gens else 0
        holder = current_holder(self.dir) if gens else None
        takeover = None
        if holder is not None and not holder.get("released"):
            takeover = stale_reason(holder, self.host) if holder else "its lease file is unreadable"
            if takeover is None and heir_of is not None and holder.get("reserved") and holder.get("run_id") == heir_of:
                takeover = "it was reserved for this run"
            if takeover is None:
                age = time.time() - holder.get("heartbeat_ms", 0) / 1000
                raise JobLocked(
                    f"job {self.job_id!r} is held by run {holder.get('run_id')} (pid {holder.get('pid')} on "
                    f"{holder.get('host')}, heartbeat {age:.0f}s ago, its lease timeout "
                    f"{holder.get('timeout_s', 60):.0f}s); wait for it to finish, or if it crashed, retry once "
                    f"its heartbeat is older than that timeout")
        mine = seen + 1
        try:
            self._write(generation_path(self.dir, mine), self._record(), exclusive=True)
        except FileExistsError:
            raise JobLocked(f"job {self.job_id!r} was taken by another run at the same moment; retry") from None
        if generations(self.dir)[-1] != mine:  # a slow taker of a generation already pruned: withdraw
            generation_path(self.dir, mine).unlink(missing_ok=True)
            raise JobLocked(f"job {self.job_id!r} was taken by another run at the same moment; retry")
        self.generation = mine
        if takeover:
            say(f"taking over from run {holder.get('run_id')}: {takeover}")
        for old in generations(self.dir):
            if old < mine - (KEEP_GENERATIONS - 1):
                generation_path(self.dir, old).unlink(missing_ok=True)
        # Heartbeats go on in the background, so a long microbatch never looks like a crash.
        self._stop.clear()
        self._lost = None
        self._beater = threading.Thread(target=self._beat, name=f"lease-{self.job_id}", daemon=True)
        self._beater.start()
        return self

    def acquire_waiting(self, wait_s: float, say=_SAY, heir_of: str | None = None) -> "JobLease":
        """Take the lease; while another run holds it, wait up to ``wait_s`` seconds (a second trigger of a
        pipeline, a savepoint or a rescale waits for the run in progress, it does not fail)."""
        deadline, said = time.time() + wait_s, False
        while True:
            try:
                return self.acquire(say, heir_of)
            except JobLocked as e:
                if time.time() >= deadline:
                    raise
                if not said:
                    say(f"waiting up to {wait_s:.0f}s for the job to be free: {e}")
                    said = True
                time.sleep(min(2.0, max(0.1, deadline - time.time())))

    def _beat(self) -> None:
        while not self._stop.wait(max(0.5, self.timeout_s / 4)):
            try:
                self._renew()
            except JobLocked as e:
                self._lost = str(e)
                return
            except OSError:
                pass  # a missed beat is retried; the timeout allows for several

    def _check_still_holder(self) -> None:
        latest = generations(self.dir)
        if not latest or latest[-1] != self.generation:
            newer = current_holder(self.dir) or {}
            raise JobLocked(f"run {self.run_id} lost job {self.job_id!r} to run {newer.get('run_id')}; stopping")

    def _renew(self) -> None:
        with self._write_lock:
            if self.generation is None:
                return
            self._check_still_holder()
            self._write(self.path, self._record(), exclusive=False)

    def heartbeat(self) -> None:
        """Renew now; raise JobLocked if another run has taken the job."""
        if self._lost:
            raise JobLocked(self._lost)
        self._renew()

    def release(self) -> None:
        self._stop.set()
        if self._beater is not None:
            self._beater.join(5)
            self._beater = None
        with self._write_lock:
            if self.generation is not None:
                try:
                    self._check_still_holder()
                    self._write(self.path, self._record(released=True), exclusive=False)
                except (JobLocked, OSError):
                    pass  # taken over meanwhile: the newer holder's file stands
                self.generation = None

    def __enter__(self) -> "JobLease":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def remove_if_only_the_lease(job_dir: Path, lease_dir: Path) -> None:
    """Remove a job folder that holds nothing but its lease (a refused first run, savepoint or restore of a
    job that did not exist leaves no folder), unless a live run holds the job (it may not have written yet)."""
    holder = current_holder(lease_dir)
    if holder is not None and not holder.get("released"):
        return
    if not any(p.is_file() and lease_dir not in p.parents for p in job_dir.rglob("*")):
        storage.rmtree(job_dir, ignore_errors=True)


def reserve(directory: Path, job_id: str, run_id: str, timeout_s: float) -> None:
    """Take job ``job_id``'s lease at ``directory`` for a holder to come (``run_id``, its heir's
    ``$LAKESTATE_LEASE_HANDOFF``), for up to ``timeout_s`` seconds; raise JobLocked while another holds it. No
    heartbeat: it holds until handed over, released (``release_reservation``) or past its timeout. Taking it
    again under the same ``run_id`` while it holds is a no-op (a sensor's retry)."""
    directory, timeout_s = storage.location(directory), check_lease_timeout(timeout_s)
    gens = generations(directory)  # first: the generation judged is the one the exclusive create follows
    seen = gens[-1] if gens else 0
    holder = current_holder(directory) if gens else None
    if holder and not holder.get("released") and not stale_reason(holder, socket.gethostname()):
        if holder.get("reserved") and holder.get("run_id") == run_id:
            return
        raise JobLocked(f"job {job_id!r} is held by run {holder.get('run_id')}")
    now = int(time.time() * 1000)
    record = {"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid(), "heartbeat_ms": now,
              "acquired_ms": now, "timeout_s": timeout_s, "released": False, "reserved": True}
    directory.mkdir(parents=True, exist_ok=True)
    try:
        storage.create_exclusive(generation_path(directory, seen + 1), json.dumps(record))
    except FileExistsError:
        raise JobLocked(f"job {job_id!r} was taken by another run at the same moment") from None
    if generations(directory)[-1] != seen + 1:  # a slow taker of a generation already pruned: withdraw
        generation_path(directory, seen + 1).unlink(missing_ok=True)
        raise JobLocked(f"job {job_id!r} was taken by another run at the same moment")


def _line_path(directory: Path, run_id: str) -> Path:
    return directory / f"waiting-{hashlib.sha1(run_id.encode()).hexdigest()[:16]}.json"


def ahead_in_line(directory: Path, run_id: str, stale_s: float) -> list[dict]:
    """The waiters ahead of ``run_id`` in the job's line (``join_line``): those that joined before it (all of
    them, while it has not joined), first first. A waiter not seen for ``stale_s`` seconds (its sensor ended)
    leaves the line. The line orders Airflow's sensors only: a waiting operation is not starved by pipeline
    runs triggered back to back, each of which would otherwise find the job free first."""
    directory, now = storage.location(directory), int(time.time() * 1000)
    try:
        names = [n for n in storage.listdir(directory) if n.startswith("waiting-")]
    except FileNotFoundError:
        return []
    line = []
    for name in names:
        try:
            record = read_json(directory / name)
        except (ValueError, OSError):  # left by then, or half written on a store without atomic writes
            continue
        if now - record["seen_ms"] > stale_s * 1000:
            (directory / name).unlink(missing_ok=True)
        else:
            line.append(record)
    line.sort(key=lambda r: (r["since_ms"], r["run_id"]))
    mine = next((r for r in line if r["run_id"] == run_id), None)
    return [r for r in line if r["run_id"] != run_id
            and (mine is None or (r["since_ms"], r["run_id"]) < (mine["since_ms"], mine["run_id"]))]


def join_line(directory: Path, run_id: str) -> None:
    """Join the job's line of waiters as ``run_id``, or say it is still waiting (its place is kept)."""
    directory, now = storage.location(directory), int(time.time() * 1000)
    path = _line_path(directory, run_id)
    try:
        since = read_json(path)["since_ms"]
    except (ValueError, OSError, KeyError):
        since = now
    directory.mkdir(parents=True, exist_ok=True)
    storage.write_atomic(path, json.dumps({"run_id": run_id, "since_ms": since, "seen_ms": now}))


def leave_line(directory: Path, run_id: str) -> None:
    _line_path(storage.location(directory), run_id).unlink(missing_ok=True)


def release_reservation(directory: Path, run_id: str) -> bool:
    """Release reservation ``run_id`` if it still holds the job (its heir never took it over: the task failed,
    or had nothing to do); whether it did."""
    directory = storage.location(directory)
    gens = generations(directory)
    holder = current_holder(directory)
    if not gens or not holder or not holder.get("reserved") or holder.get("run_id") != run_id \
            or holder.get("released"):
        return False
    storage.write_atomic(generation_path(directory, gens[-1]), json.dumps({**holder, "released": True}))
    return True


@contextmanager
def holding(job_dir: Path, job_id: str, purpose: str, wait_s: float = 0.0, say=_SAY, timeout_s: float = 60.0):
    """Hold job ``job_id`` for ``purpose`` (a run, a savepoint, a restore, a compaction): wait up to ``wait_s``
    for the holder to finish; yields the lease (its ``run_id`` is ``<purpose>-<time>-<random>``); a job folder
    this created and left empty is removed afterwards (a refused first run leaves no folder). The reservation
    ``$LAKESTATE_LEASE_HANDOFF`` names (Airflow's lease sensor's for this task), while it holds, is taken over
    at once."""
    existed = job_dir.exists()
    lease = JobLease(JobStore(job_dir).lease_dir, job_id, timeout_s,
                     run_id=f"{purpose}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}")
    lease.acquire_waiting(wait_s, lambda m: say(f"[lakestate] job {job_id}: {m}"),
                          heir_of=os.environ.get(HANDOFF_ENV) or None)
    try:
        yield lease
    finally:
        lease.release()
        if not existed:
            remove_if_only_the_lease(job_dir, lease.dir)
