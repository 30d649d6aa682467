"""State edited with SQL: one ``UPDATE``, ``DELETE`` or ``INSERT`` on a keyed state of a savepoint, written as
a new savepoint through the State Processor's writer (``lakestate state edit``; docs/operating/state-processor.md).

The state is a table of the columns the State Processor reads it as (``SavepointReader.keyed_state``):
``key`` (the key type's Spark type), ``namespace``, ``value`` and, by kind, ``index`` (a ListState's element) or
``user_key`` (a MapState's entry); a state with TTL has ``expiry`` too (epoch ms). ``key_group`` is not a column
one sets: it is computed again from each key, in the JVM, as a run computes it. Example::

    lakestate state edit --savepoint clicks/v1 "UPDATE count SET value = value * 2 WHERE key LIKE 'bot-%'"
    lakestate state edit --savepoint clicks/v1 --into fixed "DELETE FROM tags WHERE user_key = 'spam'"
    lakestate state edit --savepoint clicks/v1 "INSERT INTO count (key, value) VALUES ('ada', 41)"

Expressions are Spark SQL, run by Spark over the decoded entries. A value is assigned as Spark's ANSI store
assignment assigns a column (numbers to numbers, overflow an error), else refused naming the column's type;
the edit is refused before anything is written when it would leave a null key or value, two entries of one key
(and namespace, and map key), or a row whose types the state does not have. An entry the statement changes in a
state with TTL is stamped as a write at the savepoint's processing time stamps it, unless it sets ``expiry``.
The savepoint it reads stays as it is; any job restores the new one (``lakestate restore``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..progress import wing_logger
from ..records.layout import KEYED, KEYED_TABLE, KeyedRow
from ..state.codecs import decode_stamped_list, encode_stamped_list
from ..state.descriptors import ListStateDescriptor
from ..state.ttl.config import MAX_TIMESTAMP
from ..types import ListTypeInfo, MapTypeInfo, RowTypeInfo, TypeInfo, from_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..records.metadata import SavepointMetadata
    from ..settings import Settings

_SAY = wing_logger(__name__).info
_VIEW = "lakestate_edited_state"
_STATEMENTS = "UPDATE <state> SET ... [WHERE ...], DELETE FROM <state> [WHERE ...] or INSERT INTO <state> " \
              "[(columns)] VALUES ... | SELECT ..."


@dataclass
class Statement:
    """One parsed statement: its verb ("UPDATE", "DELETE", "INSERT"), the state it names, and its parts as Spark
    SQL text: ``where`` (UPDATE, DELETE), ``assignments`` (UPDATE: column -> expression), ``columns`` and
    ``query`` (INSERT)."""

    verb: str
    state: str
    where: str | None = None
    assignments: dict[str, str] = field(default_factory=dict)
    columns: list[str] | None = None
    query: str | None = None


def parse_statement(text: str) -> Statement:
    """``text`` as one Statement (sqlglot, Spark's dialect); anything else is refused naming what it is."""
    import sqlglot
    from sqlglot import exp

    try:
        parsed = [s for s in sqlglot.parse(text, read="spark") if s is not None]
    except sqlglot.errors.ParseError as e:
        raise ConfigError(f"the statement does not parse ({str(e).splitlines()[0]}); give {_STATEMENTS}") from None
    if len(parsed) != 1 or not isinstance(parsed[0], (exp.Update, exp.Delete, exp.Insert)):
        got = "nothing" if not parsed else f"{len(parsed)} statements" if len(parsed) > 1 else parsed[0].key.upper()
        raise ConfigError(f"lakestate state edit takes one statement: {_STATEMENTS}; got {got}")
    node = parsed[0]
    target = node.this.this if isinstance(node.this, exp.Schema) else node.this
    if not isinstance(target, exp.Table):
        raise ConfigError(f"the statement must name a state as its table ({_STATEMENTS})")
    state = ".".join(p.name for p in target.parts)
    for table in node.find_all(exp.Table):  # the state read inside the statement is the view of its entries
        if table is not target and ".".join(p.name for p in table.parts) == state:
            table.replace(exp.to_table(_VIEW))

    def sql(e) -> str:
        return e.sql(dialect="spark")

    where = node.args.get("where")
    where = sql(where.this) if where is not None else None
    if isinstance(node, exp.Update):
        if node.args.get("from") or node.args.get("from_") or node.args.get("joins"):
            raise ConfigError("UPDATE ... FROM is not supported: use a subquery in SET or WHERE")
        if not node.expressions:
            raise ConfigError("UPDATE needs SET <column> = <expression>, ...")
        return Statement("UPDATE", state, where, {a.this.name: sql(a.expression) for a in node.expressions})
    if isinstance(node, exp.Delete):
        return Statement("DELETE", state, where)
    columns = [c.name for c in node.this.expressions] if isinstance(node.this, exp.Schema) else None
    return Statement("INSERT", state, columns=columns, query=sql(node.expression))


@dataclass
class _State:
    """The keyed state a statement edits: its qualified name, the reader of its operator's part, its recorded
    descriptor, and the decoded table of its entries (``rows``, a temporary view named ``_VIEW``)."""

    qname: str
    reader: object
    info: object
    rows: "DataFrame"

    @property
    def kind(self) -> str:
        return self.info.kind

    @property
    def extra(self) -> str | None:
        return {"list": "index", "map": "user_key"}.get(self.kind)

    @property
    def columns(self) -> list[str]:
        return list(self.rows.columns)

    def stamp(self) -> int | None:
        """The expiry of an entry written at the savepoint's processing time (None: no TTL, or no time)."""
        now = self.reader.meta.processing_time
        ttl = self.info.ttl
        return None if ttl is None or now is None else min(now + ttl.ttl_ms, MAX_TIMESTAMP)


def _find_state(spark: "SparkSession", reader, name: str) -> _State:
    """The keyed state ``name`` (qualified, or of the savepoint's first operator) as a ``_State``."""
    qname = name if "." in name else f"{reader.uid}.{name}"
    uid = qname.split(".", 1)[0]
    part = reader.operator(uid) if uid in reader.uids else reader
    info = part.meta.descriptors.get(qname)
    if info is None or info.scope != KEYED:
        keyed = sorted(n for n, d in reader.meta.descriptors.items() if d.scope == KEYED)
        later = sorted(n for u in reader.uids[1:] for n, d in reader.operator(u).meta.descriptors.items()
                       if d.scope == KEYED)
        what = "is operator state: change it with SavepointWriter.with_operator_state" if info is not None else \
            "is not a keyed state of it"
        raise ConfigError(f"state {qname!r} {what}; the savepoint's keyed states are {keyed + later} (quote a "
                          f"name with '-' in backticks: `uid.name`)")
    rows = _entries(part, qname, info)
    rows.createOrReplaceTempView(_VIEW)
    return _State(qname, part, info, rows)


def _entries(reader, qname: str, info) -> "DataFrame":
    """Every live entry of keyed state ``qname``: ``key, namespace, [index | user_key], value[, expiry]``, typed
    (as ``keyed_state`` reads it, with each entry's expiry when the state has TTL)."""
    from ..keys import spark_key_type
    from .state_processor import _convert

    decoding = reader._keyed(qname, None, None)
    extra, value_t, has_ttl = decoding.extra, decoding.value, info.ttl is not None
    hide_before = reader.meta.processing_time if has_ttl and not info.ttl.return_expired else None
    ddl = f"key {spark_key_type(reader.key_type)}, namespace string" + (
        f", {extra[0]} {extra[1].spark_ddl()}" if extra else "") + f", value {value_t.spark_ddl()}" + (
        ", expiry bigint" if has_ttl else "")
    is_list, decode = info.kind == "list", decoding.decode

    def entries(row):
        head = (row["key"], row["namespace"])
        if is_list and row["expiry"] is not None:  # a TTL list: each element has its own expiry
            expiries, encoded = decode_stamped_list(row["value"])
            live = [(x, value_t.decode(e)) for x, e in zip(expiries, encoded)
                    if hide_before is None or x > hide_before]
            return [(*head, i, value_t.to_arrow(v), x) for i, (x, v) in enumerate(live)]
        tail = (row["expiry"],) if has_ttl else ()
        return [(*head, *([extra[1].to_arrow(x)] if extra else []), value_t.to_arrow(v), *tail)
                for x, v in decode(row)]

    return _convert(decoding.rows, ddl, entries)


def _assignable(source, target) -> bool:
    """Whether Spark's ANSI store assignment assigns a ``source`` column to a ``target`` one (numbers to numbers,
    dates and timestamps to each other, nested types field by field; a null to anything)."""
    from pyspark.sql import types as T

    if isinstance(source, T.NullType) or source.simpleString() == target.simpleString():
        return True
    numeric, moments = T.NumericType, (T.DateType, T.TimestampType, T.TimestampNTZType)
    if isinstance(source, numeric) and isinstance(target, numeric):
        return True
    if isinstance(source, moments) and isinstance(target, moments):
        return True
    if isinstance(source, T.ArrayType) and isinstance(target, T.ArrayType):
        return _assignable(source.elementType, target.elementType)
    if isinstance(source, T.MapType) and isinstance(target, T.MapType):
        return _assignable(source.keyType, target.keyType) and _assignable(source.valueType, target.valueType)
    if isinstance(source, T.StructType) and isinstance(target, T.StructType):
        return [f.name for f in source.fields] == [f.name for f in target.fields] and all(
            _assignable(s.dataType, t.dataType) for s, t in zip(source.fields, target.fields))
    return False


def _cast(state: _State, column: str, source, expression: str, what: str) -> str:
    """``expression`` (of Spark type ``source``) cast to ``column``'s type, once it may be assigned to it."""
    target = state.rows.schema[column].dataType
    if not _assignable(source, target):
        raise ConfigError(f"{what}: column {column!r} of state {state.qname!r} is {target.simpleString()}, the "
                          f"expression is {source.simpleString()}; give a {target.simpleString()} (CAST(... AS "
                          f"{target.simpleString()}))")
    return f"CAST(({expression}) AS {target.simpleString()})"


def _spark(run, what: str):
    """``run()``, with an error Spark raises over the statement named as the statement's."""
    import logging

    from pyspark.errors import PySparkException

    context = logging.getLogger("SQLQueryContextLogger")  # PySpark logs each failed query whole: the error says it
    level = context.level
    context.setLevel(logging.CRITICAL)
    try:
        return run()
    except PySparkException as e:
        raise ConfigError(f"{what} fails in Spark: {str(e).strip().splitlines()[0]}") from None
    finally:
        context.setLevel(level)


def _settable(state: _State, columns, verb: str) -> None:
    for column in columns:
        if column == "key_group":
            raise ConfigError(f"{verb}: key_group is computed from the key (as a run computes it); set key instead")
        if column not in state.columns:
            raise ConfigError(f"{verb}: state {state.qname!r} has no column {column!r}; its columns are "
                              f"{state.columns}")


def _edited(spark: "SparkSession", state: _State, statement: Statement) -> tuple["DataFrame", int]:
    """The state's entries after ``statement`` and how many entries it touched (updated, deleted, inserted)."""
    from pyspark.sql import functions as F

    verb, hit = statement.verb, f"coalesce(({statement.where or 'true'}), false)"
    if verb == "DELETE":
        marked = _spark(lambda: spark.sql(f"SELECT *, {hit} AS _hit FROM {_VIEW}"), "the WHERE of DELETE")
        return marked.filter(~F.col("_hit")).drop("_hit"), marked.filter(F.col("_hit")).count()
    if verb == "UPDATE":
        _settable(state, statement.assignments, "UPDATE")
        sets = {c: _cast(state, c, _spark(lambda e=e: spark.sql(f"SELECT {e} AS x FROM {_VIEW}").schema["x"].dataType,
                                         f"SET {c} = {e}"), e, f"SET {c} = {e}")
                for c, e in statement.assignments.items()}
        if state.info.ttl is not None and "expiry" not in sets and state.stamp() is not None:
            sets["expiry"] = str(state.stamp())
        selected = ", ".join(f"CASE WHEN _hit THEN {sets[c]} ELSE `{c}` END AS `{c}`" if c in sets else f"`{c}`"
                             for c in state.columns)
        marked = _spark(lambda: spark.sql(f"SELECT *, {hit} AS _hit FROM {_VIEW}"), "the WHERE of UPDATE")
        marked.createOrReplaceTempView(f"{_VIEW}_hit")
        edited = _spark(lambda: spark.sql(f"SELECT {selected}, _hit FROM {_VIEW}_hit"), "UPDATE")
        return edited.drop("_hit"), marked.filter(F.col("_hit")).count()
    return _inserted(spark, state, statement)


def _inserted(spark: "SparkSession", state: _State, statement: Statement) -> tuple["DataFrame", int]:
    """The entries with ``statement``'s INSERT added: its columns given, or the state's in order (``expiry``
    aside); ``namespace`` defaults to '', ``index`` to after the list's elements, ``expiry`` to a write's."""
    given = _spark(lambda: spark.sql(statement.query), "the rows of INSERT")
    plain = [c for c in state.columns if c != "expiry"]
    columns = statement.columns or (state.columns if len(given.columns) == len(state.columns) else plain)
    _settable(state, columns, "INSERT")
    if len(columns) != len(given.columns):
        named = "names" if statement.columns else "without a column list takes the state's"
        raise ConfigError(f"INSERT {named} {len(columns)} columns {columns} but its rows have "
                          f"{len(given.columns)} values: name the columns it gives, INSERT INTO <state> (key, "
                          f"value) VALUES ...")
    needed = [c for c in ("key", "value", "user_key") if c in state.columns and c not in columns]
    if needed:
        raise ConfigError(f"INSERT into state {state.qname!r} needs the columns {needed} (its columns are "
                          f"{plain}); name them: INSERT INTO {state.qname} ({', '.join(plain)}) VALUES ...")
    given.toDF(*[f"_c{i}" for i in range(len(columns))]).createOrReplaceTempView(f"{_VIEW}_new")
    position = {c: (f"_c{i}", given.schema[i].dataType) for i, c in enumerate(columns)}
    defaults = {"namespace": "''", "index": "NULL", "expiry": str(state.stamp() or "NULL")}
    selected = ", ".join((_cast(state, c, position[c][1], position[c][0], f"INSERT's column {c}") if c in position
                          else f"CAST({defaults[c]} AS {state.rows.schema[c].dataType.simpleString()})") + f" AS `{c}`"
                         for c in state.columns)
    new = _spark(lambda: spark.sql(f"SELECT {selected} FROM {_VIEW}_new"), "INSERT")
    return state.rows.unionByName(new), new.count()


def _checked(state: _State, edited: "DataFrame") -> None:
    """Refuses, before anything is written, entries the state cannot hold: a null key, namespace, value or map
    key, and two entries of one key (and namespace, and map key) where the kind has one."""
    from pyspark.sql import functions as F

    required = ["key", "namespace", "value", *(["user_key"] if state.kind == "map" else [])]
    nulls = edited.agg(*[F.sum(F.col(c).isNull().cast("long")).alias(c) for c in required]).first()
    for column in required:
        if nulls[column]:
            fix = "DELETE the entries instead" if column == "value" else f"give every entry a {column}"
            raise ConfigError(f"the edit leaves {nulls[column]} entries of state {state.qname!r} with a null "
                              f"{column}: {fix}")
    if state.kind == "list":
        return
    entry = ["key", "namespace", *(["user_key"] if state.kind == "map" else [])]
    twice = edited.groupBy(*entry).count().filter(F.col("count") > 1).first()
    if twice is not None:
        which = ", ".join(f"{c} {twice[c]!r}" for c in entry)
        raise ConfigError(f"the edit leaves {twice['count']} entries of state {state.qname!r} with {which}, which "
                          f"holds one: UPDATE the entry there instead of INSERTing, or DELETE it first")


def _python(t: TypeInfo, v):
    """A value as Arrow hands it to Python (a map as pairs) in the form its type encodes (a map as a dict)."""
    if v is None:
        return None
    if isinstance(t, MapTypeInfo):
        pairs = v.items() if isinstance(v, dict) else v
        return {_python(t.key, k): _python(t.value, x) for k, x in pairs}
    if isinstance(t, ListTypeInfo):
        return [_python(t.element, x) for x in v]
    if isinstance(t, RowTypeInfo):
        return {n: _python(f, v.get(n)) for n, f in t.fields.items()}
    return v


def _stored(state: _State, edited: "DataFrame", batch_id: int, max_parallelism: int) -> "DataFrame":
    """``edited`` as the keyed table's rows of the state: key groups and key texts computed in the JVM as a
    run computes them, values encoded by their declared types (a list's elements in index order)."""
    from pyspark.sql import functions as F

    from ..key_groups import key_group_column
    from ..keys import key_text_of
    from .state_processor import _convert

    descriptor, qname, kind = state.info, state.qname, state.kind
    stored_t = from_schema(descriptor.type)
    has_ttl = descriptor.ttl is not None
    expiry = F.col("expiry") if has_ttl else F.lit(None).cast("bigint")
    if kind == "list":
        edited = edited.groupBy("key", "namespace").agg(F.collect_list(F.struct(
            F.coalesce("index", F.lit(2 ** 31 - 1)).alias("i"), "_seq", "value", expiry.alias("x"))).alias("value"))
        expiry = F.lit(None).cast("bigint")
    framed = edited.select(key_group_column(F.col("key"), max_parallelism).alias("key_group"),
                           key_text_of("key", state.reader.key_type).alias("key"), "namespace",
                           (F.col("user_key") if kind == "map" else F.lit(None)).alias("user_key"), "value",
                           expiry.alias("expiry"))
    whole = ListStateDescriptor("x", stored_t).stored_type if kind == "list" else None
    value_t = stored_t.value if kind == "map" else stored_t

    def encode(row):
        user_key, value, expiry = None, row["value"], row["expiry"]
        if kind == "list":
            elements = sorted(value, key=lambda e: (e["i"], e["_seq"]))
            values = [_python(stored_t, e["value"]) for e in elements]
            expiries = [e["x"] for e in elements]
            if any(x is not None for x in expiries):  # one unstamped element takes the others' latest expiry
                expiry = max(x for x in expiries if x is not None)
                text = encode_stamped_list([expiry if x is None else x for x in expiries],
                                           [stored_t.encode(v) for v in values])
            else:
                text = whole.dumps(values)
        else:
            text = value_t.dumps(_python(value_t, value))
            if kind == "map":
                user_key = stored_t.key.dumps(_python(stored_t.key, row["user_key"]))
        return [KeyedRow(qname, row["key_group"], row["key"], row["namespace"], user_key=user_key, value=text,
                         expiry=expiry, batch_id=batch_id)]

    return _convert(framed, KEYED_TABLE.schema, encode)


@dataclass
class EditResult:
    """What an edit did: the statement's verb, the state, the entries it touched and the state's entries after
    it, and the savepoint written (None on a dry run)."""

    verb: str
    state: str
    touched: int
    entries: int
    savepoint: "SavepointMetadata | None"


def edit_state(spark: "SparkSession", settings: "Settings", ref: str, text: str, into: str | None = None,
               dry_run: bool = False, say=_SAY) -> EditResult:
    """Apply statement ``text`` to a keyed state of savepoint ``ref`` ('<job>/<name>') and write the result as
    savepoint ``<job>/<into>`` (default ``<name>-edited``); every other state is copied as it is."""
    from pyspark.sql import functions as F

    from ..catalog.savepoints import SavepointStore, load_savepoint
    from .savepoint import check_label
    from .state_processor import SavepointReader, SavepointWriter

    statement = parse_statement(text)
    meta = load_savepoint(settings, ref)
    into = check_label(into or f"{meta.name}-edited")
    if not dry_run and SavepointStore(settings, meta.job_id).path(into).exists():
        raise ConfigError(f"a savepoint named {into!r} of job {meta.job_id!r} already exists: give another --into")
    state = _find_state(spark, SavepointReader.for_savepoint(spark, ref, settings), statement.state)
    edited, touched = _edited(spark, state, statement)
    edited = _spark(lambda: edited.withColumn("_seq", F.monotonically_increasing_id()).localCheckpoint(),
                    statement.verb)
    for view in (_VIEW, f"{_VIEW}_hit", f"{_VIEW}_new"):  # the session may be a server's, shared by later work
        spark.catalog.dropTempView(view)
    _checked(state, edited)
    entries = edited.count()
    say(f"[lakestate] {statement.verb} of state {state.qname!r} of savepoint {ref}: {touched} entries touched, "
        f"{entries} entries after it")
    if dry_run:
        return EditResult(statement.verb, state.qname, touched, entries, None)
    writer = SavepointWriter.from_savepoint(spark, ref, settings)
    part = writer.operator_part(state.reader.uid)
    part.keyed = part.keyed.filter(F.col("state_name") != state.qname).unionByName(
        _stored(state, edited, part.fields["batch_id"], part.fields["max_parallelism"]))
    return EditResult(statement.verb, state.qname, touched, entries, writer.write(into, say))
