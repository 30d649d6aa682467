"""The executor half of a run's exchange: the frame a run's subtasks read, in the Spark executors.

Pure Python over Arrow record batches, so it runs (and is tested) without Spark. ``run_partition`` reads the
frame described in ``exchange`` as a stream of batches: for each subtask in it, its operator state, raw keyed
state and the keyed state of the keys the run touches, then its records microbatch by microbatch, each input's
from its own column, decoded column by column. It hands them to the subtask's runner (``runner.SubtaskRunner``,
or the vectorised ones: ``vectorized_run``, ``window_run``), which runs the user function once per key per
microbatch, and yields result batches as it goes, so memory holds a subtask's touched state plus one batch,
however many microbatches the run has.
"""
from __future__ import annotations

import datetime
import gc
from typing import Iterator

from ..records.layout import STORED_KEYED_COLUMNS
from ..types import _EPOCH
from ..vectorized import VectorizedKeyedFunction
from .exchange import (
    BROADCAST_RECORD,
    PHASE_KEYED,
    PHASE_OPERATOR,
    PHASE_RAW_KEYED,
    PHASE_RECORD,
    RECORD,
    RECORD2,
    SIDE_BROADCAST,
)
from .runner import ResultRows, RunPlan, SubtaskRunner

# The subtask loop allocates a few containers per record that nearly all die young; at the default threshold (700
# allocations) a young collection ran every few keys, and its survivors (a microbatch's state) brought full ones.
GC_YOUNG_THRESHOLD = 50_000


