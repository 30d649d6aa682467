"""``lakestate``: register and run jobs, list checkpoints, look at state.

    lakestate register demo.clicks:job
    lakestate jobs
    lakestate run --job clicks [--max-microbatches N] [--max-records N]
    lakestate submit [--print] [--master M] [--driver-memory 2g] [--conf K=V ...] -- --job clicks [...]
    lakestate checkpoints --job clicks
    lakestate state --job clicks --state events (--key 42 | --key-file PATH|-)
                    [--checkpoint N | --savepoint clicks/<name>] [--namespace NS]
    lakestate state edit --savepoint clicks/<name> [--into NAME] [--dry-run] "UPDATE events SET value = 0 WHERE ..."
    lakestate savepoint clicks [--checkpoint N] [--label L]
    lakestate savepoints [--job clicks]
    lakestate dispose clicks/<savepoint name> [--approved-by NAME]
    lakestate restore clicks (--savepoint clicks/<name> | --checkpoint N [--from-job J]) [--parallelism N]
                      [--backend B] [--uid-map OLD=NEW ...] [--allow-non-restored-state] [--approved-by NAME]
    lakestate rescale clicks --parallelism N [--savepoint-first] [--retain-savepoints N] [--approved-by NAME]
    lakestate sql explain|register JOB [--registry PATH]   a SQL job of the pipeline registry (docs/writing/sql.md)
    lakestate sql run JOB [the options of run]

A job whose pipeline registry entry lists ``rescale``, ``restore`` or ``dispose`` in ``require_approval`` is
refused that operation without ``--approved-by NAME`` (who approved it), as its Airflow DAG asks a person first;
so is any job while the registry ($LAKESTATE_REGISTRY, or ./lakestate.toml) does not parse or its entry is bad.

``--warehouse``, ``--root`` and ``--savepoints`` (or LAKESTATE_WAREHOUSE /
LAKESTATE_ROOT / LAKESTATE_SAVEPOINTS) say where the state lives. Listing reads
the catalog files only; ``run``, ``state``, ``savepoint``, ``restore`` and
``rescale`` start Spark.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

from .catalog.job_store import JobStore
from .catalog.jobs import JobCatalog
from .catalog.lease import check_lease_timeout, first_run_note
from .catalog.pipelines import approval_asked, registry_entry
from .errors import ConfigError, LakestateError
from .progress import ROOT as ROOT_LOGGER
from .settings import Settings


def _table(rows: list[list], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def _when(ms: int | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) if ms else "-"


def cmd_register(args, settings: Settings) -> int:
    spec = JobCatalog(settings).register(args.entrypoint, replace=args.replace)
    print(f"registered job {spec.job_id!r} from {args.entrypoint} in {settings.warehouse}")
    return 0


def _warn(message: str) -> None:
    print(f"lakestate: warning: {message}", file=sys.stderr)


class _WarningLine(logging.Handler):
    """Prints the library's warnings (the ``lakestate`` logger) as the command's own warning lines, each once
    per command (a command reads the same folders many times)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message not in self.seen:
            self.seen.add(message)
            _warn(message)


class _ProgressLine(logging.Handler):
    """Prints the library's progress (INFO of the ``lakestate`` loggers, ``progress``) as the command's own lines
    on stdout, as it goes."""

    def __init__(self):
        super().__init__(logging.INFO)

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING:
            print(record.getMessage(), flush=True)


def _route_logging() -> None:
    """The library's loggers (one per wing, under ``lakestate``) to the command's output: progress on stdout,
    warnings on stderr."""
    logger = logging.getLogger(ROOT_LOGGER)
    for old in [h for h in logger.handlers if isinstance(h, (_WarningLine, _ProgressLine))]:
        logger.removeHandler(old)
    logger.addHandler(_WarningLine())
    logger.addHandler(_ProgressLine())
    logger.setLevel(logging.INFO)
    logger.propagate = False


def cmd_jobs(args, settings: Settings) -> int:
    rows = []
    for job_id, record in JobCatalog(settings).records(warn=_warn).items():
        spec = record["spec"]
        store = JobStore(settings.job_dir(job_id))
        latest = store.latest_checkpoint()
        # A job runs as its latest checkpoint says (a rescale or restore may have changed the definition's values).
        rows.append([job_id, latest.backend if latest else spec["backend"],
                     latest.parallelism if latest else spec["parallelism"],
                     latest.max_parallelism if latest else spec["max_parallelism"],
                     latest.checkpoint_id if latest else "-", latest.batch_id if latest else "-",
                     _when(latest.completed_ms) if latest else "-"])
    if not rows:
        print(f"no jobs registered in {settings.warehouse}; register one with: lakestate register <module>:<factory>")
        return 0
    print(_table(rows, ["job", "backend", "parallelism", "max_parallelism", "checkpoint", "microbatch",
                        "completed (UTC)"]))
    return 0


