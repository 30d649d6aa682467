"""The vectorised keyed function (VectorizedKeyedFunction): the same sink rows, stored texts and stats as the
per-record path on the same frames (no Spark), its clear errors, and one job end to end through the real run
path, its checkpoint read by the State Processor API and restored into the per-record function."""
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from bench.jobs import ACC, OUTPUT, RunningCountSum, RunningCountSumVectorized
from state_store import ConfigError, JobSpec, MapFunction, ValueStateDescriptor, VectorizedKeyedFunction
from state_store.errors import StoredValueError
from state_store.subtask.exchange import EXCHANGE_COLUMNS, PHASE_KEYED, PHASE_RECORD, PHASE_SUBTASK, RECORD, SIDE_KEYED
from state_store.subtask.json_columns import decode_column, encode_column
from state_store.subtask.reader import run_partition
from state_store.subtask.runner import RunPlan, UserFunctionError
from state_store.types import Types
from tests.support.frames import (
    ARROW_TYPES,
    OUT,
    in_frame_order,
    keyed_changes,
    outputs,
    read_files,
    run_outputs,
    stats,
)

EVENT_TYPE = pa.struct([("key", pa.string()), ("amount", pa.int64()), ("ts", pa.int64())])
ACC_NAME = "op.acc"
LIMIT = 3  # CountSumOrClear clears a key's state once its count reaches this


class CountSumOrClear(RunningCountSum):
    """R, and a removal: a key's state is cleared once its count reaches LIMIT."""

    def process(self, key, records, ctx):
        for row in super().process(key, records, ctx):
            if row["count"] >= LIMIT:
                self.acc.clear()
            yield row


class CountSumOrClearVectorized(RunningCountSumVectorized):
    def process_batch(self, records, state, ctx):
        output, new_state = super().process_batch(records, state, ctx)
        acc = new_state.column("acc").combine_chunks()
        cleared = pc.greater_equal(pc.struct_field(acc, "count"), LIMIT)
        acc = pc.if_else(cleared, pa.scalar(None, acc.type), acc)
        return output, new_state.set_column(1, "acc", acc)


# -- frames -------------------------------------------------------------------------------------------------------
def event(batch_id, key, amount, subtask=0):
    """A record of ``key`` (in key group 4 * subtask + a hash of it: subtask 1 owns key groups 4..7)."""
    return {"subtask": subtask, "phase": PHASE_RECORD, "batch_id": batch_id, "side": SIDE_KEYED, "key": key,
            "key_group": 4 * subtask + sum(map(ord, key)) % 4, RECORD: {"key": key, "amount": amount, "ts": 0}}


def stored(key, text, subtask=0, state=ACC_NAME, expiry=None):
    return {"subtask": subtask, "phase": PHASE_KEYED, "state_name": state, "key": key,
            "key_group": sum(map(ord, key)) % 4, "namespace": "", "user_key": None, "value": text, "expiry": expiry}


def frame(rows, rows_per_batch=4, vectorized=True):
    schema = pa.schema([(n, ARROW_TYPES[t]) for n, t in EXCHANGE_COLUMNS] + [(RECORD, EVENT_TYPE)])
    full = []
    markers = [{"subtask": subtask, "phase": PHASE_SUBTASK} for subtask in sorted({r["subtask"] for r in rows} | {0})]
    for position, row in enumerate(markers + rows):
        row = dict.fromkeys(schema.names) | row
        if row["phase"] == PHASE_RECORD:
            row.update(file_idx=0, block=0, row=position)
        full.append(row)
    full = in_frame_order(full, vectorized)
    return [pa.RecordBatch.from_pylist(full[i:i + rows_per_batch], schema=schema)
            for i in range(0, len(full), rows_per_batch)]


def run(function, rows, microbatches=3, committed=None, key_type=None, side_outputs=(), output_type=OUTPUT,
        watermarks=None, order_by=()):
    """The rows ``function`` wrote (a side output's: kind ``side:<tag name>``) and the stats it returned;
    microbatch m's processing time is 1000 (m + 1), its watermark after it ``watermarks[m]`` (default none)."""
    from state_store.sources import SINK_MICROBATCH
    from state_store.subtask.run_files import OutputTable

    with tempfile.TemporaryDirectory() as directory:
        out = run_outputs(Path(directory), committed)
        for tag in side_outputs:
            out.tables[tag.table] = OutputTable(tag.table, str(Path(directory) / tag.name), "", (), committed,
                                                SINK_MICROBATCH)
        plan = RunPlan("op", function, key_type or Types.STRING(), output_type, 2, 8, True,
                       [(m, 1_000 * (m + 1)) + ((watermarks[m],) if watermarks else ()) for m in range(microbatches)],
                       out, side_outputs={t.name: t.type_info for t in side_outputs}, order_by=tuple(order_by))
        result = run_partition(plan, iter(frame(rows, vectorized=isinstance(function, VectorizedKeyedFunction))))
        return read_files(out, [r for batch in result for r in batch.to_pylist()])


