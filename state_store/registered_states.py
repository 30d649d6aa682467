"""The states a job definition registers: ``discover_descriptors`` (a dry run of its hooks on the driver) and
``registered_states`` (what a subtask's function registered), each state's ``StateInfo`` as checkpoints record
it (the records themselves are in ``records``; whether a definition may go on from them is ``restore_plan``'s).
"""
from __future__ import annotations

import copy

from .functions import FunctionInitializationContext, RuntimeContext
from .key_groups import compute_key_group_range_for_operator_index
from .records.layout import KEYED, OPERATOR
from .records.metadata import StateInfo
from .state.operator import OperatorStateStore
from .state.store import KeyedStateStore


def discover_descriptors(spec) -> dict[str, StateInfo]:
    """What a checkpoint records of every state the function registers up front (a dry run of its hooks on
    the driver)."""
    p, maxp = spec.parallelism, spec.effective_max_parallelism
    function = copy.deepcopy(spec.function)
    operator_store = OperatorStateStore(spec.uid)
    kg_range = compute_key_group_range_for_operator_index(maxp, p, 0)
    function.initialize_state(FunctionInitializationContext(operator_store, {}, kg_range, False, 0))
    runtime_ctx = RuntimeContext(spec.uid, KeyedStateStore(), 0, p, maxp)
    function.open(runtime_ctx)
    return registered_states(runtime_ctx, operator_store)


def registered_states(runtime_ctx: RuntimeContext, operator_store: OperatorStateStore) -> dict[str, StateInfo]:
    """What a checkpoint records of every state registered with ``runtime_ctx`` (keyed) and ``operator_store``."""
    states = {name: StateInfo.from_descriptor(d, KEYED) for name, d in runtime_ctx.descriptors.items()}
    for name, (mode, d) in operator_store.descriptors().items():
        states[name] = StateInfo.from_descriptor(d, OPERATOR, mode)
    return states
