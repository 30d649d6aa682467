"""Lakestate's Airflow plugin: the Lakestate page in the UI's navigation, as a React view (``static/lakestate.js``,
rendered in the UI's own page, so its links move the UI) over a FastAPI app at /lakestate that also serves the
page on its own at ``/lakestate/``."""
from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from state_store.provider.views import app


class LakestatePlugin(AirflowPlugin):
    name = "lakestate"
    fastapi_apps = [{"app": app, "url_prefix": "/lakestate", "name": "Lakestate"}]
    # Not an external view: Airflow 3.1 frames those in a sandboxed iframe, where a link can move neither the
    # frame's parent nor (without target) anything but the frame.
    react_apps = [{"name": "Lakestate", "bundle_url": "/lakestate/static/lakestate.js", "destination": "nav",
                   "url_route": "lakestate"}]
