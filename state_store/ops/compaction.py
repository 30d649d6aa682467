"""Compaction: keep a job's state tables bounded (docs/operating/compaction.md; TTL's compaction filter).

Every run of the ``delta`` backend appends the entries that changed, so a table
holds every version of every entry and a file per touched partition per
subtask per run. ``compact_job`` (``lakestate compact <job>``,
``jobs/compact.py``), while it holds the job (runs wait, none fails):

1. rewrites each state table as of the job's latest checkpoint: per entry only
   its newest row, removed entries dropped, and for states with TTL's
   compaction filter (``cleanup_in_compaction()``, on by default) entries
   expired at that checkpoint's processing time dropped (a live list keeps its
   live elements only). One file per ``(state_name, key_group)`` partition.
   Rows of microbatches after that checkpoint (a crashed run's) are left as
   they are. It is one Delta commit per table (``replaceWhere``), then a new
   checkpoint of the same microbatch pins the compacted versions;
2. deletes the data files no retained checkpoint pins (checkpoint versions
   are read by time travel, so those files are kept; savepoints are copies and
   need nothing here), each table's log before the newest Delta checkpoint at
   or before the oldest version a retained checkpoint pins, and table folders
   and ``hashmap`` snapshots no retained checkpoint pins (an old generation
   after a restore), and the plans and commit markers of the microbatches
   before the oldest retained checkpoint's.

A crash at any step leaves every retained checkpoint restorable: the rewrite is
a new table version (the old ones stay readable), the new checkpoint is
written after it, and only then are files no checkpoint pins deleted. The last
report that did work is kept in ``_meta/compaction.json`` (``JobStore.last_compaction``) for the Lakestate page,
every report in ``_meta/compactions/`` (``JobStore.compaction_history``).

A compaction right after another (no run since) has nothing to do: ``nothing_to_do`` sees it from the job's
files, without Spark, and such a compaction writes only its report to the history (``"nothing_to_do": true``).
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from urllib.parse import unquote

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from ..catalog.job_store import JobStore
from ..catalog.lease import holding
from ..delta.backends import create_keyed_backend, delta_record
from ..delta.log import expire_log, table_files, table_snapshot
from ..delta.state_tables import latest_live, visible
from ..errors import ConfigError
from ..keys import typed_key
from ..progress import wing_logger
from ..records.layout import CHECKPOINT_LAYOUT, KEYED, KEYED_TABLE, OPERATOR_TABLE, TYPED_KEY, keyed_table
from ..records.metadata import AirflowRun, CheckpointMetadata, TableVersion, utc_iso
from ..settings import Settings
from ..state.backend import backend_kind
from ..state.ttl.tables import drop_expired, ttl_states
from ..storage import location, remove_empty_folders, rmtree, walk_files

_SAY = wing_logger(__name__).info  # what it says it does, unless given a say of its own (``progress``)

# Above this many bytes of a table's files, compaction rewrites it with Spark (more cores), though this process
# could: its memory is one partition's (``live_arrow.PARTITION_MAX_BYTES``) whatever the table's size. At 68 MiB
# (10M keys) this process took 15 s and 307 MB, Spark 107 s and 1.6 GB (bench/compaction_memory.py); a GiB is
# about 4 minutes on one core.
IN_PROCESS_MAX_BYTES = 2**30

def compact_job(spark, settings: Settings, job_id: str, *, wait_s: float = 0.0, say=_SAY,
                fault=lambda step: None) -> dict:
    """Compact job ``job_id``'s state tables and delete what no retained checkpoint needs; return the report
    (entries scanned, expired and superseded entries removed, files and bytes before and after). ``spark`` is a
    SparkSession, or a function that makes one: called only when there is work (see ``nothing_to_do``).

    Example::

        compact_job(spark, Settings.load(), "clicks")["bytes_reclaimed"]
    """
    job_dir = settings.job_dir(job_id)
    store = JobStore(job_dir)
    if not store.checkpoint_ids():
        raise ConfigError(f"job {job_id!r} has no checkpoint in {settings.warehouse}: nothing to compact (run it "
                          f"first)")
    started = time.time()
    with holding(job_dir, job_id, "compact", wait_s, say):
        latest = store.latest_checkpoint(warn=lambda m: say(f"[lakestate] warning: {m}"))
        if latest is None:
            raise ConfigError(f"no checkpoint of job {job_id!r} can be read: restore from a savepoint instead")
        report = {"job": job_id, "checkpoint": latest.checkpoint_id, "microbatch": latest.batch_id,
                  "backend": latest.backend, "started_ms": int(started * 1000),
                  "started": utc_iso(int(started * 1000)), "tables": {}}
        reason = nothing_to_do(store, latest)
        if reason is not None:  # the tables stay as they are: no new table version, no checkpoint
            report.update(nothing_to_do=True, reason=reason, files_deleted=0, bytes_reclaimed=0)
            say(f"[lakestate] job {job_id}: nothing to do: {reason}; nothing was written")
        else:
            _compact(spark() if callable(spark) else spark, store, latest, report, fault, say)
        report["seconds"] = round(time.time() - started, 2)
        totals = report["tables"].values()
        report.update({k: sum(t[k] for t in totals) for k in
                       ("rows_scanned", "expired_removed", "superseded_removed", "files_before", "files_after",
                        "bytes_before", "bytes_after")})
        store.write_compaction(report)
    if "waiting" in report or "nothing_to_do" in report:
        return report
    say(f"[lakestate] job {job_id}: compacted checkpoint {latest.checkpoint_id} (microbatch {latest.batch_id}): "
        f"{report['rows_scanned']} rows scanned, {report['expired_removed']} expired and "
        f"{report['superseded_removed']} superseded or removed entries dropped; files {report['files_before']} -> "
        f"{report['files_after']}; {report['files_deleted']} files ({report['bytes_reclaimed']} bytes) no "
        f"retained checkpoint needs deleted, {report['seconds']}s")
    return report


def nothing_to_do(store: JobStore, latest: CheckpointMetadata) -> str | None:
    """Why compacting ``latest`` would change nothing, or None. Read from the job's files only (no Spark): the
    job's last compaction left ``latest`` as the latest checkpoint (its rewrite's checkpoint, or the one it
    found nothing to do at), and every table ``latest`` pins is still at the version it pins: no run, and no
    killed run, has written since, and that compaction deleted every file no retained checkpoint needed."""
    history = store.compaction_history(1)
    if not history or "waiting" in history[0]:
        return None
    last = history[0]
    left = last.get("new_checkpoint", last["checkpoint"])
    if latest.checkpoint_id != left:
        return None
    for part, _ in _operators(store, latest).values():
        for recorded in part.state.values():
            if recorded.path and recorded.version is not None and \
                    table_snapshot(recorded.path)["version"] != recorded.version:
                return None
    return (f"checkpoint {left} (microbatch {latest.batch_id}) is what the compaction of "
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(last['started_ms'] / 1000))} UTC left, and no run "
            f"has written since")


def _compact(spark: SparkSession, store: JobStore, latest: CheckpointMetadata, report: dict, fault, say) -> None:
    """The work: the rewrite (delta backend) and the deletion of unpinned files, or, when a killed run's TTL
    cleanup is past ``latest``, nothing (``report["waiting"]`` says why)."""
    job_id = latest.job_id
    parts = _operators(store, latest)
    killed = next((k for part, job_dir in parts.values() if (k := _killed_cleanup(spark, part, job_dir)) is not None),
                  None)
    if killed is not None:  # the tables stay as they are, files too: the killed run's replay needs them
        report["waiting"] = (f"a run removed expired entries after microbatch {killed} but stopped before its "
                             f"checkpoint; compacting checkpoint {latest.checkpoint_id} would bring them back. "
                             f"The job's next run finishes those microbatches: compact after it")
        say(f"[lakestate] job {job_id}: nothing compacted: {report['waiting']}")
        report["files_deleted"] = report["bytes_reclaimed"] = 0
        return
    if backend_kind(latest.backend).incremental:
        report["new_checkpoint"] = _rewrite(spark, store, latest, report, fault)
    retained = store.readable_checkpoints()
    report["files_deleted"] = report["bytes_reclaimed"] = 0
    for uid, (_, job_dir) in parts.items():  # each operator's tables are in its own folder
        mine = [c for c in (r.of_operator(uid) for r in retained) if c is not None]
        deleted, reclaimed = _delete_unpinned(job_dir, mine, fault)
        report["files_deleted"] += deleted
        report["bytes_reclaimed"] += reclaimed
    if retained:
        deleted, reclaimed = store.forget_microbatches_before(min(c.batch_id for c in retained))
        report["files_deleted"] += deleted
        report["bytes_reclaimed"] += reclaimed


def _operators(store: JobStore, checkpoint: CheckpointMetadata) -> dict[str, tuple[CheckpointMetadata, object]]:
    """Each operator's part of ``checkpoint`` and the folder of its tables (a dataflow's later operators have
    their own), by uid, first first."""
    return {uid: (checkpoint.of_operator(uid), store.job_dir if uid == checkpoint.uid else store.operator_dir(uid))
            for uid in checkpoint.uids}


def _killed_cleanup(spark: SparkSession, latest: CheckpointMetadata, job_dir) -> int | None:
    """The microbatch after which a run deleted expired entries' rows (TTL's incremental cleanup) past ``latest``
    and was killed before its checkpoint, or None. A rewrite as of ``latest`` would bring those rows back, and
    the run's replay takes that cleanup as done (``ttl.cleanup.run_incremental_cleanup``): it would not remove them."""
    if not backend_kind(latest.backend).incremental:
        return None
    committed, _ = create_keyed_backend(latest.backend, spark, job_dir, latest.job_id, latest).cleanups_done([])
    return committed if committed is not None and committed > latest.batch_id else None


