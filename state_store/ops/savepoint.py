"""Savepoints: a checkpoint's state copied, canonical and self-contained, into its own folder.

    <savepoint root>/<job>/<name>/keyed/           Delta table: the live keyed entries (state_name, key_group, ...)
    <savepoint root>/<job>/<name>/operator/        Delta table: the live operator entries (state_name, subtask, ...)
    <savepoint root>/<job>/<name>/_metadata.json   SavepointMetadata, written last

The format is the same whatever backend took the checkpoint, and nothing in
it points into the job's tables, so it restores after they are compacted,
vacuumed or deleted, at another parallelism or with another backend
(``restore``); a savepoint whose metadata points a table outside its folder is
refused. Its folder (written in a hidden ``.inprogress-*`` folder renamed when
complete, its writer recorded so what a killed one leaves is removed, found,
listed and disposed) is ``catalog/savepoints``'s ``SavepointStore``; reading one
is ``delta/points``'s ``StatePoint``, which a restore and the State Processor
share. This module says what a savepoint holds. Savepoints never expire, but for
those a rescale takes first (``rescale-<checkpoint>-<time>``), of which
``retain_rescale_savepoints`` keeps the newest N when asked (``lakestate rescale
--retain-savepoints N``); ``dispose`` deletes one.
"""
from __future__ import annotations

import copy
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..catalog.job_store import JobStore
from ..catalog.lease import holding
from ..catalog.savepoints import SavepointStore, dispose_savepoint, list_savepoints
from ..delta.log import table_snapshot
from ..delta.points import StatePoint
from ..errors import ConfigError, RestoreError
from ..job import check_job_id
from ..progress import wing_logger
from ..records.layout import KEYED, OPERATOR, table_spec
from ..records.metadata import AirflowRun, CheckpointMetadata, SavepointMetadata, TableVersion
from ..settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_SAY = wing_logger(__name__).info  # what it says it does, unless given a say of its own (``progress``)

SAVEPOINT_APP_ID = "lakestate:savepoint"  # the txnAppId of a savepoint table's one commit (txnVersion 0)
POINT_FIELDS = ("checkpoint_id", "batch_id", "uid", "key_type", "backend", "parallelism", "max_parallelism",
                "key_group_ranges", "source_offsets", "descriptors", "entries", "processing_time")
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")  # fullmatch: "$" would let a trailing newline in


def check_label(label: str | None) -> str | None:
    if label is not None and not _LABEL.fullmatch(label):
        raise ConfigError(f"savepoint label {label!r} is not usable: give 1-64 letters, digits, '_', '.' or '-', "
                          f"starting with a letter or digit (it names the savepoint's folder)")
    return label


def take_savepoint(spark: "SparkSession", settings: Settings, job_id: str, checkpoint_id: int | None = None,
                   label: str | None = None, wait_s: float = 0.0, say=_SAY) -> SavepointMetadata:
    """Copy checkpoint ``checkpoint_id`` (default: the latest) of ``job_id`` into a new savepoint.

    Holds the job while it copies (a run in progress finishes first; runs that start meanwhile wait).
    """
    check_label(label)
    check_job_id(job_id)
    job_dir = settings.job_dir(job_id)
    store = JobStore(job_dir)
    with holding(job_dir, job_id, "savepoint", wait_s, say):
        checkpoint = (store.checkpoint(checkpoint_id) if checkpoint_id is not None
                      else store.latest_checkpoint(warn=lambda m: say(f"[lakestate] warning: {m}")))
        if checkpoint is None:
            raise ConfigError(f"job {job_id!r} has no checkpoint yet: run it first, then take a savepoint")
        return savepoint_of_checkpoint(spark, settings, checkpoint, job_dir, label, say)


def savepoint_of_checkpoint(spark: "SparkSession", settings: Settings, checkpoint: CheckpointMetadata,
                            job_dir: Path, label: str | None = None, say=_SAY,
                            prefix: str = "savepoint") -> SavepointMetadata:
    """Copy ``checkpoint`` into a new savepoint, named ``label`` or ``<prefix>-<checkpoint>-<time>`` (a
    rescale's own: ``rescale-...``, which ``retain_rescale_savepoints`` thins); the caller holds the job."""
    from ..state.ttl.tables import drop_expired, ttl_states  # Spark: only where a savepoint is taken

    job_id, cid = checkpoint.job_id, checkpoint.checkpoint_id
    source = StatePoint(checkpoint, job_dir)
    damage = source.damage(spark)
    if damage:
        raise RestoreError(f"checkpoint {cid} of job {job_id!r} cannot be copied into a savepoint: "
                           + "; ".join(damage))
    name = label or f"{prefix}-{cid}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
    say(f"[lakestate] job {job_id}: savepoint of checkpoint {cid} (microbatch {checkpoint.batch_id})"
        + (f", operators {source.uids}" if len(source.uids) > 1 else ""))
    parts = {}
    for uid in source.uids:  # each operator's live entries (a job of one operator: its own)
        part = source.operator(uid)
        meta = part.meta
        # Full snapshot cleanup: expired entries of states that ask for it stay out, as of the checkpoint's time.
        cleaned = ttl_states(meta.descriptors, "full_snapshot") if meta.processing_time is not None else {}
        # A small table on a local disk is read and written by this process (Arrow, no Spark job); else Spark.
        tables = {t: None if cleaned and t == KEYED else part.rows_in_process(t) for t in (KEYED, OPERATOR)}
        tables = {t: part.rows(spark, t) if rows is None else rows for t, rows in tables.items()}
        if cleaned:
            tables[KEYED] = drop_expired(tables[KEYED], cleaned, meta.processing_time)
        parts[uid] = (tables, point_fields(meta), cleaned)
    return write_savepoint(settings, job_id, name, parts, label, say, spark)


