"""The one file ``spark-submit`` runs for every Lakestate command (``main.py``), alone in its folder: Python puts
a script's folder first on ``sys.path``, and ``state_store/`` holds modules (``types``) that would shadow the
standard library's."""
