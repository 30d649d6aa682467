"""A job's budgets, from its pipeline registry entry, checked after each run: the bytes of the state its
checkpoint pins (``max_state_bytes``) and the records the run dropped as late (``max_late_records``, Flink's
numLateRecordsDropped: windows and joins). Over one, the run fails naming the state or operator and the figure
(``on_over_budget = "fail"``) or says so and succeeds (``"warn"``); its checkpoint is kept either way: the data
is processed, the budget is an alert."""
from __future__ import annotations

from ..catalog.job_store import JobStore
from ..catalog.pipelines import PipelineEntry
from ..delta.sizes import human_bytes, pinned_partitions
from ..errors import OverBudget
from ..progress import wing_logger
from ..records.metadata import CheckpointMetadata
from ..settings import Settings

_SAY = wing_logger(__name__).info  # what it says it does, unless given a say of its own (``progress``)


def state_bytes(checkpoint: CheckpointMetadata) -> dict[str, int]:
    """Bytes per state (its name, qualified by its operator's uid) of the table versions ``checkpoint`` pins,
    every operator's, read from the tables' Delta logs."""
    sizes: dict[str, int] = {}
    for _, table, values, size, _ in pinned_partitions(checkpoint):
        name = values[0] if values else table
        sizes[name] = sizes.get(name, 0) + size
    return sizes


def over_budget(entry: PipelineEntry, late_dropped: dict[str, int], checkpoint: CheckpointMetadata | None) -> list[str]:
    """What of a run is over ``entry``'s budgets, one sentence each: the state of ``checkpoint`` (the job's latest)
    and the late records each operator dropped (``late_dropped``, by uid)."""
    where = f"(registry entry [jobs.{entry.job_id}])"
    problems = []
    if entry.max_state_bytes is not None and checkpoint is not None and checkpoint.size_bytes > entry.max_state_bytes:
        largest = sorted(state_bytes(checkpoint).items(), key=lambda kv: -kv[1])[:3]
        problems.append(
            f"state of checkpoint {checkpoint.checkpoint_id} is {human_bytes(checkpoint.size_bytes)} "
            f"({checkpoint.size_bytes} bytes), over max_state_bytes = {entry.max_state_bytes} {where}; the largest: "
            + ", ".join(f"{name} {human_bytes(size)}" for name, size in largest)
            + ". Give that state a TTL or clear what it no longer needs, or raise the budget")
    late = sum(late_dropped.values())
    if entry.max_late_records is not None and late > entry.max_late_records:
        problems.append(
            f"the run dropped {late} late records, over max_late_records = {entry.max_late_records} {where}: "
            + ", ".join(f"operator {uid} {n}" for uid, n in sorted(late_dropped.items()))
            + ". Allow more lateness (allowed_lateness, the watermark's out-of-orderness) or route late records "
              "to a side output, or raise the budget")
    return problems


def check_budgets(entry: PipelineEntry | None, late_dropped: dict[str, int], settings: Settings, say=_SAY) -> None:
    """After a run of ``entry``'s job: nothing under budget; over, an ``OverBudget`` error, or with
    ``on_over_budget = "warn"`` a warning said per budget."""
    if entry is None or (entry.max_state_bytes is None and entry.max_late_records is None):
        return
    latest = JobStore(settings.job_dir(entry.job_id)).latest_checkpoint() if entry.max_state_bytes else None
    problems = over_budget(entry, late_dropped, latest)
    if problems and entry.on_over_budget == "warn":
        for problem in problems:
            say(f"[lakestate] warning: job {entry.job_id}: over budget: {problem}")
    elif problems:
        raise OverBudget(f"job {entry.job_id}: over budget: " + "; and ".join(problems) + " (the run's checkpoint "
                         "is kept; on_over_budget = \"warn\" makes this a warning)")
