"""The state tables in Delta: the log, delta-rs commits, the tables' layout, the state backends and
the points (checkpoints, savepoints). Imports the top level, ``catalog``, ``subtask`` and ``spark``."""
