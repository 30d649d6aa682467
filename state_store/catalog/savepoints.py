"""The savepoint root's folders: ``SavepointStore``, the twin of ``JobStore`` for savepoints.

    <savepoint root>/<job>/<name>/                 a complete savepoint: its tables and ``_metadata.json``
    <savepoint root>/<job>/.inprogress-<name>-<id>/ one being written (locally; renamed into place when complete)

A savepoint exists once its ``_metadata.json`` does (written last). The folder being written first records its
writer (``_owner.json``), so what a killed writer leaves is removed (``remove_abandoned``) once no live process
owns it. On object storage (no rename) a savepoint is written in place, and lists only once its metadata is
there. What a savepoint holds (which rows, which fields) is ``ops/savepoint``'s; finding, listing, writing the
folder and disposing it are here.
"""
from __future__ import annotations

import json
import uuid
from pathlib import Path

from ..errors import ConfigError
from ..progress import wing_logger
from ..records.metadata import SavepointMetadata, TableVersion
from ..settings import Settings
from ..storage import ObjectPath, location, rmtree, write_atomic
from .job_store import JobStore, read_json, write_json_atomic
from .lease import owner_record, still_at_work

_SAY = wing_logger(__name__).info  # what it says it does, unless given a say of its own (``progress``)

METADATA = "_metadata.json"  # a savepoint's metadata file, written last: a savepoint exists once it does
OWNER = "_owner.json"  # who writes a savepoint in progress (``lease.owner_record``); removed once it is complete


class SavepointStore:
    """The savepoints of job ``job_id`` under the savepoint root of ``settings``: their folders, written,
    found, listed and disposed here alone.

    Example::

        store = SavepointStore(settings, "clicks")
        work = store.begin("before-v2")           # the folder to write the tables into
        store.publish(work, "before-v2", meta)    # its metadata, last; then it is a savepoint
        [s.name for s in list_savepoints(settings, "clicks")]   # ["before-v2"]
    """

    def __init__(self, settings: Settings, job_id: str):
        self.settings, self.job_id = settings, job_id
        self.folder = settings.savepoints / job_id

    def path(self, name: str) -> Path | ObjectPath:
        """Where savepoint ``name`` of the job is (inside the savepoint root)."""
        return self.settings.in_savepoints(Path(self.job_id) / name)

    def begin(self, name: str, say=_SAY) -> Path | ObjectPath:
        """The folder savepoint ``name`` is written in, its writer recorded: a hidden ``.inprogress-*`` folder
        renamed by ``publish`` (on object storage the savepoint's own folder). Refuses, before anything is
        written, a name taken (by a savepoint, or a folder one left incomplete) and a root it cannot write;
        removes what killed writers left first."""
        final = self.path(name)
        self.settings.check_savepoints_writable(final.parent)
        self.remove_abandoned(say)
        if final.exists() and not (final / METADATA).exists():
            raise ConfigError(f"{final} holds an incomplete savepoint (no {METADATA}): one being written now, what "
                              f"a writer left that cannot be judged dead from here, or a dispose cut short; give "
                              f"another --label, or delete that folder once nothing writes it")
        if final.exists():
            raise ConfigError(f"a savepoint named {name!r} of job {self.job_id!r} already exists at {final}: give "
                              f"another --label, or dispose it first (lakestate dispose {self.job_id}/{name})")
        work = final if isinstance(final, ObjectPath) else final.parent / f".inprogress-{name}-{uuid.uuid4().hex[:8]}"
        try:  # first: from now on housekeeping, here or on another host, leaves the folder alone while it lives
            write_atomic(work / OWNER, json.dumps(owner_record(self._lease_dir)))
        except BaseException:
            self.abandon(work)
            raise
        return work

    def publish(self, work: Path | ObjectPath, name: str, savepoint: SavepointMetadata) -> SavepointMetadata:
        """Make what was written in ``work`` (``begin``'s) savepoint ``name``: its metadata last, then (locally)
        the rename into place; ``savepoint.path`` is set to where it is."""
        final = self.path(name)
        write_json_atomic(work / METADATA, savepoint.to_dict())  # last: complete only with it
        if work != final:
            work.rename(final)
        (final / OWNER).unlink(missing_ok=True)
        savepoint.path = str(final)
        return savepoint

    @staticmethod
    def abandon(work: Path | ObjectPath) -> None:
        """Remove a folder ``begin`` gave whose savepoint failed: a savepoint half-written never looks like one."""
        rmtree(work, ignore_errors=True)

    def remove_abandoned(self, say=_SAY) -> list[str]:
        """Delete what savepoints of the job that were cut short (killed) left: the folders of writes that no
        live process is at (``lease.still_at_work``); return their names. Housekeeping and every savepoint call
        it."""
        removed = []
        for work in sorted(self.folder.iterdir()) if self.folder.is_dir() else []:
            if _in_progress(work) and not still_at_work(_owner(work), self._lease_dir):
                rmtree(work, ignore_errors=True)
                removed.append(work.name)
        if removed:
            say(f"[lakestate] job {self.job_id}: removed savepoint folders that no live process is writing: "
                f"{', '.join(removed)}")
        return removed

    @property
    def _lease_dir(self) -> Path:
        return JobStore(self.settings.job_dir(self.job_id)).lease_dir


