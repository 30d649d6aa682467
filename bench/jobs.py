"""Lakestate's side of the benchmarks: the same per-key logic as bench/peers.py.

Per key a running ``(count, sum of amount)`` in one ValueState; one output row
``key, count, sum`` per key touched in a microbatch (the values after it).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state_store import (
    FileSource,
    JobSpec,
    KafkaSource,
    KeyedProcessFunction,
    Types,
    ValueStateDescriptor,
    VectorizedKeyedFunction,
)

# --8<-- [start:functions] (docs/writing/vectorised.md shows from here to the end marker)
EVENT = Types.ROW_NAMED(["key", "amount", "ts"], [Types.STRING(), Types.LONG(), Types.LONG()])
ACC = Types.ROW_NAMED(["count", "sum"], [Types.LONG(), Types.LONG()])
OUTPUT = Types.ROW_NAMED(["key", "count", "sum"], [Types.STRING(), Types.LONG(), Types.LONG()])


class RunningCountSum(KeyedProcessFunction):
    def open(self, ctx):
        self.acc = ctx.get_state(ValueStateDescriptor("acc", ACC))

    def process(self, key, records, ctx):
        acc = self.acc.value() or {"count": 0, "sum": 0}
        count, total = acc["count"] + len(records), acc["sum"] + sum(r["amount"] for r in records)
        self.acc.update({"count": count, "sum": total})
        yield {"key": key, "count": count, "sum": total}


class RunningCountSumVectorized(VectorizedKeyedFunction):
    """RunningCountSum as one fold over a microbatch's columns (a subtask's records, sorted by key)."""

    def open(self, ctx):
        ctx.get_state(ValueStateDescriptor("acc", ACC))

    def process_batch(self, records, state, ctx):
        starts = ctx.key_offsets[:-1]  # state row i's records: records[key_offsets[i]:key_offsets[i + 1]]
        acc = state.column("acc")
        count = pc.add(pc.fill_null(pc.struct_field(acc, "count"), 0), np.diff(ctx.key_offsets))
        total = pc.add(pc.fill_null(pc.struct_field(acc, "sum"), 0),
                       np.add.reduceat(records.column("amount").to_numpy(), starts))
        new_acc = pa.StructArray.from_arrays([count.combine_chunks(), total.combine_chunks()], ["count", "sum"])
        return (pa.table({"key": state.column("key"), "count": count, "sum": total}),
                pa.table({"key": state.column("key"), "acc": new_acc}))
# --8<-- [end:functions]


def count_sum_job(input_dir: str, job_id: str = "bench", backend: str = "delta", parallelism: int = 2,
                  vectorized: bool = False, composite: bool = False) -> JobSpec:
    """R's job; ``composite``: over ``split_keys``' files, keyed by (head, tail)."""
    if composite:
        return JobSpec(job_id=job_id, function=RunningCountSumOfPair(),
                       source=FileSource(input_dir, "parquet", EVENT2, max_files_per_batch=1),
                       key=["head", "tail"], key_type=[Types.STRING(), Types.STRING()], output_type=OUTPUT,
                       sink=f"sinks/{job_id}", uid="count-sum", parallelism=parallelism, backend=backend,
                       checkpoint_interval=1, num_retained=3)
    function = RunningCountSumVectorized() if vectorized else RunningCountSum()
    return JobSpec(job_id=job_id, function=function,
                   source=FileSource(input_dir, "parquet", EVENT, max_files_per_batch=1),
                   key="key", key_type=Types.STRING(), output_type=OUTPUT, sink=f"sinks/{job_id}", uid="count-sum",
                   parallelism=parallelism, backend=backend, checkpoint_interval=1, num_retained=3)


# R's key as two columns whose pair is the key: ``head`` all but its last two characters, ``tail`` those two
# (``split_keys`` writes them), for a job keyed by both (``count_sum_job(..., composite=True)``).
EVENT2 = Types.ROW_NAMED(["head", "tail", "amount", "ts"], [Types.STRING(), Types.STRING(), Types.LONG(),
                                                            Types.LONG()])


class RunningCountSumOfPair(RunningCountSum):
    """RunningCountSum keyed by (head, tail): the key it emits is the two joined, R's key."""

    def process(self, key, records, ctx):
        acc = self.acc.value() or {"count": 0, "sum": 0}
        count, total = acc["count"] + len(records), acc["sum"] + sum(r["amount"] for r in records)
        self.acc.update({"count": count, "sum": total})
        yield {"key": key[0] + key[1], "count": count, "sum": total}


