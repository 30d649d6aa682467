"""The job tests/e2e/test_cluster.py runs on the standalone cluster (a registry entry:
``tests.support.cluster_jobs:job``): demo.sessions_per_country's Kafka dataflow, whose first operator's tasks can
be held once mid-task, so the test kills the executor, or the worker, that runs one while it runs."""
from __future__ import annotations

import os
import time
from pathlib import Path

from demo.sessions_per_country import CountrySessions, on_kafka


class HeldOnce(CountrySessions):
    """``CountrySessions``, except that while ``<folder>/armed`` exists and ``<folder>/released`` does not, a call
    writes ``<folder>/held-<pid of this Python worker>`` and waits for ``released`` (at most 5 minutes). A task
    retried after that runs as ``CountrySessions`` does: what it emits and keeps is the same."""

    def __init__(self, folder: str | None):
        super().__init__()
        self.folder = folder

    def process(self, user_id, clicks, ctx):
        if self.folder:
            _hold(Path(self.folder))
        yield from super().process(user_id, clicks, ctx)


def _hold(folder: Path) -> None:
    if not (folder / "armed").exists() or (folder / "released").exists():
        return
    (folder / f"held-{os.getpid()}").write_text("")
    deadline = time.time() + 300
    while not (folder / "released").exists() and time.time() < deadline:
        time.sleep(0.2)


def job():
    """The Kafka dataflow on ``$LAKESTATE_KAFKA_BOOTSTRAP``'s topic ``$LAKESTATE_KAFKA_TOPIC``; its first operator's
    tasks held when the folder ``$LAKESTATE_TEST_HOLD`` says so."""
    return on_kafka(os.environ["LAKESTATE_KAFKA_BOOTSTRAP"], os.environ["LAKESTATE_KAFKA_TOPIC"],
                    sessions=HeldOnce(os.environ.get("LAKESTATE_TEST_HOLD")))
