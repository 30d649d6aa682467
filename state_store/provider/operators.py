"""Airflow operators over Lakestate's ``spark-submit`` entrypoints (thin: the Spark provider's hook submits).

The Spark master comes from the Airflow connection ``lakestate_spark``; without one, ``local[*]``.
"""
from __future__ import annotations

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

import state_store.entrypoint.main as entrypoint_main

ENTRYPOINT = entrypoint_main.__file__  # spark-submit runs the installed package's file
SPARK_CONN_ID = "lakestate_spark"
DEFAULT_SPARK_CONN = {"conn_type": "spark", "host": "local[*]"}  # used when the connection is not defined
# The savepoint's label: the DAG run's ``params.label``, else ``airflow-<run id>`` with every character that may
# not name a folder made a '-', at most 64 characters (what ``state_store.savepoint.check_label`` accepts).
LABEL = ("{% for c in (params.label or 'airflow-' ~ run_id)[:64] %}"
         "{{ c if c.isalnum() or c in '_.-' else '-' }}{% endfor %}")


class _LakestateSparkSubmit(SparkSubmitOperator):
    """Submit ``jobs/<entrypoint>.py`` with ``args`` (templated, as ``application_args``) and the wait for the
    lease: the Spark connection (or local[*]) and the Delta jars filled in when the hook is made. An argument
    that renders empty is left out: an option the DAG run's params do not ask for."""

    def __init__(self, *, command: str, args: list[str], conn_id: str = SPARK_CONN_ID,
                 wait_for_lease_s: float = 3600, **kwargs):
        kwargs.setdefault("name", f"lakestate-{command}")
        super().__init__(application=ENTRYPOINT, conn_id=conn_id,
                         conf={"spark.log.level": "WARN"},
                         application_args=[command, *args, "--wait-for-lease", str(wait_for_lease_s)], **kwargs)
        self.wait_for_lease_s = wait_for_lease_s

    def render_template_fields(self, context, jinja_env=None) -> None:
        super().render_template_fields(context, jinja_env)
        self.application_args = [a for a in self.application_args if a != ""]

    def _get_hook(self):
        """The ``lakestate_spark`` connection's hook (``hooks.LakestateSparkHook``: the Delta jars, or Delta's
        Maven package where no jar is found; ``local[*]`` when the connection is not defined) with this task's
        arguments, as the provider's ``SparkSubmitOperator._get_hook`` gives them to its hook."""
        from state_store.provider.hooks import LakestateSparkHook

        return LakestateSparkHook(
            conf=self.conf, conn_id=self._conn_id, files=self.files, py_files=self.py_files,
            archives=self._archives, driver_class_path=self.driver_class_path, jars=self.jars,
            java_class=self._java_class, packages=self.packages, exclude_packages=self.exclude_packages,
            repositories=self._repositories, total_executor_cores=self._total_executor_cores,
            executor_cores=self._executor_cores, executor_memory=self._executor_memory,
            driver_memory=self._driver_memory, keytab=self.keytab, principal=self.principal,
            proxy_user=self.proxy_user, name=self.name, num_executors=self._num_executors,
            status_poll_interval=self._status_poll_interval, application_args=self.application_args,
            env_vars=self.env_vars, verbose=self._verbose, spark_binary=self._spark_binary,
            properties_file=self.properties_file, yarn_queue=self._yarn_queue, deploy_mode=self._deploy_mode,
            use_krb5ccache=self._use_krb5ccache)


class LakestateSubmitOperator(_LakestateSparkSubmit):
    """Submit one run of a job of the pipeline registry: ``jobs/run_microbatches.py --job <id> --registry <file>``.

    The run takes the job's pending microbatches (up to the entry's ``max_microbatches``) and waits up to
    ``wait_for_lease_s`` for another run of the job (a manual ``spark-submit``, a savepoint, a rescale) to
    finish instead of failing.
    """

    def __init__(self, *, job_id: str, registry: str, **kwargs):
        super().__init__(command="run", name=f"lakestate-{job_id}",
                         args=["--job", job_id, "--registry", registry], **kwargs)
        self.job_id = job_id