def _rewrite(spark: SparkSession, store: JobStore, latest: CheckpointMetadata, report: dict, fault) -> int:
    """Rewrite both state tables as of ``latest`` (``report`` gets their figures), then a checkpoint of the same
    microbatch pinning the compacted versions; return its id."""
    checkpoint_id, compacted = store.next_checkpoint_id(), {}
    for uid, (part, _) in _operators(store, latest).items():  # a dataflow: each operator's tables ("uid:keyed" ...)
        state, counted = dict(part.state), {}
        for spec in (keyed_table(part.key_type), OPERATOR_TABLE):
            name = spec.name if uid == latest.uid else f"{uid}:{spec.name}"
            state[spec.name], report["tables"][name], counted[spec.name] = _compact_table(spark, part, spec)
        compacted[uid] = replace(part, checkpoint_id=checkpoint_id, state=state,
                                 entries=_entries_after(spark, part, state[KEYED_TABLE.name],
                                                        counted[KEYED_TABLE.name]))
    fault("after_rewrite")
    first = compacted.pop(latest.uid)
    compacted = replace(CheckpointMetadata.of_operators([first, *compacted.values()]), sink=latest.sink,
                        layout=CHECKPOINT_LAYOUT, completed_ms=int(time.time() * 1000),
                        airflow_run=AirflowRun.of_environment())  # written in this release's layout
    store.publish(compacted)  # from now on runs continue from the compacted tables
    fault("after_checkpoint")
    return compacted.checkpoint_id


