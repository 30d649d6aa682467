"""Catalog records for the page's and the forms' tests: a checkpoint of a job of one operator, and a savepoint of
its fields."""
from __future__ import annotations

from dataclasses import asdict


def checkpoint_record(cid: int, parallelism: int, restored_from=None, airflow_run=None):
    from state_store.key_groups import key_group_ranges
    from state_store.records.metadata import CheckpointMetadata, TableVersion

    return CheckpointMetadata(
        job_id="clicks", checkpoint_id=cid, batch_id=4, uid="u", key_type="string", backend="delta",
        parallelism=parallelism, max_parallelism=128,
        key_group_ranges=[r.to_list() for r in key_group_ranges(128, parallelism)], source_offsets={},
        state={"keyed": TableVersion("/k", cid, 4562404, 3)}, descriptors={}, entries={"s": 1}, completed_ms=1,
        restored_from=restored_from, airflow_run=airflow_run)


def savepoint_record(name: str, **fields):
    """A savepoint of ``checkpoint_record(1, 2)``'s fields, named ``name``, holding no tables."""
    from state_store.records.metadata import SavepointMetadata

    return SavepointMetadata.from_dict({**asdict(checkpoint_record(1, 2)), "descriptors": {}, "name": name,
                                        "tables": {}, "created_ms": 1, **fields})
