"""What the Lakestate page shows, read from the warehouse catalog and the state tables' Delta logs only (no Spark,
no user code): registered jobs, their retained checkpoints and savepoints, their compactions, and state sizes per
state name, per key group and per subtask."""
from __future__ import annotations

from dataclasses import dataclass, field

from state_store.catalog.job_store import JobStore as JobStore
from state_store.catalog.jobs import JobCatalog
from state_store.catalog.pipelines import load_registry
from state_store.catalog.savepoints import list_savepoints
from state_store.catalog.sql_entries import SQL_ENTRYPOINT
from state_store.delta.sizes import human_bytes, pinned_partitions  # noqa: F401 - human_bytes: the page's, from here
from state_store.errors import ConfigError
from state_store.records.layout import KEYED
from state_store.records.metadata import AirflowRun, CheckpointMetadata
from state_store.settings import Settings

COMPACTIONS_SHOWN = 20


@dataclass
class JobOverview:
    job_id: str
    entrypoint: str
    parallelism: int
    max_parallelism: int
    backend: str
    checkpoints: list = field(default_factory=list)  # CheckpointMetadata, oldest first
    savepoints: list = field(default_factory=list)  # SavepointMetadata, oldest first
    compaction: dict | None = None  # the report of the last compaction that did work
    compactions: list[dict] = field(default_factory=list)  # every compaction's report, newest first
    problems: list[str] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)  # the job's graph: (from, to), in the order records flow
    state_bytes: dict[str, list[int]] = field(default_factory=dict)  # state name -> [bytes, files]
    key_group_bytes: list[int] = field(default_factory=list)  # index: key group
    # A dataflow's operators (or a window job's one) at the latest checkpoint, first first: uid, parallelism, max
    # parallelism, live entries, open windows (None: not a window operator), bytes and files of the table versions
    # it pins
    operators: list[dict] = field(default_factory=list)
    # The budgets of its pipeline registry entry (``catalog.pipelines``; none set: None), checked after each run
    budget: dict | None = None
    sql: str | None = None  # a SQL job's query (its entrypoint is then the SQL compiler's)

    @property
    def latest(self):
        return self.checkpoints[-1] if self.checkpoints else None

    @property
    def dag_id(self) -> str:
        return f"lakestate_{self.job_id}"

    def subtask_bytes(self) -> list[tuple[int, int, int]]:
        """``(first key group, last key group, keyed bytes)`` per subtask of the latest checkpoint: the key
        groups each subtask owns (its band on the chart) and what they hold, so skew is seen per subtask."""
        if self.latest is None:
            return []
        return [(start, end, sum(self.key_group_bytes[start:end + 1]))
                for start, end in self.latest.key_group_ranges]

    def origin(self, checkpoint: CheckpointMetadata) -> tuple[str, str]:
        """``(kind, text)`` of where ``checkpoint`` came from: kind "compaction", "rescale", "restore", or ""
        for a checkpoint a run took."""
        compacted = {r.get("new_checkpoint"): r.get("checkpoint") for r in self.compactions}
        if checkpoint.checkpoint_id in compacted:
            return "compaction", f"compaction of checkpoint {compacted[checkpoint.checkpoint_id]}"
        source = checkpoint.restored_from
        if source is None:
            return "", ""
        parallelism = None
        if source.savepoint is not None:
            parallelism = next((s.parallelism for s in self.savepoints
                                if s.path.rstrip("/") == source.savepoint.rstrip("/")), None)
        elif source.job == self.job_id:
            parallelism = next((c.parallelism for c in self.checkpoints
                                if c.checkpoint_id == source.checkpoint), None)
        label = f"checkpoint {source.checkpoint}" if source.job == self.job_id and source.savepoint is None \
            else source.label
        if parallelism is not None and parallelism != checkpoint.parallelism:
            return "rescale", f"rescale {parallelism} → {checkpoint.parallelism} from {label}"
        return "restore", f"restore from {label}"

    def airflow_run(self, checkpoint: CheckpointMetadata) -> AirflowRun | None:
        """The Airflow run that made ``checkpoint``; a compaction's checkpoint copies its source's record, so
        that one is not its own."""
        if self.origin(checkpoint)[0] == "compaction":
            source = next((r.get("checkpoint") for r in self.compactions
                           if r.get("new_checkpoint") == checkpoint.checkpoint_id), None)
            before = next((c for c in self.checkpoints if c.checkpoint_id == source), None)
            if before is None or before.airflow_run == checkpoint.airflow_run:
                return None
        return checkpoint.airflow_run


# The state a window operator keeps each open window's contents in, one entry per key and window (windows/operator.py).
WINDOW_CONTENTS = "window-contents"


