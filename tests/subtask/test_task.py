"""The subtasks of a run over Arrow batches, as an executor runs them (no Spark).

``run_partition`` reads the exchange frame of ``state_store.subtask.exchange``: per
subtask a marker row, its operator state, its raw keyed state, the keyed state
of the keys the run touches, then its records microbatch by microbatch. These
tests build such frames from readable rows and read back what it returns.
"""
import json
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from state_store.functions import KeyedBroadcastProcessFunction, KeyedProcessFunction
from state_store.records.stats import WrittenFile
from state_store.state.descriptors import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from state_store.state.operator import BROADCAST, RAW, SPLIT_DISTRIBUTE, UNION
from state_store.subtask.exchange import (
    RESULT_COLUMNS,
)
from state_store.subtask.reader import column_values, run_partition
from state_store.subtask.run_files import SINK, SINK_MICROBATCH, local_outputs
from state_store.subtask.runner import RAW_KEYED, RunPlan, UserFunctionError
from state_store.types import Types
from tests.support.frames import (
    BYTES,
    MAX_PARALLELISM,
    OUT,
    PARALLELISM,
    RAW_KEYED_NAME,
    RAW_OPERATOR_NAME,
    RULES,
    Journal,
    broadcast,
    frame,
    keyed_changes,
    keyed_row,
    marker,
    operator_changes,
    operator_row,
    outputs,
    raw_keyed_row,
    read_files,
    record,
    run,
    run_outputs,
    stats,
)

# parallelism 2 over 8 key groups: subtask 0 owns key groups 0..3, subtask 1 owns 4..7
# -- functions ------------------------------------------------------------------------------------------------
KEY_COUNT = Types.ROW_NAMED(["key", "count"], [Types.STRING(), Types.LONG()])


class CountPerKey(KeyedProcessFunction):
    OUT = KEY_COUNT

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG(), 0))

    def process(self, key, records, ctx):
        self.count.update(self.count.value() + len(records))
        yield {"key": key, "count": self.count.value()}


class RecordsPerCall(KeyedProcessFunction):
    """One output per process() call: how many records it got."""

    OUT = KEY_COUNT

    def process(self, key, records, ctx):
        return [{"key": key, "count": len(records)}]


class CallsSoFar(KeyedProcessFunction):
    """Counts its process() calls in a field set in open."""

    OUT = KEY_COUNT

    def open(self, ctx):
        self.calls = 0

    def process(self, key, records, ctx):
        self.calls += 1
        yield {"key": key, "count": self.calls}


class Echo(KeyedProcessFunction):
    OUT = Types.ROW_NAMED(["batch", "key", "v"], [Types.LONG(), Types.STRING(), Types.STRING()])

    def process(self, key, records, ctx):
        for r in records:
            yield {"batch": ctx.batch_id, "key": key, "v": r["v"]}


class Lifecycle(KeyedBroadcastProcessFunction):
    """Logs every hook as (subtask, event)."""

    OUT = KEY_COUNT

    def __init__(self, journal):
        self.journal, self.subtask = journal, None

    def open(self, ctx):
        self.subtask = ctx.get_index_of_this_subtask()
        self.journal.append((self.subtask, "open"))

    def initialize_state(self, ctx):
        self.subtask = ctx.subtask
        self.journal.append((self.subtask, "initialize_state"))

    def process_broadcast_element(self, value, ctx):
        self.journal.append((self.subtask, f"broadcast {ctx.batch_id} {value['rule']}"))

    def process(self, key, records, ctx):
        self.journal.append((self.subtask, f"process {ctx.batch_id} {key}"))

    def snapshot_state(self, ctx):
        self.journal.append((self.subtask, f"snapshot {ctx.batch_id}"))

    def close(self):
        self.journal.append((self.subtask, "close"))


class Thresholds(KeyedBroadcastProcessFunction):
    OUT = Types.ROW_NAMED(["source", "key", "limit"], [Types.STRING(), Types.STRING(), Types.LONG()])

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(value["rule"], value["limit"])
        yield {"source": "broadcast", "key": value["rule"], "limit": value["limit"]}

    def process(self, key, records, ctx):
        yield {"source": "keyed", "key": key, "limit": ctx.get_broadcast_state(RULES).get(key)}


