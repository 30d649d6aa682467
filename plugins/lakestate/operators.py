"""Airflow operators over Lakestate's ``spark-submit`` entrypoints (thin: the Spark provider's hook submits)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from airflow.exceptions import AirflowNotFoundException
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SPARK_CONN_ID = "lakestate_spark"
DEFAULT_SPARK_CONN = {"conn_type": "spark", "host": "local[*]"}  # used when the connection is not defined


class LakestateSubmitOperator(SparkSubmitOperator):
    """Submit one run of a job of the pipeline registry: ``jobs/run_microbatches.py --job <id> --registry <file>``.

    The run takes the job's pending microbatches (up to the entry's ``max_microbatches``) and waits up to
    ``wait_for_lease_s`` for another run of the job (a manual ``spark-submit``) to finish instead of failing.
    The Spark master comes from the Airflow connection ``lakestate_spark``; without one, ``local[*]``.
    """

    def __init__(self, *, job_id: str, registry: str, wait_for_lease_s: float = 3600, conn_id: str = SPARK_CONN_ID,
                 **kwargs):
        super().__init__(
            application=str(PROJECT_ROOT / "jobs" / "run_microbatches.py"),
            application_args=["--job", job_id, "--registry", registry, "--wait-for-lease", str(wait_for_lease_s)],
            conn_id=conn_id, name=f"lakestate-{job_id}", conf={"spark.log.level": "WARN"}, **kwargs)
        self.job_id = job_id

    def execute(self, context):
        from airflow.hooks.base import BaseHook

        from state_store.spark import delta_jars

        try:
            BaseHook.get_connection(self._conn_id)
        except AirflowNotFoundException:
            self.log.info("connection %r is not defined: submitting to local[*]", self._conn_id)
            os.environ[f"AIRFLOW_CONN_{self._conn_id.upper()}"] = json.dumps(DEFAULT_SPARK_CONN)
        self.jars = self.jars or ",".join(delta_jars())
        return super().execute(context)