RESTORED = [stored("a", '{"count":1,"sum":5}'), stored("z", '{"count":9,"sum":9}'), stored("b", '{"count":2,"sum":0}')]
EVENTS = [event(0, "a", 1), event(0, "b", 2), event(0, "a", 3), event(0, "c", 4),
          event(1, "c", 5), event(1, "d", -6), event(1, "a", 7),
          event(2, "c", 8), event(2, "c", 9), event(2, "e", 10)]


def expiries(result):
    """(microbatch, key, expiry) of every keyed change, sorted."""
    return sorted((r["batch_id"], r["key"], r["expiry"] or 0) for r in result if r["kind"] == "k")


def sink(result):
    """(microbatch, sink row) of every output row, sorted."""
    return sorted((r["batch_id"], sorted(r[OUT].items())) for r in result if r["kind"] == "out")


def same_on_both_paths(per_record, vectorized, rows, **options):
    expected, actual = run(per_record, rows, **options), run(vectorized, rows, **options)
    assert sorted(keyed_changes(actual), key=repr) == sorted(keyed_changes(expected), key=repr)
    assert expiries(actual) == expiries(expected)
    assert sink(actual) == sink(expected)
    assert stats(actual) == stats(expected)
    return actual


def test_r_vectorised_writes_the_per_record_paths_rows_texts_and_stats_from_restored_state():
    result = same_on_both_paths(RunningCountSum(), RunningCountSumVectorized(), RESTORED + EVENTS)
    assert (0, ACC_NAME, 1, "a", "", None, '{"count":3,"sum":9}') in keyed_changes(result)
    assert {r["key"]: r["count"] for r in outputs(result)} == {"a": 4, "b": 3, "c": 4, "d": 1, "e": 1}


def test_many_keys_with_several_records_each_fold_per_key():
    rng = np.random.default_rng(5)
    rows = [event(m, f"user-{k}", int(a)) for m in range(2)
            for k, a in zip(rng.integers(0, 1_000, 3_000), rng.integers(1, 100, 3_000))]
    result = same_on_both_paths(RunningCountSum(), RunningCountSumVectorized(), rows, microbatches=2)
    assert len(outputs(result)) > 1_500


class FirstAndLast(RunningCountSum):
    """Order-sensitive: a key's first record's amount as ``count`` and its last one's as ``sum``."""

    def process(self, key, records, ctx):
        self.acc.update({"count": records[0]["amount"], "sum": records[-1]["amount"]})
        yield {"key": key, "count": records[0]["amount"], "sum": records[-1]["amount"]}


class FirstAndLastVectorized(RunningCountSumVectorized):
    def process_batch(self, records, state, ctx):
        amounts = records.column("amount")
        first, last = amounts.take(ctx.key_offsets[:-1]), amounts.take(ctx.key_offsets[1:] - 1)
        acc = pa.StructArray.from_arrays([first.combine_chunks(), last.combine_chunks()], ["count", "sum"])
        return (pa.table({"key": state.column("key"), "count": first, "sum": last}),
                pa.table({"key": state.column("key"), "acc": acc}))


def test_a_keys_records_come_in_source_order_though_the_frame_gives_them_in_any_order():
    # The vectorised frame is sorted by SORT_KEY alone (``exchange``): the subtask puts a key's records back in
    # source order, as the per-record path reads them.
    rng = np.random.default_rng(9)
    rows = [event(m, f"k{k}", int(a)) for m in range(2) for k, a in zip(rng.integers(0, 50, 400), rng.permutation(400))]
    same_on_both_paths(FirstAndLast(), FirstAndLastVectorized(), rows, microbatches=2)


def test_record_order_is_the_per_record_paths_within_a_key_input_then_order_by_then_source_position():
    from state_store.subtask.exchange import record_order

    rows = pa.table({"input": pa.array([2, 1, 1, None], pa.int32()),
                     RECORD: pa.chunked_array([pa.array([{"key": "a", "amount": 1, "ts": 0}] * 2, EVENT_TYPE),
                                               pa.array([{"key": "a", "amount": 5, "ts": 0},
                                                         {"key": "a", "amount": 1, "ts": 0}], EVENT_TYPE)]),
                     "file_idx": pa.array([0, 1, 0, 0], pa.int32()), "block": pa.array([0, 0, 0, 0], pa.int64()),
                     "row": pa.array([3, 0, 2, 1], pa.int64())})
    assert record_order(rows, ["amount"]).to_pylist() == [1, 2, 0, 3]  # input 1 (amount 1, then 5), 2, none
    assert record_order(rows, []).to_pylist() == [2, 1, 0, 3]  # input 1 by file, then 2, then none
    assert record_order(rows, [], key=pa.array(["b", "b", "a", "a"])).to_pylist() == [2, 3, 1, 0]