class RawState(KeyedProcessFunction):
    """Logs the raw state initialize_state sees; snapshot 1 writes raw operator and raw keyed state (key group 2),
    snapshot 2 raw operator state only, later snapshots nothing."""

    OUT = KEY_COUNT

    def __init__(self, journal):
        self.journal = journal

    def initialize_state(self, ctx):
        keyed = {kg: ctx.raw_keyed_state(kg) for kg in ctx.key_group_range if ctx.raw_keyed_state(kg) is not None}
        self.journal.append((ctx.raw_operator_state(), keyed))

    def process(self, key, records, ctx):
        return None

    def snapshot_state(self, ctx):
        if ctx.batch_id == 1:
            ctx.write_raw_operator_state(b"op-1")
            ctx.write_raw_keyed_state(2, b"\x00kg2-1")
        elif ctx.batch_id == 2:
            ctx.write_raw_operator_state(b"op-2")


# -- the function contract --------------------------------------------------------------------------------------
def test_a_keyed_process_function_without_process_cannot_be_instantiated():
    class NoProcess(KeyedProcessFunction):
        def open(self, ctx):
            pass

    with pytest.raises(TypeError, match="process"):
        NoProcess()


def test_a_keyed_broadcast_process_function_without_process_broadcast_element_cannot_be_instantiated():
    class NoBroadcastHook(KeyedBroadcastProcessFunction):
        def process(self, key, records, ctx):
            return None

    with pytest.raises(TypeError, match="process_broadcast_element"):
        NoBroadcastHook()


def test_a_keyed_state_named_like_the_internal_raw_keyed_state_is_refused():
    with pytest.raises(ValueError, match="reserved"):
        ValueStateDescriptor(RAW_KEYED, Types.LONG(), 0)


# -- outputs, state changes and stats ---------------------------------------------------------------------------
def test_subtasks_return_a_row_per_file_and_per_microbatch_and_write_typed_parquet(tmp_path):
    plan = RunPlan("op", CountPerKey(), Types.STRING(), KEY_COUNT, PARALLELISM, MAX_PARALLELISM, False,
                   [(1, 0), (2, 0)], run_outputs(tmp_path))
    rows = [r for b in run_partition(plan, iter(frame(record(0, 1, "a", "x"), record(0, 2, "a", "y"))))
            for r in b.to_pylist()]
    for row in rows:
        assert list(row) == [n for n, _ in RESULT_COLUMNS]
    assert [(r["kind"], r["batch_id"]) for r in rows if r["kind"] == "stat"] == [("stat", 1), ("stat", 2)]
    files = [asdict(WrittenFile.from_json(r["payload"])) for r in rows if r["kind"] == "file"]
    # One file per table and partition touched (sink: one per subtask), with what a Delta add action needs.
    assert sorted((f["table"], f["path"].rsplit("/", 1)[0] if "/" in f["path"] else "", f["rows"], f["min_batch"],
                   f["max_batch"])
                  for f in files) == [("keyed", "state_name=op.count/key_group=1", 2, 1, 2),
                                      ("sink", "", 2, 1, 2)]
    for f in files:
        assert f["path"].rsplit("/", 1)[-1].startswith("part-t0k3n-00000-") and f["size"] > 0
    sink = next(f for f in files if f["table"] == SINK)
    table = pq.read_table(tmp_path / SINK / sink["path"])
    assert table.schema == pa.schema(list(KEY_COUNT.arrow_type()) + [(SINK_MICROBATCH, pa.int64())])
    assert table.to_pylist() == [{"key": "a", "count": 1, SINK_MICROBATCH: 1},
                                 {"key": "a", "count": 2, SINK_MICROBATCH: 2}]


def test_rows_of_microbatches_a_table_already_committed_are_not_written(tmp_path):
    outputs = run_outputs(tmp_path, committed=1)
    plan = RunPlan("op", CountPerKey(), Types.STRING(), KEY_COUNT, PARALLELISM, MAX_PARALLELISM, False,
                   [(1, 0), (2, 0)], outputs)
    rows = [r for b in run_partition(plan, iter(frame(record(0, 1, "a", "x"), record(0, 2, "a", "y"))))
            for r in b.to_pylist()]
    written = read_files(outputs, rows)
    assert [(r["kind"], r["batch_id"]) for r in written] == [("k", 2), ("out", 2), ("stat", 1), ("stat", 2)]
    assert [r[OUT] for r in written if r["kind"] == "out"] == [{"key": "a", "count": 2}]  # state still counted 1


