"""What a job definition registers (a dry run of its hooks), and whether it may go on from a checkpoint.

``discover_descriptors`` gives the ``StateInfo`` of every state the function registers up front;
``check_restorable`` asks ``restore_plan`` whether a definition can continue from a checkpoint (the records
themselves are in ``records``).
"""
from __future__ import annotations

import copy

from .functions import FunctionInitializationContext, RuntimeContext
from .key_groups import compute_key_group_range_for_operator_index
from .keyed_state import KeyedStateStore
from .operator_state import OperatorStateStore
from .records import KEYED, OPERATOR, CheckpointMetadata, StateInfo
from .restore_plan import JobFacts, plan_restore


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


def check_restorable(spec, checkpoint: CheckpointMetadata, descriptors: dict[str, StateInfo]) -> None:
    """Refuse, with the fix, a checkpoint this definition cannot continue from (``restore_plan``'s rules for
    the start of a run)."""
    plan_restore(JobFacts.of(spec), checkpoint, descriptors)


def continuing_spec(spec, checkpoint: CheckpointMetadata):
    """The definition a run continuing from ``checkpoint`` runs with: that checkpoint's parallelism, backend
    and max_parallelism (a rescale or restore set them; the definition's values shape a job's first run)."""
    return spec.with_overrides(parallelism=checkpoint.parallelism, backend=checkpoint.backend,
                               max_parallelism=checkpoint.max_parallelism)