def test_a_null_value_removes_the_state_as_clear_does():
    result = same_on_both_paths(CountSumOrClear(), CountSumOrClearVectorized(), RESTORED + EVENTS)
    assert sorted((c[0], c[3]) for c in keyed_changes(result) if c[6] is None) == [(0, "a"), (0, "b"), (2, "c")]


def test_two_subtasks_in_one_partition_each_get_their_own_calls():
    calls = []

    class Logged(RunningCountSumVectorized):
        def process_batch(self, records, state, ctx):
            calls.append((ctx.subtask, ctx.batch_id, state.column("key").to_pylist()))
            return super().process_batch(records, state, ctx)

    rows = RESTORED + EVENTS + [event(0, "x", 1, subtask=1), event(2, "x", 2, subtask=1), event(2, "y", 3, subtask=1)]
    result = same_on_both_paths(RunningCountSum(), Logged(), rows)
    assert calls == [(0, 0, ["a", "b", "c"]), (0, 1, ["a", "c", "d"]), (0, 2, ["c", "e"]), (1, 0, ["x"]),
                     (1, 2, ["x", "y"])]
    assert {s for _, s, _ in stats(result)} == {0, 1}


def test_a_replayed_microbatch_writes_nothing_but_its_state_carries_on():
    result = same_on_both_paths(RunningCountSum(), RunningCountSumVectorized(), RESTORED + EVENTS, committed=1)
    assert {r["batch_id"] for r in result if r["kind"] in ("out", "k")} == {2}


def test_long_keys_are_typed_and_sorted_as_numbers():
    seen = []

    class Keys(RunningCountSumVectorized):
        def process_batch(self, records, state, ctx):
            seen.append(state.column("key").to_pylist())
            records = records.set_column(0, "key", records.column("key").cast(pa.int64()))
            output, new_state = super().process_batch(records, state, ctx)
            return output.set_column(0, "key", output.column("key").cast(pa.string())), new_state

    rows = [dict(event(0, k, 1), key=k) for k in ("10", "9", "-1")]
    run(Keys(), rows, microbatches=1, key_type=Types.LONG())
    assert seen == [[-1, 9, 10]]


# -- the column-wise stored format -----------------------------------------------------------------------------
VALUES = Types.ROW_NAMED(["s", "n", "b", "inner", "f", "l"], [
    Types.STRING(), Types.INT(), Types.BOOLEAN(), Types.ROW_NAMED(["z", "a"], [Types.LONG(), Types.STRING()]),
    Types.DOUBLE(), Types.LIST(Types.LONG())])


@pytest.mark.parametrize("type_info, values", [
    (VALUES, [{"s": 'q"\\/é\u2028', "n": -2, "b": True, "inner": {"z": 1, "a": None}, "f": 0.1, "l": [1, None]},
              None, dict.fromkeys(["s", "n", "b", "inner", "f", "l"])]),
    (ACC, [{"count": 1, "sum": -(2**63)}, None]),
    (Types.STRING(), ["line\nbreak", "tab\t", None]),
    (Types.DOUBLE(), [1.0, float("inf"), 1e16, None]),
    (Types.DOUBLE(), [1.0, -0.0, 1e16, 1e-7, 5e-324, None, 0.1]
     + [float(x) for x in __import__("numpy").random.default_rng(7).normal(0, 1e12, 2_000)]),
    (Types.ROW_NAMED(["mean", "n"], [Types.FLOAT(), Types.LONG()]),
     [{"mean": 0.5, "n": 1}, None, {"mean": None, "n": 2}, {"mean": 0.5 ** 20, "n": 3}]),
    (Types.MAP(Types.LONG(), Types.STRING()), [{1: "a", 2: "b"}, None]),
    (Types.BYTES(), [b"\x00\xff", None]),
])
def test_a_column_encodes_to_the_per_value_text_and_decodes_back(type_info, values):
    column = pa.array([type_info.to_arrow(v) for v in values], type=type_info.arrow_type())
    texts = encode_column(type_info, column)
    assert texts.to_pylist() == [None if v is None else type_info.dumps(v) for v in values]
    assert decode_column(type_info, texts, pa.array([str(i) for i in range(len(values))]), "s").equals(column)


def test_a_stored_value_of_another_type_is_an_error_naming_the_state_and_key():
    rows = [stored("a", '{"count":"one","sum":5}'), event(0, "a", 1)]
    with pytest.raises(StoredValueError, match=r"state 'op.acc' of key 'a' holds a stored value that is not"):
        run(RunningCountSumVectorized(), rows, microbatches=1)


# -- clear errors -------------------------------------------------------------------------------------------------
class Returns(RunningCountSumVectorized):
    def __init__(self, change):
        self.change = change

    def process_batch(self, records, state, ctx):
        return self.change(*super().process_batch(records, state, ctx))


