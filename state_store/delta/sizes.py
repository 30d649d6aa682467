"""What a checkpoint's state takes, read from its tables' Delta logs (no Spark): the partitions of every table
version it pins, and sizes in words. The Lakestate page, the budgets and the approvals read them."""
from __future__ import annotations

from collections.abc import Callable, Iterator

from ..records.layout import STATE_TABLES
from ..records.metadata import CheckpointMetadata
from .log import partition_sizes


def human_bytes(size: int | None) -> str:
    """``4562404`` -> ``"4.4 MiB"``; None -> ``"-"``."""
    if size is None:
        return "-"
    value, unit = float(size), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"


def pinned_partitions(checkpoint: CheckpointMetadata, warn: Callable[[str], None] | None = None
                      ) -> Iterator[tuple[CheckpointMetadata, str, tuple, int, int]]:
    """(part, table, partition values, bytes, files) of each partition of each state table version
    ``checkpoint`` pins, every operator's (``part``: an operator's part, the first's first). A table whose log cannot
    be read is said to ``warn`` and skipped (the page shows the rest); without ``warn`` the error is raised."""
    for part in checkpoint.parts:
        for table in STATE_TABLES:
            recorded = part.table(table)
            if recorded.path is None or recorded.version is None:
                continue
            try:
                sizes = partition_sizes(recorded.path, recorded.version)
            except (OSError, ValueError) as e:
                if warn is None:
                    raise
                warn(f"{table} state table {recorded.path}: {e}")
                continue
            for values, (size, files) in sizes.items():
                yield part, table, values, size, files
