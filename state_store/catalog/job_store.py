"""A job's layout on storage and its checkpoint lifecycle: every path of a job, the next checkpoint id,
publishing a checkpoint (written last, then expire and discard).

    <warehouse>/jobs/<job>/_meta/lease/                the job's lease (``lease``)
    <warehouse>/jobs/<job>/_meta/plans/<m>.json        microbatch m's source range (written before it runs)
    <warehouse>/jobs/<job>/_meta/commits/<m>.json      microbatch m is done (those before the oldest retained
                                                       checkpoint's go at a compaction, plans too)
    <warehouse>/jobs/<job>/_meta/checkpoints/chk-<n>.json   completed checkpoints (written last)
    <warehouse>/jobs/<job>/_meta/compaction.json       the last compaction's report that did work
    <warehouse>/jobs/<job>/_meta/compactions/<ms>.json the newest 100 compactions' reports (its history)
    <warehouse>/jobs/<job>/state/<table>/              the delta backend's tables
    <warehouse>/jobs/<job>/state/g<n>/<table>/         ... a restore's new generation of them
    <warehouse>/jobs/<job>/snapshots/chk-<n>/<table>/  the hashmap backend's snapshot of checkpoint n
    <warehouse>/jobs/<job>/staging/<run token>/        what a run stages (removed when it ends)

Every file is written so that a reader never sees half of one (``storage.write_atomic``: a temporary name and
a rename locally, a single upload on object storage). Plain JSON files keep a job readable without Spark (the
CLI, the Airflow plugin).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

from .. import storage
from ..errors import ConfigError
from ..progress import wing_logger
from ..records.metadata import CheckpointMetadata, MicrobatchPlan

COMPACTION_REPORTS_KEPT = 100  # a schedule every few minutes writes one a tick, "nothing to do" ones too


def write_json_atomic(path, data: Any) -> None:
    storage.write_atomic(path, json.dumps(data, indent=1, sort_keys=True))


def read_json(path) -> Any:
    return storage.read_json(path)


class CorruptCheckpoint(ConfigError):
    """A checkpoint's file cannot be read."""

    def __init__(self, message: str, checkpoint_id: int):
        super().__init__(message)
        self.checkpoint_id = checkpoint_id