@pytest.mark.parametrize("change, message", [
    (lambda out, new: (out.drop_columns(["sum"]), new),
     r"output has columns \['key', 'count'\]: \['sum'\] are missing"),
    (lambda out, new: (out.append_column("x", out.column("sum")), new), r"\['x'\] are not declared"),
    (lambda out, new: (out.set_column(1, "count", pa.array(["x"] * out.num_rows)), new),
     r"column 'count' is string but is declared int64"),
    (lambda out, new: (out, new.rename_columns(["key", "accc"])), r"after the declared states \['acc'\]"),
    (lambda out, new: (out, pa.table({"key": ["nope"], "acc": pa.nulls(1, ACC.arrow_type())})),
     r"new state has key 'nope', which has no record in this microbatch"),
    (lambda out, new: out, r"process_batch returned Table; return a pair"),
    (lambda out, new: ([1], None), r"output is a list; return a pyarrow.Table"),
])
def test_a_wrong_result_is_an_error_naming_the_mismatch(change, message):
    with pytest.raises(ConfigError, match=message):
        run(Returns(change), EVENTS, microbatches=3)


def test_an_exception_in_process_batch_says_where():
    with pytest.raises(UserFunctionError, match=r"process_batch\(\) raised ZeroDivisionError: .*microbatch 0"):
        run(Returns(lambda out, new: 1 / 0), EVENTS, microbatches=3)


class Doubled(MapFunction):
    """A record's amount doubled, per record (``map``) and, in ``DoubledColumns``, over a table (``map_batch``)."""

    def map(self, record):
        return {"key": record["key"], "count": 1, "sum": 2 * record["amount"]}


class DoubledColumns(Doubled):
    def map_batch(self, records):
        return pa.table({"key": records.column("key"), "count": pa.repeat(pa.scalar(1), records.num_rows),
                         "sum": pc.multiply(records.column("amount"), 2)})


class DoubledFails(DoubledColumns):
    def map_batch(self, records):
        return 1 / 0


class DoubledShort(DoubledColumns):
    def map_batch(self, records):
        return super().map_batch(records).drop_columns(["sum"])


class DoubledFewer(DoubledColumns):
    def map_batch(self, records):
        return super().map_batch(records).slice(1)


def test_a_map_with_map_batch_runs_vectorised_with_the_maps_rows_and_its_errors_name_map_batch():
    from state_store.dataflow import RecordOperator, VectorizedRecordOperator, record_operator

    vectorized = record_operator(DoubledColumns())
    assert isinstance(vectorized, VectorizedRecordOperator) and type(record_operator(Doubled())) is RecordOperator
    same_on_both_paths(RecordOperator(DoubledColumns()), vectorized, EVENTS)
    with pytest.raises(UserFunctionError, match=r"map_batch\(\) raised ZeroDivisionError: .*microbatch 0"):
        run(record_operator(DoubledFails()), EVENTS)
    with pytest.raises(ConfigError, match=r"map_batch's output has columns \['key', 'count'\]: \['sum'\] are"):
        run(record_operator(DoubledShort()), EVENTS)
    with pytest.raises(ConfigError, match=r"map_batch returned 3 rows for 4 records; a map gives one row per record"):
        run(record_operator(DoubledFewer()), EVENTS)


RECENT, BUCKETS = "op.recent", "op.buckets"


def _list_and_map():
    from state_store import ListStateDescriptor, MapStateDescriptor

    return (ListStateDescriptor("recent", Types.LONG()), MapStateDescriptor("buckets", Types.STRING(), Types.LONG()))


class RecentAndBuckets(RunningCountSum):
    """A ListState of a key's last two amounts and a MapState counting its amounts by parity; a key's "odd"
    entry is removed once it reaches 3, and both states are cleared by a microbatch whose amounts sum below 0.
    Emits the number of map entries and the sum of the list."""

    def open(self, ctx):
        recent, buckets = _list_and_map()
        self.recent, self.buckets = ctx.get_list_state(recent), ctx.get_map_state(buckets)

    def process(self, key, records, ctx):
        for r in records:
            self.recent.add(r["amount"])
            self.recent.update(self.recent.get()[-2:])
            parity = "odd" if r["amount"] % 2 else "even"
            self.buckets.put(parity, (self.buckets.get(parity) or 0) + 1)
        if (self.buckets.get("odd") or 0) >= 3:
            self.buckets.remove("odd")
        if sum(r["amount"] for r in records) < 0:
            self.recent.clear()
            self.buckets.clear()
        yield {"key": key, "count": len(self.buckets.keys()), "sum": sum(self.recent.get())}


