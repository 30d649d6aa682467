"""The pipeline registry: one TOML file a user edits, one Airflow pipeline DAG per entry.

(The catalog's ``JobCatalog`` records what was registered; this file is what the user declares.)

    [jobs.clicks]
    entrypoint = "mypackage.jobs:clicks"   # required: a factory returning a JobSpec
    schedule = "@hourly"                   # cron or preset; "none" (default): only triggered
    max_microbatches = 10                  # per run; default: drain the source
    parallelism = 2                        # these four override the JobSpec's own values
    backend = "delta"
    checkpoint_interval = 1
    num_retained = 3
    max_state_bytes = 500_000_000          # budgets, checked after each run: its checkpoint's state bytes
    max_late_records = 1000                # and the records it dropped as late (windows, joins)
    on_over_budget = "fail"                # or "warn"; the run's checkpoint is kept either way
    require_approval = ["rescale", "restore", "dispose"]  # operations that wait for a person's approval first

    [compaction]                           # optional: the lakestate_compaction DAG (state_store/provider/dags.py)
    schedule = "0 3 * * *"                 # cron in UTC (the default: daily at 03:00), a preset, or "none"

Parsing imports nothing but the standard library (and croniter, Airflow's own cron parser, to check a
schedule), so DAG files stay light. Each entry is checked on its own: a bad entry gets an error naming its
field, and the other entries still load. A file that is not valid TOML (a ``[jobs.x]`` declared twice, say)
is one error naming its line: no entry of it can be trusted, but the ids of its ``[jobs.<id>]`` headers are
still known (``declared_job_ids``), so the operation DAGs keep offering them. The ``[compaction]`` table is
checked on its own too (``compaction_schedule``): a bad one takes the compaction DAG away, and nothing else.
Whether an operation waits for a person (``approval_asked``) fails closed: a file that is missing or does not
parse, or a bad entry, asks. ``LAKESTATE_REGISTRY`` says where the file is (default ``./lakestate.toml``).
"""
from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..errors import ConfigError
from ..job import check_job_id
from ..key_groups import UPPER_BOUND_MAX_PARALLELISM
from ..state.backend import BACKENDS, DEFAULT_BACKEND, backend_names
from .sql_entries import SQL_ENTRYPOINT, SQL_FIELDS, check_definition

_PRESETS = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")
_OVERRIDES = ("parallelism", "backend", "checkpoint_interval", "num_retained")
BUDGETS = ("max_state_bytes", "max_late_records")
FIELDS = ("entrypoint", "schedule", "max_microbatches", *_OVERRIDES, *BUDGETS, "on_over_budget", "require_approval",
          *SQL_FIELDS)
# What an entry's require_approval may name: the operation DAGs that change or delete a job's state.
APPROVABLE = ("rescale", "restore", "dispose")
# state_store/provider/dags.py's DAG ids: an entry whose pipeline DAG would take one of them is refused.
OPERATION_DAG_IDS = ("lakestate_savepoint", "lakestate_rescale", "lakestate_compaction", "lakestate_restore",
                     "lakestate_dispose")
# The [compaction] table's one field, and its schedule when the table or the field is absent (daily at 03:00 UTC).
COMPACTION_FIELDS = ("schedule",)
DEFAULT_COMPACTION_SCHEDULE = "0 3 * * *"
# The presets that repeat, as the cron each stands for (Airflow's own airflow.utils.dates.cron_presets): the
# compaction's timetable is given the cron. @once and @continuous are no cron, so compaction refuses them.
CRON_PRESETS = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *",
                "@quarterly": "0 0 1 */3 *", "@yearly": "0 0 1 1 *"}
_HEADER = re.compile(r"^[ \t]*\[[ \t]*jobs[ \t]*\.[ \t]*([A-Za-z0-9_-]+)[ \t]*\][ \t]*(?:#.*)?$", re.M)


@dataclass(frozen=True)
class PipelineEntry:
    job_id: str
    entrypoint: str
    schedule: str | None = None
    max_microbatches: int | None = None
    parallelism: int | None = None
    backend: str | None = None
    checkpoint_interval: int | None = None
    num_retained: int | None = None
    max_state_bytes: int | None = None
    max_late_records: int | None = None
    on_over_budget: str = "fail"
    require_approval: tuple[str, ...] = ()
    sql: dict | None = None  # a SQL job's declaration (sql_entries), the arguments of its entrypoint

    def overrides(self) -> dict:
        """What this entry sets of the JobSpec (fields left out keep the factory's values; a SQL job's
        parallelism is its operators', given to the compiler)."""
        return {name: getattr(self, name) for name in _OVERRIDES
                if getattr(self, name) is not None and not (self.sql is not None and name == "parallelism")}

    @property
    def dag_id(self) -> str:
        return f"lakestate_{self.job_id}"


