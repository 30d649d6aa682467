"""State backends: where working state lives and how a checkpoint captures it.

One interface, chosen by ``JobSpec.backend``:

- ``delta`` (default): every microbatch appends the entries that changed to the
  job's keyed and operator Delta tables (idempotently, by microbatch id); a
  checkpoint only pins their versions, so it is incremental.
- ``hashmap``: working state lives only in the executors during a run; a
  checkpoint writes a full snapshot (its own Delta tables under
  ``snapshots/chk-N``).
- ``memory``: like hashmap, but snapshots stay in this process. Tiny tests only.

A run's working state is two cached DataFrames (keyed, operator), read at most
once per run by ``restore`` and merged with each microbatch's changes.
"""
from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from .delta_log import table_snapshot
from .errors import RestoreError

KEYED_SCHEMA = "state_name string, key_group int, key string, namespace string, value string, batch_id long, ts long"
OPERATOR_SCHEMA = "state_name string, subtask int, mode string, value string, batch_id long, ts long"
KEYED_ID = ["state_name", "key_group", "key", "namespace"]
OPERATOR_ID = ["state_name", "subtask"]


def _latest_live(df: DataFrame, id_columns: list[str], batch_id: int) -> DataFrame:
    """The newest entry per id written up to ``batch_id``, without tombstones."""
    newest = Window.partitionBy(*id_columns).orderBy(F.col("batch_id").desc())
    return (
        df.filter(F.col("batch_id") <= batch_id)
        .withColumn("_rank", F.row_number().over(newest))
        .filter("_rank = 1 AND value IS NOT NULL")
        .drop("_rank")
    )


def _ensure_table(spark: SparkSession, path: Path, schema: str, partition_by: list[str]) -> None:
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, str(path)):
        spark.createDataFrame([], schema).write.format("delta").partitionBy(*partition_by).mode("append").save(str(path))


class StateBackend:
    name = ""

    def __init__(self, spark: SparkSession, job_dir: Path, job_id: str):
        self.spark, self.job_dir, self.job_id = spark, job_dir, job_id

    def empty(self) -> tuple[DataFrame, DataFrame]:
        return self.spark.createDataFrame([], KEYED_SCHEMA), self.spark.createDataFrame([], OPERATOR_SCHEMA)

    def restore(self, checkpoint: dict | None) -> tuple[DataFrame, DataFrame]:
        """The keyed and operator working state as of ``checkpoint`` (empty when None)."""
        raise NotImplementedError

    def write_changes(self, keyed: DataFrame, operator: DataFrame, batch_id: int) -> None:
        """Persist one microbatch's changed entries (None values are tombstones)."""

    def snapshot(self, keyed: DataFrame, operator: DataFrame, checkpoint_id: int, batch_id: int) -> dict:
        """Make the state durable for a checkpoint; return what the checkpoint row records."""
        raise NotImplementedError

    def discard(self, checkpoint: dict) -> None:
        """Release what an expired checkpoint held."""


class DeltaStateBackend(StateBackend):
    name = "delta"

    @property
    def keyed_path(self) -> Path:
        return self.job_dir / "state" / "keyed"

    @property
    def operator_path(self) -> Path:
        return self.job_dir / "state" / "operator"

    def _ensure(self) -> None:
        _ensure_table(self.spark, self.keyed_path, KEYED_SCHEMA, ["state_name", "key_group"])
        _ensure_table(self.spark, self.operator_path, OPERATOR_SCHEMA, ["state_name"])

    def restore(self, checkpoint):
        self._ensure()
        if checkpoint is None:
            return self.empty()
        tables = checkpoint["state"]
        read = self.spark.read.format("delta")
        keyed = read.option("versionAsOf", tables["keyed"]["version"]).load(str(self.keyed_path))
        operator = read.option("versionAsOf", tables["operator"]["version"]).load(str(self.operator_path))
        batch = checkpoint["batch_id"]
        return _latest_live(keyed, KEYED_ID, batch), _latest_live(operator, OPERATOR_ID, batch)

    def write_changes(self, keyed, operator, batch_id):
        # The tables exist: restore() made them. txnAppId/txnVersion make a replayed microbatch
        # write nothing twice. The two tables commit independently, so both appends run at once:
        # a small append is mostly driver-side commit latency.
        def append(df, path, parts, app):
            (
                df.write.format("delta")
                .option("txnAppId", f"lakestate:{self.job_id}:{app}")
                .option("txnVersion", batch_id)
                .partitionBy(*parts)
                .mode("append")
                .save(str(path))
            )

        with ThreadPoolExecutor(2, thread_name_prefix="lakestate-state-write") as pool:
            futures = [pool.submit(append, keyed, self.keyed_path, ["state_name", "key_group"], "keyed"),
                       pool.submit(append, operator, self.operator_path, ["state_name"], "operator")]
            for future in futures:
                future.result()

    def snapshot(self, keyed, operator, checkpoint_id, batch_id):
        return {"keyed": table_snapshot(self.keyed_path), "operator": table_snapshot(self.operator_path),
                "incremental": True}


