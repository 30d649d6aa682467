"""Spark's Python worker daemon for Lakestate's runs (``spark.python.daemon.module``): pyspark's own, started
with a lean path and the run's modules imported once, before it forks a worker per task.

Spark puts ``pyspark.zip``, ``py4j-*.zip`` and the ``spark-core`` jar in front of the workers' path. With a pip
installed pyspark they hold nothing the workers lack, but they cost every task: pyspark's worker calls
``importlib.invalidate_caches()`` per task, which on Python 3.11 reads each archive's whole directory again
(about 0.1 s a task here), and modules imported from an archive are compiled from source in each new worker.
This module drops the archives when pyspark and py4j import without them (else it leaves the path as it is),
imports what every Lakestate task imports, then runs pyspark's daemon: a worker it forks starts warm. (So a
long-lived Spark, e.g. the Spark Connect server, runs the Lakestate code it started with: restart it after an
upgrade, as its reused workers already required.)
"""
from __future__ import annotations

import importlib
import importlib.machinery
import sys

_ARCHIVES = (".zip", ".jar")
# What a run's task imports, for each worker forked from the daemon to inherit.
_WARM = ("pyspark.worker", "pyarrow", "pyarrow.compute", "pyarrow.parquet", "orjson", "state_store.task")


def lean_path(path: list[str]) -> list[str]:
    """``path`` without Spark's archives, when pyspark and py4j are found without them; else ``path``."""
    lean = [p for p in path if not (p.endswith(_ARCHIVES) and ("pyspark" in p or "py4j" in p or "spark-" in p))]
    if len(lean) == len(path):
        return path
    found = all(importlib.machinery.PathFinder.find_spec(name, lean) is not None for name in ("pyspark", "py4j"))
    return lean if found else path


def main() -> None:
    lean = lean_path(sys.path)
    if lean is not sys.path:
        for dropped in set(sys.path) - set(lean):
            sys.path_importer_cache.pop(dropped, None)
        sys.path[:] = lean
    for name in _WARM:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - only a warm-up: the task imports it again and reports what fails
            pass
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
