"""Rows in Flink SQL's order (``ORDER BY`` columns, nulls first ascending and last descending, ties in the order
they came), and ``WindowTopN``: Flink SQL's window Top-N (``ROW_NUMBER() OVER (PARTITION BY window_start,
window_end, k ORDER BY ...) <= n`` over a window's rows), the ``ProcessWindowFunction`` behind
``WindowedStream.top_n``. No Spark here."""
from __future__ import annotations

from typing import Any

from typing_extensions import override

from ..errors import ConfigError
from ..types import RowTypeInfo, Types
from .functions import ProcessWindowFunction

START, END = "window_start", "window_end"


def check_order(n: Any, order_by, fields: dict, rank_column: str | None, shown: str) -> list[tuple[str, bool]]:
    """A Top-N's ``n`` and ``order_by`` (columns, each a name for ascending or ``(name, ascending)``) checked
    against the stream's ``fields``, as ``[(column, ascending), ...]``; a ConfigError naming the fix otherwise."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ConfigError(f"{shown}: n is how many rows a key keeps, a positive int, got {n!r}")
    order = [(c, True) if isinstance(c, str) else tuple(c) for c in order_by or ()]
    if not order or not all(len(o) == 2 and isinstance(o[0], str) and isinstance(o[1], bool) for o in order):
        raise ConfigError(f"{shown}: order_by is a list of columns, each a name or (name, ascending), got "
                          f"{order_by!r}")
    missing = [c for c, _ in order if c not in fields]
    if missing:
        raise ConfigError(f"{shown}: the stream has no column {missing[0]!r} (columns: {list(fields)})")
    if rank_column is not None and rank_column in fields:
        raise ConfigError(f"{shown}: the stream already has a column {rank_column!r}; name the rank otherwise")
    return order


def ordered(rows: list, order_by: list[tuple[str, bool]]) -> list:
    """``rows`` sorted in place by ``order_by``: one stable sort a column, the last first, so that ties keep the
    order the rows came in; a null is the least value (first ascending, last descending)."""
    for column, ascending in reversed(order_by):
        rows.sort(key=lambda r, c=column: (False, 0) if r[c] is None else (True, r[c]), reverse=not ascending)
    return rows


class WindowTopN(ProcessWindowFunction):
    """The first ``n`` rows of a key's window by ``order_by``, emitted once when it fires, insert-only: each row
    with ``window_start``, ``window_end`` and (``rank_column``) its rank from 1."""

    def __init__(self, row_type: RowTypeInfo, n: int, order_by: list[tuple[str, bool]], rank_column: str | None):
        self.row_type, self.n, self.order_by, self.rank_column = row_type, n, order_by, rank_column

    def output_type(self) -> RowTypeInfo:
        """The window's rows, then ``window_start``, ``window_end`` and the rank (if named)."""
        fields = {**self.row_type.fields, START: Types.LONG(), END: Types.LONG()}
        if self.rank_column is not None:
            fields[self.rank_column] = Types.LONG()
        return Types.ROW_NAMED(list(fields), list(fields.values()))

    @override
    def process(self, key, context, elements):
        window, out = context.window(), []
        for rank, row in enumerate(ordered(list(elements), self.order_by)[:self.n], start=1):
            out.append({**row, START: window.start, END: window.end,
                        **({self.rank_column: rank} if self.rank_column else {})})
        return out
