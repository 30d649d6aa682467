"""Lakestate's Airflow pieces: the operator that submits a job's run (``operators``) and, later, the UI plugin.

Airflow puts the plugins folder on ``sys.path``, so DAG files import ``lakestate.operators``.
"""
