"""The files a test's Airflow reads: a pipeline registry, and the environment that points Airflow at it and at this
repository's DAGs and plugin."""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def airflow_test_env(tmp_path: Path, registry: Path, lakestate_root: Path | None = None) -> dict:
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow-home"), "LAKESTATE_REGISTRY": str(registry),
           "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"), "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "PYTHONWARNINGS": "ignore"}
    if lakestate_root is not None:
        env["LAKESTATE_ROOT"] = str(lakestate_root)
    return env


def write_registry(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "lakestate.toml"
    path.write_text(textwrap.dedent(text))
    return path
