"""Lakestate's side of the benchmarks: the same per-key logic as bench/peers.py.

Per key a running ``(count, sum of amount)`` in one ValueState; one output row
``key, count, sum`` per key touched in a microbatch (the values after it).
"""
from __future__ import annotations

from state_store import FileSource, JobSpec, KeyedProcessFunction, Types, ValueStateDescriptor

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


def count_sum_job(input_dir: str, job_id: str = "bench", backend: str = "delta", parallelism: int = 2) -> JobSpec:
    return JobSpec(job_id=job_id, function=RunningCountSum(),
                   source=FileSource(input_dir, "parquet", EVENT, max_files_per_batch=1),
                   key="key", key_type=Types.STRING(), output_type=OUTPUT, sink=f"sinks/{job_id}", uid="count-sum",
                   parallelism=parallelism, backend=backend, checkpoint_interval=1, num_retained=3)


def job() -> JobSpec:
    """The registered form (``lakestate register bench.jobs:job``): input from ``$LAKESTATE_BENCH_INPUT``."""
    import os

    return count_sum_job(os.environ["LAKESTATE_BENCH_INPUT"])
