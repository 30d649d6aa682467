"""Where Lakestate keeps things, and the rule that every path stays inside.

``LAKESTATE_ROOT`` (default ``./lakestate-data``) is the configured root;
the warehouse (``LAKESTATE_WAREHOUSE``, default ``<root>/warehouse``) must lie
inside it, and every table Lakestate writes (state, sinks) lies inside the
warehouse. Savepoints go under the savepoint root (``LAKESTATE_SAVEPOINTS``,
default ``<root>/savepoints``), which may lie anywhere: savepoints outlive the
job's tables. Each may be a local folder or an ``s3a://bucket/folder`` on
S3-compatible storage (``storage``).

Under Airflow (a task's process, or the spark-submit it starts: both have Airflow's ``AIRFLOW_CTX_DAG_ID``)
each of them given must be absolute, and the root must be given: a relative one is relative to the worker's
folder, so a task and a ``lakestate`` command would keep two warehouses without a word.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError
from .storage import ObjectPath, check_bucket, is_remote, location


def _inside(path, root) -> bool:
    return path == root or root in path.parents


def _place(value) -> Path | ObjectPath:
    """A configured folder: ``s3a://...`` as it is, a local one expanded and made absolute."""
    return location(str(value)) if is_remote(str(value)) else Path(value).expanduser().resolve()


DEFAULT_ROOT = "lakestate-data"  # relative to the process's folder: refused under Airflow


def _refuse_relative_under_airflow(**given) -> None:
    """Under an Airflow task (and the spark-submit it starts, which inherits the variables Airflow's task runner
    exports), refuse a missing root or a relative root, warehouse or savepoint root: each would be resolved
    against the worker's folder, not where ``lakestate`` run by hand or the Lakestate page look."""
    dag_id = os.environ.get("AIRFLOW_CTX_DAG_ID")
    if not dag_id:
        return
    for what, value in given.items():
        if value is None and what != "root":
            continue  # the root's subfolder, as absolute as the root
        if value is not None and (is_remote(str(value)) or Path(value).expanduser().is_absolute()):
            continue
        variable = f"LAKESTATE_{what.upper()}"
        got = (f"{variable} is not set (the default {DEFAULT_ROOT!r} would be under the task's folder "
               f"{os.getcwd()})" if value is None else f"{what} {str(value)!r} is relative to the task's folder "
                                                         f"{os.getcwd()}")
        raise ConfigError(f"under Airflow (DAG {dag_id}) the Lakestate {what} must be an absolute folder or an "
                          f"s3a:// URL: {got}; set {variable}=/absolute/path (or pass an absolute --{what}) in the "
                          f"environment of Airflow's workers, the same one the `lakestate` commands use, so both use "
                          f"one warehouse")


