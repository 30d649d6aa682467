"""A task for tests/e2e/test_stack.py, in a module of its own: the worker imports the module of a function it runs,
and test_stack.py's imports (pandas) would hide what the worker had before."""
from __future__ import annotations


def worker_path(batches):
    """A task's path, the modules it found imported (before importing anything itself), and what
    ``invalidate_caches`` costs it."""
    import importlib
    import sys
    import time

    modules = " ".join(sorted(sys.modules))  # before this task imports anything itself
    import pyarrow as pa

    for _ in batches:
        pass
    started = time.perf_counter()
    importlib.invalidate_caches()  # what pyspark's worker does at the start of every task
    seconds = time.perf_counter() - started
    yield pa.RecordBatch.from_pydict({"path": ["\n".join(sys.path)], "modules": [modules],
                                      "seconds": [seconds]})