class RecentAndBucketsVectorized(VectorizedKeyedFunction):
    """RecentAndBuckets over the ``state`` table's list and map columns (a loop over keys, not records)."""

    def open(self, ctx):
        recent, buckets = _list_and_map()
        ctx.get_list_state(recent)
        ctx.get_map_state(buckets)

    def process_batch(self, records, state, ctx):
        amounts, offsets = records.column("amount").to_pylist(), ctx.key_offsets
        lists, maps, out = [], [], []
        for i, (recent, buckets) in enumerate(zip(state.column("recent").to_pylist(),
                                                  state.column("buckets").to_pylist())):
            mine, recent, buckets = amounts[offsets[i]:offsets[i + 1]], recent or [], dict(buckets or [])
            for amount in mine:
                recent = (recent + [amount])[-2:]
                parity = "odd" if amount % 2 else "even"
                buckets[parity] = buckets.get(parity, 0) + 1
            if buckets.get("odd", 0) >= 3:
                del buckets["odd"]
            if sum(mine) < 0:
                recent, buckets = [], {}
            lists.append(recent)
            maps.append(list(buckets.items()))
            out.append((len(buckets), sum(recent)))
        new_state = pa.table({"key": state.column("key"), "recent": pa.array(lists, pa.list_(pa.int64())),
                              "buckets": pa.array(maps, pa.map_(pa.string(), pa.int64()))})
        output = pa.table({"key": state.column("key"), "count": pa.array([c for c, _ in out], pa.int64()),
                           "sum": pa.array([t for _, t in out], pa.int64())})
        return output, new_state


def test_list_and_map_state_are_arrow_columns_with_the_per_record_paths_rows_texts_and_stats():
    """ListState and MapState on the vectorised path (issue 61, item 6): a list is a list column, a map an Arrow
    map column, each key's stored entries restored into them; the same sink rows, keyed changes (a map entry each,
    removed ones as tombstones, unchanged ones not written) and stats as the per-record path's."""
    restored = [stored("a", "[5,1]", state=RECENT), dict(stored("a", "2", state=BUCKETS), user_key='"odd"'),
                dict(stored("a", "1", state=BUCKETS), user_key='"even"'), stored("z", "[9]", state=RECENT),
                dict(stored("b", "3", state=BUCKETS), user_key='"even"'),
                dict(stored("d", "5", state=BUCKETS), user_key='"odd"')]
    result = same_on_both_paths(RecentAndBuckets(), RecentAndBucketsVectorized(), restored + EVENTS)
    changes = sorted((r["batch_id"], r["key"], r["user_key"], r["value"]) for r in result
                     if r["kind"] == "k" and r["state_name"] == BUCKETS)
    assert (0, "a", '"odd"', None) in changes  # a's odd count reached 3 in microbatch 0: removed
    assert (1, "d", '"odd"', None) in changes  # d's amounts sum below 0: its map cleared
    assert (0, "b", '"even"', "4") in changes  # restored 3, then b's 2


DUE = ValueStateDescriptor("due", Types.LONG())


class CountUntilQuiet(RunningCountSum):
    """R, and a processing-time timer a second after each microbatch of a key (the one before deleted once the
    key's sum passes 20); a timer emits (key, -1, its timestamp), and clears ``due`` when it is the latest."""

    def open(self, ctx):
        super().open(ctx)
        self.due = ctx.get_state(DUE)

    def process(self, key, records, ctx):
        rows = list(super().process(key, records, ctx))
        service, due = ctx.timer_service(), self.due.value()
        if due is not None and rows[-1]["sum"] > 20:
            service.delete_processing_time_timer(due)
        service.register_processing_time_timer(ctx.timestamp() + 1_000)
        self.due.update(ctx.timestamp() + 1_000)
        yield from rows

    def on_timer(self, timestamp, ctx):
        if timestamp == self.due.value():
            self.due.clear()
        yield {"key": ctx.get_current_key(), "count": -1, "sum": timestamp}


class CountUntilQuietVectorized(RunningCountSumVectorized):
    def open(self, ctx):
        super().open(ctx)
        ctx.get_state(DUE)

    def process_batch(self, records, state, ctx):
        output, new_state = super().process_batch(records, state, ctx)
        due = state.column("due")
        past = pc.and_(pc.is_valid(due), pc.greater(output.column("sum"), 20))
        ctx.delete_processing_time_timers(state.column("key").filter(past), due.filter(past))
        at = pa.array([ctx.timestamp() + 1_000] * state.num_rows, pa.int64())
        ctx.register_processing_time_timers(state.column("key"), at)
        return output, new_state.append_column("due", at)

    def on_timer_batch(self, timers, state, ctx):
        fired = timers.column("timestamp").to_pylist()
        latest = [state.column("due")[i].as_py() in fired[ctx.key_offsets[i]:ctx.key_offsets[i + 1]]
                  for i in range(state.num_rows)]
        output = pa.table({"key": timers.column("key"), "count": pa.array([-1] * timers.num_rows, pa.int64()),
                           "sum": timers.column("timestamp")})
        return output, pa.table({"key": state.column("key").filter(pa.array(latest)),
                                 "due": pa.nulls(sum(latest), pa.int64())})