def cmd_checkpoints(args, settings: Settings) -> int:
    JobCatalog(settings).get(args.job)
    checkpoints = JobStore(settings.job_dir(args.job)).readable_checkpoints(warn=_warn)
    if args.json:
        print(json.dumps([c.to_dict() for c in checkpoints], indent=1, sort_keys=True))
        return 0
    if not checkpoints:
        print(f"job {args.job!r} has no checkpoints yet")
        return 0
    rows = []
    for c in checkpoints:
        versions = " ".join(f"{t}@v{i.version}" for t, i in c.state.items() if i is not None and i.version is not None)
        rows.append([c.checkpoint_id, c.batch_id, c.parallelism, c.backend, versions or "-", c.total_entries,
                     c.size_bytes, c.num_files, _when(c.completed_ms)])
    print(_table(rows, ["checkpoint", "microbatch", "parallelism", "backend", "table versions", "entries", "bytes",
                        "files", "completed (UTC)"]))
    return 0


def checkpoints_said(taken: list[int], retained: list[int], skipped: list[int]) -> str:
    """What a run's checkpoints came to: those it took, those the job retains, and the ids it did not write
    (due, but ``num_retained`` would expire them at once; their ids stay used, so a run of N microbatches numbers
    its checkpoints as N runs of one do)."""
    def ids(values):
        return ", ".join(map(str, values)) or "none"

    said = f"checkpoints taken: {ids(taken)}; retained: {ids(retained)}"
    return said + (f" ({'checkpoints' if len(skipped) > 1 else 'checkpoint'} {ids(skipped)} not written: the job "
                   f"keeps only its newest {len(retained)}, num_retained)" if skipped else "")


def cmd_run(args, settings: Settings) -> int:
    from .ops.budgets import check_budgets

    result, entry = _run(args, settings)
    records, seconds = result.records_in, result.seconds
    rate = f", {records / seconds:.{0 if records >= seconds * 10 else 2}f} records/s" if seconds else ""
    print(f"[lakestate] run {result.run_id}: {len(result.batches)} microbatches, {records} records in {seconds:.1f}s"
          f"{rate}; {checkpoints_said(result.checkpoints, result.retained, result.skipped)}")
    # One line a machine reads (the Airflow operator's XCom and Asset event extra).
    print("[lakestate] summary: " + json.dumps(result.summary(args.job), sort_keys=True), flush=True)
    check_budgets(entry, result.late_dropped, settings)
    return 0


def _run(args, settings: Settings):
    """``lakestate run``'s run: the job (registered from the pipeline registry first with ``--registry``) on a
    session of its own or on the Spark Connect server ``--remote``; its result, and the registry entry (None
    without ``--registry``)."""
    from .run.runtime import run_job
    from .spark.session import build_spark

    catalog = JobCatalog(settings)
    max_microbatches, entry = args.max_microbatches, None
    if args.registry is not None:  # the pipeline registry is the job's definition: record it, then run it
        entry = registry_entry(args.job, args.registry or None)
        spec = catalog.register(entry.entrypoint, overrides=entry.overrides(), arguments=entry.sql)
        if spec.job_id != args.job:
            raise ConfigError(f"registry entry [jobs.{args.job}] builds job {spec.job_id!r} from {entry.entrypoint}; "
                              f"the entry's name and the JobSpec's job_id must be the same")
        max_microbatches = max_microbatches or entry.max_microbatches
    spec = catalog.load(args.job)
    spark = build_spark(f"lakestate-{args.job}", master=args.spark_master, s3=settings.on_object_storage or None,
                        remote=args.remote, job_id=args.job)
    return run_job(spark, spec, settings, max_microbatches, args.max_records, lease_timeout_s=args.lease_timeout,
                   lease_wait_s=args.wait_for_lease, end_of_input=args.end_of_input), entry


def submit_command(run_args: list[str], master: str | None = None, driver_memory: str | None = None,
                   conf: list[str] | None = None) -> list[str]:
    """The ``spark-submit`` command of ``lakestate run <run_args>`` by hand: this installation's ``spark-submit``
    (beside the interpreter, else on ``PATH``), the master (``spark_master``: ``master``, $LAKESTATE_SPARK_MASTER,
    spark-defaults.conf's, ``local[*]``), the Delta jars as sessions find them (``LAKESTATE_JARS``, a checkout's
    .cache/jars, ``lakestate jars``' folder; else Delta's package through Ivy), this interpreter for the driver
    and the executors (unless PYSPARK_PYTHON names one), and the package's own entrypoint, as Airflow's tasks
    submit it."""
    import shutil

    from .spark.session import delta_submit_args, jars_conf, spark_master

    beside = Path(sys.executable).parent / "spark-submit"
    binary = str(beside) if beside.is_file() else shutil.which("spark-submit") or "spark-submit"
    command = [binary, "--master", spark_master(master)]
    if driver_memory:
        command += ["--driver-memory", driver_memory]
    for item in conf or []:
        if "=" not in item:
            raise ConfigError(f"--conf takes KEY=VALUE (a Spark property), got {item!r}")
        command += ["--conf", item]
    jars, packages = delta_submit_args(None, None)
    for key, value in jars_conf(jars.split(",") if jars else []).items():
        command += ["--jars", value] if key == "spark.jars" else ["--conf", f"{key}={value}"]
    if packages:
        command += ["--packages", packages]
    python = os.environ.get("PYSPARK_PYTHON") or sys.executable
    command += ["--conf", f"spark.pyspark.python={python}"]
    return [*command, str(Path(__file__).resolve().parent / "entrypoint" / "main.py"), "run", *run_args]


