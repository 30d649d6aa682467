"""Lakestate's Airflow plugin: the Lakestate page (a FastAPI app at /lakestate) in the UI's navigation."""
from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from state_store.provider.views import app


class LakestatePlugin(AirflowPlugin):
    name = "lakestate"
    fastapi_apps = [{"app": app, "url_prefix": "/lakestate", "name": "Lakestate"}]
    external_views = [{"name": "Lakestate", "href": "/lakestate/", "destination": "nav", "url_route": "lakestate"}]
