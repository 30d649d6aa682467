"""State backends: one backend object bound to one state table (keyed or operator).

Chosen by ``JobSpec.backend`` (``create_keyed_backend`` / ``create_operator_backend``):

- ``delta`` (default): the subtasks write the entries that changed, each
  tagged with its microbatch, as files of the job's Delta table, which one
  idempotent commit per run adds; a checkpoint only pins the table version
  (incremental).
- ``hashmap``: the run's changes are staged as files of the run (removed
  when it ends); each checkpoint writes a full snapshot of the live entries at
  its microbatch to its own Delta table under ``snapshots/chk-N``.
- ``memory``: like hashmap, but snapshots stay in this process. Tiny tests only.

In every case a run reads the state once (``read``), and a checkpoint of
microbatch m restores exactly the state after m.
"""
from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..catalog.job_store import JobStore
from ..errors import RestoreError
from ..records.layout import OPERATOR_TABLE, STATE_TABLES, TableSpec, keyed_table
from ..records.metadata import CheckpointMetadata, SavepointMetadata, TableVersion
from ..records.stats import CleanupNote, WrittenFile
from ..state.backend import DeltaKind, HashMapKind, MemoryKind, StateBackendKind, backend_kind, implemented_by
from ..storage import location, options_of, rmtree
from ..subtask.run_files import OutputTable
from .log import (
    CorruptLogError,
    app_transaction_version,
    first_version_past,
    missing_files,
    table_snapshot,
    transaction_metadata,
)
from .state_tables import (
    append_state_rows,
    commit_state_files,
    latest_live,
    read_version,
    remove_rows,
    visible,
)


def table_damage(what: str, path: str | Path, version: int | None) -> str | None:
    """What makes Delta table ``path`` at ``version`` unreadable (a log entry or data file it needs is missing
    or corrupt), said of ``what``; None when it is intact. Reads only the Delta log and file listings."""
    if version is None:
        return None
    try:
        missing = missing_files(path, version)
    except (CorruptLogError, FileNotFoundError) as e:
        return f"{what}: {e}"
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        return (f"{what} needs {len(missing)} data file(s) that are gone: {shown}; restore them from a backup "
                f"(never delete files inside a state table: compaction removes what no checkpoint needs)")
    return None