def cmd_submit(args, settings: Settings) -> int:
    import shlex
    import subprocess

    run_args = [a for a in args.run_args if a != "--"] if args.run_args[:1] == ["--"] else list(args.run_args)
    if not run_args:
        raise ConfigError("give the arguments of `lakestate run` after --: lakestate submit -- --job <job>")
    for flag, value in (("--warehouse", args.warehouse), ("--root", args.root), ("--savepoints", args.savepoints)):
        if value and flag not in run_args:
            run_args += [flag, value]
    build_parser().parse_args(["run", *run_args])  # a bad argument of `run` is said now, before any JVM starts
    command = submit_command(run_args, args.master, args.driver_memory, args.conf)
    if args.print:
        print(shlex.join(command))
        return 0
    return subprocess.run(command, check=False).returncode


def _key_texts(args) -> list[str]:
    """The key of ``--key`` (one a column of a composite key, in order), or read from ``--key-file`` (``-``:
    standard input) without one trailing newline, which editors and ``echo`` add; a file is how a key over the
    128 KiB of one argument is given."""
    if args.key_file is None:
        return list(args.key)
    try:
        text = sys.stdin.read() if args.key_file == "-" else Path(args.key_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the key from {args.key_file!r}: {e}; give a readable UTF-8 file, or - for "
                          f"standard input") from None
    return [text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text]


def _shown(key) -> str:
    """A key as messages quote it: whole when short, its start and length when long (a key may be 1 MB)."""
    return repr(key) if len(str(key)) <= 80 else f"{str(key)[:60]!r}... ({len(str(key))} characters)"


def cmd_state(args, settings: Settings) -> int:
    from pyspark.sql import functions as F

    from .keys import parsed_key
    from .ops.state_processor import SavepointReader
    from .types import shown_type

    if args.job is None or args.state is None or (args.key is None and args.key_file is None):
        raise ConfigError("lakestate state needs --job, --state and --key (or --key-file); to change a savepoint's "
                          "state: lakestate state edit --savepoint <job>/<name> \"<UPDATE | DELETE | INSERT>\"")
    record = JobCatalog(settings).get(args.job)
    if args.savepoint is not None and args.checkpoint is not None:
        raise ConfigError("give --checkpoint or --savepoint, not both")
    texts = _key_texts(args)
    if args.savepoint is None and JobStore(settings.job_dir(args.job)).latest_checkpoint() is None:
        raise ConfigError(f"job {args.job!r} has no checkpoint yet; run it first")
    spark = _operation_spark(args, settings, "state")
    reader = (SavepointReader.for_savepoint(spark, args.savepoint, settings) if args.savepoint is not None
              else SavepointReader.for_checkpoint(spark, args.job, args.checkpoint, settings))
    name = args.state if "." in args.state else f"{record['spec']['uid']}.{args.state}"
    key_type = reader.key_type
    # The key is parsed as the job's key type, as Spark parses text ("042" is the LONG 42, "2024-01-31 10:00:00"
    # a TIMESTAMP in UTC); a composite key's columns are given one --key each, in order.
    parts = list(getattr(key_type, "fields", {None: key_type}).items())
    if len(texts) != len(parts):
        names = [n for n, _ in parts]
        raise ConfigError(f"job {args.job!r} is keyed by {len(parts)} column(s) {names}; give one --key each, in "
                          f"that order, not {len(texts)}")
    parsed = spark.range(1).select(*[parsed_key(F.lit(t), kt).alias(f"k{i}")
                                     for i, (t, (_, kt)) in enumerate(zip(texts, parts))]).first()
    for text, value, (_, part_type) in zip(texts, parsed, parts):
        if value is None:
            raise ConfigError(f"key {_shown(text)} is not a {shown_type(part_type.to_schema())}, the key type of "
                              f"job {args.job!r}; give a key of that type")
    key = tuple(parsed) if len(parts) > 1 or getattr(key_type, "fields", None) else parsed[0]
    rows = reader.keyed_entries(name, key, args.namespace)  # only this key's values are decoded
    where = reader.source.where
    if not rows:
        print(f"no entry for key {_shown(key)} (namespace {args.namespace!r}) in state {name!r} at {where} "
              f"(microbatch {reader.meta.batch_id})")
        return 1
    kind = reader.meta.descriptors[name].kind
    if kind == "map":
        value = {r["user_key"]: r["value"] for r in rows}
    elif kind == "list":
        value = [r["value"] for r in sorted(rows, key=lambda r: r["index"])]
    else:
        value = rows[0]["value"]
    result = {"job": args.job, "from": where, "microbatch": reader.meta.batch_id, "state": name, "kind": kind,
              "key": key, "namespace": args.namespace, "value": value}
    if not reader.source.is_savepoint:
        result["checkpoint"] = reader.meta.checkpoint_id
    print(json.dumps(result, default=lambda v: v.hex() if isinstance(v, bytes) else
                     v.asDict(recursive=True) if hasattr(v, "asDict") else str(v)))
    return 0


