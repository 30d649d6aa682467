"""The jobs of bench/load.py: workload R's count-sum job (bench/jobs.py) under any id, each reading its own input
folder. A registry entry ``entrypoint = "bench.load_jobs:<id>"`` builds job ``<id>`` over
``$LAKESTATE_ROOT/input/<id>`` (the module's ``__getattr__`` makes a factory for any name)."""
from __future__ import annotations

import os
from pathlib import Path

from bench.jobs import count_sum_job


def input_dir(job_id: str, root: str | os.PathLike | None = None) -> Path:
    return Path(root or os.environ["LAKESTATE_ROOT"]) / "input" / job_id


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return lambda: count_sum_job(str(input_dir(name)), job_id=name)
