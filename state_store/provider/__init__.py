"""Lakestate's Airflow provider: operators that submit Lakestate's commands with the Spark provider
(``operators``), the DAGs' builders (``dags``), and the UI plugin (``plugin``: the Lakestate page, served by
``views`` from what ``reader`` reads).

Airflow finds them through the package's entry points (``pyproject.toml``): ``apache_airflow_provider``
(``get_provider_info``: the operators, and the ``lakestate`` connection type with its hook, ``hooks``, and the
type's old name ``lakestate_spark``) and ``airflow.plugins`` (the page). ``dags/`` and ``plugins/`` in the
repository are thin files over this package.
"""
from __future__ import annotations


def get_provider_info() -> dict:
    """What Airflow's ProvidersManager reads from the ``apache_airflow_provider`` entry point."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("lakestate")
    except PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
        release = "0.1.0"
    return {
        "package-name": "lakestate",
        "name": "Lakestate",
        "description": "Flink's keyed and operator state, checkpoints and savepoints for PySpark pipelines, kept in "
                       "Delta Lake: operators that submit Lakestate's commands, and the Lakestate page.",
        "versions": [release],
        "integrations": [{"integration-name": "Lakestate", "tags": ["software"],
                          "python-modules": ["state_store.provider.operators"]}],
        "operators": [{"integration-name": "Lakestate", "python-modules": ["state_store.provider.operators"]}],
        "hooks": [{"integration-name": "Lakestate", "python-modules": ["state_store.provider.hooks"]}],
        # Literal names, not imported from hooks: the ProvidersManager reads this without importing the hooks.
        "connection-types": [{"hook-class-name": "state_store.provider.hooks.LakestateSparkHook",
                              "connection-type": "lakestate"},
                             {"hook-class-name": "state_store.provider.hooks.LakestateSparkOldTypeHook",
                              "connection-type": "lakestate_spark"}],
        "plugins": [{"name": "lakestate", "plugin-class": "state_store.provider.plugin.LakestatePlugin"}],
    }