def cmd_state_edit(args, settings: Settings) -> int:
    from .catalog.savepoints import load_savepoint
    from .ops.state_edit import edit_state, parse_statement

    parse_statement(args.statement)  # a statement that is not one is refused before Spark starts
    args.job = load_savepoint(settings, args.savepoint).job_id
    spark = _operation_spark(args, settings, "state-edit")
    done = edit_state(spark, settings, args.savepoint, args.statement, into=args.into, dry_run=args.dry_run,
                      say=_quiet_say)
    result = {"state": done.state, "statement": done.verb, "touched": done.touched, "entries": done.entries,
              "savepoint": None if done.savepoint is None else f"{done.savepoint.job_id}/{done.savepoint.name}"}
    print(json.dumps(result))
    if done.savepoint is not None:
        print(f"[lakestate] restore a job from it: lakestate restore {args.job} --savepoint {result['savepoint']}")
    return 0


def _quiet_say(line: str) -> None:
    print(line, flush=True)


def _operation_spark(args, settings: Settings, command: str):
    """The session of an operation on ``args.job``: a Spark of this process, or with ``--remote`` a Spark Connect
    session on that server (the session of the job's runs), as ``lakestate run`` has."""
    from .spark.session import build_spark

    return build_spark(f"lakestate-{command}-{args.job}", master=args.spark_master,
                       s3=settings.on_object_storage or None, remote=args.remote, job_id=args.job)


def cmd_savepoint(args, settings: Settings) -> int:
    from .ops.savepoint import check_label, take_savepoint

    check_label(args.label)
    JobCatalog(settings).get(args.job)
    spark = _operation_spark(args, settings, "savepoint")
    savepoint = take_savepoint(spark, settings, args.job, args.checkpoint, args.label, args.wait_for_lease,
                               say=_quiet_say)
    print(f"[lakestate] savepoint path: {savepoint.path}")
    return 0


def cmd_compact(args, settings: Settings) -> int:
    from .ops.compaction import compact_job

    JobCatalog(settings).get(args.job)
    def spark():  # only when there is work: a compaction with nothing to do starts no Spark
        return _operation_spark(args, settings, "compact")

    report = compact_job(spark, settings, args.job, wait_s=args.wait_for_lease, say=_quiet_say)
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
    return 0


def cmd_savepoints(args, settings: Settings) -> int:
    from .catalog.savepoints import list_savepoints

    if args.job:
        JobCatalog(settings).get(args.job)
    found = list_savepoints(settings, args.job, warn=_warn)
    if args.json:
        print(json.dumps([{**s.to_dict(), "path": s.path} for s in found], indent=1, sort_keys=True))
        return 0
    if not found:
        print(f"no savepoints in {settings.savepoints}" + (f" for job {args.job!r}" if args.job else "")
              + "; take one with: lakestate savepoint <job>")
        return 0
    rows = [[f"{s.job_id}/{s.name}", s.checkpoint_id, s.batch_id, s.parallelism, s.backend,
             s.total_entries, s.size_bytes, _when(s.created_ms)] for s in found]
    print(_table(rows, ["savepoint", "checkpoint", "microbatch", "parallelism", "taken from", "entries", "bytes",
                        "created (UTC)"]))
    return 0


def cmd_jars(args, settings: Settings) -> int:
    from .spark.jars import fetch_jars, jars_dir
    from .spark.session import delta_jars

    paths = fetch_jars(args.repository) if args.repository else fetch_jars()
    used = delta_jars()
    print(f"[lakestate] Delta's jars are in {jars_dir()}: " + ", ".join(Path(p).name for p in paths))
    if used != paths:
        print(f"[lakestate] note: sessions and spark-submit use {', '.join(used)} first (LAKESTATE_JARS, or the "
              f"checkout's .cache/jars)")
    else:
        print("[lakestate] sessions and spark-submit (Airflow's tasks too) now get them as jars: no Ivy "
              "resolution at start")
    return 0


