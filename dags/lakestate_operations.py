"""Airflow DAGs of the operations on Lakestate jobs (savepoint, rescale, compaction), triggered from the Airflow UI's
trigger form with typed params: see ``state_store.provider.dags``."""
from state_store.provider.dags import operation_dags

globals().update(operation_dags())