class LakestateSavepointOperator(_LakestateSparkSubmit):
    """Take a savepoint of the DAG run's ``params.job`` (optional ``params.checkpoint``, ``params.label``);
    returns (XCom) the savepoint's path, checkpoint, microbatch and size."""

    template_fields = (*_LakestateSparkSubmit.template_fields, "job", "savepoint_label")

    def __init__(self, **kwargs):
        job, checkpoint = "{{ params.job }}", ("{% if params.checkpoint is not none %}"
                                               "--checkpoint={{ params.checkpoint | int }}{% endif %}")
        super().__init__(command="savepoint", args=[job, "--label", LABEL, checkpoint], **kwargs)
        self.job, self.savepoint_label = job, LABEL

    def execute(self, context):
        from state_store.savepoint import load_savepoint
        from state_store.settings import Settings

        super().execute(context)
        savepoint = load_savepoint(Settings.load(), f"{self.job}/{self.savepoint_label}")
        self.log.info("savepoint path: %s", savepoint.path)
        return {"path": savepoint.path, "job": self.job, "name": savepoint.name,
                "checkpoint": savepoint.checkpoint_id, "microbatch": savepoint.batch_id,
                "entries": sum(savepoint.entries.values()), "bytes": savepoint.size_bytes}


class LakestateRescaleOperator(_LakestateSparkSubmit):
    """Rescale the DAG run's ``params.job`` to ``params.parallelism`` (a savepoint first when
    ``params.savepoint_first``); returns (XCom) the latest checkpoint's id, microbatch and parallelism, and
    whether the rescale ``changed`` anything: at the parallelism the job already has, nothing is submitted or
    written and the task succeeds saying so."""

    template_fields = (*_LakestateSparkSubmit.template_fields, "job", "parallelism")

    def __init__(self, **kwargs):
        job, parallelism = "{{ params.job }}", "{{ params.parallelism | int }}"
        first = "{{ '--savepoint-first' if params.get('savepoint_first', true) else '' }}"
        super().__init__(command="rescale", args=[job, "--parallelism", parallelism, first], **kwargs)
        self.job, self.parallelism = job, parallelism

    def execute(self, context):
        from state_store.job_store import JobStore
        from state_store.settings import Settings

        meta = JobStore(Settings.load().job_dir(self.job))
        latest = meta.latest_checkpoint()
        changed = latest is None or latest.parallelism != int(self.parallelism)
        if changed:
            super().execute(context)
            latest = meta.latest_checkpoint()
            self.log.info("job %s: checkpoint %s at parallelism %s", self.job, latest.checkpoint_id,
                          latest.parallelism)
        else:
            from state_store.restore import already_at

            self.log.info("%s", already_at(self.job, latest))
        return {"job": self.job, "checkpoint": latest.checkpoint_id, "microbatch": latest.batch_id,
                "parallelism": latest.parallelism, "changed": changed}


class LakestateCompactOperator(_LakestateSparkSubmit):
    """Compact job ``job`` (``jobs/compact.py``): its state tables rewritten to their live entries, expired ones
    dropped (TTL's compaction filter), files no retained checkpoint needs deleted; the job is held meanwhile (its
    pipeline runs wait). Returns (XCom) the compaction report, which the Lakestate page shows too."""

    template_fields = (*_LakestateSparkSubmit.template_fields, "job")

    def __init__(self, *, job: str, **kwargs):
        super().__init__(command="compact", args=[job], **kwargs)
        self.job = job

    def execute(self, context):
        from state_store.job_store import JobStore
        from state_store.settings import Settings

        super().execute(context)
        report = JobStore(Settings.load().job_dir(self.job)).last_compaction()
        self.log.info("job %s: %s rows scanned, %s expired and %s superseded removed, files %s -> %s, %s bytes "
                      "reclaimed", self.job, report["rows_scanned"], report["expired_removed"],
                      report["superseded_removed"], report["files_before"], report["files_after"],
                      report["bytes_reclaimed"])
        return report
