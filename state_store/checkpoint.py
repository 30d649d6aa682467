"""What a job definition registers (a dry run of its hooks), and whether it may continue from a checkpoint.

``discover_descriptors`` gives the ``StateInfo`` of every state the function registers up front;
``check_restorable`` says, with the fix, when a definition cannot continue from a checkpoint (the records
themselves are in ``records``).
"""
from __future__ import annotations

import copy

from .errors import RestoreError
from .functions import FunctionInitializationContext, RuntimeContext
from .key_groups import compute_key_group_range_for_operator_index
from .keyed_state import KeyedStateStore
from .operator_state import OperatorStateStore
from .types import StateMigrationError, check_compatibility
from .records import KEYED, LAYOUT_VERSION, OPERATOR, CheckpointMetadata, StateInfo


def discover_descriptors(spec) -> dict[str, StateInfo]:
    """The schemas of every state the function registers (a dry run of its hooks on the driver)."""
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
    """Refuse, with the fix, a checkpoint this definition cannot continue from."""
    cid = checkpoint.checkpoint_id
    if checkpoint.layout != LAYOUT_VERSION:
        raise RestoreError(
            f"checkpoint {cid} was written with state layout {checkpoint.layout}; this release reads layout "
            f"{LAYOUT_VERSION}: run the job with a new job id (or a fresh warehouse)"
        )
    check_max_parallelism(spec, checkpoint.max_parallelism, f"checkpoint {cid}")
    if checkpoint.key_type != spec.key_type.to_schema():
        raise RestoreError(
            f"checkpoint {cid} keys records by {checkpoint.key_type} but the job now declares key_type "
            f"{spec.key_type.to_schema()}; a key's hash, and so its key group, depends on its type: keep "
            f"{checkpoint.key_type}"
        )
    if checkpoint.uid != spec.uid:
        raise RestoreError(
            f"checkpoint {cid} holds the state of operator uid {checkpoint.uid!r} but the job's operator is now "
            f"{spec.uid!r}; its state would not be restored: set uid={checkpoint.uid!r}, or move the state to "
            f"the new uid with: lakestate restore {spec.job_id} --checkpoint {cid} --uid-map "
            f"{checkpoint.uid}={spec.uid}"
        )
    check_descriptors(checkpoint.descriptors, descriptors, f"checkpoint {cid}")


def check_max_parallelism(spec, max_parallelism: int, where: str) -> None:
    """max_parallelism is fixed for a job's life (it is the number of key groups)."""
    if spec.max_parallelism is not None and spec.max_parallelism != max_parallelism:
        raise RestoreError(
            f"{where} has max_parallelism {max_parallelism} but the job now sets {spec.max_parallelism}; "
            f"max_parallelism is the number of key groups and is fixed for a job's life: set it back to "
            f"{max_parallelism} (or leave it unset to take the restored one)"
        )


def continuing_spec(spec, checkpoint: CheckpointMetadata):
    """The definition a run continuing from ``checkpoint`` runs with: that checkpoint's parallelism, backend
    and max_parallelism (a rescale or restore set them; the definition's values shape a job's first run)."""
    return spec.with_overrides(parallelism=checkpoint.parallelism, backend=checkpoint.backend,
                               max_parallelism=checkpoint.max_parallelism)


def check_descriptors(stored: dict[str, StateInfo], descriptors: dict[str, StateInfo], where: str) -> None:
    """Refuse, with the fix, a state whose kind or type the new definition changed incompatibly."""
    for name, old in stored.items():
        new = descriptors.get(name)
        if new is None:
            continue
        if (old.kind, old.mode) != (new.kind, new.mode):
            raise RestoreError(
                f"state {name!r} was {old.kind} state in {where} and is now {new.kind} state; "
                f"give the new state another name"
            )
        try:
            check_compatibility(old.type, new.type, where=f"state {name!r}")
        except StateMigrationError as e:
            raise RestoreError(
                f"{e} (since {where}); keep the old type, make a compatible change "
                f"(widen a number, add a row field), or give the new state another name"
            ) from None
