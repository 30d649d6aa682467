"""CPU per record of the subtask loop alone (no Spark; files written): the bench job over N keys x 2 microbatches,
beside the floor: the same per-key logic as a plain Python loop over the same Arrow batches, in the same process
(records decoded column by column into dicts, the state a dict of orjson text, output rows built as Arrow columns).

    source scripts/env.sh
    python bench/profile_subtask.py 100000          # CPU seconds and microseconds per record
    python bench/profile_subtask.py 100000 profile  # plus cProfile's top functions
    python bench/profile_subtask.py 100000 sessions # bench/sessions.py's job instead: event-time timers, a session
                                                    # gap of 30 s over ts 1 ms apart, keys shuffled per microbatch
    python bench/profile_subtask.py 100000 vectorized # R written as a VectorizedKeyedFunction (bench/jobs.py), beside
                                                      # the same floor
    python bench/profile_subtask.py 100000 sessions vectorized  # bench/sessions.py's SessionsVectorized
    python bench/profile_subtask.py 100000 composite  # R keyed by (head, tail), its key's text a JSON array
"""
from __future__ import annotations

import cProfile
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from bench.jobs import OUTPUT, RunningCountSum, RunningCountSumOfPair, RunningCountSumVectorized
from state_store.subtask.exchange import EXCHANGE_COLUMNS
from state_store.subtask.reader import column_values, run_partition
from state_store.subtask.run_files import local_outputs
from state_store.subtask.runner import RunPlan
from state_store.types import Types

MICROBATCHES = 2


def floor(batches: list) -> int:
    """RunningCountSum as a plain loop: per key and microbatch, its records as dicts, the running (count, sum)
    read from and written to a dict of orjson text, one output row appended to Arrow-bound columns."""
    state: dict[str, bytes] = {}
    out_keys, out_counts, out_sums, out_batches = [], [], [], []

    def process(batch_id, key, records):
        text = state.get(key)
        acc = orjson.loads(text) if text is not None else {"count": 0, "sum": 0}
        count, total = acc["count"] + len(records), acc["sum"] + sum(r["amount"] for r in records)
        state[key] = orjson.dumps({"count": count, "sum": total}, option=orjson.OPT_SORT_KEYS)
        out_keys.append(key), out_counts.append(count), out_sums.append(total), out_batches.append(batch_id)

    group_key, group_batch, group = None, None, []
    for batch in batches:
        record = batch.column("record")
        names = [f.name for f in record.type]
        rows = [dict(zip(names, values))
                for values in zip(*(column_values(record.field(i)) for i in range(len(names))))]
        for batch_id, key, row in zip(column_values(batch.column("batch_id")), column_values(batch.column("key")),
                                      rows):
            if key != group_key or batch_id != group_batch:
                if group:
                    process(group_batch, group_key, group)
                group_key, group_batch, group = key, batch_id, []
            group.append(row)
    if group:
        process(group_batch, group_key, group)
    out = pa.RecordBatch.from_arrays([pa.array(out_keys, pa.string()), pa.array(out_counts, pa.int64()),
                                      pa.array(out_sums, pa.int64()), pa.array(out_batches, pa.int64())],
                                     names=["key", "count", "sum", "_microbatch"])
    return out.num_rows


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    sessions, profile = "sessions" in sys.argv[2:], "profile" in sys.argv[2:]
    composite = "composite" in sys.argv[2:]
    function = (RunningCountSumVectorized() if "vectorized" in sys.argv[2:] else RunningCountSumOfPair()
                if composite else RunningCountSum())
    key_type = Types.ROW_NAMED(["head", "tail"], [Types.STRING(), Types.STRING()]) if composite else Types.STRING()
    types = {"int": pa.int32(), "bigint": pa.int64(), "string": pa.string()}
    record = pa.struct([("head", pa.string()), ("tail", pa.string()), ("amount", pa.int64()), ("ts", pa.int64())]
                       if composite else [("key", pa.string()), ("amount", pa.int64()), ("ts", pa.int64())])
    schema = pa.schema([(name, types[t]) for name, t in EXCHANGE_COLUMNS] + [("record", record)])
    rows = [{"subtask": 0, "phase": 0}]
    for m in range(MICROBATCHES):
        # sessions: ts as in workload R, 1 ms apart with each microbatch's keys in a shuffled order
        ts = (m * n + np.argsort(np.random.default_rng([11, m]).permutation(n))).tolist() if sessions else range(n)
        for k in range(n):
            key = f"user-{k:07d}"
            record = {"key": key, "amount": k, "ts": ts[k]}
            if composite:  # R's key as the pair (head, tail), as its text travels: the JSON array of both
                record = {"head": key[:-2], "tail": key[-2:], "amount": k, "ts": ts[k]}
                key = orjson.dumps([key[:-2], key[-2:]]).decode()
            rows.append({"subtask": 0, "phase": 4, "batch_id": m, "side": 1, "key": key, "key_group": k % 128,
                         "record": record})
    batches = pa.Table.from_pylist(rows, schema=schema).to_batches(max_chunksize=10_000)
    # 400,000 dicts the garbage collector's full passes would walk in the timed loops (a Python worker has none)
    del rows
    directory = Path(tempfile.mkdtemp(prefix="lakestate-profile-"))
    if sessions:  # the watermark after microbatch m: its largest ts - 1 (bound 0)
        from bench.sessions import SESSION, Sessions, SessionsVectorized

        vectorized = "vectorized" in sys.argv[2:]
        plan = RunPlan("u", SessionsVectorized() if vectorized else Sessions(), Types.STRING(), SESSION, 2, 128,
                       False, [(m, 0, (m + 1) * n - 2) for m in range(MICROBATCHES)],
                       local_outputs(directory, "profile", key_type=Types.STRING()),
                       order_by=("ts",) if vectorized else ())
    else:
        plan = RunPlan("u", function, key_type, OUTPUT, 2, 128, False, [(m, 0) for m in range(MICROBATCHES)],
                       local_outputs(directory, "profile", key_type=key_type),
                       key_columns=("head", "tail") if composite else ())
    profiler = cProfile.Profile()
    if profile:
        profiler.enable()
    cpu = time.process_time()
    out = sum(b.num_rows for b in run_partition(plan, iter(batches)))
    cpu = time.process_time() - cpu
    shutil.rmtree(directory)
    profiler.disable()
    records = n * MICROBATCHES
    print(f"{type(plan.function).__name__}: {records} records, {out} result rows (files and stats): {cpu:.2f}s CPU, "
          f"{cpu / records * 1e6:.1f} us/record")
    if not sessions:
        records_only = [b.filter(pc.equal(b.column("phase"), 4)) for b in batches]
        floor_cpu = time.process_time()
        rows = floor(records_only)
        floor_cpu = time.process_time() - floor_cpu
        print(f"floor, a plain Python loop of the same logic ({rows} output rows): {floor_cpu:.2f}s CPU, "
              f"{floor_cpu / records * 1e6:.1f} us/record; lakestate / floor {cpu / floor_cpu:.1f}x")
    if profile:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
