"""The Dataflow builder's operators with Flink SQL's semantics (docs/writing/updating.md): ``aggregate``,
``deduplicate``, ``top_n``, ``regular_join`` and ``over``, each a keyed function of this wing given to
``Dataflow.process`` (or ``two_input_process``). ``Dataflow`` inherits them; this module does not import it."""
from __future__ import annotations

from typing_extensions import Self

from ..errors import ConfigError
from ..state.ttl import StateTtlConfig
from ..types import Types
from ..windows.columns import ColumnAggregate
from ..windows.ranking import check_order
from .changelog import KIND
from .deduplicate import KEEP, Deduplicate
from .group_aggregate import GroupAggregate
from .over import FRAMES, OverAggregate
from .regular_join import RegularJoin
from .top_n import RetractTopN, TopN


class UpdatingOperators:
    """``Dataflow``'s operators whose output is a changelog (the builder's ``process``, ``two_input_process``,
    ``_fields``, ``_key``, ``_row_type`` and ``_check_second_input`` are ``Dataflow``'s)."""

    def aggregate(self, aggregate: ColumnAggregate, *, uid: str, parallelism: int = 2,
                  max_parallelism: int | None = None, generate_update_before: bool = True,
                  state_ttl: StateTtlConfig | None = None) -> Self:
        """Aggregate the keyed stream without windows, as Flink SQL's ``GROUP BY``: an updating row per key, the
        aggregates of all its records so far (docs/writing/updating.md). The stream after it is a changelog:
        the key's columns, each aggregate, and ``_kind`` (``+I`` a key's first row, then ``-U`` and ``+U`` in
        each microbatch that changes it; ``-D`` when an updating input retracts all of its records). Write it
        to an ``UpsertDeltaSink`` to keep the current rows, or to a ``DeltaSink`` to keep every change.

        Example: ``.key_by("user").aggregate(ColumnAggregate(clicks="count(*)", spent="sum(amount)"),
        uid="per-user")``

        :param aggregate: the ``ColumnAggregate`` of each output column (count, sum, min, max, avg, last).
        :param uid: the operator's uid.
        :param parallelism: its number of subtasks.
        :param max_parallelism: its number of key groups.
        :param generate_update_before: emit ``-U`` before each ``+U`` (Flink's default; off: ``+U`` alone).
        :param state_ttl: a key idle for longer loses its state (Flink's ``table.exec.state.ttl``).
        """
        if self._key is None:
            raise ConfigError(f"aggregate(uid={uid!r}) needs a keyed stream: .key_by(column).aggregate(...); to "
                              f"aggregate per window, .key_by(column).window(assigner).aggregate(...)")
        if not isinstance(aggregate, ColumnAggregate):
            raise ConfigError(f"aggregate(uid={uid!r}) takes a ColumnAggregate(name='op(column)', ...), got "
                              f"{type(aggregate).__name__}")
        fields = self._fields()
        if fields is None:
            raise ConfigError(f"aggregate(uid={uid!r}): the source does not declare its columns; declare its schema")
        function = GroupAggregate(aggregate, fields, *self._key, generate_update_before, state_ttl)
        return self.process(function, uid=uid, output_type=function.output_type(), parallelism=parallelism,
                            max_parallelism=max_parallelism)

    def deduplicate(self, *, uid: str, keep: str = "first", time_column: str | None = None, parallelism: int = 2,
                    max_parallelism: int | None = None, generate_update_before: bool = True,
                    state_ttl: StateTtlConfig | None = None) -> Self:
        """Keep one row per key, its first or its last, as Flink SQL's deduplication (``ROW_NUMBER() OVER
        (PARTITION BY key ORDER BY time) = 1``; docs/writing/updating.md). In processing time (no
        ``time_column``) the first row is emitted once and the stream stays insert-only; the last row, and either
        row in event time (the least or greatest ``time_column``), make a changelog (``+I``, then ``-U``/``+U``).

        Example: ``.key_by("order_id").deduplicate(uid="orders", keep="last", time_column="updated_at")``
        """
        fields, shown = self._table_input(f"deduplicate(uid={uid!r})")
        if keep not in KEEP:
            raise ConfigError(f"{shown}: keep is 'first' or 'last', got {keep!r}")
        if time_column is not None and time_column not in fields:
            raise ConfigError(f"{shown}: the stream has no column {time_column!r} (columns: {list(fields)})")
        function = Deduplicate(Types.ROW_NAMED(list(fields), list(fields.values())), keep, time_column,
                               generate_update_before, state_ttl)
        return self.process(function, uid=uid, output_type=function.output_type(), parallelism=parallelism,
                            max_parallelism=max_parallelism)

    def top_n(self, n: int, order_by: "list[str | tuple[str, bool]]", *, uid: str, rank_column: str | None = None,
              parallelism: int = 2, max_parallelism: int | None = None, generate_update_before: bool = True,
              state_ttl: StateTtlConfig | None = None) -> Self:
        """Keep each key's first ``n`` rows by ``order_by``, as Flink SQL's Top-N (``ROW_NUMBER() OVER (PARTITION
        BY key ORDER BY ...) <= n``; docs/writing/updating.md): a changelog of the rows entering and leaving the
        top, or, with ``rank_column``, of each rank's row. Over an updating stream (a ``GROUP BY``'s result) each
        key keeps all its rows, and a retracted row leaves the top (Flink's retracting Top-N). ``order_by``:
        columns, ascending, or ``(column, False)`` for descending; ties keep the order the rows came in.

        Example: ``.key_by("auction").top_n(10, [("price", False)], uid="top-bids", rank_column="rank")``
        """
        fields, shown = self._table_input(f"top_n(uid={uid!r})", updating=True)
        rows = {c: t for c, t in fields.items() if c != KIND}
        order = check_order(n, order_by, rows, rank_column, shown)
        function = (RetractTopN if KIND in fields else TopN)(Types.ROW_NAMED(list(rows), list(rows.values())), n,
                                                             order, rank_column, generate_update_before, state_ttl)
        return self.process(function, uid=uid, output_type=function.output_type(), parallelism=parallelism,
                            max_parallelism=max_parallelism)

    def _table_input(self, shown: str, updating: bool = False) -> tuple[dict, str]:
        """The columns of the keyed stream a deduplication or Top-N reads (insert-only unless ``updating``); a
        ConfigError naming the fix otherwise."""
        if self._key is None:
            raise ConfigError(f"{shown} needs a keyed stream: .key_by(column) before it")
        fields = self._fields()
        if fields is None:
            raise ConfigError(f"{shown}: the source does not declare its columns; declare its schema")
        if KIND in fields and not updating:
            raise ConfigError(f"{shown} reads an insert-only stream, and this one is updating (its rows have "
                              f"{KIND!r}); apply it before the operator that makes the updates")
        return fields, shown

    def regular_join(self, other: Self, *, uid: str, how: str = "inner", right_prefix: str | None = None,
                     parallelism: int = 2, max_parallelism: int | None = None,
                     state_ttl: StateTtlConfig | None = None) -> Self:
        """Join this keyed stream with keyed ``other`` on their keys, as Flink SQL's regular join (``a JOIN b ON
        a.k = b.k``; ``how``: ``inner``, ``left``, ``right`` or ``full`` outer; docs/writing/updating.md): both
        sides kept whole in state, every row joined with the other side's rows of its key as it comes. The
        stream after it is a changelog of the joined rows: the left's columns, then the right's (each after
        ``right_prefix``), with null-padded rows of an outer join retracted once a match comes.

        Example: ``orders.key_by("user").regular_join(users.key_by("id"), how="left", uid="orders-users",
        right_prefix="user_")``
        """
        self._check_second_input(other, "regular_join", keyed=True)
        function = RegularJoin(self._row_type(), other._row_type(), how, right_prefix, state_ttl)
        return self.two_input_process(other, function, uid=uid, output_type=function.output_type(),
                                      parallelism=parallelism, max_parallelism=max_parallelism)

    def over(self, aggregate: ColumnAggregate, *, uid: str, time_column: str | None = None, frame: str = "range",
             preceding=None, parallelism: int = 2, max_parallelism: int | None = None) -> Self:
        """Each row with aggregates of the rows before it, as Flink SQL's OVER aggregation in event time
        (``agg(...) OVER (PARTITION BY key ORDER BY time RANGE | ROWS BETWEEN preceding PRECEDING AND CURRENT
        ROW)``; docs/writing/updating.md): emitted once the watermark passes the row's time, insert-only.
        ``frame``: ``range`` (``preceding`` a ``timedelta`` or milliseconds) or ``rows`` (``preceding`` a number of
        rows); ``preceding=None``: unbounded. ``time_column``: the job's event-time column by default.

        Example: ``.key_by("user").over(ColumnAggregate(spent_hour="sum(amount)"), uid="last-hour",
        preceding=timedelta(hours=1))``
        """
        from datetime import timedelta

        shown = f"over(uid={uid!r})"
        fields, shown = self._table_input(shown)
        strategy = self._settings["watermark_strategy"]
        if strategy is None:
            raise ConfigError(f"{shown} works in event time: give the dataflow a watermark_strategy "
                              f"(Dataflow.from_source(..., watermark_strategy=...))")
        time_column = time_column or strategy.timestamp_column
        if time_column not in fields:
            raise ConfigError(f"{shown}: the stream has no column {time_column!r} (columns: {list(fields)})")
        if frame not in FRAMES:
            raise ConfigError(f"{shown}: frame is 'range' or 'rows', got {frame!r}")
        if isinstance(preceding, timedelta) and frame == "range":
            preceding = int(preceding / timedelta(milliseconds=1))
        if preceding is not None and (not isinstance(preceding, int) or isinstance(preceding, bool) or preceding < 0):
            raise ConfigError(f"{shown}: preceding is how far back a row's window reaches (a number of rows for "
                              f"frame='rows', a timedelta or milliseconds for 'range'), or None for unbounded; got "
                              f"{preceding!r}")
        function = OverAggregate(aggregate, Types.ROW_NAMED(list(fields), list(fields.values())), *self._key,
                                 time_column, frame, preceding)
        return self.process(function, uid=uid, output_type=function.output_type(), parallelism=parallelism,
                            max_parallelism=max_parallelism)
