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
import os
import sys

_ARCHIVES = (".zip", ".jar")
# What a run's task imports, for each worker forked from the daemon to inherit. pandas among them: pyarrow.compute
# imports it at a task's first call with a Python scalar (about 0.2 s in each new worker here).
_WARM = ("pyspark.worker", "pandas", "pyarrow", "pyarrow.compute", "pyarrow.parquet", "orjson",
         "state_store.subtask.reader")


def lean_path(path: list[str]) -> list[str]:
    """``path`` without Spark's archives, when pyspark and py4j are found without them; else ``path``."""
    lean = [p for p in path if not (p.endswith(_ARCHIVES) and ("pyspark" in p or "py4j" in p or "spark-" in p))]
    if len(lean) == len(path):
        return path
    found = all(importlib.machinery.PathFinder.find_spec(name, lean) is not None for name in ("pyspark", "py4j"))
    return lean if found else path


def _inside(path: str, archives: set[str]) -> bool:
    return any(path == a or path.startswith(a + os.sep) for a in archives)


def main() -> None:
    lean = lean_path(sys.path)
    if lean is not sys.path:
        dropped = set(sys.path) - set(lean)
        sys.path[:] = lean
        # The importers Python made for the archives (and for folders inside them, e.g. a namespace package the
        # start-up looked for there), which ``invalidate_caches`` would still visit.
        for path in [p for p in sys.path_importer_cache if _inside(p, dropped)]:
            del sys.path_importer_cache[path]
        for name, module in list(sys.modules.items()):
            package = getattr(module, "__path__", None)
            if package is not None and getattr(module, "__file__", None) is None and list(package) and all(
                    _inside(p, dropped) for p in package):
                del sys.modules[name]  # a namespace package found only inside an archive (e.g. the jar's org/)
    for name in _WARM:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - only a warm-up: the task imports it again and reports what fails
            pass
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
