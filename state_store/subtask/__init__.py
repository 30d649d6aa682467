"""The executor half of a run: a subtask's frame in, the user function over its keys, its state and
output files out. Imports the top level and ``state``; no Spark at load (executors, JVM-less tests)."""