@dataclass(frozen=True)
class Settings:
    """Where Lakestate keeps things (see the module docstring): the configured ``root``, the ``warehouse`` inside
    it and the ``savepoints`` root, each a local folder or an ``s3a://`` one. Made by ``Settings.load``."""

    root: Path | ObjectPath
    warehouse: Path | ObjectPath
    savepoints: Path | ObjectPath

    @classmethod
    def load(cls, warehouse: str | os.PathLike | None = None, root: str | os.PathLike | None = None,
             savepoints: str | os.PathLike | None = None) -> "Settings":
        """The settings from the arguments, else ``LAKESTATE_ROOT``, ``LAKESTATE_WAREHOUSE`` and
        ``LAKESTATE_SAVEPOINTS``, else the defaults (``./lakestate-data``, ``<root>/warehouse``,
        ``<root>/savepoints``); local folders made absolute. Raises ConfigError when the warehouse is outside the
        root, the warehouse and the savepoint root contain one another, one of them is a file, or (under Airflow)
        the root is not given or one given is relative.

        Example: ``Settings.load(root="/data/lakestate")``
        """
        _refuse_relative_under_airflow(root=root or os.environ.get("LAKESTATE_ROOT"),
                                       warehouse=warehouse or os.environ.get("LAKESTATE_WAREHOUSE"),
                                       savepoints=savepoints or os.environ.get("LAKESTATE_SAVEPOINTS"))
        root_path = _place(root or os.environ.get("LAKESTATE_ROOT") or DEFAULT_ROOT)
        wh_path = _place(warehouse or os.environ.get("LAKESTATE_WAREHOUSE") or root_path / "warehouse")
        if not _inside(wh_path, root_path):
            raise ConfigError(
                f"warehouse {wh_path} is outside the configured root {root_path}: "
                f"choose a warehouse under {root_path}, or set LAKESTATE_ROOT to a folder that contains it"
            )
        sp_path = _place(savepoints or os.environ.get("LAKESTATE_SAVEPOINTS") or root_path / "savepoints")
        if _inside(wh_path, sp_path) or _inside(sp_path, wh_path):
            raise ConfigError(f"the savepoint root {sp_path} and the warehouse {wh_path} must not contain one "
                              f"another (savepoints outlive the job's tables): point --savepoints or "
                              f"LAKESTATE_SAVEPOINTS elsewhere")
        for what, path, fix in (("root", root_path, "--root or LAKESTATE_ROOT"),
                                ("warehouse", wh_path, "--warehouse or LAKESTATE_WAREHOUSE"),
                                ("savepoint root", sp_path, "--savepoints or LAKESTATE_SAVEPOINTS")):
            if isinstance(path, ObjectPath):
                if path.is_file():
                    raise ConfigError(f"the {what} {path} is an object, not a folder: point {fix} at a folder")
            elif path.exists() and not path.is_dir():
                raise ConfigError(f"the {what} {path} is a file, not a folder: point {fix} at a folder "
                                  f"(it is created if missing)")
        return cls(root_path, wh_path, sp_path)

    def check_writable(self, sink: Path | ObjectPath | None = None) -> None:
        """Refuse, before anything is written, a warehouse that cannot be created or written to, and a ``sink``
        whose folder (or the nearest one that exists) this process cannot write."""
        if isinstance(self.warehouse, ObjectPath):
            check_bucket(self.warehouse, "warehouse", "point --warehouse or LAKESTATE_WAREHOUSE at another bucket")
        else:
            try:
                self.warehouse.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise ConfigError(f"cannot create the warehouse {self.warehouse}: {e.strerror}; choose a folder you "
                                  f"can write to (--warehouse or LAKESTATE_WAREHOUSE, under --root)") from None
            if not os.access(self.warehouse, os.W_OK | os.X_OK):
                raise ConfigError(f"the warehouse {self.warehouse} is not writable by this user: fix its "
                                  f"permissions or choose another folder (--warehouse or LAKESTATE_WAREHOUSE)")
        if sink is not None:  # checked once the warehouse is there: the sink's nearest existing folder may be it
            check_folder_writable(sink, "sink", "give the job a sink it can write (its `sink` field)")

    def in_warehouse(self, path: str | os.PathLike, what: str) -> Path | ObjectPath:
        """Resolve ``path`` (relative paths are under the warehouse) and refuse anything outside it."""
        p = location(path).expanduser()
        p = (p if p.is_absolute() else self.warehouse / p).resolve()
        if not _inside(p, self.warehouse) or p == self.warehouse:
            raise ConfigError(
                f"{what} {p} is outside the warehouse {self.warehouse}: give a path inside it "
                f"(a relative path such as 'sinks/my_job' is placed there)"
            )
        return p

    def sink(self, path: str | os.PathLike) -> Path | ObjectPath:
        """A job's sink (``in_warehouse``), refused inside the folders Lakestate keeps for itself: a sink there
        would be written over a job's state tables or the catalog, and a failed run's cleanup would delete
        their files."""
        p = self.in_warehouse(path, "sink")
        for reserved in (self.warehouse / "jobs", self.catalog_dir):
            if _inside(p, reserved):
                raise ConfigError(f"sink {p} is inside the warehouse's {reserved.name!r} folder, where Lakestate "
                                  f"keeps the jobs' state and catalog: give the sink its own folder, such as "
                                  f"'sinks/<job>'")
        return p

    def in_savepoints(self, path: str | os.PathLike) -> Path | ObjectPath:
        """Resolve a savepoint path (relative: under the savepoint root) and refuse anything outside it."""
        p = location(path).expanduser()
        p = (p if p.is_absolute() else self.savepoints / p).resolve()
        if not _inside(p, self.savepoints) or p == self.savepoints:
            raise ConfigError(f"savepoint {p} is outside the savepoint root {self.savepoints}: give a path inside "
                              f"it, or '<job>/<savepoint name>' as `lakestate savepoints` lists them")
        return p

    @property
    def on_object_storage(self) -> bool:
        """Whether the warehouse or the savepoint root is on ``s3a://`` (Spark then needs hadoop-aws)."""
        return isinstance(self.warehouse, ObjectPath) or isinstance(self.savepoints, ObjectPath)

    def check_savepoints_writable(self, folder: Path | ObjectPath) -> None:
        """Refuse, before anything is written, a savepoint ``folder`` this process cannot write."""
        check_folder_writable(folder, "savepoint root", "point --savepoints or LAKESTATE_SAVEPOINTS at a folder "
                                                        "you can write to", shown=self.savepoints)

    def job_dir(self, job_id: str) -> Path | ObjectPath:
        """Job ``job_id``'s folder, ``<warehouse>/jobs/<job_id>``: its metadata, lease and state tables."""
        return self.warehouse / "jobs" / job_id

    @property
    def catalog_dir(self) -> Path | ObjectPath:
        """The catalog's folder, ``<warehouse>/_lakestate`` (the registered jobs are under its ``jobs``)."""
        return self.warehouse / "_lakestate"


def check_folder_writable(folder: Path | ObjectPath, what: str, fix: str, shown=None) -> None:
    """Refuse ``folder`` (the ``what``, named as ``shown``) when its nearest existing folder cannot be written,
    before anything is written: a read-only volume otherwise fails deep inside Spark, or in the cleanup."""
    shown = shown or folder
    if isinstance(folder, ObjectPath):
        check_bucket(folder, what, fix)
        return
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if os.access(existing, os.W_OK | os.X_OK):
        return
    probe = os.statvfs(existing)
    why = ("on a read-only file system" if probe.f_flag & os.ST_RDONLY
           else "not writable by this user (its permissions or attributes)")
    raise ConfigError(f"the {what} {shown} cannot be written: its folder {existing} is {why}; {fix}")