class JobStore:
    """One job's folder: its paths, plans, commits and checkpoints; ``warn`` is told of files in its folders
    that are not Lakestate's (default: the ``lakestate`` logger)."""

    def __init__(self, job_dir: Path, warn=None):
        self.job_dir = job_dir
        self.dir = job_dir / "_meta"
        self.plans, self.commits = self.dir / "plans", self.dir / "commits"
        self.checkpoints_dir = self.dir / "checkpoints"
        self._warn = warn or wing_logger(__name__).warning
        self._strays: set[str] = set()

    # -- paths ------------------------------------------------------------------------------------------------
    @property
    def lease_dir(self) -> Path:
        return self.dir / "lease"

    @property
    def staging_dir(self) -> Path:
        """Where runs stage what they write (each run's own folder in it; housekeeping removes what is left)."""
        return self.job_dir / "staging"

    def staging(self, token: str) -> Path:
        """What run ``token`` stages (a table's changes on the snapshot backends, a constrained sink's rows)."""
        return self.staging_dir / token

    @property
    def table_folders(self) -> tuple[Path, Path]:
        """The folders every state table of the job is under (``state/``: delta, ``snapshots/``: hashmap)."""
        return self.job_dir / "state", self.job_dir / "snapshots"

    def operator_dir(self, uid: str) -> Path:
        """Where a dataflow's later operator ``uid`` keeps its state tables and stages its output (``dataflow``);
        the first operator's are the job's own."""
        return self.job_dir / "operators" / uid

    def state_table(self, table: str, generation: int | None = None) -> Path:
        """The delta backend's table ``table``: the job's first, or the one a restore started as checkpoint
        ``generation`` (``state/g<N>/``)."""
        folder = self.job_dir / "state"
        return folder / f"g{generation}" / table if generation is not None else folder / table

    def snapshot_table(self, checkpoint_id: int, table: str) -> Path:
        """The hashmap backend's snapshot of ``table`` for checkpoint ``checkpoint_id``."""
        return self.job_dir / "snapshots" / f"chk-{checkpoint_id}" / table

    # -- plans and commits -----------------------------------------------------------------------------------
    def _numbered(self, directory: Path, prefix: str = "") -> list[int]:
        """The numbers N of the files ``<prefix><N>.json`` in ``directory``, sorted. Any other name (a copy
        someone made, an editor's backup) is not Lakestate's: it is ignored, with a warning, rather than
        stopping every command that lists the folder."""
        if not directory.is_dir():
            return []
        pattern, out = re.compile(rf"{re.escape(prefix)}(\d+)\.json"), []
        for p in directory.iterdir():
            found = pattern.fullmatch(p.name)
            if found:
                out.append(int(found.group(1)))
            elif not p.name.startswith(".") and p.name not in self._strays:  # "." : a write in progress
                self._strays.add(p.name)
                self._warn(f"ignoring {p}: not a name Lakestate writes there ({prefix}<N>.json); move it out of "
                           f"{directory}")
        return sorted(out)

    def read_plan(self, batch_id: int) -> MicrobatchPlan | None:
        p = self.plans / f"{batch_id}.json"
        if not p.exists():
            return None
        try:
            return MicrobatchPlan.from_dict(read_json(p))
        except (ValueError, TypeError, AttributeError) as e:
            raise ConfigError(
                f"the plan of microbatch {batch_id}, {p}, is corrupt ({type(e).__name__}: {e}); it fixes what that "
                f"microbatch reads, and a replay must read the same. Restore the file from a backup; if no output "
                f"row of microbatch {batch_id} is in the sink (column _microbatch) and no commit file "
                f"{self.commits / f'{batch_id}.json'} exists, deleting it makes the next run plan it again") from None

    def write_plan(self, plan: MicrobatchPlan) -> None:
        write_json_atomic(self.plans / f"{plan.batch_id}.json", plan.to_dict())

    def drop_plan(self, batch_id: int) -> None:
        (self.plans / f"{batch_id}.json").unlink(missing_ok=True)
        try:
            self.plans.rmdir()  # only when no plan is left: a refused first run leaves no folder behind
        except OSError:
            pass

    def write_commit(self, batch_id: int, commit: dict) -> None:
        write_json_atomic(self.commits / f"{batch_id}.json", commit)

    def commit_records(self) -> dict[int, dict]:
        """Every microbatch's commit record (its counters: records in and out, timers fired ...), by id."""
        return {n: read_json(self.commits / f"{n}.json") for n in self._numbered(self.commits)}

    def last_commit(self) -> int | None:
        ids = self._numbered(self.commits)
        return ids[-1] if ids else None

    def forget_microbatches_before(self, batch_id: int) -> tuple[int, int]:
        """Delete the plans and commit markers of the microbatches before ``batch_id`` (the oldest retained
        checkpoint's), as Spark forgets its offset and commit logs of old batches: no run or restore reads them
        again. A run plans from its checkpoint's next microbatch (so a retained checkpoint's next plans stay), and
        a restore, which never rewinds, reads the newest marker only (kept whatever its number). Returns (files
        deleted, bytes reclaimed)."""
        newest, deleted, reclaimed = self.last_commit(), 0, 0
        for folder in (self.plans, self.commits):
            for n in self._numbered(folder):
                if n < batch_id and not (folder == self.commits and n == newest):
                    path = folder / f"{n}.json"
                    reclaimed += path.stat().st_size
                    path.unlink()
                    deleted += 1
        return deleted, reclaimed

    # -- checkpoints -------------------------------------------------------------------------------------------
    def checkpoint_ids(self) -> list[int]:
        return self._numbered(self.checkpoints_dir, "chk-")

    def next_checkpoint_id(self) -> int:
        """The id the job's next checkpoint gets, whoever writes it (a run, a restore, a compaction): past
        every checkpoint file there, readable or not, so none is ever overwritten."""
        return max(self.checkpoint_ids(), default=0) + 1

    def checkpoint(self, checkpoint_id: int) -> CheckpointMetadata:
        p = self.checkpoints_dir / f"chk-{checkpoint_id}.json"
        if not p.exists():
            raise ConfigError(f"checkpoint {checkpoint_id} does not exist; retained: {self.checkpoint_ids()}")
        try:
            return CheckpointMetadata.from_dict(read_json(p))
        except (ValueError, TypeError, AttributeError, KeyError) as e:
            raise CorruptCheckpoint(f"checkpoint {checkpoint_id}'s file {p} is corrupt ({type(e).__name__}: {e})",
                                    checkpoint_id) from None

    def readable_checkpoints(self, warn=None) -> list[CheckpointMetadata]:
        """The retained checkpoints whose files can be read, oldest first; ``warn`` is told of the others."""
        found = []
        for cid in self.checkpoint_ids():
            try:
                found.append(self.checkpoint(cid))
            except CorruptCheckpoint as e:
                if warn is not None:
                    warn(str(e))
        return found

    def checkpoints(self) -> list[CheckpointMetadata]:
        return self.readable_checkpoints()

    def latest_checkpoint(self, warn=None) -> CheckpointMetadata | None:
        """The newest checkpoint that can be read (``warn`` is told of newer ones that cannot)."""
        for cid in reversed(self.checkpoint_ids()):
            try:
                return self.checkpoint(cid)
            except CorruptCheckpoint as e:
                if warn is not None:
                    warn(str(e))
        return None

    def write_checkpoint(self, checkpoint: CheckpointMetadata) -> None:
        write_json_atomic(self.checkpoints_dir / f"chk-{checkpoint.checkpoint_id}.json", checkpoint.to_dict())

    def publish(self, checkpoint: CheckpointMetadata) -> None:
        """Make ``checkpoint`` the job's. Written last of all it pins: it exists only once its state does."""
        self.write_checkpoint(checkpoint)

    def expire(self, num_retained: int,
               discard: Callable[[str, CheckpointMetadata, list[CheckpointMetadata]], None] | None = None) -> None:
        """Forget the checkpoints before the newest ``num_retained``, and ``discard(uid, part, retained)`` what
        each one's part of each operator alone held (``retained``: that operator's parts of the checkpoints
        kept). The one expiry of a job's checkpoints: a run's checkpointer and a restore call it."""
        expired = self.expire_checkpoints(num_retained)
        if expired and discard is not None:
            retained = self.readable_checkpoints()
            for old in expired:
                for part in old.parts:
                    discard(part.uid, part, [p for c in retained if (p := c.of_operator(part.uid)) is not None])

    def expire_checkpoints(self, num_retained: int) -> list[CheckpointMetadata]:
        """Forget all but the newest ``num_retained`` checkpoints; return the ones removed that could be read
        (an unreadable one pins nothing anyone can find: its file just goes)."""
        ids = self.checkpoint_ids()
        removed = []
        for cid in ids[:-num_retained] if len(ids) > num_retained else []:
            try:
                removed.append(self.checkpoint(cid))
            except CorruptCheckpoint as e:
                self._warn(f"{e}; expired")
            (self.checkpoints_dir / f"chk-{cid}.json").unlink()
        return removed

    # -- reports -------------------------------------------------------------------------------------------------
    def last_compaction(self) -> dict | None:
        """The report of the job's last compaction that did work (``compaction.compact_job``), or None: one that
        found nothing to do (``report["nothing_to_do"]``) is in ``compaction_history`` only."""
        path = self.dir / "compaction.json"
        return read_json(path) if path.exists() else None

    def compaction_history(self, limit: int | None = None) -> list[dict]:
        """Every compaction's report, newest first (at most ``limit``), those that found nothing to do too."""
        folder = self.dir / "compactions"
        return [read_json(folder / f"{ms}.json") for ms in reversed(self._numbered(folder, ""))][:limit]

    def write_compaction(self, report: dict) -> None:
        """Add ``report`` to the history (one file per compaction, named by its start; the newest
        ``COMPACTION_REPORTS_KEPT`` are kept, as Flink's web history keeps its newest jobs); a report with work
        done also becomes ``last_compaction``."""
        folder = self.dir / "compactions"
        write_json_atomic(folder / f"{int(report['started_ms'])}.json", report)
        for ms in self._numbered(folder, "")[:-COMPACTION_REPORTS_KEPT]:
            (folder / f"{ms}.json").unlink(missing_ok=True)
        if not report.get("nothing_to_do"):
            write_json_atomic(self.dir / "compaction.json", report)