def check_approved(job: str, operation: str, approved_by: str | None) -> None:
    """Refuse ``operation`` of ``job`` when its registry entry asks for a person's approval of it (or the registry
    cannot tell: ``approval_asked``) and ``--approved-by`` names nobody; say who approved when one is given. By
    hand, a job without a registry entry (or without a registry) is not asked about."""
    asked = approval_asked(job, operation, strict=False)
    if asked is None:
        return
    if not (approved_by or "").strip():
        fix = " (or fix the registry, so the entry decides)" if asked.problem else ""
        raise ConfigError(f"{asked.why}: a {operation} of it needs a person's approval; give --approved-by NAME, the "
                          f"person who approved it{fix}, or trigger the Airflow DAG lakestate_{operation}, whose "
                          f"approve task asks (in a DAG of your own: LakestateApprovalOperator(task_id='approve', "
                          f"operation='{operation}') before the {operation} task)")
    print(f"[lakestate] {operation} of job {job} approved by {approved_by.strip()} ({asked.why})", flush=True)


def savepoint_job(settings: Settings, ref: str) -> str:
    """The job of savepoint ``ref`` (``<job>/<name>`` or its path): the first folder under the savepoint root."""
    below = str(settings.in_savepoints(ref))[len(str(settings.savepoints).rstrip("/")):]
    return below.strip("/").split("/")[0]


def cmd_dispose(args, settings: Settings) -> int:
    from .catalog.savepoints import dispose_savepoint

    check_approved(savepoint_job(settings, args.savepoint), "dispose", args.approved_by)
    savepoint = dispose_savepoint(settings, args.savepoint)
    print(f"disposed savepoint {savepoint.job_id}/{savepoint.name} ({savepoint.path})")
    return 0


def cmd_restore(args, settings: Settings) -> int:
    from .delta.points import StatePoint
    from .ops.restore import restore_job
    from .restore_plan import check_requested_parallelism, check_restore_backend, parse_uid_map

    if (args.savepoint is None) == (args.checkpoint is None):
        raise ConfigError("give exactly one of --savepoint <job>/<name> and --checkpoint N")
    if args.from_job and args.savepoint:
        raise ConfigError("--from-job goes with --checkpoint; a savepoint names its own job")
    check_approved(args.job, "restore", args.approved_by)
    uid_map = parse_uid_map(args.uid_map)
    check_restore_backend(args.backend)  # before Spark starts
    if args.parallelism is not None:
        check_requested_parallelism(args.parallelism)
    spec = JobCatalog(settings).load(args.job)
    if args.savepoint:
        source = StatePoint.of_savepoint(settings, args.savepoint)
    else:
        from_job = args.from_job or args.job
        JobCatalog(settings).get(from_job)
        source = StatePoint.of_checkpoint(settings, from_job, args.checkpoint)
    spark = _operation_spark(args, settings, "restore")
    checkpoint = restore_job(spark, settings, spec, source, parallelism=args.parallelism, backend=args.backend,
                             uid_map=uid_map, allow_non_restored_state=args.allow_non_restored_state,
                             wait_s=args.wait_for_lease, say=_quiet_say)
    print(f"[lakestate] job {args.job}: restored as checkpoint {checkpoint.checkpoint_id} (microbatch "
          f"{checkpoint.batch_id}, parallelism {checkpoint.parallelism}, backend {checkpoint.backend})")
    return 0


def cmd_rescale(args, settings: Settings) -> int:
    from .ops.restore import rescale_job
    from .restore_plan import already_at, check_requested_parallelism, rescale_request

    check_requested_parallelism(args.parallelism)
    if args.retain_savepoints is not None and args.retain_savepoints < 0:
        raise ConfigError(f"--retain-savepoints must be 0 or more, got {args.retain_savepoints}")
    check_approved(args.job, "rescale", args.approved_by)
    spec = JobCatalog(settings).load(args.job)
    latest = JobStore(settings.job_dir(args.job)).latest_checkpoint()
    if latest is None:
        raise ConfigError(f"job {args.job!r} has no checkpoint to rescale; "
                          + first_run_note(JobStore(settings.job_dir(args.job)).lease_dir))
    if not rescale_request(args.job, latest, args.parallelism, args.operator).changed:  # nothing to write, no Spark
        print(already_at(args.job, latest, args.operator))
        return 0
    spark = _operation_spark(args, settings, "rescale")
    parallelism = {args.operator: args.parallelism} if args.operator else args.parallelism
    checkpoint = rescale_job(spark, settings, spec, parallelism,
                             allow_non_restored_state=args.allow_non_restored_state,
                             savepoint_first=args.savepoint_first, wait_s=args.wait_for_lease, say=_quiet_say)
    parts = checkpoint.parts
    at = ", ".join(f"{p.uid} {p.parallelism}" for p in parts) if len(parts) > 1 else checkpoint.parallelism
    print(f"[lakestate] job {args.job}: checkpoint {checkpoint.checkpoint_id} at parallelism {at}; the next run "
          f"continues from it")
    if args.retain_savepoints is not None:
        from .ops.savepoint import retain_rescale_savepoints

        retain_rescale_savepoints(settings, args.job, args.retain_savepoints, say=_quiet_say)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakestate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--warehouse", help="warehouse directory (default: $LAKESTATE_WAREHOUSE or <root>/warehouse)")
    common.add_argument("--root", help="root every path must stay in (default: $LAKESTATE_ROOT or ./lakestate-data)")
    common.add_argument("--savepoints", help="savepoint root (default: $LAKESTATE_SAVEPOINTS or <root>/savepoints)")
    sub = parser.add_subparsers(dest="command", required=True)
    lease = argparse.ArgumentParser(add_help=False)
    lease.add_argument("--wait-for-lease", type=float, default=0.0,
                       help="seconds to wait for a run of the job in progress to finish (default 0: fail at once)")
    lease.add_argument("--spark-master", default=None)
    _add_remote(lease)
    _add_job_commands(sub, common)
    _add_run_commands(sub, common)
    _add_savepoint_commands(sub, common, lease)
    _add_rewrite_commands(sub, common, lease)
    _add_sql_commands(sub, common)
    return parser


