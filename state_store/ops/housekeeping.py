"""Checkpoint housekeeping after a pipeline run: report the retained checkpoints, drop what dead runs and dead
savepoints left.

Reads only the catalog (no Spark), so an Airflow task runs it in-process.
"""
from __future__ import annotations

from ..catalog.job_store import JobStore
from ..catalog.lease import current_holder
from ..catalog.savepoints import SavepointStore
from ..progress import wing_logger
from ..records.metadata import utc_iso
from ..settings import Settings
from ..storage import rmtree

_SAY = wing_logger(__name__).info  # what it says it does, unless given a say of its own (``progress``)


def housekeeping(job_id: str, settings: Settings | None = None, say=_SAY) -> dict:
    """Print the job's retained checkpoints and remove staging folders of runs that are over and folders of
    savepoints cut short; return a summary (an Airflow task's XCom)."""
    settings = settings or Settings.load()
    job_dir = settings.job_dir(job_id)
    store = JobStore(job_dir)
    checkpoints = store.readable_checkpoints(warn=lambda problem: say(f"warning: {problem}"))
    removed = []
    holder = current_holder(store.lease_dir)
    staging = store.staging_dir
    if (holder is None or holder.get("released")) and staging.is_dir():  # no run holds the job: all of it is left over
        for folder in sorted(staging.iterdir()):
            rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
    rows = [{"checkpoint": c.checkpoint_id, "microbatch": c.batch_id, "entries": c.total_entries,
             "bytes": c.size_bytes, "files": c.num_files, "completed_ms": c.completed_ms,
             "completed": utc_iso(c.completed_ms)} for c in checkpoints]
    for r in rows:
        say(f"[lakestate] job {job_id}: checkpoint {r['checkpoint']} at microbatch {r['microbatch']}: "
            f"{r['entries']} entries, {r['bytes']} bytes in {r['files']} files")
    if removed:
        say(f"[lakestate] job {job_id}: removed staging folders of finished runs: {', '.join(removed)}")
    return {"job": job_id, "checkpoints": rows, "latest": rows[-1]["checkpoint"] if rows else None,
            "removed_staging": removed, "removed_savepoints": SavepointStore(settings, job_id).remove_abandoned(say)}
