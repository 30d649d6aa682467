"""What one subtask does with one microbatch, in a Spark executor.

Pure Python over pandas frames, so it runs (and is tested) without Spark:
``run_subtask`` gets the state entries of the keys this subtask touches plus
its operator state, and the records routed to it; it runs the user function
and returns output rows and the state entries that changed.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .functions import (
    BroadcastContext,
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    RuntimeContext,
)
from .key_groups import compute_key_group_range_for_operator_index
from .keyed_state import KeyedStateStore
from .operator_state import OperatorStateStore
from .types import TypeInfo, Types

# The working state of a run, keyed and operator entries in one frame.
STATE_COLUMNS = ["scope", "state_name", "key_group", "subtask", "key", "namespace", "mode", "value"]
STATE_SCHEMA = (
    "scope string, state_name string, key_group int, subtask int, key string, namespace string, mode string, value string"
)
# What a subtask returns: kind 'out' (payload = an output row as JSON), 'k' (keyed entry), 'o' (operator entry).
RESULT_SCHEMA = STATE_SCHEMA + ", kind string, payload string"
# The records routed to a subtask: side 'k' (keyed) or 'b' (broadcast, every subtask gets them).
INPUT_SCHEMA = "subtask int, side string, key_group int, key string, record string"

KEYED, OPERATOR = "k", "o"
RAW_KEYED = "__raw_keyed__"


def decode_key(key_type: TypeInfo, encoded: str) -> Any:
    """Keys are stored as Spark's cast to string; turn one back into the declared type."""
    if key_type.name in ("LONG", "INT"):
        return int(encoded)
    return encoded


@dataclass
class SubtaskPlan:
    """Everything a subtask needs besides its data; shipped to the executors with the UDF."""

    uid: str
    function: KeyedProcessFunction
    key_type: TypeInfo
    output_type: TypeInfo
    parallelism: int
    max_parallelism: int
    batch_id: int
    timestamp: int
    restored: bool
    order_by: list[str] = field(default_factory=list)


def _record_sort_key(order_by: list[str]):
    def sort_key(item):
        text, rec = item
        # Records with equal order_by values are ordered by their full text, so the
        # order (and every result) is the same on every run and replay.
        return tuple((rec.get(c) is None, rec.get(c) if rec.get(c) is not None else 0) for c in order_by) + (text,)

    return sort_key


def run_subtask(plan: SubtaskPlan, state: pd.DataFrame, records: pd.DataFrame) -> pd.DataFrame:
    subtask = int(records["subtask"].iloc[0]) if len(records) else int(state["subtask"].iloc[0])
    kg_range = compute_key_group_range_for_operator_index(plan.max_parallelism, plan.parallelism, subtask)
    raw_keyed_name = f"{plan.uid}.{RAW_KEYED}"
    bytes_type = Types.BYTES()

    store = KeyedStateStore()
    raw_keyed: dict[int, bytes] = {}
    operator_entries: dict[str, tuple[str, str]] = {}
    for scope, state_name, key_group, key, namespace, mode, value in zip(
        state["scope"], state["state_name"], state["key_group"], state["key"], state["namespace"], state["mode"],
        state["value"],
    ):
        if scope == KEYED:
            if state_name == raw_keyed_name:
                raw_keyed[int(key_group)] = bytes_type.loads(value)
            else:
                store.load(state_name, key, namespace, int(key_group), value)
        else:
            operator_entries[state_name] = (mode, value)

    function = copy.deepcopy(plan.function)
    operator_store = OperatorStateStore(plan.uid, operator_entries)
    function.initialize_state(
        FunctionInitializationContext(operator_store, raw_keyed, kg_range, plan.restored, subtask)
    )
    runtime_ctx = RuntimeContext(plan.uid, store, subtask, plan.parallelism, plan.max_parallelism)
    function.open(runtime_ctx)

    outputs: list[str] = []

    def emit(result):
        for row in result or ():
            outputs.append(plan.output_type.dumps(row))

    sort_key = _record_sort_key(plan.order_by)
    groups: dict[str, list] = {}
    if len(records):
        broadcast = records[records["side"] == "b"]
        if len(broadcast):
            if not isinstance(function, KeyedBroadcastProcessFunction):
                raise TypeError("the job has a broadcast source but its function is not a KeyedBroadcastProcessFunction")
            b_ctx = BroadcastContext(operator_store, plan.batch_id, plan.timestamp)
            items = sorted(((t, json.loads(t)) for t in broadcast["record"]), key=sort_key)
            for _, rec in items:
                emit(function.process_broadcast_element(rec, b_ctx))
        operator_store.read_only_broadcast = True
        keyed = records[records["side"] == "k"]
        ctx = Context(store, operator_store, plan.batch_id, plan.timestamp)
        key_groups: dict[str, int] = {}
        if keyed["key"].isna().any():
            bad = keyed[keyed["key"].isna()]["record"].iloc[0]
            raise ValueError(f"a record has a null key (e.g. {bad}); filter or fill null keys in the source")
        for key, key_group, text in zip(keyed["key"], keyed["key_group"], keyed["record"]):
            groups.setdefault(key, []).append(text)
            key_groups[key] = int(key_group)
        for key in sorted(groups):
            items = sorted(((t, json.loads(t)) for t in groups[key]), key=sort_key)
            store.set_current_key(key, key_groups[key])
            ctx.current_key = decode_key(plan.key_type, key)
            emit(function.process(ctx.current_key, [rec for _, rec in items], ctx))
        store.current_key = None
        operator_store.read_only_broadcast = False

    snapshot_ctx = FunctionSnapshotContext(operator_store, kg_range, plan.batch_id)
    function.snapshot_state(snapshot_ctx)
    function.close()

    stats = {"records": int((records["side"] == "k").sum()) if len(records) else 0,
             "broadcast": int((records["side"] == "b").sum()) if len(records) else 0,
             "keys": len(groups), "outputs": len(outputs)}
    rows: list[tuple] = [(None, None, None, subtask, None, None, None, None, "out", p) for p in outputs]
    rows.append((None, None, None, subtask, None, None, None, None, "stat", json.dumps(stats)))
    for state_name, key_group, key, namespace, value in store.changes():
        rows.append((KEYED, state_name, key_group, subtask, key, namespace, None, value, KEYED, None))
    for key_group, data in sorted(snapshot_ctx.raw_keyed.items()):
        before = raw_keyed.get(key_group)
        if data != before:
            value = None if data is None else bytes_type.dumps(data)
            rows.append((KEYED, raw_keyed_name, key_group, subtask, "", "", None, value, KEYED, None))
    for state_name, mode, value in operator_store.changes():
        rows.append((OPERATOR, state_name, None, subtask, None, None, mode, value, OPERATOR, None))
    columns = STATE_COLUMNS + ["kind", "payload"]
    frame = pd.DataFrame(rows, columns=columns)
    frame["key_group"] = frame["key_group"].astype("Int32")
    frame["subtask"] = frame["subtask"].astype("Int32")
    return frame
