"""Changelog streams (issue 62): rows that insert, update or delete a result row, with Flink's ``RowKind`` s.

A changelog stream's row type ends in the column ``_kind``, each row's kind as Flink's short string: ``+I``
(insert), ``-U`` (update-before: the row as it was), ``+U`` (update-after: the row as it is now) and ``-D``
(delete). An operator that emits updates (``Dataflow.aggregate``, Flink SQL's ``GROUP BY``) emits one; a stream
without the column is insert-only, a changelog of ``+I`` rows. ``sink_to`` a ``DeltaSink`` keeps every change as
a row with its kind (a changelog sink); an ``UpsertDeltaSink`` keeps the table the changes describe.
"""
from __future__ import annotations

from enum import Enum

from ..errors import ConfigError
from ..types import RowTypeInfo, Types

KIND = "_kind"  # a changelog stream's column: its row's kind, RowKind's short string


class RowKind(Enum):
    """Flink's ``RowKind``, by its short string (what ``_kind`` holds)."""

    INSERT = "+I"
    UPDATE_BEFORE = "-U"
    UPDATE_AFTER = "+U"
    DELETE = "-D"


ADDS = (RowKind.INSERT.value, RowKind.UPDATE_AFTER.value)  # kinds whose row holds (after it) in the result
RETRACTS = (RowKind.UPDATE_BEFORE.value, RowKind.DELETE.value)  # kinds whose row no longer holds


def is_changelog(row_type: RowTypeInfo | None) -> bool:
    """Whether a stream of ``row_type`` carries updates (its rows have a ``_kind``)."""
    return row_type is not None and KIND in row_type.fields


def changelog_type(row_type: RowTypeInfo) -> RowTypeInfo:
    """``row_type`` with ``_kind`` last: the type of a changelog of such rows."""
    if KIND in row_type.fields:
        raise ConfigError(f"the row already has a column {KIND!r} (columns: {list(row_type.fields)}); a changelog "
                          f"stream's rows get their kind in it: rename the column")
    return Types.ROW_NAMED([*row_type.fields, KIND], [*row_type.fields.values(), Types.STRING()])


def result_type(row_type: RowTypeInfo) -> RowTypeInfo:
    """The rows a changelog of ``row_type`` describes: its columns without ``_kind``."""
    fields = {n: t for n, t in row_type.fields.items() if n != KIND}
    return Types.ROW_NAMED(list(fields), list(fields.values()))



def changes(before: dict | None, after: dict | None, update_before: bool = True) -> list[dict]:
    """The changelog rows that turn result row ``before`` (None: none yet) into ``after`` (None: none any more):
    ``+I``; ``-U`` (unless ``update_before`` is off) then ``+U``; or ``-D``. Nothing when both are None."""
    if before is None:
        return [] if after is None else [{**after, KIND: RowKind.INSERT.value}]
    if after is None:
        return [{**before, KIND: RowKind.DELETE.value}]
    after = {**after, KIND: RowKind.UPDATE_AFTER.value}
    return [{**before, KIND: RowKind.UPDATE_BEFORE.value}, after] if update_before else [after]
