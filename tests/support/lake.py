"""A small lake for a test: a root with a warehouse and input folders (the ``lake`` fixture gives one)."""
from __future__ import annotations

import json
from pathlib import Path

from state_store.settings import Settings


class Lake:
    """A root with a warehouse and input folders, as a user would have it."""

    def __init__(self, base: Path):
        self.root = base / "root"
        self.inputs = self.root / "input"
        self.events = self.inputs / "events"
        self.rules = self.inputs / "rules"
        for d in (self.events, self.rules):
            d.mkdir(parents=True, exist_ok=True)
        self.settings = Settings.load(root=self.root)

    def write_events(self, name: str, rows: list[dict]) -> Path:
        path = self.events / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path

    def write_rules(self, name: str, rows: list[dict]) -> Path:
        path = self.rules / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path