def point_fields(point) -> dict:
    """What a savepoint's metadata takes over from the checkpoint or savepoint it is made from."""
    return {k: copy.deepcopy(getattr(point, k)) for k in POINT_FIELDS}


def write_savepoint(settings: Settings, job_id: str, name: str, parts: dict, label: str | None,
                    say=_SAY, spark=None) -> SavepointMetadata:
    """Write savepoint ``<job_id>/<name>`` from ``parts``: per operator uid, first operator first, ``(tables,
    fields, recount)``: its tables ("keyed", "operator": DataFrames of live entries, or ``pyarrow.Table``s this
    process writes, with ``spark`` the session that names a new table's columns), its metadata ``fields``,
    and the states whose entries are counted again (a cleanup thinned them). A dataflow's later operators' tables
    go under ``operators/<uid>/``. ``_metadata.json`` is written last: locally into a hidden folder then renamed
    into place; on object storage (no rename) in place, where nothing lists as a savepoint until its metadata is
    there."""
    store = SavepointStore(settings, job_id)
    work, started = store.begin(name, say), time.time()
    try:
        metas = [_write_part(work, f"operators/{uid}/" if i else "", job_id, name, label, *part, spark=spark)
                 for i, (uid, part) in enumerate(parts.items())]
        savepoint = SavepointMetadata.of_operators(metas)
        savepoint.seconds = round(time.time() - started, 1)  # what the rescale form says "savepoint first" adds
        store.publish(work, name, savepoint)
    except BaseException:
        store.abandon(work)
        raise
    say(f"[lakestate] job {job_id}: savepoint {savepoint.path} complete: {savepoint.total_entries} entries, "
        f"{savepoint.size_bytes} bytes in {savepoint.num_files} files, {savepoint.seconds:.1f}s")
    return savepoint


def _write_part(work, prefix: str, job_id: str, name: str, label: str | None, tables: dict, fields: dict,
                recount, spark=None) -> SavepointMetadata:
    """One operator's tables of a savepoint being written in ``work`` (under ``prefix``), and its metadata."""
    from ..delta.state_tables import append_state_rows  # Spark: only where a savepoint is taken

    written = {}
    for table, rows in tables.items():
        spec, path = table_spec(table, fields["key_type"]), f"{prefix}{table}"
        append_state_rows(rows, work / path, SAVEPOINT_APP_ID, 0, spec, spark=spark)  # tasks write, delta-rs commits
        snap = table_snapshot(work / path)
        written[table] = TableVersion(path, snap["version"], snap["size_bytes"], snap["num_files"])
    if recount:  # states a cleanup thinned: their entries are what the savepoint holds
        from ..state.ttl.tables import count_entries

        keyed = tables[KEYED].sparkSession.read.format("delta").load(str(work / written[KEYED].path))
        counts = count_entries(keyed, recount)
        entries = {**fields["entries"], **{n: counts.get(n, 0) for n in recount}}
        fields = {**fields, "entries": {n: c for n, c in sorted(entries.items()) if c}}
    return SavepointMetadata(job_id=job_id, name=name, tables=written, created_ms=int(time.time() * 1000),
                             label=label, airflow_run=AirflowRun.of_environment(), **fields)


RESCALE_PREFIX = "rescale"  # the name of the savepoint a rescale takes first: rescale-<checkpoint>-<time>


def retain_rescale_savepoints(settings: Settings, job_id: str, keep: int, say=_SAY) -> list[str]:
    """Dispose the savepoints of ``job_id`` that rescales took (unlabelled, named ``rescale-...``) but the newest
    ``keep``; return their names. Labelled savepoints and those taken by hand are never touched."""
    if keep < 0:
        raise ConfigError(f"the number of rescale savepoints to retain must be 0 or more, got {keep}")
    taken = [s for s in list_savepoints(settings, job_id)
             if s.label is None and s.name.startswith(f"{RESCALE_PREFIX}-")]
    taken.sort(key=lambda s: s.created_ms)
    gone = [dispose_savepoint(settings, f"{job_id}/{s.name}").name for s in taken[:max(len(taken) - keep, 0)]]
    if gone:
        say(f"[lakestate] job {job_id}: disposed rescale savepoints past the newest {keep}: {', '.join(gone)}")
    return gone