def test_counting_function_emits_outputs_keyed_state_rows_and_a_stat_row():
    result = run(CountPerKey(), marker(0), record(0, 1, "a", "1"), record(0, 1, "a", "2"),
                 record(0, 1, "b", "3", key_group=2))
    assert outputs(result) == [{"key": "a", "count": 2}, {"key": "b", "count": 1}]
    assert keyed_changes(result) == [(1, "op.count", 1, "a", "", None, "2"), (1, "op.count", 2, "b", "", None, "1")]
    assert {r["subtask"] for r in result} == {0}
    assert stats(result) == [(1, 0, {"records_in": 3, "broadcast_in": 0, "keys": 2, "records_out": 2, "side_out": 0,
                                     "side_rows": {}, "late_dropped": 0, "timers_in": 0, "timers_fired": 0,
                                     "state_upserts": 2, "state_deletes": 0, "entries_delta": {"op.count": 2}})]


def test_keyed_state_rows_in_the_frame_are_what_process_reads():
    result = run(CountPerKey(), marker(0), keyed_row(0, "op.count", "a", 1, "5"), record(0, 1, "a", "x"))
    assert outputs(result) == [{"key": "a", "count": 6}]
    assert keyed_changes(result) == [(1, "op.count", 1, "a", "", None, "6")]
    assert stats(result)[0][2]["entries_delta"] == {}  # updated, not created


def test_keyed_state_carries_across_the_microbatches_of_one_run():
    result = run(CountPerKey(), marker(0), record(0, 1, "a", "1"), record(0, 1, "a", "2"), record(0, 2, "a", "3"),
                 microbatches=[(1, 0), (2, 0)])
    assert outputs(result, 1) == [{"key": "a", "count": 2}] and outputs(result, 2) == [{"key": "a", "count": 3}]
    assert keyed_changes(result) == [(1, "op.count", 1, "a", "", None, "2"), (2, "op.count", 1, "a", "", None, "3")]


@pytest.mark.parametrize("extra", ["none", "map", "expiry", "timer"])
def test_stored_state_loaded_a_batch_at_a_time_reads_as_loaded_row_by_row(extra):
    """Batches holding only one subtask's stored entries are loaded column-wise (no per-row dispatch, no
    records decoded); the entries read the same as the first batch's, loaded row by row, whatever else the
    batch holds (map entries, expiries, timers: row by row again)."""
    state = [keyed_row(0, "op.count", f"k{i}", 1, str(i)) for i in range(12)]
    if extra == "map":
        state.append(keyed_row(0, "op.other", "k0", 1, "1", user_key='"x"'))
    elif extra == "expiry":
        state[-1]["expiry"] = 4_000_000_000_000  # far ahead: TTL-free code reads it as stored
    elif extra == "timer":
        state.append({**keyed_row(0, "op.__timers_event__", "k3", 1, "5000", user_key="5000"), "expiry": 5000})
    records = [record(0, 1, f"k{i}", "x") for i in range(12)]
    by_row = run(CountPerKey(), marker(0), *state, *records)
    by_batch = run(CountPerKey(), marker(0), *state, *records, rows_per_batch=5)
    expected = [{"key": f"k{i}", "count": i + 1} for i in range(12)]
    assert sorted(outputs(by_batch), key=str) == sorted(outputs(by_row), key=str) == sorted(expected, key=str)
    assert keyed_changes(by_batch) == keyed_changes(by_row)


class CountPerParity(KeyedProcessFunction):
    OUT = KEY_COUNT

    def open(self, ctx):
        self.counts = ctx.get_map_state(MapStateDescriptor("counts", Types.STRING(), Types.LONG()))

    def process(self, key, records, ctx):
        for r in records:
            parity = "even" if int(r["v"]) % 2 == 0 else "odd"
            self.counts.put(parity, (self.counts.get(parity) or 0) + 1)
        yield {"key": key, "count": sum(self.counts.values())}


def test_map_state_entries_are_read_and_written_as_one_row_per_user_key():
    result = run(CountPerParity(), marker(0), keyed_row(0, "op.counts", "a", 1, "3", user_key='"odd"'),
                 keyed_row(0, "op.counts", "a", 1, "7", user_key='"prime"'), record(0, 1, "a", "2"))
    assert outputs(result) == [{"key": "a", "count": 11}]
    assert keyed_changes(result) == [(1, "op.counts", 1, "a", "", '"even"', "1")]  # odd and prime untouched