class StateBackend(StateBackendKind):
    """The state of one table: read at a checkpoint, written per run, captured per checkpoint. What each backend
    can do is its kind's (``state.backend``): its implementation subclasses it."""

    def __init__(self, spark: SparkSession, job_dir: Path, job_id: str, table: TableSpec,
                 checkpoint: CheckpointMetadata | None = None):
        self.spark, self.job_dir, self.job_id, self.table = spark, job_dir, job_id, table
        self.store = JobStore(job_dir)
        self.bound = checkpoint  # the checkpoint the run continues from (it says where a delta table lives)
        self._base: DataFrame | None = None
        self._changes: DataFrame | None = None
        self._output: OutputTable | None = None

    @property
    def app_id(self) -> str:
        """The Delta ``txnAppId`` of this table's microbatch writes."""
        return f"lakestate:{self.job_id}:{self.table.name}"

    @property
    def snapshot_app_id(self) -> str:
        """The ``txnAppId`` of a full snapshot's one commit, at ``txnVersion`` = its checkpoint id."""
        return f"{self.app_id}:snapshot"

    def empty(self) -> DataFrame:
        """No rows, the table's columns: a plan of the JVM alone (``createDataFrame([])`` of a classic session
        would run a job of Python tasks over an empty Python RDD in each pass that reads it)."""
        columns = [c.split(" ", 1) for c in self.table.schema.split(", ")]
        return self.spark.range(0).selectExpr(*[f"CAST(NULL AS {t}) AS `{n}`" for n, t in columns])

    def read(self, checkpoint: CheckpointMetadata | None, restrict=None, partitions=None) -> DataFrame:
        """The live entries as of ``checkpoint`` (none when None); ``restrict`` (DataFrame -> DataFrame)
        narrows the rows first, e.g. to the keys a run touches, so only those are sorted out; ``partitions``
        (delta-rs's tuple filters on the partition columns, a superset of what ``restrict`` keeps) lets a
        table read only those partitions' files."""
        raise NotImplementedError

    def staging_dir(self, token: str) -> Path:
        return self.store.staging(token) / self.table.name

    def output(self, token: str) -> OutputTable:
        """Where run ``token``'s subtasks write this table's changes (``run_files``): by default a
        staging directory of the run, read back by ``write_run``."""
        # Staged files are read back by their columns, not by readers of the table: no typed key.
        self._output = OutputTable(self.table.name, str(self.staging_dir(token)), self.table.schema,
                                   self.table.partition_columns, None, storage=options_of(self.job_dir))
        return self._output

    def write_run(self, files: list[WrittenFile], last_batch_id: int) -> None:
        """Make a run's changes (the files its subtasks wrote; rows of the table's schema, each tagged with
        its microbatch) durable as far as this backend does per run."""
        directory = self._output.directory
        self._changes = (self.spark.read.schema(self.table.schema).option("basePath", directory)
                         .parquet(*[str(self._output.root / f.path) for f in files]) if files else None)

    def end_run(self, token: str) -> None:
        """The run is over (its checkpoints taken or it failed): drop what it staged."""
        rmtree(self.staging_dir(token).parent, ignore_errors=True)

    def snapshot(self, checkpoint_id: int, batch_id: int, cleanup=None) -> TableVersion:
        """Capture the state after ``batch_id`` for a checkpoint; return what the checkpoint records. A full
        snapshot passes its rows through ``cleanup`` (TTL's full snapshot cleanup); an incremental one cannot."""
        raise NotImplementedError

    def live_after(self, batch_id: int) -> DataFrame:
        """The live entries after ``batch_id`` of this run (its changes written): what cleanup visits."""
        return self._full_state_at(batch_id)

    def remove_entries(self, rows: DataFrame, batch_id: int, note: CleanupNote) -> None:
        """Remove the entries of ``rows`` (tombstones of microbatch ``batch_id``, generation 1: TTL's
        incremental cleanup, which ``note`` describes) from the state this run leaves: here, from what its
        snapshots capture."""
        self._changes = rows if self._changes is None else self._changes.unionByName(rows)

    def cleanups_done(self, batch_ids: list[int]) -> tuple[int | None, dict[int, CleanupNote]]:
        """The last microbatch an incremental cleanup of this table was committed for (None: none ever was), and
        the ``note`` of each one an earlier attempt committed for one of ``batch_ids`` (a replay takes them as
        they were). Here none: a run's changes, its cleanup's too, are staged with it."""
        return None, {}

    def damage(self, checkpoint: CheckpointMetadata) -> str | None:
        """What makes ``checkpoint`` unrestorable for this table (a log file or data file it needs is missing
        or corrupt), or None when it is intact. Reads only the Delta log and file listings."""
        return None

    def discard(self, checkpoint: CheckpointMetadata, retained: list[CheckpointMetadata]) -> None:
        """Release what an expired checkpoint held and no ``retained`` checkpoint still pins."""

    def fresh_generation(self, attempt: int, checkpoint_id: int) -> int:
        """The generation an attempt (``attempt``: its lease generation) writes checkpoint ``checkpoint_id``'s
        rows as: its own, unless the tables it writes to already hold a later one."""
        return attempt

    def write_full(self, rows: DataFrame, checkpoint_id: int, generation: int = 0) -> TableVersion:
        """Write ``rows`` (live entries of this table, e.g. a restore's, written as ``generation``: the attempt's,
        see ``state_tables``) as the whole state of checkpoint ``checkpoint_id``, where nothing else is; return
        what the checkpoint records."""
        raise NotImplementedError

    @staticmethod
    def _pinned(retained: list[CheckpointMetadata], table: str) -> set[str]:
        return {str(c.table(table).path) for c in retained}

    def _full_state_at(self, batch_id: int) -> DataFrame:
        """The live entries after ``batch_id``: the restored state with the run's changes applied."""
        base = self._base if self._base is not None else self.empty()
        if self._changes is None:
            return base
        return latest_live(base.unionByName(self._changes.filter(F.col("batch_id") <= batch_id)), self.table)


