"""Airflow: one pipeline DAG per entry of the pipeline registry (``lakestate.toml``, or ``$LAKESTATE_REGISTRY``): see
``state_store.provider.dags``. A bad entry is this file's import error, naming its field."""
from state_store.provider.dags import pipeline_dags

globals().update(pipeline_dags())