def test_stats_are_counted_per_microbatch_and_per_subtask_even_when_counts_are_equal():
    result = run(CountPerKey(), marker(0), record(0, 1, "a", "1"), record(0, 1, "a", "2"), record(0, 2, "a", "3"),
                 marker(1), record(1, 1, "x", "1"), record(1, 1, "x", "2"), microbatches=[(1, 0), (2, 0)])
    mb1 = {"records_in": 2, "broadcast_in": 0, "keys": 1, "records_out": 1, "side_out": 0, "side_rows": {},
           "late_dropped": 0, "timers_in": 0, "timers_fired": 0, "state_upserts": 1, "state_deletes": 0,
           "entries_delta": {"op.count": 1}}
    assert stats(result) == [
        (1, 0, mb1),
        (2, 0, {"records_in": 1, "broadcast_in": 0, "keys": 1, "records_out": 1, "side_out": 0, "side_rows": {},
                "late_dropped": 0, "timers_in": 0, "timers_fired": 0, "state_upserts": 1, "state_deletes": 0,
                "entries_delta": {}}),
        (1, 1, mb1),
        (2, 1, {"records_in": 0, "broadcast_in": 0, "keys": 0, "records_out": 0, "side_out": 0, "side_rows": {},
                "late_dropped": 0, "timers_in": 0, "timers_fired": 0, "state_upserts": 0, "state_deletes": 0,
                "entries_delta": {}}),
    ]


# -- lifecycle ----------------------------------------------------------------------------------------------------
def test_each_microbatch_runs_initialize_state_broadcast_elements_process_per_key_then_snapshot_state():
    journal = Journal()
    run(Lifecycle(journal), marker(0), broadcast(0, 1, "r1", 1), record(0, 1, "a", "x"), record(0, 1, "b", "y"),
        broadcast(0, 2, "r2", 2), record(0, 2, "a", "z"), microbatches=[(1, 0), (2, 0), (3, 0)])
    events = [e for _, e in journal]
    assert events.count("open") == 1
    assert [e for e in events if e != "open"] == [
        "initialize_state", "broadcast 1 r1", "process 1 a", "process 1 b", "snapshot 1",
        "initialize_state", "broadcast 2 r2", "process 2 a", "snapshot 2",
        "initialize_state", "snapshot 3",  # microbatch 3 has no records: initialize and snapshot all the same
        "close",
    ]


def test_open_runs_once_after_the_first_initialize_state_as_in_flink():
    journal = Journal()
    run(Lifecycle(journal), marker(0), record(0, 1, "a", "x"), microbatches=[(1, 0), (2, 0)])
    events = [e for _, e in journal]
    assert events[:2] == ["initialize_state", "open"] and events.count("open") == 1


def test_every_present_subtask_initializes_and_snapshots_every_microbatch_with_or_without_records():
    journal = Journal()
    result = run(Lifecycle(journal), marker(0), record(0, 2, "a", "x"), marker(1),
                 microbatches=[(1, 0), (2, 0), (3, 0)])
    for subtask in (0, 1):
        snapshots = [e for s, e in journal if s == subtask and e.startswith(("initialize", "snapshot"))]
        assert snapshots == ["initialize_state", "snapshot 1", "initialize_state", "snapshot 2",
                             "initialize_state", "snapshot 3"]
    assert [(b, s) for b, s, _ in stats(result)] == [(1, 0), (2, 0), (3, 0), (1, 1), (2, 1), (3, 1)]


def test_the_function_object_and_its_fields_persist_across_the_microbatches_of_a_run():
    result = run(CallsSoFar(), marker(0), record(0, 1, "a", "x"), record(0, 2, "a", "y"), record(0, 3, "b", "z"),
                 microbatches=[(1, 0), (2, 0), (3, 0)])
    assert outputs(result) == [{"key": "a", "count": 1}, {"key": "a", "count": 2}, {"key": "b", "count": 3}]


