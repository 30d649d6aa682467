"""State points: any checkpoint or savepoint, found and read the same way (what restore, savepoint and the
State Processor share).

A savepoint is found by its ``_metadata.json`` (``load_savepoint``); a checkpoint by its job's catalog
(``JobStore``). ``StatePoint`` reads either one's live entries as a DataFrame and names the damage that would
make it unreadable. Nothing Spark is imported until a point is read, so listing savepoints (the CLI, the
Airflow plugin) stays light.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..catalog.job_store import JobStore, read_json
from ..errors import ConfigError
from ..records.layout import KEYED, TABLE_SPECS
from ..records.metadata import CheckpointMetadata, RestoredFrom, SavepointMetadata, TableVersion
from ..settings import Settings
from ..state.backend import backend_kind
from ..storage import ObjectPath

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

METADATA = "_metadata.json"  # a savepoint's metadata file, written last: a savepoint exists once it does


@dataclass
class StatePoint:
    """A checkpoint (of this job or another) or a savepoint: what a restore, a savepoint or a reader starts from.

    Example::

        StatePoint.of_savepoint(settings, "clicks/before-v2").rows(spark, "keyed")
        StatePoint.of_checkpoint(settings, "clicks").describe()   # RestoredFrom("clicks", 7)
    """

    meta: CheckpointMetadata | SavepointMetadata
    job_dir: Path | None = None  # a checkpoint's job folder

    @classmethod
    def of_checkpoint(cls, settings: Settings, job_id: str, checkpoint_id: int | None = None) -> "StatePoint":
        """Retained checkpoint ``checkpoint_id`` of ``job_id`` (default: its latest)."""
        meta = JobStore(settings.job_dir(job_id))
        checkpoint = meta.checkpoint(checkpoint_id) if checkpoint_id is not None else meta.latest_checkpoint()
        if checkpoint is None:
            raise ConfigError(f"job {job_id!r} has no checkpoint to restore from; run it first")
        return cls(checkpoint, settings.job_dir(job_id))

    @classmethod
    def of_savepoint(cls, settings: Settings, ref: str) -> "StatePoint":
        """The savepoint at ``ref`` ('<job>/<name>' or a path under the savepoint root)."""
        return cls(load_savepoint(settings, ref))

    @property
    def uids(self) -> list[str]:
        """The operators whose state the point holds: its first, then a dataflow's later ones."""
        return [self.meta.uid] + sorted(self.meta.operators or {})

    def operator(self, uid: str) -> "StatePoint | None":
        """The point's part of operator ``uid`` (a dataflow's later operators keep their tables in folders of their
        own); None when it holds no state of ``uid``."""
        meta = self.meta.of_operator(uid)
        if meta is None:
            return None
        if self.is_savepoint or uid == self.meta.uid:
            return StatePoint(meta, self.job_dir)
        return StatePoint(meta, JobStore(self.job_dir).operator_dir(uid))

    @property
    def is_savepoint(self) -> bool:
        return isinstance(self.meta, SavepointMetadata)

    @property
    def where(self) -> str:
        """The point in words, for messages."""
        if self.is_savepoint:
            return f"savepoint {self.meta.path}"
        return f"checkpoint {self.meta.checkpoint_id} of job {self.meta.job_id!r}"

    def describe(self) -> RestoredFrom:
        """The point as a checkpoint's ``restored_from`` records it."""
        return RestoredFrom(self.meta.job_id, self.meta.checkpoint_id,
                            self.meta.path if self.is_savepoint else None)

    def damage(self, spark: "SparkSession") -> list[str]:
        """What is missing or corrupt among the Delta log entries and files the point pins (empty: intact)."""
        from .backends import point_damage

        damage = point_damage(spark, self.meta, self.job_dir)
        for uid in self.uids[1:]:
            part = self.operator(uid)
            damage += [f"operator {uid}: {d}" for d in point_damage(spark, part.meta, part.job_dir)]
        return damage

    def rows(self, spark: "SparkSession", table: str) -> "DataFrame":
        """The live entries of state table ``table`` (``records.KEYED`` or ``records.OPERATOR``) of the point's first
        operator (a dataflow's others: ``operator(uid).rows(...)``)."""
        from .backends import create_keyed_backend, create_operator_backend

        spec = TABLE_SPECS[table]
        if self.is_savepoint:
            df = spark.read.format("delta").load(self.meta.table_path(table))
        else:
            create = create_keyed_backend if table == KEYED else create_operator_backend
            df = create(self.meta.backend, spark, self.job_dir, self.meta.job_id, self.meta).read(self.meta)
        return df.select(*spec.columns)

    def rows_in_process(self, table: str):
        """``rows`` read and selected by this process with Arrow, no Spark job (``live_arrow.read_live``), for a
        checkpoint whose table is small and local; None where ``rows`` must read it."""
        from .live_arrow import read_live

        if self.is_savepoint or not backend_kind(self.meta.backend).readable_in_process:
            return None
        recorded = self.meta.table(table)
        if not recorded.path or recorded.version is None:
            return None
        return read_live(recorded.path, recorded.version, TABLE_SPECS[table], self.meta.batch_id,
                         recorded.generations)


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
