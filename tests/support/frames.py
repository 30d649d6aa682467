"""Exchange frames for the subtask tests, without Spark: the rows ``state_store.subtask.exchange`` describes (a
subtask's marker, its operator, raw and keyed state, its records and broadcast elements), built readable, run
through ``run_partition``, and what it returns read back (outputs, state changes, stats, written files)."""
import random
import tempfile
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from state_store.records.stats import MicrobatchStats, WrittenFile
from state_store.side_outputs import SIDE_PREFIX
from state_store.state.descriptors import MapStateDescriptor
from state_store.subtask.exchange import (
    BROADCAST_RECORD,
    EXCHANGE_COLUMNS,
    PHASE_KEYED,
    PHASE_OPERATOR,
    PHASE_RAW_KEYED,
    PHASE_RECORD,
    PHASE_SUBTASK,
    RECORD,
    RECORD2,
    SIDE_BROADCAST,
    SIDE_KEYED,
    sort_columns,
    sort_key_parts,
)
from state_store.subtask.reader import run_partition
from state_store.subtask.run_files import SINK, SINK_MICROBATCH, OutputTable, RunOutputs, local_outputs
from state_store.subtask.runner import RAW_KEYED, RunPlan
from state_store.types import Types
from state_store.vectorized import VectorizedKeyedFunction

# parallelism 2 over 8 key groups: subtask 0 owns key groups 0..3, subtask 1 owns 4..7

PARALLELISM, MAX_PARALLELISM = 2, 8
ARROW_TYPES = {"int": pa.int32(), "bigint": pa.int64(), "string": pa.string()}
RECORD_TYPE = pa.struct([("v", pa.string())])  # the keyed source's record
RULE_TYPE = pa.struct([("rule", pa.string()), ("limit", pa.int64())])  # the broadcast source's record
RAW_KEYED_NAME = f"op.{RAW_KEYED}"
RAW_OPERATOR_NAME = "op.__raw__"
BYTES = Types.BYTES()
OUT = "out"


# -- building the exchange frame -------------------------------------------------------------------------------
def marker(subtask):
    """The row that makes a subtask present in the partition, even without state or records."""
    return {"subtask": subtask, "phase": PHASE_SUBTASK}


def operator_row(subtask, state_name, mode, value, origin=None):
    """Operator state stored by subtask ``origin`` (default: ``subtask`` itself)."""
    return {"subtask": subtask, "phase": PHASE_OPERATOR, "state_name": state_name, "mode": mode, "value": value,
            "origin": subtask if origin is None else origin}


def raw_keyed_row(subtask, key_group, data: bytes):
    return {"subtask": subtask, "phase": PHASE_RAW_KEYED, "state_name": RAW_KEYED_NAME, "key": "", "namespace": "",
            "key_group": key_group, "value": BYTES.dumps(data)}


def keyed_row(subtask, state_name, key, key_group, value, namespace="", user_key=None):
    return {"subtask": subtask, "phase": PHASE_KEYED, "state_name": state_name, "key": key, "key_group": key_group,
            "namespace": namespace, "user_key": user_key, "value": value}


def record(subtask, batch_id, key, v, key_group=None):
    """A keyed record ``{"v": v}``; its source position is its place in the list given to ``frame``."""
    return {"subtask": subtask, "phase": PHASE_RECORD, "batch_id": batch_id, "side": SIDE_KEYED, "key": key,
            "key_group": 4 * subtask + 1 if key_group is None else key_group, RECORD: {"v": v}}


def broadcast(subtask, batch_id, rule, limit):
    return {"subtask": subtask, "phase": PHASE_RECORD, "batch_id": batch_id, "side": SIDE_BROADCAST,
            BROADCAST_RECORD: {"rule": rule, "limit": limit}}


def _spark_order(row, vectorized=False):
    # The runtime gives each subtask a partition of its own and sorts it by sort_columns (after packing
    # SORT_KEY from sort_key_parts), ascending, nulls last. Several subtasks here follow one another.
    packed = sum((row["batch_id" if name == "batch_index" else name] or 0) << shift
                 for name, (shift, _) in sort_key_parts().items())
    rest = tuple((row[c] is None, row[c] if row[c] is not None else 0) for c in sort_columns([], vectorized)[1:])
    return (row["subtask"], packed) + rest


def in_frame_order(rows: list[dict], vectorized: bool) -> list[dict]:
    """``rows`` in an order the runtime's sort may give them: a vectorised function's frame is sorted by
    ``SORT_KEY`` alone, so rows that tie on it come in any order (shuffled here, with a fixed seed)."""
    rows = list(rows)
    random.Random(7).shuffle(rows)
    return sorted(rows, key=lambda r: _spark_order(r, vectorized))