def test_two_subtasks_in_one_partition_are_both_processed_each_with_its_own_function_copy():
    journal = Journal()
    run(Lifecycle(journal), marker(0), record(0, 1, "a", "x"), marker(1), record(1, 1, "x", "y"))
    assert [(s, e) for s, e in journal if e.startswith(("open", "process", "close"))] == [
        (0, "open"), (0, "process 1 a"), (0, "close"), (1, "open"), (1, "process 1 x"), (1, "close")]
    result = run(CallsSoFar(), marker(0), record(0, 1, "a", "1"), record(0, 1, "b", "2", key_group=2),
                 marker(1), record(1, 1, "x", "3"))
    assert [(r["subtask"], r[OUT]) for r in result if r["kind"] == "out"] == [
        (0, {"key": "a", "count": 1}), (0, {"key": "b", "count": 2}), (1, {"key": "x", "count": 1})]


class RestoredFlags(KeyedProcessFunction):
    OUT = KEY_COUNT

    def __init__(self, journal):
        self.journal = journal

    def initialize_state(self, ctx):
        self.journal.append(ctx.is_restored())

    def process(self, key, records, ctx):
        return None


@pytest.mark.parametrize("restored", [False, True])
def test_is_restored_equals_the_plans_restored_flag_on_every_microbatch(restored):
    journal = Journal()
    run(RestoredFlags(journal), marker(0), record(0, 1, "a", "x"), microbatches=[(1, 0), (2, 0), (3, 0)],
        restored=restored)
    assert journal == [restored] * 3


# -- records ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("nulls", [False, True])
def test_a_timestamp_column_reads_as_aware_utc_datetimes_equal_to_pyarrows(nulls):
    micros = [0, 1_735_689_590_123_456, -1, 253_402_300_799_999_999] + ([None] if nulls else [])
    array = pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    values = column_values(array)
    assert values == array.to_pylist() and all(v is None or v.utcoffset().total_seconds() == 0 for v in values)
    assert (values[-1] is None) == nulls


def test_a_keys_records_arrive_in_source_order_not_sorted_by_content():
    result = run(Echo(), marker(0), record(0, 1, "a", "c"), record(0, 1, "a", "a"), record(0, 1, "a", "b"))
    assert [o["v"] for o in outputs(result)] == ["c", "a", "b"]


def test_a_keys_records_of_one_microbatch_are_one_process_call_even_across_input_batches():
    result = run(RecordsPerCall(), marker(0), *[record(0, 1, "a", str(i)) for i in range(5)],
                 record(0, 1, "b", "x"), record(0, 2, "a", "y"), microbatches=[(1, 0), (2, 0)], rows_per_batch=2)
    assert outputs(result, 1) == [{"key": "a", "count": 5}, {"key": "b", "count": 1}]
    assert outputs(result, 2) == [{"key": "a", "count": 1}]


class KeyAndTime(KeyedProcessFunction):
    OUT = Types.ROW_NAMED(["key", "key_group", "timestamp"], [Types.LONG(), Types.INT(), Types.LONG()])

    def process(self, key, records, ctx):
        assert key == ctx.get_current_key()
        yield {"key": key + 1, "key_group": ctx.current_key_group(), "timestamp": ctx.timestamp()}


def test_process_gets_the_key_in_the_declared_key_type_its_key_group_and_the_microbatchs_timestamp():
    result = run(KeyAndTime(), marker(0), record(0, 1, "41", "x", key_group=3), record(0, 2, "41", "y", key_group=3),
                 key_type=Types.LONG(), microbatches=[(1, 1_000), (2, 2_000)])
    assert outputs(result) == [{"key": 42, "key_group": 3, "timestamp": 1_000},
                               {"key": 42, "key_group": 3, "timestamp": 2_000}]


def test_broadcast_elements_are_processed_before_keyed_records_and_stored_as_broadcast_state():
    result = run(Thresholds(), marker(0), record(0, 1, "a", "x"), broadcast(0, 1, "a", 5))
    assert outputs(result) == [{"source": "broadcast", "key": "a", "limit": 5},
                               {"source": "keyed", "key": "a", "limit": 5}]
    (batch_id, subtask, name, mode, value), = operator_changes(result)
    assert (batch_id, subtask, name, mode) == (1, 0, "op.rules", BROADCAST)
    assert RULES.stored_type.loads(value) == {"a": 5}
    assert stats(result)[0][2]["broadcast_in"] == 1