@implemented_by
class DeltaStateBackend(DeltaKind, StateBackend):

    @property
    def path(self) -> Path:
        """The table runs append to: the one the bound checkpoint pins (a restore may have started a new
        generation of it, ``state/g<N>/``), else the job's first."""
        own = self.bound is not None and self.bound.backend == self.name
        recorded = self.bound.table(self.table.name) if own else TableVersion()
        return location(recorded.path) if recorded.path else self.store.state_table(self.table.name)

    def _generation_path(self, checkpoint_id: int) -> Path:
        return self.store.state_table(self.table.name, checkpoint_id)

    @property
    def generations(self) -> list[int] | None:
        """The generations of writes that are not microbatches whose rows the bound checkpoint sees (what the
        run's checkpoints pin too); None for a checkpoint recorded before they were listed: it sees every row."""
        if self.bound is None or self.bound.backend != self.name:
            return []
        return self.bound.table(self.table.name).generations

    def read(self, checkpoint, restrict=None, partitions=None):
        if checkpoint is None:  # the table is made by the run's first write
            return self.empty()
        recorded = checkpoint.table(self.table.name)
        df = read_version(self.spark, recorded.path, recorded.version, self.table, partitions)
        df = visible(df.filter(F.col("batch_id") <= checkpoint.batch_id), recorded.generations)
        return latest_live(restrict(df) if restrict else df, self.table)

    def output(self, token):
        self._output = OutputTable.of_spec(self.table, self.path, app_transaction_version(self.path, self.app_id),
                                           storage=options_of(self.path))
        return self._output

    def write_run(self, files, last_batch_id):
        commit_state_files(self.spark, self.path, self.table, self.app_id, last_batch_id, files, self._output.committed)

    def snapshot(self, checkpoint_id, batch_id, cleanup=None):
        # The latest version, unless an incremental cleanup of a later microbatch (this run's last, or an
        # earlier attempt's) already deleted rows that are live at ``batch_id``: then the version before it.
        past = first_version_past(self.path, self.cleanup_app_id, batch_id)
        return delta_record(self.path, self.generations, None if past is None else past - 1)

    def live_after(self, batch_id):
        rows = visible(self.spark.read.format("delta").load(str(self.path)), self.generations)
        return latest_live(rows, self.table, batch_id)

    @property
    def cleanup_app_id(self) -> str:
        """The ``txnAppId`` of TTL's incremental cleanup commits."""
        return f"{self.app_id}:cleanup"

    def remove_entries(self, rows, batch_id, note):
        """Delete every row of these entries from the table's current version, as a DELETE would: the files
        holding them are rewritten without them (copy on write), so the table's rows and bytes shrink between
        compactions, where tombstones would only add rows. Older versions, which earlier checkpoints pin, keep
        them. The commit carries its own ``txnAppId`` at ``batch_id``: a replayed run never commits it twice and
        it never passes for a microbatch."""
        remove_rows(self.spark, self.path, rows, self.cleanup_app_id, batch_id, self.table, note.to_json())

    def cleanups_done(self, batch_ids):
        committed = app_transaction_version(self.path, self.cleanup_app_id)
        if committed is None:
            return None, {}
        return committed, {b: CleanupNote.from_json(note) for b in batch_ids if b <= committed
                           and (note := transaction_metadata(self.path, self.cleanup_app_id, b))}

    def damage(self, checkpoint):
        recorded = checkpoint.table(self.table.name)
        path = recorded.path or self.path
        return table_damage(f"checkpoint {checkpoint.checkpoint_id}'s {self.table.name} state table "
                            f"{path} (version {recorded.version})", path, recorded.version)

    @property
    def restore_app_id(self) -> str:
        """The ``txnAppId`` of writes that are not microbatches (restore, rescale), at ``txnVersion`` = the
        attempt's generation: never taken for a replay, and a retry is never skipped as the attempt it retries."""
        return f"{self.app_id}:restore"

    def fresh_generation(self, attempt, checkpoint_id):
        # Past every restore write the tables already hold: releases before generations were lease generations
        # wrote checkpoint ids, and a write below one of those would be refused, or lose the newest-row tie.
        written = [app_transaction_version(p, self.restore_app_id)
                   for p in (self.path, self._generation_path(checkpoint_id))]
        return max([attempt] + [w + 1 for w in written if w is not None])

    def write_full(self, rows, checkpoint_id, generation=0):
        # A new folder of the table: rows a previous life appended past this state can never mix in. A killed
        # attempt at the same checkpoint id may have left rows there; they are of its generation, which the
        # new checkpoint does not list.
        path = self._generation_path(checkpoint_id)
        self._append(rows, path, generation)
        return delta_record(path, [generation])

    def append_changes(self, rows: DataFrame, generation: int) -> TableVersion:
        """Append ``rows`` (a rescale's redistributed operator entries and tombstones, written as ``generation``,
        the attempt's) to the bound table; return what the new checkpoint records: the generations the bound
        checkpoint sees and this one."""
        self._append(rows, self.path, generation)
        pinned = self.generations
        return delta_record(self.path, None if pinned is None else [*pinned, generation])

    def _append(self, rows, path: Path, generation: int) -> None:  # a DataFrame, or pyarrow.Tables (a restore's)
        # Generations are unique to an attempt: a table that already has this one (or a later one) was written by
        # another attempt, whose rows must never pass for this one's.
        if not append_state_rows(rows, path, self.restore_app_id, generation, self.table, batch_column="generation",
                                 spark=self.spark):
            raise RestoreError(f"{path} already holds a restore or rescale write at generation {generation} or "
                               f"later, which this attempt cannot be; nothing was written. Take a savepoint of job "
                               f"{self.job_id!r} and restore it: that writes its state into new tables")