def test_timers_of_a_vectorised_function_fire_in_on_timer_batch_as_the_per_record_paths_fire_in_on_timer():
    """``ctx.register_processing_time_timers`` / ``delete_...`` and ``on_timer_batch`` (issue 61, item 6): the
    same sink rows, keyed changes (timers and state) and stats (timers fired) as the per-record path's
    ``on_timer``; a key's timer deleted once its sum passes 20 never fires; timers for keys not in the call are
    refused naming the fix."""
    result = same_on_both_paths(CountUntilQuiet(), CountUntilQuietVectorized(), EVENTS)
    fired = sorted((r["batch_id"], r[OUT]["key"], r[OUT]["sum"]) for r in result
                   if r["kind"] == "out" and r[OUT]["count"] == -1)
    # the 2 s timers of a, b and c fire after microbatch 1's records; of the 3 s ones, c's is deleted in
    # microbatch 2 (its sum, 26, passes 20) and a's and d's fire
    assert fired == [(1, "a", 2_000), (1, "b", 2_000), (1, "c", 2_000), (2, "a", 3_000), (2, "d", 3_000)]

    class Stray(CountUntilQuietVectorized):
        def process_batch(self, records, state, ctx):
            ctx.register_event_time_timers(["nobody"], [5])
            return None, None

    with pytest.raises(ConfigError, match="key 'nobody' is not a key of this call's state"):
        run(Stray(), EVENTS)


def test_the_benchs_vectorised_sessions_close_the_per_record_sessions_and_store_the_same_timers():
    """``bench/sessions.py``'s ``SessionsVectorized`` (issue 61, item 6's bench job), gap 30: sessions closed by a
    later event and by their timer, a late event, a stale timer left firing for nothing, each as ``Sessions``
    writes them (rows, state, timers, stats)."""
    from bench.sessions import LATE, SESSION, Sessions, SessionsVectorized

    def at(batch_id, key, ts):
        return dict(event(batch_id, key, 0), **{RECORD: {"key": key, "amount": 1, "ts": ts}})

    rows = [at(0, "a", 10), at(0, "a", 20), at(0, "b", 15), at(0, "a", 100),
            at(1, "a", 40), at(1, "a", 120), at(1, "b", 60), at(1, "c", 60), at(1, "c", 200),
            at(2, "c", 210), at(2, "d", 250)]
    result = same_on_both_paths(Sessions(30), SessionsVectorized(30), rows, output_type=SESSION, side_outputs=[LATE],
                                watermarks=[50, 200, 300], order_by=["ts"])
    closed = [(0, "a", 10, 50, 2), (0, "b", 15, 45, 1), (1, "c", 60, 90, 1), (1, "a", 100, 150, 2),
              (1, "b", 60, 90, 1), (2, "c", 200, 240, 2), (2, "d", 250, 280, 1)]
    assert sink(result) == sorted((b, sorted({"key": k, "start": s, "end": e, "events": n}.items()))
                                  for b, k, s, e, n in closed)
    assert [(r["batch_id"], r[OUT]["ts"]) for r in result if r["kind"] == "side:late"] == [(1, 40)]


def test_state_kinds_the_vectorised_path_lacks_are_refused():
    from datetime import timedelta

    from state_store import ReducingStateDescriptor, StateTtlConfig

    class Reducing(RunningCountSumVectorized):
        def open(self, ctx):
            ctx.get_reducing_state(ReducingStateDescriptor("seen", lambda a, b: a + b, Types.LONG()))

    with pytest.raises(ConfigError, match="declares reducing state 'seen', but a VectorizedKeyedFunction keeps "
                                          "ValueState, ListState and MapState"):
        run(Reducing(), EVENTS)

    class ListWithTtl(RunningCountSumVectorized):
        def open(self, ctx):
            recent, _ = _list_and_map()
            ctx.get_list_state(recent.enable_time_to_live(StateTtlConfig.new_builder(timedelta(seconds=1)).build()))

    with pytest.raises(ConfigError, match="declares list state 'recent' with TTL"):
        run(ListWithTtl(), EVENTS)


# -- TTL ----------------------------------------------------------------------------------------------------------
def _acc_with_ttl(update_type, visibility):
    from datetime import timedelta

    from state_store import StateTtlConfig

    config = (StateTtlConfig.new_builder(timedelta(milliseconds=1_500)).set_update_type(update_type)
              .set_state_visibility(visibility).build())
    return ValueStateDescriptor("acc", ACC).enable_time_to_live(config)


class WritesWhenMoved(RunningCountSum):
    """R with TTL that only reads a key whose records all have amount 0 (a read: TTL may restamp or expire)."""

    def __init__(self, *ttl):
        self.ttl = ttl

    def open(self, ctx):
        self.acc = ctx.get_state(_acc_with_ttl(*self.ttl))

    def process(self, key, records, ctx):
        acc = self.acc.value() or {"count": 0, "sum": 0}
        if any(r["amount"] for r in records):
            acc = {"count": acc["count"] + len(records), "sum": acc["sum"] + sum(r["amount"] for r in records)}
            self.acc.update(acc)
        yield {"key": key, **acc}


