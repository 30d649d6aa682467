"""The driver <-> executor frame contract of a run, in one place.

A run is one Spark pass: one frame goes to the subtasks, partitioned by
subtask (one Spark partition per subtask) and sorted so that each subtask
reads, in this order, its marker, its operator state, its raw keyed state,
the keyed state of the keys the run touches, then the records of every
microbatch of the run: microbatch by microbatch, broadcast records before
keyed ones, keys in order of key group then stored text, a key's records in
``order_by`` order, then source order (file, then position in the file). A
two-input operator's records (``KeyedCoProcessFunction``) carry their input in
``input`` (1 or 2; null for everything else), the second input's in column
``record2``: a key's records of input 1 come before those of input 2.

A vectorised function's frame (``VectorizedKeyedFunction``) is sorted by ``SORT_KEY`` alone, one long, which
Spark sorts by radix: a subtask gets its phases and microbatches in order, and orders each microbatch's
records itself (``record_order``), as it holds them all for its one call anyway. Its rows keep their source
position (``SORT_ONLY_COLUMNS``) for that, and its stored entries come in no order.

The subtasks write the sink rows and state changes to files themselves
(``run_files``); what they send back is small: one ``stat`` row per subtask
and microbatch, and one ``file`` row per file written (its description as
JSON), for the driver to commit.
No Spark import here: the executor side (``reader``, ``runner``) and the tests use it alone.
"""
from __future__ import annotations

from functools import lru_cache

# Phases of the exchange frame, in the order a subtask reads them.
PHASE_SUBTASK, PHASE_OPERATOR, PHASE_RAW_KEYED, PHASE_KEYED, PHASE_RECORD = 0, 1, 2, 3, 4
# Sides of a record within a microbatch: broadcast elements first.
SIDE_BROADCAST, SIDE_KEYED = 0, 1
# Kinds of result rows.
KIND_STAT, KIND_FILE = "stat", "file"

EXCHANGE_COLUMNS = [
    ("subtask", "int"), ("phase", "int"), ("batch_id", "bigint"), ("side", "int"), ("key", "string"),
    ("key_group", "int"), ("file_idx", "int"), ("block", "bigint"), ("row", "bigint"),
    ("state_name", "string"), ("origin", "int"), ("namespace", "string"), ("user_key", "string"),
    ("value", "string"), ("expiry", "bigint"), ("mode", "string"), ("input", "int"),
]
RECORD, BROADCAST_RECORD, RECORD2 = "record", "brecord", "record2"


SORT_KEY = "sort_key"
# A record's place in its source (file, block, row): sorted by, then dropped before the subtasks get the frame.
SORT_ONLY_COLUMNS = ("file_idx", "block", "row")
MAX_RUN_MICROBATCHES = 1 << 24  # a run's microbatches fit the sort key's 24 bits


def sort_key_parts() -> dict[str, tuple[int, int]]:
    """How ``SORT_KEY`` packs (phase, microbatch index in the run, side, key group) into one long, so
    Spark's sort compares one number first: name -> (shift, bits)."""
    return {"phase": (40, 3), "batch_index": (16, 24), "side": (15, 1), "key_group": (0, 15)}


def sort_columns(order_by: list[str], vectorized: bool = False) -> list[str]:
    """The order a subtask reads its frame in, after ``SORT_KEY`` (see the module docstring). A Spark
    partition holds one subtask, so the subtask is not a sort column."""
    if vectorized:
        return [SORT_KEY]
    return ([SORT_KEY, "key", "input"] + [f"{RECORD}.`{c}`" for c in order_by]
            + ["file_idx", "block", "row", "state_name", "origin", "namespace", "user_key"])


def record_order(batch, order_by: list[str], key=None):
    """The indices that put a vectorised subtask's records of one microbatch (exchange rows with ``input``,
    ``record`` and ``SORT_ONLY_COLUMNS``) in the order ``sort_columns`` gives the per-record path within a key:
    input, ``order_by``, file, block, row; by ``key`` (an array beside them) first when given. Nulls last,
    as Spark's sort puts them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = {} if key is None else {"k": key}
    if batch.column("input").null_count < batch.num_rows:  # a union of two inputs
        columns["i"] = batch.column("input")
    record = batch.column(RECORD)
    for n, name in enumerate(order_by):
        columns[f"o{n}"] = pc.struct_field(record, name)
    for name in SORT_ONLY_COLUMNS:
        columns[name] = batch.column(name)
    table = pa.table(columns)
    return pc.sort_indices(table, sort_keys=[(n, "ascending") for n in table.column_names], null_placement="at_end")


RESULT_COLUMNS = [("kind", "string"), ("batch_id", "bigint"), ("subtask", "int"), ("payload", "string")]
RESULT_DDL = ", ".join(f"{n} {t}" for n, t in RESULT_COLUMNS)


# Spark's Murmur3 hash of an int (seed 42), as HashPartitioning computes it: lets the driver pick, for each
# subtask, a value that lands in the partition of the same index, so every subtask gets a partition of its own.
_C1, _C2, _MASK = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def murmur3_int(value: int, seed: int = 42) -> int:
    k1 = (_rotl((value & _MASK) * _C1 & _MASK, 15) * _C2) & _MASK
    h1 = (_rotl(seed ^ k1, 13) * 5 + 0xE6546B64) & _MASK
    h1 ^= 4
    h1 = ((h1 ^ (h1 >> 16)) * 0x85EBCA6B) & _MASK
    h1 = ((h1 ^ (h1 >> 13)) * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


@lru_cache(maxsize=64)
def partition_keys(parallelism: int) -> tuple[int, ...]:
    """For each subtask s, an int whose Spark hash partition among ``parallelism`` partitions is s."""
    keys: dict[int, int] = {}
    candidate = 0
    while len(keys) < parallelism:
        keys.setdefault(murmur3_int(candidate) % parallelism, candidate)
        candidate += 1
    return tuple(keys[s] for s in range(parallelism))
