"""The durable catalog, kept as JSON files beside the tables in the warehouse.

    <warehouse>/_lakestate/jobs/<job>.json           registered jobs
    <warehouse>/jobs/<job>/_meta/plans/<m>.json      microbatch m's source range (written before it runs)
    <warehouse>/jobs/<job>/_meta/commits/<m>.json    microbatch m is done
    <warehouse>/jobs/<job>/_meta/checkpoints/chk-<n>.json   completed checkpoints (written last)
    <warehouse>/jobs/<job>/_meta/compaction.json     the last compaction's report

Every file is written so that a reader never sees half of one (``storage.write_atomic``:
a temporary name and a rename locally, a single upload on object storage). Plain files keep the catalog readable without Spark (the CLI,
the Airflow plugin).
"""
from __future__ import annotations

import importlib
import json
import logging
import re
import time
from pathlib import Path
from typing import Any

from . import storage
from .checkpoint import CheckpointMetadata, MicrobatchPlan, discover_descriptors
from .errors import ConfigError, JobNotFound, LakestateError
from .job import JobSpec, check_job_id
from .settings import Settings


def write_json_atomic(path, data: Any) -> None:
    storage.write_atomic(path, json.dumps(data, indent=1, sort_keys=True))


def read_json(path) -> Any:
    return storage.read_json(path)


class CorruptCheckpoint(ConfigError):
    """A checkpoint's file cannot be read."""

    def __init__(self, message: str, checkpoint_id: int):
        super().__init__(message)
        self.checkpoint_id = checkpoint_id


# What the CLI and the Lakestate page take from a record's spec.
_SPEC_FIELDS = ("uid", "backend", "parallelism", "max_parallelism")


class JobRegistry:
    """Jobs by id: each points at the Python factory that builds its JobSpec."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.dir = settings.catalog_dir / "jobs"

    def register(self, entrypoint: str, replace: bool = False, overrides: dict | None = None) -> JobSpec:
        """Record the job ``entrypoint`` builds, with ``overrides`` of its JobSpec fields (the pipeline
        registry's parallelism, backend, ...) applied now and whenever it is loaded."""
        overrides = dict(overrides or {})
        spec = build_spec(entrypoint).with_overrides(**overrides)
        spec.validate()
        # States (and their TTL) are declared in the user's open(): calling the hooks once on the driver, as a
        # run's start does, refuses a bad declaration before the record is written, not at the first run.
        discover_descriptors(spec)
        sink = self.settings.sink(spec.sink)  # refused before the record is written
        spec.sink = str(sink)
        record = {"entrypoint": entrypoint, "registered_at": int(time.time() * 1000), "spec": spec.describe(),
                  "overrides": overrides}
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
        spec = build_spec(record["entrypoint"]).with_overrides(**record.get("overrides", {}))
        if spec.job_id != job_id:
            raise ConfigError(f"{record['entrypoint']} now builds job {spec.job_id!r}, not {job_id!r}; register it again")
        return spec


def build_spec(entrypoint: str) -> JobSpec:
    """Import ``module:factory`` and call it; the factory returns a JobSpec."""
    module_name, _, attr = entrypoint.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"entrypoint {entrypoint!r} must look like 'package.module:factory'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"cannot import {module_name!r} for entrypoint {entrypoint!r}: {e}; check PYTHONPATH") from e
    factory = getattr(module, attr, None)
    if factory is None:
        raise ConfigError(f"{module_name!r} has no {attr!r} (entrypoint {entrypoint!r})")
    try:
        spec = factory() if callable(factory) and not isinstance(factory, JobSpec) else factory
    except LakestateError:
        raise
    except Exception as e:  # the user's factory failed: name it, keep the cause for the trace
        raise ConfigError(f"entrypoint {entrypoint} failed while building the job: {type(e).__name__}: {e}; "
                          f"it must be a factory that takes no arguments and returns a JobSpec") from e
    if not isinstance(spec, JobSpec):
        raise ConfigError(f"{entrypoint} must return a state_store.JobSpec, got {type(spec).__name__}")
    return spec


class JobMeta:
    """One job's plans, commits and checkpoints; ``warn`` is told of files in their folders that are not
    Lakestate's (default: the ``lakestate`` logger)."""

    def __init__(self, job_dir: Path, warn=None):
        self.job_dir = job_dir
        self.dir = job_dir / "_meta"
        self.plans, self.commits, self.checkpoints_dir = self.dir / "plans", self.dir / "commits", self.dir / "checkpoints"
        self._warn = warn or logging.getLogger("lakestate").warning
        self._strays: set[str] = set()

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

    def last_commit(self) -> int | None:
        ids = self._numbered(self.commits)
        return ids[-1] if ids else None

    def checkpoint_ids(self) -> list[int]:
        return self._numbered(self.checkpoints_dir, "chk-")

    def checkpoint(self, checkpoint_id: int) -> CheckpointMetadata:
        p = self.checkpoints_dir / f"chk-{checkpoint_id}.json"
        if not p.exists():
            raise ConfigError(f"checkpoint {checkpoint_id} does not exist; retained: {self.checkpoint_ids()}")
        try:
            return CheckpointMetadata.from_dict(read_json(p))
        except (ValueError, TypeError, AttributeError) as e:
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

    def last_compaction(self) -> dict | None:
        """The report of the job's last compaction (``compaction.compact_job``), or None."""
        path = self.dir / "compaction.json"
        return read_json(path) if path.exists() else None

    def write_compaction(self, report: dict) -> None:
        write_json_atomic(self.dir / "compaction.json", report)

    def write_checkpoint(self, checkpoint: CheckpointMetadata) -> None:
        write_json_atomic(self.checkpoints_dir / f"chk-{checkpoint.checkpoint_id}.json", checkpoint.to_dict())

    def expire_checkpoints(self, num_retained: int) -> list[CheckpointMetadata]:
        """Forget all but the newest ``num_retained`` checkpoints; return the ones removed."""
        ids = self.checkpoint_ids()
        removed = []
        for cid in ids[:-num_retained] if len(ids) > num_retained else []:
            removed.append(self.checkpoint(cid))
            (self.checkpoints_dir / f"chk-{cid}.json").unlink()
        return removed
