"""The state tables' on-disk layout: each table's spec (``SINK``, ``KEYED``, ``OPERATOR``; ``TableSpec``: its
columns, the columns that name an entry, its partitioning), its rows (``KeyedRow``, ``OperatorRow``: one row of a
table file, in its column order), the changes a subtask hands back (``KeyedChange``, ``ChangeColumns``,
``OperatorChange``) and the layout version checkpoints pin. What ``docs/internals/records.md`` documents."""
from __future__ import annotations

from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Any, NamedTuple

LAYOUT_VERSION = 2  # the state tables' layout, which a savepoint records (see state_tables)
# A checkpoint record's layout: 3 keeps the job's fields once and every operator's flatly by uid under
# ``operators``; 2 kept the first operator's at the top and nested the others; 1 is 2 before it was numbered.
CHECKPOINT_LAYOUT = 3
STATE_LAYOUTS = (2, 3)  # the layouts whose state tables this release reads (3 changed the record, not the tables)
SAVEPOINT_FORMAT = 1

# -- the state tables' specs -----------------------------------------------------------------------------------
SINK, KEYED, OPERATOR = "sink", "keyed", "operator"
STATE_TABLES = (KEYED, OPERATOR)
KEYED_SCOPE, OPERATOR_SCOPE = KEYED, OPERATOR  # a state's scope is the table that holds it


TYPED_KEY = "typed_key"  # the keyed table's column of each entry's key as its own type, for readers of the table


@dataclass(frozen=True)
class TableSpec:
    """One state table: its columns (DDL), the columns that name an entry, its partition columns; a keyed table
    of an operator whose key type is known (``keyed_table``) also has the column ``typed_key``."""

    name: str  # KEYED or OPERATOR
    schema: str  # the columns its writers give and its readers read (the typed key is neither's)
    id_columns: tuple[str, ...]
    partition_columns: tuple[str, ...]
    key_type: Any = None  # a keyed table's key type (a TypeInfo): its files' ``typed_key`` is of it

    @property
    def columns(self) -> list[str]:
        return [column.split()[0] for column in self.schema.split(", ")]

    @property
    def ddl(self) -> str:
        """The table's columns as its Delta schema has them: ``schema``, and ``typed_key`` of its key's Spark type
        (a struct of a composite key's columns) when there is one."""
        if self.key_type is None:
            return self.schema
        from ..keys import spark_key_type

        return f"{self.schema}, {TYPED_KEY} {spark_key_type(self.key_type)}"


class KeyedRow(NamedTuple):
    """A keyed state table row as a run writes it: ``value`` None removes the entry; generation 0 is a
    microbatch's write (``state_tables``)."""

    state_name: str
    key_group: int
    key: str
    namespace: str
    user_key: str | None
    value: str | None
    expiry: int | None
    batch_id: int
    generation: int = 0


# The keyed table's Spark type of each KeyedRow field; its columns are KeyedRow's, in KeyedRow's order.
_KEYED_DDL_TYPES = {"state_name": "string", "key_group": "int", "key": "string", "namespace": "string",
                    "user_key": "string", "value": "string", "expiry": "bigint", "batch_id": "bigint",
                    "generation": "bigint"}
# The order a subtask loads a stored keyed entry in (``KeyedStateStore.load``'s arguments): the entry, then its data.
STORED_KEYED_COLUMNS = ("state_name", "key", "namespace", "user_key", "key_group", "value", "expiry")


def keyed_columns(**by_name) -> list:
    """The keyed table's columns (lists or Arrow arrays, each given by its KeyedRow field's name), in table order;
    ``generation`` left out is a microbatch's write (generation 0)."""
    if "generation" not in by_name:
        by_name["generation"] = [0] * len(by_name["state_name"])
    if set(by_name) != set(KeyedRow._fields):
        raise TypeError(f"keyed_columns takes the keyed table's columns {list(KeyedRow._fields)}, got "
                        f"{sorted(by_name)}")
    return [by_name[name] for name in KeyedRow._fields]