def registry_path() -> Path:
    return Path(os.environ.get("LAKESTATE_REGISTRY") or "lakestate.toml").expanduser().resolve()


def _positive(where: str, name: str, value, limit: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0 or (limit and value > limit):
        bound = f" and at most {limit}" if limit else ""
        raise ConfigError(f"{where}: field {name!r} must be an integer above 0{bound}, got {value!r}")
    return value


def _check_name(where: str, job_id: str) -> None:
    try:
        check_job_id(job_id)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    dag_id = f"lakestate_{job_id}"
    if dag_id in OPERATION_DAG_IDS:  # Airflow would only say "duplicate DAG id", naming no entry
        raise ConfigError(f"{where}: the entry's name {job_id!r} makes DAG id {dag_id}, the id of Lakestate's "
                          f"{job_id} operation DAG (state_store/provider/dags.py): rename the entry, and the "
                          f"JobSpec's job_id with it")


def _cron_problem(text: str) -> str | None:
    """Why Airflow would refuse ``text`` as a cron schedule, or None. Airflow 3.1 checks a cron with croniter
    (``CronMixin.validate``), so the same check here refuses exactly what it would, while the file is read."""
    from croniter import CroniterError, croniter  # only when there is a cron to check

    try:
        croniter(text)
    except CroniterError as e:
        return str(e)
    return None


def _schedule(where: str, schedule) -> str | None:
    """The entry's schedule: None for "none", else a preset or a cron expression Airflow accepts."""
    if schedule == "none":
        return None
    problem = "not a string" if not isinstance(schedule, str) else None if schedule in _PRESETS \
        else _cron_problem(schedule)
    if problem:
        raise ConfigError(f"{where}: field 'schedule' must be a cron expression ('*/10 * * * *'), a preset "
                          f"({', '.join(_PRESETS)}) or 'none', got {schedule!r} ({problem})")
    return schedule


def pipeline_backends() -> tuple[str, ...]:
    """The backends a pipeline may choose: a DAG run's state must outlive its process (``allowed_in_pipelines``)."""
    return tuple(name for name in backend_names() if BACKENDS[name].allowed_in_pipelines)


def _shown(backend: str) -> str:
    return f"{backend} (the default)" if backend == DEFAULT_BACKEND else backend


def _backend(where: str, backend) -> str | None:
    if isinstance(backend, str) and backend in BACKENDS and not BACKENDS[backend].allowed_in_pipelines:
        raise ConfigError(f"{where}: field 'backend' is {backend!r}, which keeps a job's state in the process of "
                          f"one run only (it is only for tiny in-process tests): a DAG run's state must outlive "
                          f"it; use {' or '.join(_shown(n) for n in pipeline_backends())}")
    if backend is not None and backend not in pipeline_backends():
        raise ConfigError(f"{where}: field 'backend' must be one of {', '.join(pipeline_backends())}, "
                          f"got {backend!r}")
    return backend


def parse_entry(job_id: str, table, path: Path) -> PipelineEntry:
    """One entry, checked field by field (ConfigError naming the file, the entry and its first bad field)."""
    where = f"{path} [jobs.{job_id}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a table of fields ({', '.join(FIELDS)})")
    _check_name(where, job_id)
    unknown = sorted(set(table) - set(FIELDS))
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r}; the fields are {', '.join(FIELDS)}")
    entrypoint, sql = table.get("entrypoint"), None
    if "sql" in table:
        if entrypoint is not None:
            raise ConfigError(f"{where}: give either 'entrypoint' (a factory) or 'sql' (a query), not both")
        entrypoint, sql = SQL_ENTRYPOINT, check_definition(where, job_id, table)
    elif set(table) & {"sink", "tables"}:
        raise ConfigError(f"{where}: fields 'sink' and 'tables' belong to a SQL job (field 'sql'); an entrypoint's "
                          f"factory gives its own")
    elif not isinstance(entrypoint, str) or not re.fullmatch(r"[\w.]+:[\w.]+", entrypoint):
        raise ConfigError(f"{where}: field 'entrypoint' must look like 'package.module:factory' (or give a query "
                          f"as field 'sql'), got {entrypoint!r}")
    schedule = _schedule(where, table.get("schedule", "none"))
    values = {}
    for name, limit in (("max_microbatches", None), ("parallelism", UPPER_BOUND_MAX_PARALLELISM),
                        ("checkpoint_interval", None), ("num_retained", None), *((b, None) for b in BUDGETS)):
        if name in table:
            values[name] = _positive(where, name, table[name], limit)
    on_over = table.get("on_over_budget", "fail")
    if on_over not in ("fail", "warn"):
        raise ConfigError(f"{where}: field 'on_over_budget' must be 'fail' (the run's task fails, naming the "
                          f"figure) or 'warn' (it says so and succeeds), got {on_over!r}")
    approval = table.get("require_approval", [])
    if not isinstance(approval, list) or not set(approval) <= set(APPROVABLE):
        raise ConfigError(f"{where}: field 'require_approval' must be a list of operations among "
                          f"{', '.join(APPROVABLE)}, got {approval!r}")
    if sql is not None:
        sql["parallelism"] = values.get("parallelism")
    return PipelineEntry(job_id, entrypoint, schedule, backend=_backend(where, table.get("backend")),
                         on_over_budget=on_over, require_approval=tuple(approval), sql=sql, **values)


