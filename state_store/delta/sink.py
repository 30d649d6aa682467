"""``DeltaSink``: a Delta table in the warehouse, appended to exactly once per microbatch (the first ``Sink``).

Its rows carry their microbatch (``_microbatch``), and a run's commit adds them in one Delta commit whose
transaction (``txnAppId`` the job's, ``txnVersion`` the run's last microbatch) Delta keeps: a replay of
microbatches the table already holds adds nothing, and the subtasks leave out rows of those microbatches."""
from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import InputError
from ..records.layout import SINK
from ..sinks import SINK_MICROBATCH, Sink, SinkRun, check_sink
from ..storage import options_of
from ..subtask.run_files import OutputTable
from .log import app_transaction_version, sink_version, table_metadata


def _shape(field_type):
    """A Spark schema's JSON without what does not change what a column holds (nullability, metadata)."""
    if isinstance(field_type, dict):
        return {k: _shape(v) for k, v in field_type.items()
                if k not in ("nullable", "metadata", "containsNull", "valueContainsNull")}
    if isinstance(field_type, list):
        return [_shape(v) for v in field_type]
    return field_type


@dataclass(frozen=True)
class DeltaSink(Sink):
    """The Delta table ``path`` inside the warehouse; ``sink="sinks/clicks"`` and ``sink=DeltaSink("sinks/clicks")``
    are the same sink. Lakestate adds the subtasks' files to the table directly; a table with constraints,
    generated or identity columns or column mapping gets them through Delta's own writer (which checks them).

    Example: ``JobSpec(..., sink=DeltaSink("sinks/clicks"))``

    :param path: the table, a path inside the warehouse.
    """

    path: str

    def __post_init__(self):
        check_sink(self.path, "DeltaSink's path")

    @property
    def name(self) -> str:
        return self.path

    def describe(self) -> dict:
        return {"type": "delta", "path": self.path}

    def check(self, run: SinkRun) -> None:
        """Refuse a table whose columns are not the declared ones (or that is partitioned)."""
        meta = table_metadata(run.location)
        if meta is not None:
            self._check_columns(run, meta)

    def output(self, run: SinkRun, token: str) -> OutputTable:
        """The table itself when Lakestate can add files to it directly, else a staging folder whose rows a Spark
        append writes at the commit; a table the run's commit creates is checked again there."""
        meta = table_metadata(run.location)
        if meta is None:  # created by the run's commit
            return OutputTable(run.table, str(run.location), run.columns, (), None, SINK_MICROBATCH,
                               options_of(run.location), run.declared)
        committed = app_transaction_version(run.location, run.app_id)
        text, conf = meta["schemaString"], meta["configuration"]
        plain = (not any(k.startswith("delta.constraints.") for k in conf)
                 and conf.get("delta.columnMapping.mode", "none") == "none"
                 and not any(m in text for m in ("delta.generationExpression", "delta.identity", "delta.invariants")))
        directory = run.location if plain else run.staging(token) / run.table.replace(":", "-")
        return OutputTable(run.table, str(directory), run.columns, (), committed, SINK_MICROBATCH,
                           options_of(directory))

    def commit(self, run: SinkRun, table: OutputTable, files: list, last_batch: int) -> None:
        from .state_tables import append_idempotent, commit_files  # Spark: only where a run commits

        if table.declared is not None and (meta := table_metadata(run.location)) is not None:
            self._check_columns(run, meta)  # made since the run opened it
        if table.directory == str(run.location):
            commit_files(run.spark, run.location, run.app_id, last_batch, files, table.ddl, (), table.committed,
                         SINK_MICROBATCH)
        else:  # a table with constraints or generated columns: Delta's own writer checks them
            staged = (run.spark.read.schema(table.ddl).parquet(*[str(table.root / f.path) for f in files])
                      if files else run.spark.createDataFrame([], table.ddl))
            append_idempotent(staged, run.location, run.app_id, last_batch, batch_column=SINK_MICROBATCH)

    def version(self, run: SinkRun):
        return sink_version(run.location)

    def _check_columns(self, run: SinkRun, meta: dict) -> None:
        from ..spark.session import ddl_schema  # Spark: only where a run opens its tables

        actual = _shape(json.loads(meta["schemaString"]))
        expected = _shape(ddl_schema(run.spark, run.columns).jsonValue())
        if actual != expected or meta.get("partitionColumns"):
            names = [f["name"] for f in actual["fields"]]
            raise InputError(
                f"the {'sink' if run.table == SINK else 'side output table'} {run.location} has columns {names}"
                f"{' partitioned' if meta.get('partitionColumns') else ''} "
                f"that do not match {run.declared} ({run.columns}); point the job at a new table, or change the "
                f"type back")


def as_sink(sink) -> Sink:
    """The ``Sink`` a job's ``sink`` is (a plain warehouse path: a ``DeltaSink``)."""
    return sink if isinstance(sink, Sink) else DeltaSink(sink)