def _compact_table(spark: SparkSession, checkpoint: CheckpointMetadata, spec):
    recorded = checkpoint.table(spec.name)
    path, version, b = recorded.path, recorded.version, checkpoint.batch_id
    before = table_snapshot(path, version)
    filtered = ttl_states(checkpoint.descriptors, "compaction") if spec.name == KEYED else {}
    if checkpoint.processing_time is None:
        filtered = {}  # no time to judge expiry by: nothing is filtered
    if not filtered:  # in this process where the table is small and local
        done = _compact_in_process(recorded, b, spec)
        if done is not None:
            scanned, written, per_state = done
            after = table_snapshot(path)
            return (delta_record(path, recorded.generations, after["version"]),
                    {"rows_scanned": scanned, "expired_removed": 0, "superseded_removed": scanned - written,
                     "rows_after": written, "files_before": before["num_files"],
                     "files_after": after["num_files"], "bytes_before": before["size_bytes"],
                     "bytes_after": after["size_bytes"]},
                    per_state)
    rows = spark.read.format("delta").option("versionAsOf", version).load(path)
    scanned = rows.filter(F.col("batch_id") <= b).count()
    # Rows of an attempt killed before its checkpoint are not the checkpoint's: the rewrite drops them.
    live = latest_live(visible(rows, recorded.generations), spec, b)
    expired_removed = 0
    if filtered:
        kept = drop_expired(live, filtered, checkpoint.processing_time)
        mine = F.col("state_name").isin(sorted(filtered))
        expired_removed = live.filter(mine).count() - kept.filter(mine).count()
        live = kept
    live = live.select(*spec.columns)
    if spec.key_type is not None:  # the typed key as the runs' writer makes it; a table made before it gets it
        live = live.withColumn(TYPED_KEY, typed_key(F.col("key"), spec.key_type, lenient=True))
    live = live.cache()
    try:
        count = live.count()
        (live.repartition(*spec.partition_columns).write.format("delta").mode("overwrite")
         .option("replaceWhere", f"batch_id <= {b}").option("mergeSchema", "true")
         .partitionBy(*spec.partition_columns).save(path))
    finally:
        live.unpersist()
    after = table_snapshot(path)
    return (delta_record(path, recorded.generations, after["version"]),
            {"rows_scanned": scanned, "expired_removed": expired_removed,
             "superseded_removed": scanned - count - expired_removed, "rows_after": count,
             "files_before": before["num_files"], "files_after": after["num_files"],
             "bytes_before": before["size_bytes"], "bytes_after": after["size_bytes"]},
            None)