# -- operator and raw state -------------------------------------------------------------------------------------
def test_raw_operator_state_written_by_a_snapshot_is_what_the_next_initialize_state_sees_until_not_written():
    journal = Journal()
    result = run(RawState(journal), marker(0), operator_row(0, RAW_OPERATOR_NAME, RAW, BYTES.dumps(b"restored")),
                 microbatches=[(1, 0), (2, 0), (3, 0), (4, 0)])
    assert [operator for operator, _ in journal] == [b"restored", b"op-1", b"op-2", None]
    assert operator_changes(result) == [
        (1, 0, RAW_OPERATOR_NAME, RAW, BYTES.dumps(b"op-1")),
        (2, 0, RAW_OPERATOR_NAME, RAW, BYTES.dumps(b"op-2")),
        (3, 0, RAW_OPERATOR_NAME, RAW, None),  # snapshot 3 wrote none: dropped
    ]


def test_raw_keyed_state_written_by_a_snapshot_is_what_the_next_initialize_state_sees_until_not_written():
    journal = Journal()
    result = run(RawState(journal), marker(0), raw_keyed_row(0, 3, b"restored"), microbatches=[(1, 0), (2, 0), (3, 0)])
    assert [keyed for _, keyed in journal] == [{3: b"restored"}, {2: b"\x00kg2-1"}, {}]
    assert keyed_changes(result) == [
        (1, RAW_KEYED_NAME, 2, "", "", None, BYTES.dumps(b"\x00kg2-1")),
        (1, RAW_KEYED_NAME, 3, "", "", None, None),  # snapshot 1 did not write key group 3 again: dropped
        (2, RAW_KEYED_NAME, 2, "", "", None, None),
    ]


class UnionAndSplit(KeyedProcessFunction):
    OUT = KEY_COUNT

    def __init__(self, journal):
        self.journal = journal

    def initialize_state(self, ctx):
        store = ctx.get_operator_state_store()
        self.journal.append((ctx.subtask, store.get_union_list_state(ListStateDescriptor("seen", Types.LONG())).get(),
                             store.get_list_state(ListStateDescriptor("mine", Types.LONG())).get()))

    def process(self, key, records, ctx):
        return None


def test_union_list_state_is_given_whole_to_every_subtask_and_split_list_state_only_to_its_own():
    journal = Journal()
    rows = []
    for subtask in (0, 1):  # the runtime sends every subtask's union state to every subtask
        rows += [marker(subtask),
                 operator_row(subtask, "op.seen", UNION, "[1,2]", origin=0),
                 operator_row(subtask, "op.seen", UNION, "[3]", origin=1),
                 operator_row(subtask, "op.mine", SPLIT_DISTRIBUTE, f"[{10 + subtask}]")]
    run(UnionAndSplit(journal), *rows)
    assert journal == [(0, [1, 2, 3], [10]), (1, [1, 2, 3], [11])]


def docs_example(marker: str) -> dict:
    """The names a Python example of the docs (``docs/**/*.md``) defines: the fenced block that contains
    ``marker``, run as is."""
    found = [(page, b.split("\n", 1)[1])
             for page in sorted((Path(__file__).resolve().parents[2] / "docs").rglob("*.md"))
             for b in page.read_text().split("```")[1::2] if b.startswith("python") and marker in b]
    ((page, block),) = found
    names: dict = {}
    exec(compile(block, str(page.name), "exec"), names)  # the project's own docs, run as a test
    return names


def test_the_docs_buffering_sink_rebuilds_its_buffer_once_per_run_and_snapshots_it_every_microbatch():
    record_type = Types.ROW_NAMED(["v"], [Types.STRING()])
    sink = docs_example("class BufferingSink")["BufferingSink"](3, record_type)
    restored = ListStateDescriptor("buffered-elements", record_type).stored_type.dumps([{"v": "r"}])
    result = run(sink, marker(0), operator_row(0, "op.buffered-elements", SPLIT_DISTRIBUTE, restored),
                 record(0, 1, "a", "x"), record(0, 2, "a", "y"), record(0, 3, "b", "z"), record(0, 4, "b", "w"),
                 output_type=record_type, microbatches=[(1, 0), (2, 0), (3, 0), (4, 0)], restored=True)
    assert outputs(result, 2) == [{"v": "r"}, {"v": "x"}, {"v": "y"}]  # the restored element once, then in order
    assert outputs(result) == outputs(result, 2)
    assert [(b, json.loads(v) if v else None) for b, _, _, _, v in operator_changes(result)] == [
        (1, [{"v": "r"}, {"v": "x"}]), (2, None), (3, [{"v": "z"}]), (4, [{"v": "z"}, {"v": "w"}])]


