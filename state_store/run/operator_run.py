"""One operator's part of a run (``runtime`` sequences them): its state backends, its outputs, its Spark pass,
its commits and its checkpointer. A job of one operator has one; a dataflow's chain (``dataflow``) one per
operator, each but the first reading what the one before emitted in the same run (``sources.EdgeSource``).
"""
from __future__ import annotations

from ..delta.backends import StateBackend, create_keyed_backend, create_operator_backend
from ..errors import RestoreError
from ..job import InputRole
from ..records.layout import KEYED, OPERATOR, SINK
from ..records.metadata import CheckpointMetadata, MicrobatchPlan, StateInfo
from ..records.stats import MicrobatchStats, WrittenFile
from ..restore_plan import check_restorable
from ..side_outputs import SIDE_PREFIX
from ..sources.edge import edge_name
from ..storage import rmtree
from ..subtask.exchange import KIND_FILE, KIND_STAT
from ..subtask.run_files import RunOutputs, remove_uncommitted
from ..watermarks import EventClock
from . import commit, timing
from .checkpointing import Checkpointer
from .context import RunContext
from .frame import Frame
from .outputs import dead_letter_files, open_outputs


def _stats_and_files(plans: list[MicrobatchPlan], rows, tables) -> tuple[list[MicrobatchStats],
                                                                          dict[str, list[WrittenFile]]]:
    """Per microbatch, the subtasks' counters summed exactly; per table (of ``tables``), the files the subtasks
    wrote."""
    by_batch = {p.batch_id: MicrobatchStats(p.batch_id) for p in plans}
    files: dict[str, list[WrittenFile]] = {name: [] for name in tables}
    for r in rows:
        if r["kind"] == KIND_STAT:
            by_batch[r["batch_id"]].add(MicrobatchStats.from_json(r["payload"]))
        elif r["kind"] == KIND_FILE:
            info = WrittenFile.from_json(r["payload"])
            files[info.table].append(info)
    return [by_batch[p.batch_id] for p in plans], files


def check_chain_restorable(specs, checkpoint: CheckpointMetadata, descriptors: list[dict[str, StateInfo]]) -> None:
    """Refuse, with the fix, a checkpoint these operators cannot continue from: each operator's own rules
    (``restore_plan``), and in a dataflow, state of an operator the job no longer has (Flink's non-restored
    state) or a first operator that is not the one that keeps the source's offsets."""
    uids = [op.uid for op in specs]
    held = checkpoint.uids
    if len(held) == 1 and len(specs) == 1:
        check_restorable(specs[0], checkpoint, descriptors[0])  # one operator: its uid is checked there
        return
    if checkpoint.uid != uids[0]:
        raise RestoreError(f"checkpoint {checkpoint.checkpoint_id}'s first operator is {checkpoint.uid!r} (it keeps "
                           f"the source's offsets) but the job's first operator is now {uids[0]!r}; keep its uid")
    dropped = [u for u in held if u not in uids and checkpoint.of_operator(u).entries]  # a stateless one: nothing lost
    if dropped:
        raise RestoreError(f"checkpoint {checkpoint.checkpoint_id} holds state of operators {dropped} that the job "
                           f"no longer has; put them back, or restore it into the job with "
                           f"--allow-non-restored-state to drop their state")
    for op, found in zip(specs, descriptors):
        mine = checkpoint.of_operator(op.uid)
        if mine is not None:
            check_restorable(op, mine, found)


def chain_timers_due(operators: list["OperatorRun"]):
    """For a run without new input: ``due(now, watermark)``, whether a stored timer of any operator is due;
    None when no operator has timers."""
    checks = [c for c in (timing.timers_due_check(op.ctx, op.keyed, op.checkpoint) for op in operators) if c]
    if not checks:
        return None
    return lambda now, watermark: any(check(now, watermark) for check in checks)