def dispose_savepoint(settings: Settings, ref: str) -> SavepointMetadata:
    """Delete a savepoint (only a complete one inside the savepoint root; it need not be restorable)."""
    savepoint = load_savepoint(settings, ref, own_tables=False)
    path = location(savepoint.path)
    # The metadata goes first: a dispose cut short leaves something that no longer looks like a savepoint.
    (path / METADATA).unlink()
    rmtree(path)
    return savepoint


def load_savepoint(settings: Settings, ref: str, own_tables: bool = True) -> SavepointMetadata:
    """The savepoint at ``ref``: a path inside the savepoint root, or '<job>/<name>' under it; with
    ``own_tables``, refused when its metadata puts a table outside its folder."""
    path = settings.in_savepoints(ref)
    file = path / METADATA
    if not file.exists():
        known = ", ".join(f"{s.job_id}/{s.name}" for s in list_savepoints(settings)) or "none"
        raise ConfigError(f"no complete savepoint at {path} (no {METADATA}); savepoints: {known}")
    try:
        data = read_json(file)
        savepoint = SavepointMetadata.from_dict(data)
    except (ValueError, TypeError, KeyError) as e:
        raise ConfigError(f"savepoint {path}'s {METADATA} is corrupt ({type(e).__name__}: {e})") from None
    savepoint.path = str(path)
    _check_name(savepoint, settings, path, strict=own_tables)
    if own_tables:
        _check_tables_inside(savepoint, path)
    return savepoint


def list_savepoints(settings: Settings, job_id: str | None = None, warn=None) -> list[SavepointMetadata]:
    """Complete savepoints (of ``job_id``, or of every job), oldest first; ``warn`` is told of unreadable ones."""
    root = settings.savepoints
    jobs = [root / job_id] if job_id else (sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else [])
    found = []
    for job in jobs:
        if not job.is_dir():
            continue
        for folder in sorted(job.iterdir()):
            if folder.name.startswith(".") or not (folder / METADATA).exists():
                continue
            try:
                found.append(load_savepoint(settings, str(folder)))
            except ConfigError as e:
                if warn is not None:
                    warn(str(e))
    return sorted(found, key=lambda s: s.created_ms)


def _check_name(savepoint: SavepointMetadata, settings: Settings, folder, strict: bool) -> None:
    """A savepoint is named by its folder, ``<job>/<name>`` under the savepoint root: metadata naming another
    (a copied folder, an edited file) is refused where the savepoint would be restored or read (``strict``), and
    else (to dispose it, or ask about doing so) takes the folder's name, so what is deleted is that folder."""
    if folder.parent.parent != settings.savepoints:
        return  # a folder deeper in the root: no name to compare (``in_savepoints`` keeps it inside)
    job_id, name = folder.parent.name, folder.name
    if (savepoint.job_id, savepoint.name) == (job_id, name):
        return
    if strict:
        raise ConfigError(f"savepoint {folder}'s {METADATA} names savepoint {savepoint.job_id}/{savepoint.name}, "
                          f"not its folder's {job_id}/{name}: a savepoint is named by its folder; put back the "
                          f"{METADATA} it was written with (or the folder's name), or dispose it (lakestate "
                          f"dispose {job_id}/{name})")
    savepoint.job_id, savepoint.name = job_id, name


def _check_tables_inside(savepoint: SavepointMetadata, folder) -> None:
    """A savepoint restores from its own tables alone: metadata pointing elsewhere (a job's live table, edited
    in or left by a copy) would restore whatever that table holds now, with the savepoint's offsets."""
    for table, record in savepoint.tables.items():
        relative = str(record.path or "") if isinstance(record, TableVersion) else ""
        try:
            where = (folder / relative).resolve()
        except ValueError:  # on object storage: an absolute path, or another bucket
            where = relative
        if not isinstance(where, (Path, ObjectPath)) or where == folder or folder not in where.parents:
            raise ConfigError(f"savepoint {folder}'s {METADATA} puts its {table} table at {where}, outside the "
                              f"savepoint's folder: a savepoint's tables must be inside its own folder (it "
                              f"restores from them alone); put back the {METADATA} the savepoint was written "
                              f"with, or dispose it (lakestate dispose {savepoint.job_id}/{savepoint.name}) and "
                              f"take a new one")


def _in_progress(folder) -> bool:
    """A savepoint's folder while it is written: locally a hidden ``.inprogress-*`` folder renamed when
    complete; on object storage (no rename) the savepoint's own folder, until its metadata is there."""
    if isinstance(folder, ObjectPath):
        return folder.is_dir() and not (folder / METADATA).exists()
    return folder.name.startswith(".inprogress-") and folder.is_dir()


def _owner(folder) -> dict | None:
    try:
        return read_json(folder / OWNER)
    except (OSError, ValueError):
        return None
