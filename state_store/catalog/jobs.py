"""The durable catalog, kept as JSON files beside the tables in the warehouse.

    <warehouse>/_lakestate/jobs/<job>.json           registered jobs

(a job's own files are ``job_store``'s).

Every file is written so that a reader never sees half of one (``storage.write_atomic``:
a temporary name and a rename locally, a single upload on object storage). Plain files keep the catalog readable
without Spark (the CLI, the Airflow plugin).
"""
from __future__ import annotations

import importlib
import time

from ..errors import ConfigError, JobNotFound, LakestateError
from ..graph import Job, as_job
from ..job import JobSpec, check_job_id
from ..registered_states import discover_descriptors
from ..settings import Settings
from ..side_outputs import check_one_writer_per_table
from ..sinks import sink_name
from .job_store import read_json, write_json_atomic

# What the CLI and the Lakestate page take from a record's spec.
_SPEC_FIELDS = ("uid", "backend", "parallelism", "max_parallelism")


class JobCatalog:
    """Jobs by id: each points at the Python factory that builds its JobSpec."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.dir = settings.catalog_dir / "jobs"

    def register(self, entrypoint: str, replace: bool = False, overrides: dict | None = None,
                 arguments: dict | None = None) -> JobSpec | Job:
        """Record the job ``entrypoint`` builds (given ``arguments``: a SQL job's declaration), with ``overrides``
        of its JobSpec fields (the pipeline registry's parallelism, backend, ...) applied now and whenever it is
        loaded."""
        overrides = dict(overrides or {})
        spec = build_spec(entrypoint, arguments).with_overrides(**overrides)
        spec.validate()
        # States (and their TTL) are declared in the user's open(): calling the hooks once on the driver, as a
        # run's start does, refuses a bad declaration before the record is written, not at the first run.
        for op in as_job(spec).operators:
            discover_descriptors(op)
        sink = self.settings.sink(sink_name(spec.sink))  # refused before the record is written
        spec = spec.with_overrides(sink=str(sink))
        self._check_tables_are_its_own(spec)
        record = {"entrypoint": entrypoint, "registered_at": int(time.time() * 1000), "spec": spec.describe(),
                  "overrides": overrides, **({"arguments": arguments} if arguments is not None else {})}
        existing = self.dir / f"{spec.job_id}.json"
        if existing.exists():
            try:
                old = self._read(existing)
            except ConfigError:
                if not replace:
                    raise
                old = record  # a damaged record is what --replace is for
            if old["entrypoint"] != entrypoint and not replace:
                raise ConfigError(f"job {spec.job_id!r} is already registered from {old['entrypoint']}; "
                                  f"to point it at {entrypoint} instead, register again with --replace")
            record["registered_at"] = old.get("registered_at", record["registered_at"])
        self.settings.check_writable(sink)
        write_json_atomic(existing, record)
        return spec

    def _tables(self, described: dict) -> set[str]:
        """The tables a job writes (its sinks and every side output's), from its ``describe()``, as resolved paths."""
        paths = [described["sink"], *(described.get("sinks") or {}).values(),
                 *(described.get("side_outputs") or {}).values()]
        return {str(self.settings.sink(p)) for p in paths}

    def _check_tables_are_its_own(self, spec: JobSpec | Job) -> None:
        """Refuse a job whose sink or side output table another registered job writes: two jobs' rows (and their
        ``txnAppId`` versions) in one table could never be told apart. Side outputs are ``<sink>_<tag>``, so
        sink ``x`` with tag ``late_a`` and sink ``x_late`` with tag ``a`` meet in ``x_late_a``."""
        check_one_writer_per_table(spec.tables(), self.settings.sink)  # two spellings of one table in one job
        mine = self._tables(spec.describe())
        for job_id, record in self.records(warn=lambda message: None).items():
            if job_id == spec.job_id:
                continue
            shared = sorted(mine & self._tables(record["spec"]))
            if shared:
                raise ConfigError(f"job {spec.job_id!r} would write table {shared[0]}, which registered job "
                                  f"{job_id!r} writes (as its sink or a side output, '<sink>_<tag name>'); give "
                                  f"job {spec.job_id!r} another sink, or rename the side output")

    def ids(self, warn=None) -> list[str]:
        """The ids of the registered jobs, sorted; ``warn`` is told of each file in the catalog folder whose name
        is not a job id (nothing Lakestate wrote)."""
        if not self.dir.is_dir():
            return []
        found = []
        for path in sorted(self.dir.glob("*.json")):
            if path.name.startswith("."):  # a write in progress (storage.write_atomic)
                continue
            try:
                found.append(check_job_id(path.stem))
            except ConfigError as e:
                if warn is not None:
                    warn(f"{path} is not a job record: {e}; rename or remove it")
        return found

    def records(self, warn) -> dict[str, dict]:
        """Every job record that can be read, by job id; ``warn`` is told of each one that cannot, and why:
        one damaged record must not hide the others."""
        found = {}
        for job_id in self.ids(warn):
            try:
                found[job_id] = self._read(self.dir / f"{job_id}.json")
            except ConfigError as e:
                warn(str(e))
        return found

    def get(self, job_id: str) -> dict:
        """Job ``job_id``'s record (entrypoint, spec, overrides); a clear error when it is not registered or its
        record cannot be read."""
        check_job_id(job_id)
        path = self.dir / f"{job_id}.json"
        if not path.exists():
            known = ", ".join(self.ids()) or "none"
            raise JobNotFound(
                f"job {job_id!r} is not registered in {self.settings.warehouse} (registered: {known}); "
                f"register it with: lakestate register <module>:<factory>"
            )
        return self._read(path)

    @staticmethod
    def _read(path) -> dict:
        """The record at ``path``, checked for what every reader of the catalog takes from it."""
        fix = f"register the job again (lakestate register <module>:<factory> --replace), or remove {path}"
        try:
            record = read_json(path)
        except (OSError, ValueError) as e:  # truncated, not UTF-8, unreadable
            raise ConfigError(f"job record {path} cannot be read ({type(e).__name__}: {e}); {fix}") from None
        if not isinstance(record, dict):
            raise ConfigError(f"job record {path} is not a JSON object; {fix}")
        for name, kind in (("entrypoint", str), ("spec", dict)):
            if not isinstance(record.get(name), kind):
                raise ConfigError(f"job record {path} has no {name!r} ({kind.__name__}); {fix}")
        missing = [f for f in _SPEC_FIELDS if f not in record["spec"]]
        if missing:
            raise ConfigError(f"job record {path} has a 'spec' without {missing}; {fix}")
        return record

    def load(self, job_id: str) -> JobSpec:
        record = self.get(job_id)
        spec = build_spec(record["entrypoint"], record.get("arguments")).with_overrides(**record.get("overrides", {}))
        if spec.job_id != job_id:
            raise ConfigError(f"{record['entrypoint']} now builds job {spec.job_id!r}, not {job_id!r}; "
                              "register it again")
        return spec


def _registered_spec(job_id: str, settings: Settings | None) -> dict:
    """The definition job ``job_id`` was last registered with (a pipeline run registers it), or {} when it is not
    registered yet or its record cannot be read: for a DAG file, which must parse without the job's code."""
    try:
        settings = settings or Settings.load()
        return JobCatalog._read(settings.catalog_dir / "jobs" / f"{check_job_id(job_id)}.json")["spec"]
    except (LakestateError, OSError, ValueError):
        return {}


def registered_side_outputs(job_id: str, settings: Settings | None = None) -> list[str]:
    """The side output names job ``job_id`` was last registered with ([] when unknown: ``_registered_spec``)."""
    return sorted(_registered_spec(job_id, settings).get("side_outputs") or {})


def registered_branch_sinks(job_id: str, settings: Settings | None = None) -> list[str]:
    """In a graph (``Dataflow.graph``), the uids of the operators that write a sink other than the job's own, as
    job ``job_id`` was last registered ([] for any other job, or when unknown: ``_registered_spec``)."""
    spec = _registered_spec(job_id, settings)
    return [uid for uid, sink in (spec.get("sinks") or {}).items() if sink != spec.get("sink")]


def import_factory(entrypoint: str, what: str = "entrypoint"):
    """The object ``module:factory`` names (``what``: what it is for, in the errors)."""
    module_name, _, attr = entrypoint.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{what} {entrypoint!r} must look like 'package.module:factory'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"cannot import {module_name!r} for {what} {entrypoint!r}: {e}; check PYTHONPATH") from e
    factory = getattr(module, attr, None)
    if factory is None:
        raise ConfigError(f"{module_name!r} has no {attr!r} ({what} {entrypoint!r})")
    return factory


def build_spec(entrypoint: str, arguments: dict | None = None) -> JobSpec | Job:
    """Import ``module:factory`` and call it (with ``arguments``, recorded with it: a SQL job's declaration); the
    factory returns a JobSpec (or a dataflow's Job)."""
    factory = import_factory(entrypoint)
    try:
        spec = (factory(**(arguments or {})) if callable(factory) and not isinstance(factory, (JobSpec, Job))
                else factory)
    except LakestateError:
        raise
    except Exception as e:  # the user's factory failed: name it, keep the cause for the trace
        raise ConfigError(f"entrypoint {entrypoint} failed while building the job: {type(e).__name__}: {e}; "
                          f"it must be a factory that takes no arguments and returns a JobSpec") from e
    if not isinstance(spec, (JobSpec, Job)):
        raise ConfigError(f"{entrypoint} must return a state_store.JobSpec (or a Job, from Dataflow...sink_to), "
                          f"got {type(spec).__name__}")
    return spec