class WritesWhenMovedVectorized(RunningCountSumVectorized):
    def __init__(self, *ttl):
        self.ttl = ttl

    def open(self, ctx):
        ctx.get_state(_acc_with_ttl(*self.ttl))

    def process_batch(self, records, state, ctx):
        output, new_state = super().process_batch(records, state, ctx)
        moved = np.maximum.reduceat(records.column("amount").to_numpy(), ctx.key_offsets[:-1]) > 0
        acc = state.column("acc")
        old = {f: pc.fill_null(pc.struct_field(acc, f), 0) for f in ("count", "sum")}
        output = pa.table({"key": output.column("key"),
                           **{f: pc.if_else(moved, output.column(f), old[f]) for f in ("count", "sum")}})
        return output, new_state.filter(moved)


TTL_ROWS = [stored("a", '{"count":1,"sum":5}', expiry=999), stored("b", '{"count":2,"sum":2}', expiry=5_000),
            stored("c", '{"count":3,"sum":3}'), stored("z", '{"count":9,"sum":9}', expiry=1),
            event(0, "a", 1), event(0, "b", 0), event(0, "c", 0), event(0, "e", 2),
            event(1, "c", 5), event(1, "d", 0), event(1, "e", 0),
            event(2, "e", 0), event(2, "b", 1), event(2, "a", 0)]


@pytest.mark.parametrize("update_type", ["OnCreateAndWrite", "OnReadAndWrite"])
@pytest.mark.parametrize("visibility", ["NeverReturnExpired", "ReturnExpiredIfNotCleanedUp"])
def test_ttl_expires_restamps_and_stamps_as_the_per_record_ttl_handles(update_type, visibility):
    result = same_on_both_paths(WritesWhenMoved(update_type, visibility),
                                WritesWhenMovedVectorized(update_type, visibility), TTL_ROWS)
    assert (0, "a", 2_500) in expiries(result)  # expired at 1000 (999), written again: stamped 1000 + 1500
    assert (0, "c", 2_500) in expiries(result)  # stored without expiry, read: stamped
    if update_type == "OnReadAndWrite":  # e read at 2000: restamped, so live at 3000
        assert (1, "e", 3_500) in expiries(result) and (2, "e", 0) not in expiries(result)
    else:  # e written at 1000 only: expired at 3000, and its read removes it
        assert (2, "e", 0) in expiries(result) and not [e for e in expiries(result) if e[:2] == (1, "e")]
    assert not [r for r in result if r["kind"] == "k" and r["key"] == "z"]  # not touched: not read


def test_on_timer_and_broadcast_are_refused_where_the_job_is_defined(tmp_path):
    from bench.jobs import count_sum_job
    from state_store import FileSource

    class Timers(RunningCountSumVectorized):
        def on_timer(self, timestamp, ctx):
            return None

    spec = count_sum_job(str(tmp_path), vectorized=True)
    assert isinstance(spec.validate().function, VectorizedKeyedFunction)
    with pytest.raises(ConfigError, match="defines on_timer, but a VectorizedKeyedFunction's timers fire in "
                                          "on_timer_batch"):
        spec.with_overrides(function=Timers()).validate()
    with pytest.raises(ConfigError, match="which takes no broadcast_source"):
        spec.with_overrides(broadcast_source=FileSource(str(tmp_path), "json", OUTPUT)).validate()
    with pytest.raises(ConfigError, match="batch_format is 'polars'"):
        spec.with_overrides(function=type("Polars", (RunningCountSumVectorized,), {"batch_format": "polars"})()
                            ).validate()
    with pytest.raises(ConfigError, match=r"executor is 'gpu'; leave it out .* or use one of \('batches', 'windows'\)"):
        spec.with_overrides(function=type("Gpu", (RunningCountSumVectorized,), {"executor": "gpu"})()).validate()
    assert isinstance(spec, JobSpec)


def test_pandas_in_and_out_gives_the_same_rows():
    class Pandas(VectorizedKeyedFunction):
        batch_format = "pandas"

        def open(self, ctx):
            ctx.get_state(ValueStateDescriptor("acc", ACC))

        def process_batch(self, records, state, ctx):
            totals = records.groupby("key", sort=True)["amount"].agg(["count", "sum"]).reset_index()
            merged = state.merge(totals, on="key")
            count = merged["acc"].map(lambda a: a["count"] if a else 0) + merged["count"]
            total = merged["acc"].map(lambda a: a["sum"] if a else 0) + merged["sum"]
            out = merged[["key"]].assign(count=count, sum=total)
            new = merged[["key"]].assign(acc=[{"count": c, "sum": s} for c, s in zip(count, total)])
            return out, new

    same_on_both_paths(RunningCountSum(), Pandas(), RESTORED + EVENTS)


# -- end to end (Spark) -------------------------------------------------------------------------------------------
def _r_job(lake, function, job_id="vec"):
    from bench.jobs import EVENT
    from state_store import FileSource

    return JobSpec(job_id=job_id, function=function, source=FileSource(str(lake.events), "json", EVENT,
                                                                      max_files_per_batch=1),
                   key="key", key_type=Types.STRING(), output_type=OUTPUT, sink=f"sinks/{job_id}", uid="count-sum",
                   parallelism=2, max_parallelism=8, checkpoint_interval=1, num_retained=2)


