"""Where Lakestate keeps things, and the rule that every path stays inside.

``LAKESTATE_ROOT`` (default ``./lakestate-data``) is the configured root;
the warehouse (``LAKESTATE_WAREHOUSE``, default ``<root>/warehouse``) must lie
inside it, and every table Lakestate writes (state, sinks) lies inside the
warehouse.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@dataclass(frozen=True)
class Settings:
    root: Path
    warehouse: Path

    @classmethod
    def load(cls, warehouse: str | os.PathLike | None = None, root: str | os.PathLike | None = None) -> "Settings":
        root_path = Path(root or os.environ.get("LAKESTATE_ROOT") or "lakestate-data").expanduser().resolve()
        wh = warehouse or os.environ.get("LAKESTATE_WAREHOUSE") or root_path / "warehouse"
        wh_path = Path(wh).expanduser().resolve()
        if not _inside(wh_path, root_path):
            raise ConfigError(
                f"warehouse {wh_path} is outside the configured root {root_path}: "
                f"choose a warehouse under {root_path}, or set LAKESTATE_ROOT to a folder that contains it"
            )
        return cls(root_path, wh_path)

    def in_warehouse(self, path: str | os.PathLike, what: str) -> Path:
        """Resolve ``path`` (relative paths are under the warehouse) and refuse anything outside it."""
        p = Path(path).expanduser()
        p = (p if p.is_absolute() else self.warehouse / p).resolve()
        if not _inside(p, self.warehouse) or p == self.warehouse:
            raise ConfigError(
                f"{what} {p} is outside the warehouse {self.warehouse}: give a path inside it "
                f"(a relative path such as 'sinks/my_job' is placed there)"
            )
        return p

    def job_dir(self, job_id: str) -> Path:
        return self.warehouse / "jobs" / job_id

    @property
    def catalog_dir(self) -> Path:
        return self.warehouse / "_lakestate"