def split_keys(source_dir, target_dir) -> None:
    """Each Parquet file of ``source_dir`` with its ``key`` split in ``head`` and ``tail`` (``EVENT2``)."""
    from pathlib import Path

    import pyarrow.parquet as pq

    Path(target_dir).mkdir(parents=True, exist_ok=True)
    for path in sorted(Path(source_dir).glob("*.parquet")):
        table = pq.read_table(path)
        key = table.column("key")
        n = pc.utf8_length(key)
        head = pc.utf8_slice_codeunits(key, 0, -2)
        tail = pc.utf8_slice_codeunits(key, -2, 2**31 - 1)
        assert pc.all(pc.equal(pc.add(pc.utf8_length(head), pc.utf8_length(tail)), n)).as_py()
        pq.write_table(pa.table({"head": head, "tail": tail, "amount": table.column("amount"),
                                 "ts": table.column("ts")}), Path(target_dir) / path.name)


def split_sources(source_dir, target_dir, n: int = 3) -> list:
    """Each Parquet file of ``source_dir`` dealt row by row into ``n`` sources (``target_dir/s0`` ...), a file of
    each a microbatch: together the same events, for a union of ``n`` sources (``count_sum_union_job``)."""
    from pathlib import Path

    import pyarrow.parquet as pq

    dirs = [Path(target_dir) / f"s{i}" for i in range(n)]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    for path in sorted(Path(source_dir).glob("*.parquet")):
        table = pq.read_table(path)
        for i, d in enumerate(dirs):
            pq.write_table(table.take(pa.array(range(i, table.num_rows, n))), d / path.name)
    return dirs


def count_sum_union_job(dirs, job_id: str = "bench", backend: str = "delta", parallelism: int = 2) -> JobSpec:
    """R's job over a union of the sources in ``dirs`` (``a.union(b, c)``), each its own offsets."""
    from state_store import Dataflow

    first, *others = [Dataflow.from_source(FileSource(str(d), "parquet", EVENT, max_files_per_batch=1),
                                           job_id=job_id, backend=backend) for d in dirs]
    return (first.union(*others).key_by("key")
            .process(RunningCountSum(), uid="count-sum", output_type=OUTPUT, parallelism=parallelism)
            .sink_to(f"sinks/{job_id}"))


def count_sum_kafka_job(bootstrap: str, topic: str, per_microbatch: int, job_id: str = "bench-kafka",
                        parallelism: int = 2) -> JobSpec:
    """``count_sum_job`` over a Kafka topic of the events as JSON (bench/kafka.py)."""
    source = KafkaSource(bootstrap, topics=[topic], schema=EVENT, max_records_per_microbatch=per_microbatch)
    return JobSpec(job_id=job_id, function=RunningCountSum(), source=source,
                   key="key", key_type=Types.STRING(), output_type=OUTPUT, sink=f"sinks/{job_id}", uid="count-sum",
                   parallelism=parallelism, checkpoint_interval=1, num_retained=3)


def job() -> JobSpec:
    """The registered form (``lakestate register bench.jobs:job``): input from ``$LAKESTATE_BENCH_INPUT``."""
    import os

    return count_sum_job(os.environ["LAKESTATE_BENCH_INPUT"])