# -- errors ---------------------------------------------------------------------------------------------------------
class FailsOnB(KeyedProcessFunction):
    OUT = KEY_COUNT

    def process(self, key, records, ctx):
        if key == "b":
            raise ValueError("boom")
        return None


def test_an_error_in_user_code_names_the_hook_the_key_and_the_microbatch():
    with pytest.raises(UserFunctionError) as err:
        run(FailsOnB(), marker(0), record(0, 1, "a", "x"), record(0, 2, "a", "y"), record(0, 2, "b", "z"),
            microbatches=[(1, 0), (2, 0)])
    message = str(err.value)
    assert "process()" in message and "'b'" in message and "microbatch 2" in message and "boom" in message


class WrongOutput(KeyedProcessFunction):
    OUT = KEY_COUNT

    def process(self, key, records, ctx):
        yield {"key": key, "count": "three"}


def test_an_output_row_not_matching_the_output_type_raises_naming_output_type():
    with pytest.raises(UserFunctionError, match="output_type"):
        run(WrongOutput(), marker(0), record(0, 1, "a", "x"))


class WritesBroadcastInProcess(Thresholds):
    def process(self, key, records, ctx):
        ctx.get_broadcast_state(RULES).put(key, 1)
        return []


def test_broadcast_state_is_read_only_while_processing_keyed_records():
    with pytest.raises(UserFunctionError, match="read-only"):
        run(WritesBroadcastInProcess(), marker(0), record(0, 1, "a", "x"))


def test_broadcast_records_need_a_keyed_broadcast_process_function():
    with pytest.raises(UserFunctionError, match="not a KeyedBroadcastProcessFunction"):
        run(CountPerKey(), marker(0), broadcast(0, 1, "a", 1))


def test_a_record_with_a_null_key_after_other_keys_raises_naming_the_null_key():
    with pytest.raises(UserFunctionError, match="null key") as err:
        run(CountPerKey(), marker(0), record(0, 1, "a", "x"), record(0, 1, None, "orphan"))
    assert "orphan" in str(err.value)


def test_a_record_with_a_null_key_raises_even_when_no_other_key_precedes_it_in_its_microbatch():
    with pytest.raises(UserFunctionError, match="null key"):
        run(Echo(), marker(0), record(0, 1, None, "orphan"), record(0, 2, "a", "x"), microbatches=[(1, 0), (2, 0)])


@pytest.mark.parametrize("flush_bytes, row_groups", [(None, 1), (1, 3)])
def test_a_subtasks_sink_rows_are_held_as_arrow_and_written_once_per_flush(tmp_path, monkeypatch, flush_bytes,
                                                                             row_groups):
    """Three microbatches' output rows under the memory bound make one row group, written at close; over it,
    one per microbatch. The rows and their order are the same either way, and a side output's rows (held as
    Python rows) are written beside them."""
    import state_store.subtask.run_files as run_files

    if flush_bytes is not None:
        monkeypatch.setattr(run_files, "FLUSH_BYTES", flush_bytes)
    out_type = pa.struct([("key", pa.string()), ("n", pa.int64())])
    outputs = local_outputs(tmp_path, "tok")
    outputs.tables["late"] = run_files.OutputTable("late", str(tmp_path / "late"), "", (), None, SINK_MICROBATCH)
    files = run_files.SubtaskFiles(outputs, 0, out_type, {"late": out_type})
    for batch_id in range(3):
        files.sink.add_rows(batch_id, [(f"k{i}", batch_id * 10 + i) for i in range(4)])
        files.sides["late"].add(batch_id, {"key": "late", "n": batch_id})
        files.maybe_flush()
    assert (files.sink.pending_bytes > 0) == (flush_bytes is None) and files.sink.pending_rows == 0
    written = {info.table: info for info in files.close()}
    sink = pq.ParquetFile(tmp_path / SINK / written[SINK].path)
    assert sink.metadata.num_row_groups == row_groups
    assert sink.read().to_pylist() == [{"key": f"k{i}", "n": b * 10 + i, SINK_MICROBATCH: b}
                                       for b in range(3) for i in range(4)]
    assert (written[SINK].rows, written[SINK].min_batch, written[SINK].max_batch) == (12, 0, 2)
    late = pq.read_table(tmp_path / "late" / written["late"].path).to_pylist()
    assert [(r["key"], r["n"], r[SINK_MICROBATCH]) for r in late] == [("late", b, b) for b in range(3)]