KEYED_TABLE = TableSpec(
    KEYED,
    ", ".join(f"{name} {_KEYED_DDL_TYPES[name]}" for name in KeyedRow._fields),
    ("state_name", "key_group", "key", "namespace", "user_key"),
    ("state_name", "key_group"),
)
OPERATOR_TABLE = TableSpec(
    OPERATOR,
    "state_name string, subtask int, mode string, value string, batch_id bigint, generation bigint",
    ("state_name", "subtask"),
    ("state_name",),
)
TABLE_SPECS = {t.name: t for t in (KEYED_TABLE, OPERATOR_TABLE)}


def keyed_table(key_type) -> TableSpec:
    """The keyed table of an operator whose key is of ``key_type`` (a TypeInfo, or its schema as a checkpoint
    records it; None: untyped, ``KEYED_TABLE``): its files also hold each entry's key as ``typed_key``, computed
    from ``key`` by the writer (``run_files.TableFiles``), null for a raw keyed row."""
    if key_type is None:
        return KEYED_TABLE
    if not hasattr(key_type, "to_schema"):
        from ..types import from_schema

        key_type = from_schema(key_type)
    return replace(KEYED_TABLE, key_type=key_type)


def table_spec(table: str, key_type=None) -> TableSpec:
    """The spec of state table ``table`` (KEYED or OPERATOR) of an operator whose key is of ``key_type``."""
    return keyed_table(key_type) if table == KEYED else TABLE_SPECS[table]



class OperatorRow(NamedTuple):
    """An operator state table row: subtask ``subtask``'s entry of a state (``mode`` as ``state.operator``)."""

    state_name: str
    subtask: int
    mode: str
    value: str | None
    batch_id: int
    generation: int = 0



class KeyedChange(NamedTuple):
    """A keyed entry a subtask changed since its store's last flush: its new stored text (None: removed), how
    the live entries changed (+1 created, -1 removed, 0 updated) and its expiry."""

    state_name: str
    key_group: int
    key: str
    namespace: str
    user_key: str | None
    value: str | None
    delta: int
    expiry: int | None

    def row(self, batch_id: int) -> KeyedRow:
        """The keyed table row microbatch ``batch_id`` writes for it (built as a tuple: once per change)."""
        return tuple.__new__(KeyedRow, _ROW_OF_CHANGE(self) + (batch_id, 0))


# KeyedChange.row's picks: KeyedRow's fields a change has, in KeyedRow's order; the row's last two are its own.
assert KeyedRow._fields[-2:] == ("batch_id", "generation")
_ROW_OF_CHANGE = itemgetter(*(KeyedChange._fields.index(name) for name in KeyedRow._fields[:-2]))



class ChangeColumns:
    """Keyed changes as columns, one list per ``KeyedChange`` field, in no particular order (the writer orders
    them: ``TableFiles.add_columns``): what a flush gives without an object per changed entry."""

    FIELDS = KeyedChange._fields

    def __init__(self, columns: list[list] | None = None):
        self.lists = columns if columns is not None else [[] for _ in self.FIELDS]

    @classmethod
    def of(cls, changes: list[KeyedChange]) -> "ChangeColumns":
        return cls([list(c) for c in zip(*changes)] if changes else None)

    def __len__(self) -> int:
        return len(self.lists[0])

    def extend(self, other: "ChangeColumns") -> "ChangeColumns":
        for mine, theirs in zip(self.lists, other.lists):
            mine.extend(theirs)
        return self

    def changes(self) -> list[KeyedChange]:
        """The changes as records, sorted (state name, key, namespace, user key): for tests and tools."""
        return sorted((KeyedChange(*c) for c in zip(*self.lists)), key=lambda c: (c[0], c[2], c[3], c[4] or ""))

    def table_columns(self, batch_id: int) -> list:
        """The keyed table columns of the rows microbatch ``batch_id`` writes for them, in table order."""
        n = len(self)
        if not n:
            return []
        by_name = dict(zip(self.FIELDS, self.lists))
        del by_name["delta"]
        return keyed_columns(**by_name, batch_id=[batch_id] * n)


class OperatorChange(NamedTuple):
    """An operator state a subtask changed since its store's last flush (``value`` None: removed)."""

    state_name: str
    mode: str
    value: str | None
    delta: int

    def row(self, subtask: int, batch_id: int) -> OperatorRow:
        return OperatorRow(self.state_name, subtask, self.mode, self.value, batch_id)
