"""What the Lakestate page shows, read from the warehouse catalog and the state tables' Delta logs only (no Spark,
no user code): registered jobs, their retained checkpoints and savepoints, and state sizes per state name and per
key group."""
from __future__ import annotations

from dataclasses import dataclass, field

from state_store.catalog import JobRegistry
from state_store.job_store import JobStore as JobStore
from state_store.records import KEYED, STATE_TABLES
from state_store.delta_log import partition_sizes
from state_store.savepoint import list_savepoints
from state_store.settings import Settings


@dataclass
class JobOverview:
    job_id: str
    entrypoint: str
    parallelism: int
    max_parallelism: int
    backend: str
    checkpoints: list = field(default_factory=list)  # CheckpointMetadata, oldest first
    savepoints: list = field(default_factory=list)  # SavepointMetadata, oldest first
    compaction: dict | None = None  # the last compaction's report
    problems: list[str] = field(default_factory=list)
    state_bytes: dict[str, list[int]] = field(default_factory=dict)  # state name -> [bytes, files]
    key_group_bytes: list[int] = field(default_factory=list)  # index: key group

    @property
    def latest(self):
        return self.checkpoints[-1] if self.checkpoints else None

    @property
    def dag_id(self) -> str:
        return f"lakestate_{self.job_id}"


def job_overviews(settings: Settings) -> tuple[list[JobOverview], list[str]]:
    """Every registered job's overview, and the catalog's own problems: a job record that cannot be read is
    named there and skipped, so it never hides the other jobs."""
    problems: list[str] = []
    records = JobRegistry(settings).records(warn=problems.append)
    return [job_overview(settings, job_id, record) for job_id, record in records.items()], problems


def job_overview(settings: Settings, job_id: str, record: dict) -> JobOverview:
    spec = record["spec"]
    overview = JobOverview(job_id, record["entrypoint"], spec["parallelism"], spec["max_parallelism"], spec["backend"])
    meta = JobStore(settings.job_dir(job_id), warn=overview.problems.append)
    overview.checkpoints = meta.readable_checkpoints(warn=overview.problems.append)
    overview.savepoints = list_savepoints(settings, job_id, warn=overview.problems.append)
    try:
        overview.compaction = meta.last_compaction()
    except (OSError, ValueError) as e:
        overview.problems.append(f"the last compaction report cannot be read: {e}")
    latest = overview.latest
    if latest is None:
        return overview
    overview.parallelism, overview.max_parallelism, overview.backend = (latest.parallelism, latest.max_parallelism,
                                                                         latest.backend)
    overview.key_group_bytes = [0] * latest.max_parallelism
    for table in STATE_TABLES:
        recorded = latest.table(table)
        if recorded.path is None or recorded.version is None:
            continue
        try:
            sizes = partition_sizes(recorded.path, recorded.version)
        except (OSError, ValueError) as e:  # a damaged table: shown, not fatal to the page
            overview.problems.append(f"{table} state table {recorded.path}: {e}")
            continue
        for values, (size, files) in sizes.items():
            name = values[0] if values else table
            cell = overview.state_bytes.setdefault(name, [0, 0])
            cell[0] += size
            cell[1] += files
            if table == KEYED and len(values) > 1 and values[1] is not None:
                group = int(values[1])
                if 0 <= group < len(overview.key_group_bytes):
                    overview.key_group_bytes[group] += size
    return overview
