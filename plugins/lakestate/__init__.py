"""Lakestate's Airflow pieces: the operators that submit a job's run (``operators``) and the UI plugin
(``plugin``: the Lakestate page, served by ``views`` from what ``reader`` reads).

Airflow puts the plugins folder on ``sys.path``, so DAG files import ``lakestate.operators``.
"""