@implemented_by
class HashMapStateBackend(HashMapKind, StateBackend):

    def _dir(self, checkpoint_id: int) -> Path:
        return self.store.snapshot_table(checkpoint_id, self.table.name)

    def read(self, checkpoint, restrict=None, partitions=None):
        if checkpoint is None:
            self._base = self.empty()
            return self._base
        recorded = checkpoint.table(self.table.name)
        if not recorded.path or not (location(recorded.path) / "_delta_log").is_dir():
            raise RestoreError(
                f"checkpoint {checkpoint.checkpoint_id}'s snapshot {recorded.path} is missing; "
                f"restore an older checkpoint or a savepoint"
            )
        self._base = read_version(self.spark, recorded.path, recorded.version, self.table)
        return restrict(self._base) if restrict else self._base

    def snapshot(self, checkpoint_id, batch_id, cleanup=None):
        rows = self._full_state_at(batch_id)
        return self.write_full(cleanup(rows) if cleanup else rows, checkpoint_id)

    def write_full(self, rows, checkpoint_id, generation=0):
        path = self._dir(checkpoint_id)
        # A full snapshot in a new table. What a killed attempt at this checkpoint id left there, no published
        # checkpoint names (a checkpoint is published after its snapshot): removed, so a retry is idempotent.
        rmtree(path, ignore_errors=True)
        append_state_rows(rows.filter(F.col("value").isNotNull()), path, self.snapshot_app_id, checkpoint_id,
                          self.table)
        return TableVersion(**table_snapshot(path), incremental=False)

    def discard(self, checkpoint, retained):
        # A rescaled checkpoint pins the keyed snapshot of the checkpoint it came from: keep what is pinned.
        path = checkpoint.table(self.table.name).path
        if path and path not in self._pinned(retained, self.table.name):
            rmtree(path, ignore_errors=True)
        folder = self._dir(checkpoint.checkpoint_id).parent
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()

    def damage(self, checkpoint):
        recorded = checkpoint.table(self.table.name)
        if recorded.path is None:
            return None
        return table_damage(f"checkpoint {checkpoint.checkpoint_id}'s {self.table.name} snapshot {recorded.path}",
                            recorded.path, recorded.version)