def _add_remote(parser, default=None) -> None:
    parser.add_argument("--remote", default=default or os.environ.get("LAKESTATE_SPARK_REMOTE") or None,
                        help="work on the Spark Connect server at sc://HOST:PORT (scripts/spark-connect.sh) instead "
                             "of a Spark of this process (default: $LAKESTATE_SPARK_REMOTE)")


def _add_job_commands(sub, common) -> None:
    """register, jobs, checkpoints: the warehouse's jobs."""
    p = sub.add_parser("register", parents=[common],
                       help="register a job from a 'module:factory' that returns a JobSpec")
    p.add_argument("entrypoint")
    p.add_argument("--replace", action="store_true", help="point an already registered job id at this entrypoint")
    p.set_defaults(func=cmd_register)
    p = sub.add_parser("jobs", parents=[common], help="list registered jobs and their latest checkpoint")
    p.set_defaults(func=cmd_jobs)
    p = sub.add_parser("jars", parents=[common],
                       help="fetch Delta's jars into this machine's cache once, so no start resolves them")
    p.add_argument("--repository", default=None,
                   help="a Maven repository's URL (default: Maven Central, https://repo1.maven.org/maven2)")
    p.set_defaults(func=cmd_jars)
    p = sub.add_parser("checkpoints", parents=[common], help="list a job's retained checkpoints")
    p.add_argument("--job", required=True)
    p.add_argument("--json", action="store_true", help="print the full checkpoint rows")
    p.set_defaults(func=cmd_checkpoints)


def _add_run_commands(sub, common) -> None:
    """run, state: a run of a job, and a key's value at a checkpoint."""
    p = sub.add_parser("run", parents=[common],
                       help="run a job's microbatches (what jobs/run_microbatches.py does under spark-submit)")
    p.add_argument("--job", required=True)
    _add_run_options(p)
    p.set_defaults(func=cmd_run)
    _add_submit_command(sub, common)
    _add_state_command(sub, common)


def _add_run_options(p) -> None:
    """What a run takes (``run``, ``sql run``)."""
    p.add_argument("--max-microbatches", type=int, default=None, help="stop after N microbatches (default: drain)")
    p.add_argument("--max-records", type=int, default=None,
                   help="plan no more microbatches once the run holds about N input records (Parquet footers)")
    p.add_argument("--end-of-input", action="store_true",
                   help="the inputs are bounded and end here: once drained, the watermark goes to its end, firing "
                        "every event-time window and timer (Flink's end of a bounded input); later records are late")
    p.add_argument("--spark-master", default=None)
    _add_remote(p)
    p.add_argument("--registry", nargs="?", const="", default=None,
                   help="take the job's definition from the pipeline registry (default file: $LAKESTATE_REGISTRY "
                        "or ./lakestate.toml), as the Airflow DAGs do")
    p.add_argument("--wait-for-lease", type=float, default=0.0,
                   help="seconds to wait for another run of the job to finish instead of failing (default 0)")
    p.add_argument("--lease-timeout", type=float, default=60.0,
                   help="seconds of this run's silence after which another run may take the job over (> 0)")


def _add_submit_command(sub, common) -> None:
    p = sub.add_parser("submit", parents=[common],
                       help="run `lakestate run` under spark-submit, with the Delta jars and the package's "
                            "entrypoint (--print: print the command instead)",
                       description="lakestate submit [options] -- <the arguments of lakestate run>")
    p.add_argument("--print", action="store_true", help="print the spark-submit command instead of running it")
    p.add_argument("--master", default=None,
                   help="Spark's master (default: $LAKESTATE_SPARK_MASTER, else spark.master of "
                        "spark-defaults.conf, else local[*])")
    p.add_argument("--driver-memory", default=None,
                   help="the driver's memory, e.g. 4g (default: spark-defaults.conf's)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark property (repeatable)")
    p.add_argument("run_args", nargs=argparse.REMAINDER, metavar="-- RUN ARGS",
                   help="the arguments of `lakestate run`, after --: --job <job> [--max-microbatches N] ...")
    p.set_defaults(func=cmd_submit)