def registry_text(path: str | os.PathLike | None = None) -> str | None:
    """The registry file's text, None when there is none: read once by a DAG file's parse, which hands it to
    ``declared_job_ids`` and ``compaction_schedule``."""
    path = Path(path) if path is not None else registry_path()
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def load_registry(path: str | os.PathLike | None = None,
                  text: str | None = None) -> tuple[dict[str, PipelineEntry], dict[str, str]]:
    """The registry's good entries by job id, and an error per bad one (``text``: the file's, already read). A
    file that cannot be read or parsed at all is one ConfigError."""
    path = Path(path) if path is not None else registry_path()
    if text is None:
        text = registry_text(path)
    if text is None:
        raise ConfigError(f"no pipeline registry at {path}: create it (see README, 'Airflow'), or set "
                          f"LAKESTATE_REGISTRY to its path")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _not_toml(path, text, e) from None
    jobs = data.get("jobs", {})
    extra = sorted(set(data) - {"jobs", "compaction"})
    if not isinstance(jobs, dict) or extra:
        got = f"top-level key {extra[0]!r}" if extra else f"jobs = {jobs!r}"
        raise ConfigError(f"the pipeline registry {path} must hold only [jobs.<job id>] tables and a [compaction] "
                          f"table, not {got}: put each job's fields under its [jobs.<job id>] header, and the "
                          f"compaction's schedule under [compaction]")
    entries, errors = {}, {}
    for job_id, table in jobs.items():
        try:
            entries[job_id] = parse_entry(job_id, table, path)
        except ConfigError as e:
            errors[job_id] = str(e)
    return entries, errors


def _headers(text: str) -> list[tuple[str, int]]:
    """The ``[jobs.<id>]`` headers of a registry's text with their line numbers, read line by line: what can
    be known of a file that is not valid TOML."""
    return [(m[1], text.count("\n", 0, m.start()) + 1) for m in _HEADER.finditer(text)]


def _not_toml(path: Path, text: str, error: tomllib.TOMLDecodeError) -> ConfigError:
    """The parse error naming the file and the line (tomllib says it only at the end of its message), with the
    fix; a table declared twice, the likely slip, is named with both of its lines."""
    at = re.search(r"at line (\d+)", str(error))
    line = int(at[1]) if at else None
    first = {}
    for job_id, number in _headers(text):
        if job_id in first and number == line:
            return ConfigError(f"{path}, line {line}: [jobs.{job_id}] is declared again (first at line "
                               f"{first[job_id]}), and TOML allows a table once, so no entry of the file can be "
                               f"trusted and no pipeline DAG loads: merge the two [jobs.{job_id}] tables into one, "
                               f"or rename one")
        first.setdefault(job_id, number)
    return ConfigError(f"{path}{f', line {line}' if line else ''}: the pipeline registry is not valid TOML "
                       f"({error}), so no pipeline DAG loads: fix that line")


def declared_job_ids(path: str | os.PathLike | None = None, text: str | None = None) -> list[str]:
    """The job ids the operation DAGs (savepoint, rescale, compaction) offer: the registry's good entries; when
    the file does not parse, the ids of the ``[jobs.<id>]`` headers that can be read, so one bad line does not
    take the operations of every job away (the pipeline DAG file shows the error); none without a file.
    ``text``: the file's, already read (``registry_text``)."""
    path = Path(path) if path is not None else registry_path()
    text = registry_text(path) if text is None else text
    if text is None:
        return []
    try:
        return sorted(load_registry(path, text)[0])
    except ConfigError:
        return sorted({job_id for job_id, _ in _headers(text) if _good_name(job_id)})


def _good_name(job_id: str) -> bool:
    try:
        _check_name("", job_id)
    except ConfigError:
        return False
    return True


def registry_entry(job_id: str, path: str | os.PathLike | None = None) -> PipelineEntry:
    entries, errors = load_registry(path)
    if job_id in errors:
        raise ConfigError(errors[job_id])
    if job_id not in entries:
        raise ConfigError(f"job {job_id!r} is not in the pipeline registry {path or registry_path()} "
                          f"(it has: {', '.join(sorted(entries)) or 'none'})")
    return entries[job_id]