class MemorySnapshots:
    """The memory backend's snapshots: the rows of each (job folder, state table, checkpoint id).

    Owned by ``MemoryStateBackend.snapshots``, the one store of the process: made at import, shared by every
    memory backend of every SparkSession in the process, gone with the process. So a checkpoint can be restored
    in the process that took it and in no other (what the backend is for: tiny tests). ``clear()`` forgets
    every snapshot, for tests that want a process as fresh as a new one."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str, int], list] = {}

    def get(self, job_dir: Path, table: str, checkpoint_id: int) -> list | None:
        return self._rows.get((str(job_dir), table, checkpoint_id))

    def put(self, job_dir: Path, table: str, checkpoint_id: int, rows: list) -> None:
        self._rows[(str(job_dir), table, checkpoint_id)] = rows

    def discard(self, job_dir: Path, table: str, checkpoint_id: int) -> None:
        self._rows.pop((str(job_dir), table, checkpoint_id), None)

    def clear(self) -> None:
        self._rows.clear()

    def __len__(self) -> int:
        return len(self._rows)


@implemented_by
class MemoryStateBackend(MemoryKind, StateBackend):
    snapshots = MemorySnapshots()  # process-wide; see MemorySnapshots

    def read(self, checkpoint, restrict=None, partitions=None):
        if checkpoint is None:
            self._base = self.empty()
            return self._base
        rows = self.snapshots.get(self.job_dir, self.table.name, checkpoint.checkpoint_id)
        if rows is None:
            raise RestoreError(
                "the memory backend keeps checkpoints only in the process that took them; "
                "use the hashmap or delta backend for state that outlives a process"
            )
        self._base = self.spark.createDataFrame(rows, self.table.schema)
        return restrict(self._base) if restrict else self._base

    def snapshot(self, checkpoint_id, batch_id, cleanup=None):
        rows = self._full_state_at(batch_id)
        return self.write_full(cleanup(rows) if cleanup else rows, checkpoint_id)

    def write_full(self, rows, checkpoint_id, generation=0):
        rows = rows.filter(F.col("value").isNotNull()).collect()
        self.snapshots.put(self.job_dir, self.table.name, checkpoint_id, rows)
        return TableVersion(entries=len(rows), incremental=False)

    def discard(self, checkpoint, retained):
        self.snapshots.discard(self.job_dir, self.table.name, checkpoint.checkpoint_id)




def delta_record(path, generations: list[int] | None, version: int | None = None) -> TableVersion:
    """What a checkpoint records of a ``delta`` state table: the version it pins (default: the latest) and the
    generations of writes that are not microbatches whose rows it sees (``state_tables.visible``)."""
    return TableVersion(**table_snapshot(path, version), incremental=True,
                        generations=None if generations is None else sorted(set(int(g) for g in generations)))


def checkpoint_damage(spark: SparkSession, job_dir: Path, checkpoint: CheckpointMetadata) -> list[str]:
    """What makes ``checkpoint`` unrestorable, per state table (empty when intact); see ``StateBackend.damage``."""
    return [d for create in (create_keyed_backend, create_operator_backend)
            if (d := create(checkpoint.backend, spark, job_dir, checkpoint.job_id, checkpoint).damage(checkpoint))]


def point_damage(spark: SparkSession, point: CheckpointMetadata | SavepointMetadata, job_dir: Path | None
                 ) -> list[str]:
    """What makes a checkpoint (of the job in ``job_dir``) or a savepoint unreadable, per state table (empty
    when intact): the one check every reader makes first (a run, a savepoint, a restore, the State Processor),
    so a damaged table is named with the fix instead of failing in Spark halfway through a read."""
    if isinstance(point, SavepointMetadata):
        return [d for t in STATE_TABLES if (d := table_damage(
            f"savepoint {point.path}'s {t} table", point.table_path(t), point.tables[t].version))]
    return checkpoint_damage(spark, job_dir, point)


def _implementation(name: str) -> type[StateBackend]:
    """The backend registered as ``name`` (``state.backend.BACKENDS``: once this module is loaded, each built-in
    name is its implementation here; a subclass with a name of its own is registered as well)."""
    found = backend_kind(name)
    if not issubclass(found, StateBackend):
        raise TypeError(f"backend {name!r} is a kind without an implementation: subclass delta.backends.StateBackend")
    return found


def create_keyed_backend(name: str, spark: SparkSession, job_dir: Path, job_id: str,
                         checkpoint: CheckpointMetadata | None = None, key_type=None) -> StateBackend:
    """The ``name`` backend bound to the job's keyed state table (as ``checkpoint`` left it), whose keys are of
    ``key_type`` (the table's writes type them; None: the checkpoint's key type, if any)."""
    if key_type is None and checkpoint is not None:
        key_type = checkpoint.key_type
    return _implementation(name)(spark, job_dir, job_id, keyed_table(key_type), checkpoint)


def create_operator_backend(name: str, spark: SparkSession, job_dir: Path, job_id: str,
                            checkpoint: CheckpointMetadata | None = None) -> StateBackend:
    """The ``name`` backend bound to the job's operator state table (as ``checkpoint`` left it)."""
    return _implementation(name)(spark, job_dir, job_id, OPERATOR_TABLE, checkpoint)