def job_overviews(settings: Settings) -> tuple[list[JobOverview], list[str]]:
    """Every registered job's overview, and the catalog's own problems: a job record that cannot be read is
    named there and skipped, so it never hides the other jobs."""
    problems: list[str] = []
    records = JobCatalog(settings).records(warn=problems.append)
    overviews = [job_overview(settings, job_id, record) for job_id, record in records.items()]
    try:
        entries = load_registry()[0]
    except ConfigError:  # no registry, or one that does not parse: the pipeline DAG file shows why
        entries = {}
    for overview in overviews:
        entry = entries.get(overview.job_id)
        if entry is not None and (entry.max_state_bytes or entry.max_late_records):
            overview.budget = {"max_state_bytes": entry.max_state_bytes, "max_late_records": entry.max_late_records,
                               "on_over_budget": entry.on_over_budget}
    return overviews, problems


def job_overview(settings: Settings, job_id: str, record: dict) -> JobOverview:
    spec = record["spec"]
    overview = JobOverview(job_id, record["entrypoint"], spec["parallelism"], spec["max_parallelism"], spec["backend"])
    overview.edges = job_edges(spec)
    if record["entrypoint"] == SQL_ENTRYPOINT:
        overview.entrypoint, overview.sql = "SQL", (record.get("arguments") or {}).get("sql")
    store = JobStore(settings.job_dir(job_id), warn=overview.problems.append)
    overview.checkpoints = store.readable_checkpoints(warn=overview.problems.append)
    overview.savepoints = list_savepoints(settings, job_id, warn=overview.problems.append)
    try:
        overview.compaction = store.last_compaction()
        overview.compactions = store.compaction_history(COMPACTIONS_SHOWN)
    except (OSError, ValueError) as e:
        overview.problems.append(f"a compaction report cannot be read: {e}")
    latest = overview.latest
    if latest is None:
        return overview
    overview.parallelism, overview.max_parallelism, overview.backend = (latest.parallelism, latest.max_parallelism,
                                                                         latest.backend)
    overview.key_group_bytes = [0] * latest.max_parallelism
    _state_sizes(overview, latest)  # state names are qualified by their operator's uid: one table of states for all
    parts = latest.parts
    windows = [c.entries.get(f"{c.uid}.{WINDOW_CONTENTS}", 0) if f"{c.uid}.{WINDOW_CONTENTS}" in c.descriptors
               else None for c in parts]
    if len(parts) > 1 or windows[0] is not None:
        overview.operators = [{"uid": c.uid, "parallelism": c.parallelism, "max_parallelism": c.max_parallelism,
                               "entries": sum(c.entries.values()), "open_windows": open_windows,
                               "bytes": sum(t.size_bytes for t in c.state.values() if t is not None),
                               "files": sum(t.num_files for t in c.state.values() if t is not None)}
                              for c, open_windows in zip(parts, windows)]
    return overview


def job_edges(spec: dict) -> list[tuple[str, str]]:
    """The edges of a job's graph from its catalog record's definition (``JobSpec.describe``, a dataflow's
    ``operators``): each source into its operator (a two-input operator's inputs numbered), each operator into
    the next (a graph's into each that reads it), each branch's end into its sink, and each operator into its side
    outputs."""
    operators = spec.get("operators") or [spec]
    edges = []
    if not all("uid" in op for op in operators):  # a record without its operators' uids: no graph to draw
        return edges
    for i, op in enumerate(operators):
        two = op.get("second_source") is not None
        later = list(enumerate(op.get("further_sources") or [], start=3))  # a union's inputs 3, 4, ...
        for number, source in [(1, op.get("source")), (2, op.get("second_source")), *later,
                               (None, op.get("broadcast_source"))]:
            if source is None:
                continue
            into = op["uid"] + (f" (input {number})" if two and number else " (broadcast)" if not number else "")
            edges.append((_source_text(source), into))
        sink = (spec["sinks"].get(op["uid"]) if spec.get("sinks") else
                op.get("sink") if i == len(operators) - 1 else None)  # a graph's each branch; a chain's last
        if sink:
            edges.append((op["uid"], f"sink {sink}"))
        edges += [(op["uid"], f"side output {tag} ({table})") for tag, table in (op.get("side_outputs") or {}).items()]
    return edges


def _source_text(source: dict) -> str:
    kind = source.get("type")
    if kind == "operator":
        return f"operator {source['uid']}"
    if kind == "files":
        return f"files {source['path']} ({source['format']})"
    if kind == "kafka":
        return "Kafka " + (", ".join(source.get("topics") or []) or f"topics /{source.get('topic_pattern')}/")
    if kind == "delta":
        return f"Delta table {source['path']}"
    return str(kind)


def _state_sizes(overview: JobOverview, checkpoint: CheckpointMetadata) -> None:
    """Bytes and files per state of ``checkpoint``'s table versions, every operator's, and per key group of the
    first operator's keyed table."""
    for part, table, values, size, files in pinned_partitions(checkpoint, warn=overview.problems.append):
        name = values[0] if values else table
        cell = overview.state_bytes.setdefault(name, [0, 0])
        cell[0] += size
        cell[1] += files
        if part.uid == checkpoint.uid and table == KEYED and len(values) > 1 and values[1] is not None:
            group = int(values[1])
            if 0 <= group < len(overview.key_group_bytes):
                overview.key_group_bytes[group] += size
