"""The hook of connection type ``lakestate`` (and of its old name ``lakestate_spark``, which still works): the
Spark provider's ``spark-submit`` hook with what a Lakestate run
needs filled in (the Delta jars, or Delta's Maven package when there are none; when the connection is not defined,
the master ``lakestate run`` takes: ``$LAKESTATE_SPARK_MASTER``, else ``spark-defaults.conf``'s ``spark.master``,
else ``local[*]``, where the provider's own default is ``yarn``). Connections of the provider's own type ``spark``
work the same: the hook reads host, port and extras as the provider does, whatever the connection's type. A
connection of the provider's type ``spark_connect`` names a Spark Connect server instead (``spark_connect_url``):
the pipeline's run then runs on it, with no ``spark-submit``.

The type is ``lakestate``: Airflow warns, at every use of a connection (three times a task), that a type holding
'_' is not a URI scheme (RFC 3986), and it turns a '-' of a URI's or a JSON connection's type into '_', so a
type spelled with either would be warned about. The connection's id stays ``lakestate_spark``.
"""
from __future__ import annotations

from typing import Any

from airflow.exceptions import AirflowNotFoundException
from airflow.providers.apache.spark.hooks.spark_submit import DEFAULT_SPARK_BINARY, SparkSubmitHook

CONN_TYPE = "lakestate"  # no '_' (Airflow warns of it) and no '-' (Airflow makes it a '_')
OLD_CONN_TYPE = "lakestate_spark"  # the type's name before: connections of it keep working


class LakestateSparkHook(SparkSubmitHook):
    """Submits a Lakestate command with ``spark-submit`` (see ``SparkSubmitHook`` for every argument) to the
    master of connection ``conn_id``: its host (``local[*]``, ``spark://HOST`` with port 7077, ``yarn``,
    ``k8s://https://HOST``) and port, its extras as the provider reads them; when it is not defined,
    ``state_store.spark.session.spark_master()`` (``$LAKESTATE_SPARK_MASTER``, spark-defaults' ``spark.master``,
    ``local[*]``).
For example ``LakestateSparkHook(name="lakestate-clicks", application_args=["run", ...]).submit(ENTRYPOINT)``.
    """

    conn_name_attr = "conn_id"
    default_conn_name = "lakestate_spark"
    conn_type = CONN_TYPE
    hook_name = "Lakestate Spark"

    def __init__(self, *args: Any, conn_id: str = default_conn_name, jars: str | None = None,
                 packages: str | None = None, **kwargs: Any) -> None:
        from state_store.spark.session import delta_submit_args, jars_conf

        jars, packages = delta_submit_args(jars, packages)
        placed = jars_conf(jars.split(",") if jars else [])
        if "spark.jars" not in placed:  # on the workers already: on the class paths, not --jars
            kwargs["conf"], jars = {**(kwargs.get("conf") or {}), **placed}, None
        super().__init__(*args, conn_id=conn_id, jars=jars, packages=packages, **kwargs)
        if packages and "delta-spark" in packages:
            self.log.info("no Delta jars on this machine: spark-submit resolves %s through Ivy at every start; "
                          "`lakestate jars` fetches them once", packages)

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form: the provider's Spark fields, with the master's forms as placeholders."""
        behaviour = super().get_ui_field_behaviour()
        return {**behaviour, "relabeling": {"host": "Master"},
                "placeholders": {**behaviour.get("placeholders", {}),
                                 "host": "local[*], spark://HOST, yarn or k8s://https://HOST",
                                 "port": "7077 for spark://HOST"}}

    def _resolve_connection(self) -> dict[str, Any]:
        try:
            self.get_connection(self._conn_id)
        except AirflowNotFoundException:
            from state_store.spark.session import spark_master

            master = spark_master()  # $LAKESTATE_SPARK_MASTER, spark-defaults.conf's spark.master, local[*]
            self.log.info("connection %r is not defined: submitting to %s", self._conn_id, master)
            return {"master": master, "queue": self._yarn_queue, "deploy_mode": self._deploy_mode,
                    "spark_binary": self.spark_binary or DEFAULT_SPARK_BINARY, "namespace": None,
                    "principal": self._principal, "keytab": self._keytab}
        return super()._resolve_connection()


class LakestateSparkOldTypeHook(LakestateSparkHook):
    """``LakestateSparkHook`` for connections of the type's old name, ``lakestate_spark``: they work as before
    (Airflow warns of the '_' in their type at each use; give the connection type ``lakestate`` to be rid of
    it)."""

    conn_type = OLD_CONN_TYPE
    hook_name = "Lakestate Spark (old type name: use Lakestate Spark)"


def spark_connect_url(conn_id: str) -> str | None:
    """The ``sc://`` URL of connection ``conn_id`` when it is of the provider's type ``spark_connect`` (a Spark
    Connect server, e.g. scripts/spark-connect.sh's: ``airflow connections add lakestate_spark --conn-type
    spark_connect --conn-host 127.0.0.1 --conn-port 15002``); None for any other type or no connection, where
    the run is a ``spark-submit``."""
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    return SparkConnectHook(conn_id).get_connection_url() if conn.conn_type == SparkConnectHook.conn_type else None
