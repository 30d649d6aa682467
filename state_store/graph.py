"""A job as the runtime sees it: a graph of operators (``Job``), whatever built it.

``JobSpec`` is the user's constructor of a one-operator job and ``as_job(spec)`` its graph; ``Dataflow`` builds
the graph of several (``sink_to``, ``Dataflow.graph``). Every room that runs, registers, restores or rescales a
job takes its ``Job`` (``as_job``): one shape, never a branch on which constructor made it. Each operator is
a ``JobSpec`` of its own (its uid, function, key, parallelism, output type, side outputs, state tables) with
its ``inputs`` (``job.Input``: a source, or what an operator before it emitted as a ``sources.EdgeSource``;
its key, watermark strategy and role); the first operator reads the job's sources (a later one may read one
of its own beside what it is fed: ``Job.planned_inputs``), and each branch's end writes its sink.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .errors import ConfigError
from .job import Input, InputRole, JobSpec, later_source_name
from .side_outputs import check_one_writer_per_table
from .sinks import Sink, sink_name
from .sources.edge import edge_name

# What every operator of a chain shares: the job's, set once on the dataflow.
JOB_WIDE = ("job_id", "backend", "checkpoint_interval", "num_retained", "sink")


def _of_head(name: str) -> property:
    """A Job's ``name``: its first operator's."""
    return property(lambda self: getattr(self.operators[0], name), doc=f"The job's {name} (its first operator's).")


@dataclass
class Job:
    """A job's operators (``operators``, each after those it reads; see the module docstring): one, a chain, or a
    graph (``Dataflow.graph``) whose operators may feed several others and whose branches end in sinks of their
    own (``sinks``, by the uid of the operator that writes each; None: the last operator writes ``sink``). A job
    of one operator describes, validates and takes overrides as its ``JobSpec`` does."""

    operators: list[JobSpec]
    sinks: dict[str, str] | None = None

    @property
    def single(self) -> bool:
        """A job of one operator (a ``JobSpec``'s)."""
        return len(self.operators) == 1 and self.sinks is None

    @property
    def head(self) -> JobSpec:
        """The first operator: it reads the job's source; the run plans its microbatches from it."""
        return self.operators[0]

    # The job-wide settings (``JOB_WIDE``, the same on every operator) and what only the first operator takes,
    # read as on a JobSpec.
    job_id = _of_head("job_id")
    backend = _of_head("backend")
    checkpoint_interval = _of_head("checkpoint_interval")
    num_retained = _of_head("num_retained")
    sink = _of_head("sink")
    source = _of_head("source")
    watermark_strategy = _of_head("watermark_strategy")
    broadcast_source = _of_head("broadcast_source")

    @property
    def side_outputs(self) -> list:
        """Every operator's side outputs (each a table beside the sink)."""
        return [t for op in self.operators for t in op.side_outputs]

    def side_output_sink(self, tag) -> str:
        """Where side output ``tag``'s table is (a warehouse path, next to the sink)."""
        return self.operators[0].side_output_sink(tag)

    def operator(self, uid: str) -> JobSpec:
        """The operator (its ``JobSpec``) whose uid is ``uid``; ConfigError, naming the job's uids, when there is
        none."""
        for op in self.operators:
            if op.uid == uid:
                return op
        raise ConfigError(f"job {self.job_id!r} has no operator {uid!r}; its operators are {self.uids}")

    @property
    def uids(self) -> list[str]:
        """The operators' uids, in the order of ``operators``."""
        return [op.uid for op in self.operators]

    def sink_of(self, uid: str) -> "str | Sink | None":
        """The sink operator ``uid`` writes (a path inside the warehouse, or a ``Sink``), None when it feeds only
        operators."""
        if self.sinks is None:
            return self.sink if uid == self.operators[-1].uid else None
        return self.sinks.get(uid)

    @property
    def all_sinks(self) -> list[str]:
        """Every sink of the job, the job's own (``sink``, where the side outputs are) first."""
        names = [sink_name(s) for s in [self.sink, *(self.sinks or {}).values()]]
        return list(dict.fromkeys(names))

    def tables(self) -> list[tuple[str, str]]:
        """(who writes it, warehouse path) of every table the job writes: each branch's sink, then every
        operator's side outputs (beside the job's own sink)."""
        if self.single:
            return self.head.tables()
        sinks = [(f"the sink of the branch ending at operator {op.uid!r}", sink_name(sink)) for op in self.operators
                 if (sink := self.sink_of(op.uid)) is not None]
        streamed = self._streamed()
        return sinks + [(f"side output {t.name!r} of operator {op.uid!r}", self.side_output_sink(t))
                        for op in self.operators for t in op.side_outputs
                        if t.name not in streamed.get(op.uid, ())]  # a stream read further: no table

    def streamed_side_outputs(self, uid: str) -> list[str]:
        """The side outputs of operator ``uid`` that later operators read as streams (``get_side_output``), by tag
        name: each staged for the run as an edge, not written to a table of its own."""
        read = self._streamed().get(uid, set())
        return [t.name for t in self.operator(uid).side_outputs if t.name in read]

    def _streamed(self) -> dict[str, set[str]]:
        """Every operator's side outputs read further as streams, by tag name, by the operator's uid (one pass)."""
        read: dict[str, set[str]] = {}
        for op in self.operators:
            for i in op.inputs:
                if i.upstream is not None and getattr(i.source, "output", None) is not None:
                    read.setdefault(i.upstream, set()).add(i.source.output)
        return read

    def planned_inputs(self) -> tuple[Input, ...]:
        """Every input of the job that reads a source, as the plans name its ranges and the checkpoints its
        offsets: the first operator's by their names ("main", "second", "broadcast"), a later operator's by
        ``later_source_name`` ("<uid>:second"). One plan fixes them all, so one microbatch is the same records of
        every source wherever it is read."""
        head, *later = self.operators
        return (*head.inputs, *(replace(i, name=later_source_name(op.uid, i.name))
                                for op in later for i in op.inputs if i.upstream is None))

    def inputs_of(self, uid: str) -> list[str]:
        """The operators whose output operator ``uid`` reads (none for the first)."""
        return [i.upstream for i in self.operator(uid).inputs if i.upstream is not None]

    def with_overrides(self, **changes: Any) -> "Job":
        """A copy with job-wide ``changes`` (backend, checkpoint_interval, num_retained) applied to every operator.
        An operator's parallelism is its own: set it in the dataflow, or ``lakestate rescale``. A one-operator job
        takes any of its ``JobSpec``'s fields."""
        if self.single:
            return Job([self.head.with_overrides(**changes)])
        own = sorted(set(changes) - set(JOB_WIDE))
        if own:
            raise ConfigError(f"job {self.job_id!r} has {len(self.operators)} operators, each with its own {own}: set "
                              f"them on each operator's process(..., parallelism=N) in the dataflow, or change one "
                              f"with `lakestate rescale {self.job_id} --operator UID --parallelism N`; not for the "
                              f"whole job (remove {', '.join(own)} from its pipeline registry entry "
                              f"[jobs.{self.job_id}])")
        return Job([replace(op, **changes) for op in self.operators], self.sinks)

    def validate(self) -> "Job":
        """Raise ConfigError naming the first problem and its fix; return self when usable."""
        if not self.operators:
            raise ConfigError("a dataflow needs at least one operator: .key_by(...).process(...) before sink_to")
        for op in self.operators:
            op.validate()
        uids = self.uids
        twice = sorted({u for u in uids if uids.count(u) > 1})
        if twice:
            raise ConfigError(f"operator uid {twice[0]!r} is given twice; give each operator its own uid")
        first = self.operators[0]
        for op in self.operators[1:]:
            for name in JOB_WIDE:
                if getattr(op, name) != getattr(first, name):
                    raise ConfigError(f"operator {op.uid!r} has {name} {getattr(op, name)!r} but the job's is "
                                      f"{getattr(first, name)!r}: it is the whole job's, set on the dataflow")
        emits = _emits(first)
        for op in self.operators[1:]:
            for input_ in op.inputs:
                self._validate_later_input(op.uid, input_, emits, first.watermark_strategy is not None)
            emits.update(_emits(op))
        self._validate_sinks()
        tags = [t.name for op in self.operators for t in op.side_outputs]
        twice = sorted({t for t in tags if tags.count(t) > 1})
        if twice:
            raise ConfigError(f"side output {twice[0]!r} is declared by two operators; each side output is a table "
                              f"beside the sink, so give each its own name")
        return self

    @staticmethod
    def _validate_later_input(uid: str, input_: Input, emits: dict, timed: bool) -> None:
        """An input of an operator after the first: what an operator before it emits (``emits``: their output
        types by uid), of that type, or (a second input, or a union's further one) a source of the job with a
        watermark strategy where the job has event time (``timed``: its first operator's source has one), and
        none where it has not; a broadcast input, a source's or an operator's; the first input's watermark is the
        first operator's alone."""
        only_first = ConfigError(f"operator {uid!r}: only the first operator of a dataflow takes a watermark "
                                 f"strategy on its first input (the watermark flows down)")
        if input_.role is InputRole.BROADCAST and input_.upstream is None:
            return  # a source broadcast to a later operator, planned with the job's other sources
        if input_.upstream is None and input_.index not in (None, 1):
            if timed != (input_.watermark_strategy is not None):
                raise ConfigError(
                    f"operator {uid!r} reads a source as its {input_.name} input, whose watermark_strategy the "
                    f"job's event time needs: give it one (Dataflow.from_source(..., watermark_strategy=...))"
                    if timed else
                    f"operator {uid!r} reads a source with a watermark_strategy in a job whose first source has "
                    f"none: give the first source one too, or drop this one")
            return
        upstream = input_.upstream
        edge = input_.source.edge if upstream is not None else None
        side = getattr(input_.source, "output", None)
        if upstream in emits and edge not in emits:
            raise ConfigError(f"operator {uid!r} reads side output {side!r} of operator {upstream!r}, which does not "
                              f"declare it: add it to that operator's side_outputs=[...]")
        if edge not in emits:
            raise ConfigError(f"operator {uid!r} must read what an operator before it emits (build the job with "
                              f"Dataflow)")
        if input_.source.schema != emits[edge]:
            what = repr(upstream) if side is None else f"side output {side!r} of {upstream!r}"
            raise ConfigError(f"operator {uid!r} reads {input_.source.schema} but {what} emits {emits[edge]}")
        if input_.watermark_strategy is not None:
            raise only_first

    def _validate_sinks(self) -> None:
        check_one_writer_per_table(self.tables())
        if self.sinks is None:
            return
        fed = {u for op in self.operators for u in self.inputs_of(op.uid)}
        rows_fed = {i.upstream for op in self.operators for i in op.inputs  # its rows, not a side output, read on
                    if i.upstream is not None and getattr(i.source, "output", None) is None}
        for op in self.operators:
            if op.uid not in self.sinks and op.uid not in fed:
                raise ConfigError(f"operator {op.uid!r} feeds no operator and writes no sink: end its branch with "
                                  f".sink_to(...) and give the branch to Dataflow.graph")
            if op.uid in self.sinks and op.uid in rows_fed:
                raise ConfigError(f"operator {op.uid!r} feeds other operators and writes sink "
                                  f"{sink_name(self.sinks[op.uid])!r}: a sink ends a branch (Dataflow.graph adds the "
                                  f"operator that writes it)")
        if sink_name(self.sink) not in {sink_name(s) for s in self.sinks.values()}:
            raise ConfigError(f"the job's sink {sink_name(self.sink)!r} is no branch's; build the graph with "
                              f"Dataflow.graph")

    def describe(self) -> dict:
        """What the catalog records of this definition: the first operator's, and every operator's (each with the
        sink it writes, in a graph); a one-operator job's is its operator's."""
        if self.single:
            return self.head.describe()
        described, streamed = [op.describe() for op in self.operators], self._streamed()
        for d in described:  # a side output read further is a stream of the job, with no table of its own
            read = streamed.get(d["uid"], set())
            if read & set(d["side_outputs"]):
                d["streamed_side_outputs"] = sorted(read & set(d["side_outputs"]))
                d["side_outputs"] = {n: t for n, t in d["side_outputs"].items() if n not in read}
        side_outputs = {name: sink for d in described for name, sink in d["side_outputs"].items()}
        head = {**described[0], "side_outputs": side_outputs, "operators": described}
        if self.sinks is not None:
            for d in described:
                d["sink"] = sink_name(self.sinks[d["uid"]]) if d["uid"] in self.sinks else None
            head.update(sink=sink_name(self.sink), sinks={uid: sink_name(s) for uid, s in self.sinks.items()})
        return head


def _emits(op: JobSpec) -> dict:
    """What operator ``op`` emits that later operators may read, by ``edge_name``: its rows and its side
    outputs, each with its type."""
    return {edge_name(op.uid): op.output_type, **{edge_name(op.uid, t.name): t.type_info for t in op.side_outputs}}


def as_job(definition: JobSpec | Job) -> Job:
    """The job a definition is: a ``Job`` as it is, a ``JobSpec`` as the job of its one operator. ConfigError for
    anything else."""
    if isinstance(definition, Job):
        return definition
    if isinstance(definition, JobSpec):
        return Job([definition])
    raise ConfigError(f"a job is a state_store.JobSpec or what Dataflow...sink_to(...) returns, got "
                      f"{type(definition).__name__}")