def frame(*rows, rows_per_batch=None, with_broadcast=False, record_type=RECORD_TYPE, record2_type=None,
          vectorized=False):
    """Exchange batches of ``rows``: typed as EXCHANGE_COLUMNS + record (+ brecord, + record2 of a two-input
    operator), sorted as the runtime sorts them, records given file 0, block 0 and their place in ``rows`` as
    source position."""
    schema = pa.schema([(n, ARROW_TYPES[t]) for n, t in EXCHANGE_COLUMNS] + [(RECORD, record_type)]
                       + ([(BROADCAST_RECORD, RULE_TYPE)] if with_broadcast else [])
                       + ([(RECORD2, record2_type)] if record2_type is not None else []))
    full = []
    for position, row in enumerate(rows):
        row = dict.fromkeys(schema.names) | row
        if row["phase"] == PHASE_RECORD:
            row.update(file_idx=0, block=0, row=position)
        full.append(row)
    full = in_frame_order(full, vectorized)
    size = rows_per_batch or max(len(full), 1)
    return [pa.RecordBatch.from_pylist(full[i:i + size], schema=schema) for i in range(0, len(full), size)]


def run_outputs(directory, committed=None) -> RunOutputs:
    """The three tables' files under ``directory`` (as a run with the staging backends writes them)."""
    return local_outputs(directory, "t0k3n", committed)


def read_files(outputs: RunOutputs, result_rows) -> list[dict]:
    """Rows of the files a run wrote (in the order it described them), as dicts: kind ``out`` with the sink row
    in ``OUT``, ``k`` keyed and ``o`` operator changes; then the stat rows."""
    read = []
    for row in result_rows:
        if row["kind"] != "file":
            continue
        info = WrittenFile.from_json(row["payload"])
        table = outputs.tables[info.table]
        for r in pq.read_table(Path(table.directory) / info.path).to_pylist():
            if info.table == SINK or info.table.startswith(SIDE_PREFIX):
                batch_id = r.pop(SINK_MICROBATCH)
                kind = "out" if info.table == SINK else info.table
                read.append({"kind": kind, "batch_id": batch_id, "subtask": row["subtask"], OUT: r})
            else:
                partition = {k: int(v) if k == "key_group" else v for k, v in info.partition.items()}
                read.append({"kind": "k" if info.table == "keyed" else "o", "subtask": row["subtask"],
                             **partition, **r})
    # Files group rows by partition; within a kind, a run writes microbatch after microbatch.
    read.sort(key=lambda r: (r["kind"], r["batch_id"]))
    return read + [r for r in result_rows if r["kind"] == "stat"]


def run(function, *rows, output_type=None, microbatches=((1, 1_000),), restored=False, rows_per_batch=None,
        key_type=None, record_type=RECORD_TYPE, side_outputs=(), start_watermark=None, record2_type=None):
    """Run ``function`` over the frame of ``rows``; the rows it wrote and returned, as dicts (``out`` is the
    typed sink row, or a side output's row: kind ``side:<tag name>``)."""
    with tempfile.TemporaryDirectory() as directory:
        outputs = run_outputs(Path(directory))
        for tag in side_outputs:
            outputs.tables[tag.table] = OutputTable(tag.table, str(Path(directory) / tag.name), "", (), None,
                                                    SINK_MICROBATCH)
        plan = RunPlan("op", function, key_type or Types.STRING(), output_type or function.OUT, PARALLELISM,
                       MAX_PARALLELISM, restored, list(microbatches), outputs,
                       side_outputs={t.name: t.type_info for t in side_outputs},
                       **({} if start_watermark is None else {"start_watermark": start_watermark}))
        with_broadcast = any(r.get("side") == SIDE_BROADCAST for r in rows)
        batches = run_partition(plan, iter(frame(*rows, rows_per_batch=rows_per_batch, with_broadcast=with_broadcast,
                                                 record_type=record_type, record2_type=record2_type,
                                                 vectorized=isinstance(function, VectorizedKeyedFunction))))
        return read_files(outputs, [r for batch in batches for r in batch.to_pylist()])


# -- reading the result ------------------------------------------------------------------------------------------
def outputs(result, batch_id=None):
    return [r[OUT] for r in result if r["kind"] == "out" and batch_id in (None, r["batch_id"])]


def keyed_changes(result):
    """(batch_id, state_name, key_group, key, namespace, user_key, value) of every keyed change row."""
    return [(r["batch_id"], r["state_name"], r["key_group"], r["key"], r["namespace"], r["user_key"], r["value"])
            for r in result if r["kind"] == "k"]


def operator_changes(result):
    """(batch_id, subtask, state_name, mode, value) of every operator change row."""
    return [(r["batch_id"], r["subtask"], r["state_name"], r["mode"], r["value"]) for r in result if r["kind"] == "o"]


def stats(result):
    """(batch_id, subtask, payload) of every stat row, in the order returned; the worker's peak RSS (which
    every stat row carries, and must be a positive number of KiB) and the states registered so far (checked
    end to end by the State Processor tests) are left out."""
    rows = []
    for r in result:
        if r["kind"] == "stat":
            payload = MicrobatchStats.from_json(r["payload"])
            assert payload.worker_peak_rss_kb > 0 and payload.batch_id == r["batch_id"]
            counters = {k: v for k, v in asdict(payload).items()
                        if k not in ("batch_id", "worker_peak_rss_kb", "descriptors")}
            rows.append((r["batch_id"], r["subtask"], counters))
    return rows


class Journal(list):
    """A log every copy of a function writes to: run_partition deep-copies the function per subtask."""

    def __deepcopy__(self, memo):
        return self


# The broadcast state of the tests' rule-keeping functions.
RULES = MapStateDescriptor("rules", Types.STRING(), Types.LONG())