def _compact_in_process(recorded: TableVersion, batch_id: int, spec):
    """``_compact_table``'s rewrite read, selected and written by this process (Arrow and delta-rs, no Spark job)
    for a local table up to ``IN_PROCESS_MAX_BYTES``, one partition at a time (``live_arrow.rewrite_live``).
    Returns (rows scanned, rows written, rows written per state name); None where Spark must do it."""
    from ..delta.live_arrow import rewrite_live

    if table_snapshot(recorded.path, recorded.version)["size_bytes"] > IN_PROCESS_MAX_BYTES:
        return None
    return rewrite_live(recorded.path, recorded.version, spec, batch_id, recorded.generations)


def _entries_after(spark: SparkSession, checkpoint: CheckpointMetadata, keyed: TableVersion,
                   counted: dict[str, int] | None = None) -> dict[str, int]:
    """Entries per state: counted in the compacted keyed table (``counted``: by the in-process rewrite, which
    holds its rows), as the checkpoint has them for the rest."""
    counts = counted
    if counts is None:
        df = spark.read.format("delta").option("versionAsOf", keyed.version).load(keyed.path)
        counts = {r["state_name"]: r["count"] for r in df.filter(F.col("batch_id") <= checkpoint.batch_id)
                  .groupBy("state_name").count().collect()}
    keyed_names = set(counts) | {n for n, d in checkpoint.descriptors.items() if d.scope == KEYED_TABLE.name}
    entries = {n: c for n, c in checkpoint.entries.items() if n not in keyed_names}
    entries.update(counts)
    return {n: c for n, c in sorted(entries.items()) if c}


def _delete_unpinned(job_dir, retained: list[CheckpointMetadata], fault) -> tuple[int, int]:
    """Delete data files of the job's state tables that no retained checkpoint's table version references, the
    log files no retained version needs (``expire_log``: a log would otherwise grow by a commit a run), and
    table folders and snapshots no retained checkpoint pins. Returns (files deleted, bytes reclaimed)."""
    pinned_tables: dict[str, set[str]] = {}
    oldest: dict[str, int] = {}  # per table, the oldest version a retained checkpoint pins
    for c in retained:
        for recorded in c.state.values():
            if recorded.path and recorded.version is not None:
                table = _same(recorded.path)
                pinned_tables.setdefault(table, set()).update(
                    unquote(f) for f in table_files(recorded.path, recorded.version))
                oldest[table] = min(recorded.version, oldest.get(table, recorded.version))
    tables = {folder.name: _tables_under(location(folder)) for folder in JobStore(job_dir).table_folders
              if location(folder).is_dir()}
    found = {_same(t) for ts in tables.values() for t in ts}
    lost = [p for p in pinned_tables if p.startswith(_same(job_dir) + "/") and p not in found]
    if lost:  # a pinned table not found where it should be: delete nothing rather than guess
        raise ConfigError(f"compaction found no table at {lost[0]}, which a retained checkpoint pins; nothing was "
                          f"deleted. Check the job folder {job_dir} (was it moved or copied?)")
    deleted = reclaimed = 0
    for folder, under in tables.items():
        root = location(job_dir) / folder
        for table in under:
            keep = pinned_tables.get(_same(table))
            if keep is None:  # a table no retained checkpoint reads: an old generation or snapshot
                files = walk_files(table)
                size, count = sum(f.stat().st_size for f in files), len(files)
                rmtree(table)
                deleted, reclaimed = deleted + count, reclaimed + size
                continue
            count, size = expire_log(table, oldest[_same(table)])
            deleted, reclaimed = deleted + count, reclaimed + size
            for f in walk_files(table):
                relative = f.relative_to(table).as_posix()
                if relative not in keep:
                    size = f.stat().st_size
                    f.unlink(missing_ok=True)
                    deleted, reclaimed = deleted + 1, reclaimed + size
                    fault("while_deleting")
        remove_empty_folders(root)
    return deleted, reclaimed


def _same(path) -> str:
    """One spelling of a table's path, whatever a checkpoint recorded (a local path fully resolved)."""
    path = location(path)
    return str(path.resolve()) if isinstance(path, Path) else str(path)


def _tables_under(root) -> list:
    """The Delta tables (folders with a ``_delta_log``) under ``root``, at any depth."""
    found = []
    for child in sorted(root.iterdir()):
        if not child.is_dir():
            continue
        if (child / "_delta_log").is_dir():
            found.append(child)
        else:
            found.extend(_tables_under(child))
    return found