def test_every_key_kind_travels_as_text_that_decodes_alike_scalar_and_column_wise():
    """keys.py is the key's one home: its types, their Spark types, and the decoding of its text (what Spark's
    ``key_text`` makes of a key), scalar and column-wise alike; a composite key is the row of its columns and its
    value a tuple; any other type is refused naming the kinds a key may have."""
    import datetime
    import decimal

    from state_store.errors import ConfigError
    from state_store.keys import (
        arrow_keys,
        check_key,
        check_key_type,
        decode_key,
        key_decoder,
        record_key_columns,
        spark_key_type,
    )

    utc = datetime.timezone.utc
    kinds = [  # (type, its Spark type, texts as key_text makes them, the values they are)
        (Types.STRING(), "string", ["a", ""], ["a", ""]),
        (Types.LONG(), "bigint", ["42", "-7"], [42, -7]),
        (Types.INT(), "int", ["42", "-7"], [42, -7]),
        (Types.BOOLEAN(), "boolean", ["true", "false"], [True, False]),
        (Types.DATE(), "date", ["2024-02-29", "1969-12-31"], [datetime.date(2024, 2, 29), datetime.date(1969, 12, 31)]),
        (Types.TIMESTAMP(), "timestamp", ["1704067200123456", "-1"],
         [datetime.datetime(2024, 1, 1, 0, 0, 0, 123456, utc),
          datetime.datetime(1969, 12, 31, 23, 59, 59, 999999, utc)]),
        (Types.DECIMAL(10, 2), "decimal(10,2)", ["12.50", "-0.01"],
         [decimal.Decimal("12.50"), decimal.Decimal("-0.01")]),
        (Types.BYTES(), "binary", ["00FF10", ""], [b"\x00\xff\x10", b""]),
        (Types.ROW_NAMED(["user", "n"], [Types.STRING(), Types.LONG()]), "struct<user:string,n:bigint>",
         ['["al\\"ice",null]', '["bob","3"]'], [('al"ice', None), ("bob", 3)]),
        (Types.ROW_NAMED(["a", "b"], [Types.STRING(), Types.INT()]), "struct<a:string,b:int>",  # no escape, no null
         ['["a,b","1"]', '["","-2"]'], [("a,b", 1), ("", -2)]),
    ]
    for key_type, spark_type, texts, values in kinds:
        assert spark_key_type(key_type) == spark_type
        decode = key_decoder(key_type) or (lambda text: text)
        assert [decode(t) for t in texts] == [decode_key(key_type, t) for t in texts] == values, key_type
        column = arrow_keys(key_type, pa.array(texts, pa.string())).to_pylist()
        assert [tuple(v.values()) if isinstance(v, dict) else v for v in column] == values, key_type
        assert check_key_type(key_type) == key_type
    row = Types.ROW_NAMED(["user", "device"], [Types.STRING(), Types.INT()])
    assert check_key(["user", "device"], [Types.STRING(), Types.INT()]) == (("user", "device"), row)
    # a subtask takes such a key from its first record's columns, where their values are the decoded ones
    assert record_key_columns(("user", "device"), row) == ("user", "device")
    assert record_key_columns(("day", "n"), Types.ROW_NAMED(["day", "n"], [Types.DATE(), Types.LONG()])) == ()
    assert check_key(["user"], [Types.STRING()]) == ("user", Types.STRING())
    with pytest.raises(ConfigError, match=r"key_by\('x'\): a key is STRING, LONG, INT, BOOL.* not Types\(\"DOUBLE\"\)"):
        check_key_type(Types.DOUBLE(), "key_by('x')")
    with pytest.raises(ConfigError, match=r"2 key columns \['a', 'b'\] but 1 key types"):
        check_key(["a", "b"], [Types.LONG()])
    with pytest.raises(ConfigError, match="names a column twice"):
        check_key(["a", "a"], [Types.LONG(), Types.LONG()])
    with pytest.raises(ConfigError, match=r"a row of them .*ROW.*DOUBLE"):
        check_key(["a", "b"], [Types.LONG(), Types.DOUBLE()])
