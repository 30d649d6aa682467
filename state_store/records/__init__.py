"""Typed records that cross rooms, without Spark or I/O, so the subtasks, the CLI and the Airflow plugin all read
the same ones: ``layout`` (the state tables' on-disk layout: specs, rows, changes), ``stats`` (what a run counts
and writes: microbatch counters, cleanup notes, written files) and ``metadata`` (what the catalog keeps as JSON:
table versions, state info, plans, checkpoints, savepoints)."""