class ApprovalAsked(NamedTuple):
    """Why an operation of a job must wait for a person's approval: ``why``, a sentence; ``problem``: the
    registry cannot be read or the job's entry is bad, so its own ``require_approval`` is unknown (the fix is
    to mend the registry), rather than the entry asking."""
    why: str
    problem: bool


def approval_asked(job_id: str, operation: str, path: str | os.PathLike | None = None, *,
                   strict: bool = True) -> ApprovalAsked | None:
    """Whether ``operation`` (rescale, restore or dispose) of job ``job_id`` must be approved by a person first,
    and why; None when the job's entry is read and does not list it in ``require_approval``.

    Fails closed: a registry that is missing or not valid TOML, or a job whose entry has a problem (a bad field
    anywhere in it: ``max_state_bytes = "1GB"``), says nothing to be trusted about the entry's
    ``require_approval``, so the operation is asked about too. ``strict=False`` (the CLI by hand) lets a job go
    on unasked where there is no pipeline registry at all (no ``LAKESTATE_REGISTRY`` and no ``./lakestate.toml``)
    or the registry has no entry of the job (one registered by hand, not a pipeline)."""
    explicit = path is not None or bool(os.environ.get("LAKESTATE_REGISTRY"))
    path = Path(path) if path is not None else registry_path()
    unknown = f"so whether job {job_id!r} asks for an approval of a {operation} (require_approval) is unknown"
    if not strict and not explicit and not path.exists():
        return None
    try:
        entries, errors = load_registry(path)
    except ConfigError as e:
        return ApprovalAsked(f"the pipeline registry cannot be read ({e}), {unknown}", True)
    if job_id in errors:
        return ApprovalAsked(f"job {job_id!r}'s registry entry has a problem ({errors[job_id]}), {unknown}", True)
    entry = entries.get(job_id)
    if entry is None:
        return None if not strict else ApprovalAsked(
            f"job {job_id!r} has no entry in the pipeline registry {path} (it has: "
            f"{', '.join(sorted(entries)) or 'none'}), {unknown}", True)
    if operation in entry.require_approval:
        return ApprovalAsked(f"job {job_id!r}'s registry entry ({path} [jobs.{job_id}]) lists {operation} in "
                             f"require_approval", False)
    return None


def parse_compaction(table, path: Path) -> str | None:
    """The ``[compaction]`` table's schedule: a cron expression in UTC (a preset becomes its cron), or None for
    "none" (only triggered); ``DEFAULT_COMPACTION_SCHEDULE`` without the field. A ConfigError names the file, the
    field, its value and the fix."""
    where = f"{path} [compaction]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a table of one field, schedule, got {table!r}: write "
                          f"[compaction] on a line of its own and schedule = \"0 3 * * *\" under it")
    unknown = sorted(set(table) - set(COMPACTION_FIELDS))
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r} (= {table[unknown[0]]!r}); the only field is "
                          f"'schedule' (a cron expression or 'none'): remove it, or, if it is the schedule "
                          f"misspelt, name it schedule")
    schedule = table.get("schedule", DEFAULT_COMPACTION_SCHEDULE)
    if schedule == "none":
        return None
    if isinstance(schedule, str) and schedule in CRON_PRESETS:
        return CRON_PRESETS[schedule]
    problem = ("not a string" if not isinstance(schedule, str)
               else "not a preset that repeats" if schedule.startswith("@") else _cron_problem(schedule))
    if problem:
        raise ConfigError(f"{where}: field 'schedule' must be a cron expression in UTC ('0 3 * * *', the default: "
                          f"daily at 03:00), a preset ({', '.join(CRON_PRESETS)}) or 'none' (only triggered), "
                          f"got {schedule!r} ({problem})")
    return schedule


def compaction_schedule(path: str | os.PathLike | None = None, text: str | None = None) -> str | None:
    """The schedule of the ``lakestate_compaction`` DAG, from the registry's ``[compaction]`` table
    (``parse_compaction``): a cron expression in UTC, or None (only triggered). ``DEFAULT_COMPACTION_SCHEDULE``
    without the table, and when the file cannot be read or is not valid TOML (the pipeline DAG file shows that
    error). A bad table is a ConfigError. ``text``: the file's, already read (``registry_text``)."""
    path = Path(path) if path is not None else registry_path()
    text = registry_text(path) if text is None else text
    try:
        data = tomllib.loads(text) if text is not None else {}
    except tomllib.TOMLDecodeError:
        return DEFAULT_COMPACTION_SCHEDULE
    return parse_compaction(data.get("compaction", {}), path)