def _add_state_command(sub, common) -> None:
    p = sub.add_parser("state", parents=[common], help="show one key's value of a keyed state at a checkpoint "
                                                       "(state edit: change a savepoint's state with SQL)")
    p.add_argument("--job", default=None, help="the job (required)")
    p.add_argument("--state", default=None, help="state name (qualified 'uid.name' or plain, for the job's uid; "
                                                 "required)")
    key = p.add_mutually_exclusive_group()
    key.add_argument("--key", action="append", help="the key; a composite key's columns one --key each, in order")
    key.add_argument("--key-file", metavar="PATH",
                     help="read the key from PATH ('-': standard input) without its trailing newline: a key over "
                          "128 KiB does not fit a command-line argument")
    p.add_argument("--namespace", default="")
    p.add_argument("--checkpoint", type=int, default=None, help="checkpoint id (default: latest)")
    p.add_argument("--savepoint", default=None, help="read a savepoint (<job>/<name>) instead of a checkpoint")
    p.add_argument("--spark-master", default=None)
    _add_remote(p)
    p.set_defaults(func=cmd_state)
    actions = p.add_subparsers(dest="state_command", metavar="edit")
    # The options `state` takes too, kept when given before `edit` (lakestate state --root R edit ...): no default
    # of edit's overwrites them.
    inherited = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    for action in common._actions:
        inherited.add_argument(*action.option_strings, help=action.help)
    e = actions.add_parser("edit", parents=[inherited], help="write a new savepoint with one UPDATE, DELETE or "
                           "INSERT on a keyed state's table (docs/operating/state-processor.md)")
    e.add_argument("--savepoint", required=True, help="the savepoint to edit (<job>/<name>); it stays as it is")
    e.add_argument("--into", default=None, help="the new savepoint's name (default: <name>-edited)")
    e.add_argument("--dry-run", action="store_true", help="check the statement and count what it changes; write "
                                                          "nothing")
    e.add_argument("statement", help="UPDATE <state> SET ... [WHERE ...] | DELETE FROM <state> [WHERE ...] | "
                                     "INSERT INTO <state> [(columns)] VALUES ... | SELECT ...")
    e.add_argument("--spark-master", default=argparse.SUPPRESS)
    _add_remote(e, default=argparse.SUPPRESS)
    e.set_defaults(func=cmd_state_edit)


def _add_sql_commands(sub, common) -> None:
    """sql explain | register | run: a SQL job of the pipeline registry."""
    p = sub.add_parser("sql", help="explain, register or run a SQL job of the pipeline registry (docs/writing/sql.md)")
    actions = p.add_subparsers(dest="sql_command", required=True)
    for name, help_text in (("explain", "print the query and the operators it compiles to, each uid and its state"),
                            ("register", "record the job the query defines in the warehouse's catalog"),
                            ("run", "register the job, then run its microbatches (as `lakestate run --registry`)")):
        q = actions.add_parser(name, parents=[common], help=help_text)
        q.add_argument("job", help="the job's id: its [jobs.<id>] entry in the registry")
        if name == "run":
            _add_run_options(q)
        else:
            q.add_argument("--registry", default="", help="the pipeline registry file (default: "
                                                          "$LAKESTATE_REGISTRY or ./lakestate.toml)")
        q.set_defaults(func=cmd_sql)


def _sql_entry(job_id: str, registry: str | None):
    entry = registry_entry(job_id, registry or None)
    if entry.sql is None:
        raise ConfigError(f"registry entry [jobs.{job_id}] is a job of {entry.entrypoint}, not a SQL job (field "
                          f"'sql'): use lakestate run --job {job_id} --registry")
    return entry


def cmd_sql(args, settings: Settings) -> int:
    from .catalog.jobs import build_spec
    from .sql.compile import explain

    if args.sql_command == "run":
        args.registry = args.registry or ""
        _sql_entry(args.job, args.registry)
        return cmd_run(args, settings)
    entry = _sql_entry(args.job, args.registry)
    if args.sql_command == "register":
        JobCatalog(settings).register(entry.entrypoint, overrides=entry.overrides(), arguments=entry.sql)
        print(f"registered SQL job {args.job!r} in {settings.warehouse}")
        return 0
    job = build_spec(entry.entrypoint, entry.sql)
    print(entry.sql["sql"].strip())
    print()
    print(explain(job))
    return 0


def _add_savepoint_commands(sub, common, lease) -> None:
    """savepoint, savepoints, dispose: taking, listing and deleting savepoints."""
    p = sub.add_parser("savepoint", parents=[common, lease],
                       help="copy a checkpoint into a self-contained savepoint under the savepoint root")
    p.add_argument("job")
    p.add_argument("--checkpoint", type=int, default=None, help="checkpoint id (default: the latest)")
    p.add_argument("--label", default=None, help="the savepoint's name (default: savepoint-<checkpoint>-<time>)")
    p.set_defaults(func=cmd_savepoint)
    p = sub.add_parser("savepoints", parents=[common], help="list savepoints")
    p.add_argument("--job", default=None)
    p.add_argument("--json", action="store_true", help="print the full savepoint metadata")
    p.set_defaults(func=cmd_savepoints)
    p = sub.add_parser("dispose", parents=[common], help="delete a savepoint")
    p.add_argument("savepoint", help="<job>/<name> as `lakestate savepoints` lists it, or its path")
    _add_approved_by(p, "dispose")
    p.set_defaults(func=cmd_dispose)


