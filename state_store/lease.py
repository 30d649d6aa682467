"""One run of a job at a time: a lease file with the holder's identity and heartbeat.

A second run is refused with an error naming the holder. A holder that
crashed leaves a stale lease: one whose process is gone (same host) or whose
heartbeat is older than the lease timeout is taken over.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

from .catalog import read_json
from .errors import JobLocked


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


class JobLease:
    def __init__(self, path: Path, job_id: str, timeout_s: float = 60.0, run_id: str | None = None):
        self.path, self.job_id, self.timeout_s = path, job_id, timeout_s
        self.run_id = run_id or f"run-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.held = False
        self._stop = threading.Event()
        self._beater: threading.Thread | None = None
        self._lost: str | None = None
        self._write_lock = threading.Lock()

    def _record(self) -> dict:
        now = int(time.time() * 1000)
        return {"run_id": self.run_id, "host": self.host, "pid": self.pid, "heartbeat_ms": now,
                "acquired_ms": getattr(self, "_acquired", now)}

    def _stale_reason(self, holder: dict) -> str | None:
        if holder.get("host") == self.host and not _pid_alive(int(holder.get("pid", -1))):
            return f"its process {holder.get('pid')} is gone"
        age = time.time() - holder.get("heartbeat_ms", 0) / 1000
        if age > self.timeout_s:
            return f"its last heartbeat was {age:.0f}s ago (lease timeout {self.timeout_s:.0f}s)"
        return None

    def acquire(self) -> "JobLease":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._acquired = int(time.time() * 1000)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            with os.fdopen(fd, "w") as f:
                json.dump(self._record(), f)
        except FileExistsError:
            try:
                holder = read_json(self.path)
            except (ValueError, FileNotFoundError):
                holder = {}
            reason = self._stale_reason(holder) if holder else "its lease file is unreadable"
            if reason is None:
                raise JobLocked(
                    f"job {self.job_id!r} is held by run {holder.get('run_id')} (pid {holder.get('pid')} on "
                    f"{holder.get('host')}, heartbeat {time.time() - holder.get('heartbeat_ms', 0) / 1000:.0f}s ago); "
                    f"wait for it to finish, or if it crashed, retry after the {self.timeout_s:.0f}s lease timeout"
                ) from None
            # Take over a crashed holder: replace, then check that we won against another taker.
            tmp = self.path.with_name(f".{self.path.name}.{self.run_id}")
            tmp.write_text(json.dumps(self._record()))
            os.replace(tmp, self.path)
            print(f"[lakestate] taking over job {self.job_id!r} from run {holder.get('run_id')}: {reason}")
        if read_json(self.path).get("run_id") != self.run_id:
            raise JobLocked(f"job {self.job_id!r} was taken by another run at the same moment; retry")
        self.held = True
        # Heartbeats go on in the background, so a long microbatch never looks like a crash.
        self._stop.clear()
        self._beater = threading.Thread(target=self._beat, name=f"lease-{self.job_id}", daemon=True)
        self._beater.start()
        return self

    def _beat(self) -> None:
        while not self._stop.wait(max(0.5, self.timeout_s / 4)):
            try:
                self._renew()
            except JobLocked as e:
                self._lost = str(e)
                return
            except OSError:
                pass  # a missed beat is retried; the timeout allows for several

    def _renew(self) -> None:
        with self._write_lock:
            holder = read_json(self.path)
            if holder.get("run_id") != self.run_id:
                raise JobLocked(f"run {self.run_id} lost job {self.job_id!r} to run {holder.get('run_id')}; stopping")
            tmp = self.path.with_name(f".{self.path.name}.{self.run_id}")
            tmp.write_text(json.dumps(self._record()))
            os.replace(tmp, self.path)

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
        if self.held:
            try:
                if read_json(self.path).get("run_id") == self.run_id:
                    self.path.unlink()
            except FileNotFoundError:
                pass
            self.held = False

    def __enter__(self) -> "JobLease":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
