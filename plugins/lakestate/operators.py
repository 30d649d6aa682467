"""Airflow operators over Lakestate's ``spark-submit`` entrypoints (thin: the Spark provider's hook submits).

The Spark master comes from the Airflow connection ``lakestate_spark``; without one, ``local[*]``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from airflow.exceptions import AirflowNotFoundException
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SPARK_CONN_ID = "lakestate_spark"
DEFAULT_SPARK_CONN = {"conn_type": "spark", "host": "local[*]"}  # used when the connection is not defined


class _LakestateSparkSubmit(SparkSubmitOperator):
    """Submit ``jobs/<entrypoint>.py``: the Spark connection (or local[*]) and the Delta jars filled in."""

    def __init__(self, *, entrypoint: str, conn_id: str = SPARK_CONN_ID, wait_for_lease_s: float = 3600,
                 **kwargs):
        kwargs.setdefault("name", f"lakestate-{entrypoint}")
        super().__init__(application=str(PROJECT_ROOT / "jobs" / f"{entrypoint}.py"), conn_id=conn_id,
                         conf={"spark.log.level": "WARN"}, **kwargs)
        self.wait_for_lease_s = wait_for_lease_s

    def submit(self, context) -> None:
        from airflow.hooks.base import BaseHook

        from state_store.spark import delta_jars, s3_jars, wants_s3

        try:
            BaseHook.get_connection(self._conn_id)
        except AirflowNotFoundException:
            self.log.info("connection %r is not defined: submitting to local[*]", self._conn_id)
            os.environ[f"AIRFLOW_CONN_{self._conn_id.upper()}"] = json.dumps(DEFAULT_SPARK_CONN)
        jars = delta_jars()
        if wants_s3() and not any("hadoop-aws" in j for j in jars):
            jars += s3_jars()
        self.jars = self.jars or ",".join(jars)
        super().execute(context)


class LakestateSubmitOperator(_LakestateSparkSubmit):
    """Submit one run of a job of the pipeline registry: ``jobs/run_microbatches.py --job <id> --registry <file>``.

    The run takes the job's pending microbatches (up to the entry's ``max_microbatches``) and waits up to
    ``wait_for_lease_s`` for another run of the job (a manual ``spark-submit``, a savepoint, a rescale) to
    finish instead of failing.
    """

    def __init__(self, *, job_id: str, registry: str, wait_for_lease_s: float = 3600, **kwargs):
        super().__init__(entrypoint="run_microbatches", name=f"lakestate-{job_id}", wait_for_lease_s=wait_for_lease_s,
                         application_args=["--job", job_id, "--registry", registry, "--wait-for-lease",
                                           str(wait_for_lease_s)], **kwargs)
        self.job_id = job_id

    def execute(self, context):
        self.submit(context)


class LakestateSavepointOperator(_LakestateSparkSubmit):
    """Take a savepoint of the DAG run's ``params.job`` (optional ``params.checkpoint``, ``params.label``);
    returns (XCom) the savepoint's path, checkpoint, microbatch and size."""

    def __init__(self, **kwargs):
        super().__init__(entrypoint="savepoint", **kwargs)

    def execute(self, context):
        from state_store.savepoint import check_label, load_savepoint
        from state_store.settings import Settings

        params = context["params"]
        job = params["job"]
        label = params.get("label") or f"airflow-{context['run_id']}"
        label = "".join(c if c.isalnum() or c in "_.-" else "-" for c in label)[:64]
        check_label(label)
        self.application_args = [job, "--label", label, "--wait-for-lease", str(self.wait_for_lease_s)]
        if params.get("checkpoint") is not None:
            self.application_args += ["--checkpoint", str(int(params["checkpoint"]))]
        self.submit(context)
        savepoint = load_savepoint(Settings.load(), f"{job}/{label}")
        self.log.info("savepoint path: %s", savepoint.path)
        return {"path": savepoint.path, "job": job, "name": savepoint.name, "checkpoint": savepoint.checkpoint_id,
                "microbatch": savepoint.batch_id, "entries": sum(savepoint.entries.values()),
                "bytes": savepoint.size_bytes}


class LakestateRescaleOperator(_LakestateSparkSubmit):
    """Rescale the DAG run's ``params.job`` to ``params.parallelism`` (a savepoint first when
    ``params.savepoint_first``); returns (XCom) the latest checkpoint's id, microbatch and parallelism, and
    whether the rescale ``changed`` anything: at the parallelism the job already has, nothing is submitted or
    written and the task succeeds saying so."""

    def __init__(self, **kwargs):
        super().__init__(entrypoint="rescale", **kwargs)

    def execute(self, context):
        from state_store.catalog import JobMeta
        from state_store.settings import Settings

        params = context["params"]
        job, parallelism = params["job"], int(params["parallelism"])
        meta = JobMeta(Settings.load().job_dir(job))
        latest = meta.latest_checkpoint()
        changed = latest is None or latest.parallelism != parallelism
        if changed:
            self.application_args = [job, "--parallelism", str(parallelism), "--wait-for-lease",
                                     str(self.wait_for_lease_s)]
            if params.get("savepoint_first", True):
                self.application_args.append("--savepoint-first")
            self.submit(context)
            latest = meta.latest_checkpoint()
            self.log.info("job %s: checkpoint %s at parallelism %s", job, latest.checkpoint_id, latest.parallelism)
        else:
            from state_store.restore import already_at

            self.log.info("%s", already_at(job, latest))
        return {"job": job, "checkpoint": latest.checkpoint_id, "microbatch": latest.batch_id,
                "parallelism": latest.parallelism, "changed": changed}


class LakestateCompactOperator(_LakestateSparkSubmit):
    """Compact job ``job`` (``jobs/compact.py``): its state tables rewritten to their live entries, expired ones
    dropped (TTL's compaction filter), files no retained checkpoint needs deleted; the job is held meanwhile (its
    pipeline runs wait). Returns (XCom) the compaction report, which the Lakestate page shows too."""

    template_fields = (*_LakestateSparkSubmit.template_fields, "job")

    def __init__(self, *, job: str, **kwargs):
        super().__init__(entrypoint="compact", **kwargs)
        self.job = job

    def execute(self, context):
        from state_store.catalog import JobMeta
        from state_store.settings import Settings

        self.application_args = [self.job, "--wait-for-lease", str(self.wait_for_lease_s)]
        self.submit(context)
        report = JobMeta(Settings.load().job_dir(self.job)).last_compaction()
        self.log.info("job %s: %s rows scanned, %s expired and %s superseded removed, files %s -> %s, %s bytes "
                      "reclaimed", self.job, report["rows_scanned"], report["expired_removed"],
                      report["superseded_removed"], report["files_before"], report["files_after"],
                      report["bytes_reclaimed"])
        return report