@pytest.mark.parametrize("functions, state, value", [
    ((RunningCountSum, RunningCountSumVectorized), "acc", [{"count": 3, "sum": 15}]),
    ((RecentAndBuckets, RecentAndBucketsVectorized), "recent", [3, 12]),  # a list: a row per element
    ((CountUntilQuiet, CountUntilQuietVectorized), "due", [1_700_000_001_000])])  # timers stored, not yet due
def test_a_vectorised_job_checkpoints_rescales_and_restores_into_the_per_record_function(spark, tmp_path, functions,
                                                                                        state, value):
    """The vectorised R (and the list and map states' job, and one with timers: issue 61 item 6) crashes after
    its second microbatch's sink write and replays, runs two microbatches, is rescaled 2 -> 3, runs one microbatch
    as the per-record function and one vectorised again: its sink and state are those of the per-record function
    run throughout, and the State Processor reads its checkpoint's values."""
    from state_store.ops.restore import rescale_job
    from state_store.ops.state_processor import SavepointReader
    from state_store.run.runtime import FaultInjector, InjectedFault
    from tests.support.helpers import run as run_job
    from tests.support.helpers import sink_rows, state_at_latest_checkpoint
    from tests.support.lake import Lake

    lakes = {name: Lake(tmp_path / name) for name in ("per_record", "vectorized")}
    for lake in lakes.values():
        for m in range(4):
            lake.write_events(f"e{m}.json", [{"key": k, "amount": m * 10 + i, "ts": m} for i, k in
                                             enumerate(["a", "b", "c", "a", "d", "e"][m % 2:])])
    steady = _r_job(lakes["per_record"], functions[0]())
    run_job(spark, steady, lakes["per_record"])
    lake = lakes["vectorized"]
    vectorized, per_record = _r_job(lake, functions[1]()), _r_job(lake, functions[0]())
    with pytest.raises(InjectedFault):
        run_job(spark, vectorized, lake, max_microbatches=2, faults=FaultInjector("after_sink_write", batch_id=1))
    run_job(spark, vectorized, lake, max_microbatches=2)
    reader = SavepointReader.for_checkpoint(spark, "vec", settings=lake.settings)
    found = [r["value"] for r in reader.keyed_state(state).collect() if r["key"] == "a"]
    assert sorted(v.asDict() if hasattr(v, "asDict") else v for v in found) == value
    assert rescale_job(spark, lake.settings, vectorized, 3, say=lambda m: None).parallelism == 3
    run_job(spark, per_record, lake, max_microbatches=1)
    result = run_job(spark, vectorized, lake)
    assert [b.batch_id for b in result.batches] == [3]
    assert sink_rows(spark, lake, vectorized) == sink_rows(spark, lakes["per_record"], steady)
    assert state_at_latest_checkpoint(spark, lake, vectorized)[0] == \
        state_at_latest_checkpoint(spark, lakes["per_record"], steady)[0]


def test_side_outputs_of_a_vectorised_function_are_whole_tables_and_equal_the_per_record_paths():
    """``ctx.output(tag, table)`` in ``process_batch`` (issue 61, items 3 and 6): no call per row, and the same
    side rows, sink, state and stats as ``ctx.output(tag, row)`` per record; an undeclared tag or rows of other
    columns are refused naming the fix."""
    from bench.jobs import EVENT
    from state_store import OutputTag

    big = OutputTag("big", EVENT)

    class WithBig(RunningCountSum):
        def process(self, key, records, ctx):
            for r in records:
                if r["amount"] >= 5:
                    ctx.output(big, r)
            yield from super().process(key, records, ctx)

    class WithBigVectorized(RunningCountSumVectorized):
        tag, columns = big, ["key", "amount", "ts"]

        def process_batch(self, records, state, ctx):
            ctx.output(self.tag, records.filter(pc.greater_equal(records.column("amount"), 5)).select(self.columns))
            return super().process_batch(records, state, ctx)

    result = same_on_both_paths(WithBig(), WithBigVectorized(), RESTORED + EVENTS, side_outputs=[big])
    sides = sorted((r["batch_id"], r[OUT]["key"], r[OUT]["amount"]) for r in result if r["kind"] == "side:big")
    assert sides == [(1, "a", 7), (1, "c", 5), (2, "c", 8), (2, "c", 9), (2, "e", 10)]
    with pytest.raises(ConfigError, match=r"ctx.output\(OutputTag\('other'\), ...\): the job declares no such"):
        run(type("Other", (WithBigVectorized,), {"tag": OutputTag("other", EVENT)})(), EVENTS, side_outputs=[big])
    with pytest.raises(ConfigError, match="the rows of side output 'big'"):
        run(type("Wrong", (WithBigVectorized,), {"columns": ["key"]})(), EVENTS, side_outputs=[big])
