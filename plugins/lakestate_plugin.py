"""Lakestate's Airflow plugin (the Lakestate page), for an Airflow that reads this plugins folder.

An Airflow with the ``lakestate`` package installed finds the same plugin through the package's
``airflow.plugins`` entry point; Airflow loads a plugin of one name once, so both ways together are harmless.
"""
from state_store.provider.plugin import LakestatePlugin  # noqa: F401