def _add_rewrite_commands(sub, common, lease) -> None:
    """restore, compact, rescale: the commands that write a job's next checkpoint or its state tables."""
    p = sub.add_parser("restore", parents=[common, lease],
                       help="make a savepoint or checkpoint the job's next checkpoint, with changes")
    p.add_argument("job", help="the registered job that continues from it")
    p.add_argument("--savepoint", default=None, help="<job>/<name> or a path under the savepoint root")
    p.add_argument("--checkpoint", type=int, default=None, help="a retained checkpoint id")
    p.add_argument("--from-job", default=None, help="the job whose checkpoint it is (default: the job itself)")
    p.add_argument("--parallelism", type=int, default=None, help="default: the source's")
    p.add_argument("--backend", default=None, help="delta or hashmap (default: the source's)")
    p.add_argument("--uid-map", action="append", default=[], metavar="OLD=NEW",
                   help="move the state of operator uid OLD to NEW (repeatable)")
    p.add_argument("--allow-non-restored-state", action="store_true",
                   help="drop state the job no longer registers instead of refusing")
    _add_approved_by(p, "restore")
    p.set_defaults(func=cmd_restore)
    p = sub.add_parser("compact", parents=[common, lease],
                       help="rewrite the job's state tables to their live entries (TTL's compaction filter) and "
                            "delete files no retained checkpoint needs")
    p.add_argument("job")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_compact)
    p = sub.add_parser("rescale", parents=[common, lease],
                       help="write a checkpoint of the job at a new parallelism (keyed state is not moved)")
    p.add_argument("job")
    p.add_argument("--parallelism", type=int, required=True)
    p.add_argument("--operator", metavar="UID", default=None,
                   help="a dataflow's operator to rescale (default: every operator of the job)")
    p.add_argument("--savepoint-first", action="store_true", help="take a savepoint of the latest checkpoint first")
    p.add_argument("--retain-savepoints", type=int, default=None, metavar="N",
                   help="after the rescale, keep only the newest N savepoints rescales took (default: keep all)")
    p.add_argument("--allow-non-restored-state", action="store_true",
                   help="drop raw operator state of subtasks that a scale-down removes instead of refusing")
    _add_approved_by(p, "rescale")
    p.set_defaults(func=cmd_rescale)


def _add_approved_by(parser, operation: str) -> None:
    parser.add_argument("--approved-by", metavar="NAME", default=None,
                        help=f"who approved this {operation}: required when the job's pipeline registry entry lists "
                             f"{operation} in require_approval (or the registry does not parse)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _route_logging()
    for flag in ("max_microbatches", "max_records"):
        value = getattr(args, flag, None)
        if value is not None and value <= 0:
            print(f"lakestate: error: --{flag.replace('_', '-')} must be positive, got {value}", file=sys.stderr)
            return 2
    settings = None
    try:
        if getattr(args, "lease_timeout", None) is not None:
            check_lease_timeout(args.lease_timeout)
        settings = Settings.load(args.warehouse, args.root, args.savepoints)
        return _on_server(args, settings)
    except LakestateError as e:
        print(f"lakestate: error: {e}{_trace_note(e, settings)}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - not one Lakestate foresaw: still one line, the trace in the log
        first = (str(e).strip().splitlines() or [""])[0][:600]
        print(f"lakestate: error: unexpected {type(e).__name__}: {first}{_trace_note(e, settings, always=True)}; "
              f"please report it with that log", file=sys.stderr)
        return 1


def _on_server(args, settings: Settings) -> int:
    """The command; with ``--remote``, an address where no server listens is said in seconds, before anything
    is read or written, and a server lost during the command is one error naming it."""
    from .spark.connect import check_answers, lost_server_said

    remote = getattr(args, "remote", None)
    if remote:
        check_answers(remote)
    with lost_server_said(remote, "the run" if args.command == "run" else "the operation"):
        return args.func(args, settings)


def _trace_note(error: BaseException, settings: Settings | None, always: bool = False) -> str:
    """Write the full trace of an error with a cause (a Spark or worker error under ours) to a log file under
    the root, and say where; errors that are one line already need no log."""
    if error.__cause__ is None and not always:
        return ""
    import traceback

    text = "".join(traceback.format_exception(error))
    if settings is None:
        return "\n" + text
    try:
        logs = settings.root / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        path = logs / f"lakestate-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
        path.write_text(text)
    except OSError:
        return "\n" + text
    return f" (full trace: {path})"


if __name__ == "__main__":
    sys.exit(main())
