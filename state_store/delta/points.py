"""State points: any checkpoint or savepoint, found and read the same way (what restore, savepoint and the
State Processor share).

A savepoint is found by its ``_metadata.json`` (``catalog/savepoints.load_savepoint``); a checkpoint by its job's
catalog (``JobStore``). ``StatePoint`` reads either one's live entries as a DataFrame and names the damage that would
make it unreadable. Nothing Spark is imported until a point is read, so listing savepoints (the CLI, the
Airflow plugin) stays light.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..catalog.job_store import JobStore
from ..catalog.savepoints import load_savepoint
from ..errors import ConfigError
from ..records.layout import KEYED, TABLE_SPECS
from ..records.metadata import CheckpointMetadata, RestoredFrom, SavepointMetadata
from ..settings import Settings
from ..state.backend import backend_kind

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


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
        store = JobStore(settings.job_dir(job_id))
        checkpoint = store.checkpoint(checkpoint_id) if checkpoint_id is not None else store.latest_checkpoint()
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
        return self.meta.uids

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
        """``rows`` read and selected by this process with Arrow, no Spark job (``live_arrow.read_live``: a
        ``pyarrow.Table``, or for a larger table of small partitions an iterator of them), for a checkpoint or
        savepoint whose table is local; None where ``rows`` must read it."""
        from .live_arrow import read_live

        if self.is_savepoint:  # its tables hold the live entries alone, of one generation
            recorded = self.meta.tables.get(table)
            if recorded is None or recorded.version is None:
                return None
            return read_live(self.meta.table_path(table), recorded.version, TABLE_SPECS[table], self.meta.batch_id,
                             None, selected=True)
        if not backend_kind(self.meta.backend).readable_in_process:
            return None
        recorded = self.meta.table(table)
        if not recorded.path or recorded.version is None:
            return None
        return read_live(recorded.path, recorded.version, TABLE_SPECS[table], self.meta.batch_id,
                         recorded.generations)