class OperatorRun:
    """``OperatorRun(ctx, checkpoint, descriptors)``: ``open``, ``process``, ``write``, ``cleanup``, then
    ``checkpointer``; ``close`` whatever happened."""

    def __init__(self, ctx: RunContext, checkpoint: CheckpointMetadata | None, descriptors: dict[str, StateInfo]):
        self.ctx, self.checkpoint, self.descriptors = ctx, checkpoint, descriptors
        spec = ctx.spec
        self.keyed = create_keyed_backend(spec.backend, ctx.spark, ctx.job_dir, spec.job_id, checkpoint,
                                          spec.key_type)
        self.operator = create_operator_backend(spec.backend, ctx.spark, ctx.job_dir, spec.job_id, checkpoint)
        self.backends: dict[str, StateBackend] = {KEYED: self.keyed, OPERATOR: self.operator}
        self.outputs: RunOutputs | None = None
        self.stats: list[MicrobatchStats] = []
        self.files: dict[str, list[WrittenFile]] = {}
        self.written: dict[str, set[str]] = {}  # per table, the files its commit added

    def open(self, token: str) -> None:
        """Where this run writes: the sink (or, for an operator before the last, its edge), the side outputs;
        refuses an unfit sink before anything is planned."""
        ctx = self.ctx
        self.outputs = RunOutputs(token, open_outputs(ctx, token))

    def process(self, plans: list[MicrobatchPlan], clock: EventClock,
                emitted: dict[str, list[str]]) -> dict[str, list[str]]:
        """This operator's Spark pass over ``plans``, fed (in a dataflow) what the operators it reads emitted in
        this run (``emitted``: each one's files by ``edge_name``); returns the files it emitted, in order (by
        subtask), by ``edge_name``: its rows, and each side output a later operator reads."""
        ctx = self.ctx
        self.outputs.tables.update({n: b.output(self.outputs.token) for n, b in self.backends.items()})
        due = timing.due_timer_keys(ctx, self.keyed, self.checkpoint, plans)
        rows = Frame(ctx, plans, clock, due, emitted).process(self.checkpoint, self.keyed, self.operator,
                                                    self.outputs).collect()
        self.stats, self.files = _stats_and_files(plans, rows, self.outputs.tables)
        dead_letter_files(ctx, plans, self.outputs, self.stats, self.files)
        uid = ctx.spec.uid
        out = {edge_name(uid): self._emitted(SINK)}
        out.update({edge_name(uid, tag): self._emitted(SIDE_PREFIX + tag) for tag in ctx.side_edges})
        return out

    def _emitted(self, table: str) -> list[str]:
        root = self.outputs.tables[table].root
        return [str(root / f.path) for f in sorted(self.files.get(table, []), key=lambda f: f.path)]

    def write(self, plans: list[MicrobatchPlan]) -> None:
        commit.write(self.ctx, plans, self.outputs, self.files, self.backends, self.written)

    def cleanup(self, plans: list[MicrobatchPlan]):
        """TTL's incremental cleanup after the state is written; what it removed after which microbatch."""
        return commit.cleanup(self.ctx, self.keyed, self.registered(), self.checkpoint, plans, self.stats)

    def registered(self) -> dict[str, StateInfo]:
        """Every state the subtasks registered in this run."""
        found: dict[str, StateInfo] = {}
        for s in self.stats:
            found.update(s.descriptors)
        return found

    def checkpointer(self, sweeps: dict) -> Checkpointer:
        # States the function registers only while processing: recorded, marked so a restore lets them follow
        # their uid (a dry run of the definition cannot tell whether it still registers them).
        states = {**{n: d.with_lazy() for n, d in self.registered().items() if n not in self.descriptors},
                  **self.descriptors}
        return Checkpointer(self.ctx, self.keyed, self.operator, states, self.checkpoint, self.stats, sweeps)

    def committed(self) -> dict[str, set[str]]:
        """Per folder of a table this operator wrote, the files its commits named (relative paths)."""
        if self.outputs is None:
            return {}
        return {_folder(t.directory): set(self.written.get(t.name, ())) for t in self.outputs.tables.values()}

    def close(self, committed: dict[str, set[str]]) -> None:
        """Remove this run's files that no commit of the run names (``committed``: every operator's, by folder; a
        failed task attempt's, all of a failed run's, an edge's always) and what the backends staged."""
        if self.outputs is None:
            return
        for t in self.outputs.tables.values():
            remove_uncommitted(t.directory, self.outputs.token, committed.get(_folder(t.directory), set()),
                               t.storage, t.partition_columns)
        for backend in self.backends.values():
            backend.end_run(self.outputs.token)
        if self.ctx.edge:
            rmtree(self.ctx.sink_path, ignore_errors=True)
        for staged in self.ctx.side_edges.values():
            rmtree(staged, ignore_errors=True)


def _folder(directory) -> str:
    import posixpath

    return posixpath.normpath(str(directory))


def records_from_sources(operators: list[OperatorRun]) -> int:
    """The records a run read from the job's sources (a run summary's ``records_in``): its first operator's, and
    those a later operator read from a source itself (all it took in, less what the operators before it emitted
    to it). Broadcast records count apart (``broadcast_in``), as the first operator's do."""
    head, *later = operators
    total = sum(s.records_in for s in head.stats)
    later = [op for op in later if any(i.upstream is None and i.role is not InputRole.BROADCAST
                                       for i in op.ctx.spec.inputs)]
    if not later:  # most jobs: only the first operator reads sources
        return total
    emitted: dict[str, int] = {}  # edge -> rows emitted to it in the run
    for op in operators:
        uid = op.ctx.spec.uid
        emitted[edge_name(uid)] = sum(s.records_out for s in op.stats)
        for s in op.stats:
            for tag, rows in s.side_rows.items():
                emitted[edge_name(uid, tag)] = emitted.get(edge_name(uid, tag), 0) + rows
    for op in later:
        edges = sum(emitted.get(i.source.edge, 0) for i in op.ctx.spec.inputs
                    if i.upstream is not None and i.role is not InputRole.BROADCAST)
        total += sum(s.records_in for s in op.stats) - edges
    return total


def close_all(operators: list[OperatorRun]) -> None:
    """End a run's operators (``OperatorRun.close``): the files any operator's commits named are kept in every
    folder, so two operators whose tables share a folder never remove each other's committed files (all of a
    run's files carry its one token)."""
    committed: dict[str, set[str]] = {}
    for op in operators:
        for folder, names in op.committed().items():
            committed.setdefault(folder, set()).update(names)
    for op in operators:
        op.close(committed)