def column_values(array) -> list:
    """An Arrow array as a list of Python values, as ``to_pylist`` gives them, but through NumPy for strings,
    binaries and numbers (``to_pylist`` builds a scalar object per value: 25-50 times slower)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = array.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return array.to_numpy(zero_copy_only=False).tolist()
    if pa.types.is_integer(t) or pa.types.is_float32(t) or pa.types.is_float64(t) or pa.types.is_boolean(t):
        if not array.null_count:
            return array.to_numpy(zero_copy_only=False).tolist()
        values = array.fill_null(False if pa.types.is_boolean(t) else 0).to_numpy(zero_copy_only=False).tolist()
        for i in pc.indices_nonzero(array.is_null()).to_numpy().tolist():
            values[i] = None
        return values
    if pa.types.is_timestamp(t) and t.tz in ("UTC", "+00:00") and t.unit == "us":  # Spark's timestamp: 8x faster
        return _timestamps(array)
    return array.to_pylist()


def _timestamps(array) -> list:
    """A UTC timestamp array (microseconds) as aware datetimes in UTC, as ``_Timestamp.decode`` gives them, from
    its integers (``to_pylist`` goes through pytz for each value)."""
    import pyarrow as pa

    epoch, microseconds = _EPOCH, datetime.timedelta
    micros = array.cast(pa.int64())
    values = column_values(micros)
    if not micros.null_count:
        return [epoch + microseconds(microseconds=v) for v in values]
    return [None if v is None else epoch + microseconds(microseconds=v) for v in values]


def _struct_rows(array) -> list:
    """A struct column as dicts, field by field (faster than pyarrow's row-wise ``to_pylist``)."""
    names = [f.name for f in array.type]
    if not names:
        return [None] * len(array)
    fields = [column_values(array.field(i)) for i in range(len(names))]
    return [dict(zip(names, values)) for values in zip(*fields)]


def _user_value_converter(arrow_type):
    """A function turning pyarrow's Python value of ``arrow_type`` into the user's (maps become dicts),
    or None when they are the same."""
    import pyarrow as pa

    if pa.types.is_map(arrow_type):
        k, v = _user_value_converter(arrow_type.key_type), _user_value_converter(arrow_type.item_type)
        return lambda x: None if x is None else {(k(a) if k else a): (v(b) if v else b) for a, b in x}
    if pa.types.is_struct(arrow_type):
        fields = [(f.name, _user_value_converter(f.type)) for f in arrow_type]
        if all(c is None for _, c in fields):
            return None
        return lambda x: None if x is None else {n: (c(x[n]) if c else x[n]) for n, c in fields}
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        e = _user_value_converter(arrow_type.value_type)
        return None if e is None else (lambda x: None if x is None else [e(i) for i in x])
    return None



def _uniform(batch, subtask: int) -> int | None:
    """The phase of a batch whose rows are all of that phase and of ``subtask`` (most of them), broadcast records
    excepted; else None."""
    import pyarrow.compute as pc

    phase, subtasks = (pc.min_max(batch.column(n)) for n in ("phase", "subtask"))
    if phase["min"] != phase["max"] or not subtasks["min"].as_py() == subtasks["max"].as_py() == subtask:
        return None
    if phase["min"].as_py() == PHASE_RECORD:
        side = pc.min_max(batch.column("side"))
        if SIDE_BROADCAST in (side["min"].as_py(), side["max"].as_py()):
            return None
    return phase["min"].as_py()


def run_partition(plan: RunPlan, batches: Iterator) -> Iterator:
    """The executor side of a run: exchange batches in, result batches out (see ``exchange``). The garbage
    collector's young generation is collected less often while it runs (``GC_YOUNG_THRESHOLD``)."""
    threshold = gc.get_threshold()
    gc.set_threshold(max(threshold[0], GC_YOUNG_THRESHOLD), *threshold[1:])
    try:
        yield from _run_subtasks(plan, batches)
    finally:
        gc.set_threshold(*threshold)


def _run_subtasks(plan: RunPlan, batches: Iterator) -> Iterator:
    results = ResultRows()
    runner: SubtaskRunner | None = None
    finished: set[int] = set()
    convert = bconvert = two_inputs = None
    vectorized = isinstance(plan.function, VectorizedKeyedFunction)
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if vectorized:
            runner = _run_vectorized(plan, batch, runner, finished, results)
            runner.files.maybe_flush()
            yield from results.take()
            continue
        schema = batch.schema
        if convert is None:
            convert = _user_value_converter(schema.field(RECORD).type)
            if schema.get_field_index(BROADCAST_RECORD) >= 0:
                bconvert = _user_value_converter(schema.field(BROADCAST_RECORD).type) or (lambda x: x)
            if schema.get_field_index(RECORD2) >= 0:  # a two-input operator: records are (input, record) pairs
                two_inputs = _two_input_records(convert, _user_value_converter(schema.field(RECORD2).type))
        phase = _uniform(batch, runner.subtask) if runner is not None else None  # the runner's subtask's only
        if phase == PHASE_KEYED:  # a run's stored state: no records to decode
            runner.load_keyed_columns(*(column_values(batch.column(n)) for n in STORED_KEYED_COLUMNS))
            continue
        if two_inputs is not None:
            records = two_inputs(batch)
        else:
            records = _struct_rows(batch.column(RECORD))
            if convert is not None:
                records = [convert(r) for r in records]
        if phase == PHASE_RECORD:
            runner.records(*(column_values(batch.column(n)) for n in ("batch_id", "key", "key_group")), records)
        else:
            runner = _run_rows(plan, batch, records, bconvert, runner, finished, results)
        runner.drain()
        runner.files.maybe_flush()
        yield from results.take()
    if runner is not None:
        runner.finish()
    yield from results.take()


def _two_input_records(convert, convert2):
    """What makes a two-input operator's batch its records: ``(input, record)`` for each record row (the record
    of input 1 from ``record``, of input 2 from ``record2``), None for the other rows."""
    def records(batch) -> list:
        inputs = column_values(batch.column("input"))
        if not any(inputs):
            return [None] * batch.num_rows
        firsts, seconds = _struct_rows(batch.column(RECORD)), _struct_rows(batch.column(RECORD2))
        return [None if i is None else (1, convert(a) if convert else a) if i == 1 else
                (2, convert2(b) if convert2 else b) for i, a, b in zip(inputs, firsts, seconds)]
    return records


def _run_rows(plan: RunPlan, batch, records: list, bconvert, runner: SubtaskRunner | None, finished: set[int],
              results: ResultRows) -> SubtaskRunner:
    """A batch row by row (state to load, broadcast records, a change of subtask); returns the subtask's runner
    at its end."""
    import pyarrow.compute as pc

    def column(name: str) -> list:
        return column_values(batch.column(name))

    subtasks, phases, batch_ids, sides, keys, key_groups = (
        column(n) for n in ("subtask", "phase", "batch_id", "side", "key", "key_group"))
    brecords = column(BROADCAST_RECORD) if bconvert is not None else None
    # Batches of records only skip the state columns.
    if pc.min(batch.column("phase")).as_py() != PHASE_RECORD:
        names, values, namespaces, user_keys, modes, origins, expiries = (
            column(n) for n in ("state_name", "value", "namespace", "user_key", "mode", "origin", "expiry"))
    for i in range(batch.num_rows):
        subtask = subtasks[i]
        if runner is None or subtask != runner.subtask:
            if runner is not None:
                runner.finish()
                finished.add(runner.subtask)
            if subtask in finished:  # the frame is sorted per partition, not by subtask
                raise RuntimeError(f"rows of subtask {subtask} arrived after those of another subtask: "
                                   f"the exchange must give each subtask a partition of its own")
            runner = SubtaskRunner(plan, subtask, results)
        phase = phases[i]
        if phase == PHASE_RECORD:
            if sides[i] == SIDE_BROADCAST:
                runner.broadcast(batch_ids[i], bconvert(brecords[i]))
            else:
                runner.keyed(batch_ids[i], keys[i], key_groups[i], records[i])
        elif phase == PHASE_KEYED:
            runner.load_keyed(names[i], keys[i], namespaces[i], user_keys[i], key_groups[i], values[i],
                              expiries[i])
        elif phase == PHASE_RAW_KEYED:
            runner.load_raw_keyed(key_groups[i], values[i])
        elif phase == PHASE_OPERATOR:
            runner.load_operator(names[i], modes[i], values[i], origins[i])
    return runner


def _run_vectorized(plan: RunPlan, batch, runner: SubtaskRunner | None, finished: set[int],
                    results: ResultRows) -> SubtaskRunner:
    """A batch of a VectorizedKeyedFunction's frame: each run of keyed records of one microbatch goes to the
    subtask's ``VectorizedRun`` as an Arrow slice, the other rows (state to load, a new subtask) to ``_run_rows``;
    returns the subtask's runner at its end."""
    import numpy as np
    import pyarrow.compute as pc

    keyed = pc.and_kleene(pc.equal(batch.column("phase"), PHASE_RECORD),
                          pc.not_equal(batch.column("side"), SIDE_BROADCAST))
    flags = pc.fill_null(keyed, False).to_numpy(zero_copy_only=False)
    batch_ids = pc.fill_null(batch.column("batch_id"), -1).to_numpy()
    subtasks = batch.column("subtask").to_numpy()
    n = batch.num_rows
    changed = (flags[1:] != flags[:-1]) | (batch_ids[1:] != batch_ids[:-1]) | (subtasks[1:] != subtasks[:-1])
    starts = [0] + (np.flatnonzero(changed) + 1).tolist()
    for start, end in zip(starts, starts[1:] + [n]):
        part = batch.slice(start, end - start)
        if not flags[start]:
            if runner is not None and _uniform(part, runner.subtask) == PHASE_KEYED:
                if runner.vectorized.loads_timers or runner._timer_names.isdisjoint(
                        pc.unique(part.column("state_name")).to_pylist()):
                    runner.vectorized.load(part)  # ValueState entries (or a window run's), kept as Arrow
                else:  # timers a per-record run registered: the runner's
                    runner.load_keyed_columns(*(column_values(part.column(n)) for n in STORED_KEYED_COLUMNS))
            else:
                runner = _run_rows(plan, part, [], None, runner, finished, results)
            continue
        if runner is None or runner.subtask != subtasks[start]:
            raise RuntimeError(f"records of subtask {subtasks[start]} arrived before its marker row")
        if runner.batch_id != batch_ids[start]:
            runner.goto(int(batch_ids[start]))
        runner.vectorized.add(part)
    return runner