class HashMapStateBackend(StateBackend):
    name = "hashmap"

    def _dir(self, checkpoint_id: int) -> Path:
        return self.job_dir / "snapshots" / f"chk-{checkpoint_id}"

    def restore(self, checkpoint):
        if checkpoint is None:
            return self.empty()
        tables = checkpoint["state"]
        for t in ("keyed", "operator"):
            if not Path(tables[t]["path"]).exists():
                raise RestoreError(
                    f"checkpoint {checkpoint['checkpoint_id']}'s snapshot {tables[t]['path']} is missing; "
                    f"restore an older checkpoint or a savepoint"
                )
        read = self.spark.read.format("delta")
        return (
            read.option("versionAsOf", tables["keyed"]["version"]).load(tables["keyed"]["path"]),
            read.option("versionAsOf", tables["operator"]["version"]).load(tables["operator"]["path"]),
        )

    def snapshot(self, keyed, operator, checkpoint_id, batch_id):
        base = self._dir(checkpoint_id)
        # A full snapshot; overwriting makes a retried checkpoint (after a crash) idempotent.
        keyed.write.format("delta").partitionBy("state_name", "key_group").mode("overwrite").save(str(base / "keyed"))
        operator.write.format("delta").partitionBy("state_name").mode("overwrite").save(str(base / "operator"))
        return {"keyed": table_snapshot(base / "keyed"), "operator": table_snapshot(base / "operator"),
                "incremental": False}

    def discard(self, checkpoint):
        shutil.rmtree(self._dir(checkpoint["checkpoint_id"]), ignore_errors=True)


_MEMORY_SNAPSHOTS: dict[tuple[str, int], tuple[list, list]] = {}


class MemoryStateBackend(StateBackend):
    name = "memory"

    def restore(self, checkpoint):
        if checkpoint is None:
            return self.empty()
        rows = _MEMORY_SNAPSHOTS.get((str(self.job_dir), checkpoint["checkpoint_id"]))
        if rows is None:
            raise RestoreError(
                "the memory backend keeps checkpoints only in the process that took them; "
                "use the hashmap or delta backend for state that outlives a process"
            )
        return self.spark.createDataFrame(rows[0], KEYED_SCHEMA), self.spark.createDataFrame(rows[1], OPERATOR_SCHEMA)

    def snapshot(self, keyed, operator, checkpoint_id, batch_id):
        k, o = keyed.collect(), operator.collect()
        _MEMORY_SNAPSHOTS[(str(self.job_dir), checkpoint_id)] = (k, o)
        return {"keyed": {"entries": len(k)}, "operator": {"entries": len(o)}, "incremental": False}

    def discard(self, checkpoint):
        _MEMORY_SNAPSHOTS.pop((str(self.job_dir), checkpoint["checkpoint_id"]), None)


BACKENDS = {b.name: b for b in (DeltaStateBackend, HashMapStateBackend, MemoryStateBackend)}


def create_backend(name: str, spark: SparkSession, job_dir: Path, job_id: str) -> StateBackend:
    return BACKENDS[name](spark, job_dir, job_id)
