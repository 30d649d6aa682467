"""The State Processor API: read the state of a checkpoint or savepoint as Spark DataFrames, write new savepoints
from DataFrames, and make a changed copy of a savepoint (Flink's State Processor API, in ``delta.tables``' shape).

Reading::

    reader = SavepointReader.for_savepoint(spark, "clicks/before-v2")      # or .for_checkpoint(spark, "clicks")
    reader.keyed_state("count").filter("key = 42").show()   # key_group, key, namespace, value (typed)
    reader.keyed_state("items")                              # a ListState: one row per element, with its index
    reader.keyed_state("tags")                               # a MapState: one row per entry (user_key, value)
    reader.list_state("offsets")                             # operator ListState / union state: subtask, index, value
    reader.broadcast_state("rules")                          # subtask, key, value
    reader.timers()                                          # key_group, key, namespace, timestamp, domain

Writing a new savepoint (a job then restores from it with ``lakestate restore <job> --savepoint <job>/<name>``)::

    (SavepointWriter.bootstrap(spark, "clicks", uid="main", key_type=Types.LONG(), max_parallelism=128)
        .with_keyed_state(ValueStateDescriptor("count", Types.LONG()), counts_df, key="user", value="n")
        .with_operator_state(ListStateDescriptor("seen", Types.STRING()), ["a", "b"])
        .write("bootstrapped"))

Changing one (always into a new savepoint: the old one stays)::

    SavepointWriter.from_savepoint(spark, "clicks/v1").remove_operator("old").rename_uid("main", "clicks") \\
        .write("v2")

Values are decoded and encoded in the executors by the declared types the
savepoint records (never unpickled); keys keep their declared type, and key
groups are computed in the JVM as a run computes them.
"""
from __future__ import annotations

import functools
import inspect
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..catalog.savepoints import load_savepoint
from ..delta.points import StatePoint
from ..errors import ConfigError, RestoreError, stored_value_error
from ..job import check_job_id
from ..key_groups import check_parallelism, compute_default_max_parallelism, key_group_column, key_group_ranges
from ..keys import (
    check_key,
    check_key_type,
    key_columns,
    key_expression,
    key_literal,
    key_text_of,
    mistyped_key,
    spark_key_type,
    typed_key,
)
from ..progress import wing_logger
from ..records.layout import KEYED, KEYED_TABLE, LAYOUT_VERSION, OPERATOR, OPERATOR_TABLE, STATE_TABLES, KeyedRow
from ..records.metadata import SavepointMetadata, StateInfo
from ..repartition import split_distribute, union_stored
from ..settings import Settings
from ..state.codecs import decode_stamped_list
from ..state.descriptors import (
    ListStateDescriptor,
    MapStateDescriptor,
    StateDescriptor,
    check_state_name,
    qualified_name,
)
from ..state.operator import BROADCAST, SPLIT_DISTRIBUTE, UNION
from ..state.ttl.tables import expired
from ..timers import TimeDomain, timer_state_names
from ..types import TypeInfo, Types, from_schema
from .savepoint import check_label, point_fields, write_savepoint

_SAY = wing_logger(__name__).info  # what it says it does, unless given a say of its own (``progress``)


def _convert(rows: DataFrame, out_ddl: str, convert) -> DataFrame:
    """Map each row (a dict) of ``rows`` to output tuples with ``convert``, in the executors (Arrow batches)."""
    import pyarrow as pa

    out_schema = rows.sparkSession.createDataFrame([], out_ddl).schema
    names = [f.name for f in out_schema.fields]

    def batches(iterator):
        from pyspark.sql.pandas.types import to_arrow_schema

        arrow_schema = to_arrow_schema(out_schema)
        for batch in iterator:
            out = [t for row in batch.to_pylist() for t in convert(row)]
            yield pa.RecordBatch.from_arrays(
                [pa.array([r[i] for r in out], type=arrow_schema.field(i).type) for i in range(len(names))],
                schema=arrow_schema)

    return rows.mapInArrow(batches, out_schema)


def _intact(spark: SparkSession, source: StatePoint) -> StatePoint:
    """``source``, once every Delta log entry and data file it pins is there (``backends.point_damage``, the
    check a run, a savepoint and a restore make too): damage is named with the fix before any read."""
    damage = source.damage(spark)
    if damage:
        raise RestoreError(f"{source.where} cannot be read: " + "; ".join(damage))
    return source


@dataclass
class _KeyedDecoding:
    """How a keyed state's stored rows decode: ``rows`` (``key_group``, typed ``key``, ``namespace``,
    ``user_key``, ``value``, ``expiry``; entries TTL hides left out); ``extra``, the column beside the value
    (``("index", INT)`` for a list, ``("user_key", <its type>)`` for a map, else None); the ``value`` type;
    ``decode(row)``, the row's entries as ``(extra or None, value)``."""

    rows: DataFrame
    extra: tuple[str, TypeInfo] | None
    value: TypeInfo
    decode: Callable[[dict], list[tuple]]


def _checked(decode: Callable[[dict], list[tuple]], qname: str, type_name: str) -> Callable[[dict], list[tuple]]:
    """``decode``, where a stored value that is not of its declared type is a StoredValueError naming the state,
    the key and the value, as a run's is."""

    def checked(row: dict) -> list[tuple]:
        try:
            return decode(row)
        except (TypeError, ValueError, AttributeError, RecursionError) as e:
            where = f"state {qname!r} of key {row['key']!r}" + (
                f" (namespace {row['namespace']!r})" if row["namespace"] else "")
            raise stored_value_error(where, type_name, e, stored=row["value"]) from None

    return checked


def _per_operator(method):
    """A reader's method called with the ``uid`` of another operator of a dataflow's point reads that operator's
    part of the point (its own tables and records)."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    def read(self, *args, **kwargs):
        uid = signature.bind(self, *args, **kwargs).arguments.get("uid")
        return method(self.operator(uid) if uid in self.uids[1:] else self, *args, **kwargs)

    return read


class SavepointReader:
    """The state of one checkpoint or savepoint, as DataFrames; a dataflow's later operators' through
    ``operator(uid)``, or any method's ``uid=``.

    Example::

        reader = SavepointReader.for_savepoint(spark, "first-job/before-v2")   # or .for_checkpoint(spark, "first-job")
        reader.keyed_state("count").filter("key = 'ada'")   # DataFrame: key_group, key, namespace, value (typed)
        reader.keyed_entries("count", "ada")                # one key's entries, decoded: [{"value": 3}]
        reader.states()                                     # qualified name ("main.count") -> kind, type, entries
        SavepointReader.for_checkpoint(spark, "spend").keyed_state("per-user", uid="country-totals")  # later operator
    """

    def __init__(self, spark: SparkSession, source: StatePoint):
        self.spark, self.source, self.meta = spark, _intact(spark, source), source.meta

    @classmethod
    def for_savepoint(cls, spark: SparkSession, ref: str, settings: Settings | None = None) -> "SavepointReader":
        """The savepoint ``ref`` ('<job>/<name>' or a path under the savepoint root)."""
        return cls(spark, StatePoint.of_savepoint(settings or Settings.load(), ref))

    @classmethod
    def for_checkpoint(cls, spark: SparkSession, job_id: str, checkpoint_id: int | None = None,
                       settings: Settings | None = None) -> "SavepointReader":
        """Retained checkpoint ``checkpoint_id`` of ``job_id`` (default: its latest)."""
        return cls(spark, StatePoint.of_checkpoint(settings or Settings.load(), job_id, checkpoint_id))

    @property
    def uid(self) -> str:
        """The uid of the operator whose part this reader reads (the point's first operator's by default)."""
        return self.meta.uid

    @property
    def uids(self) -> list[str]:
        """The operators whose state the point holds (a dataflow's: every one)."""
        return self.source.uids

    def operator(self, uid: str) -> "SavepointReader":
        """The reader of operator ``uid``'s part of the point (a dataflow's later operator)."""
        part = self.source.operator(uid)
        if part is None:
            raise ConfigError(f"{self.source.where} holds no state of operator {uid!r}; its operators are "
                              f"{self.uids}")
        return self if part.meta.uid == self.meta.uid else SavepointReader(self.spark, part)

    @property
    def key_type(self) -> TypeInfo:
        """The type of the operator's key, as the point recorded it."""
        return from_schema(self.meta.key_type)

    def states(self) -> dict[str, dict]:
        """Qualified state name -> its recorded descriptor (scope, kind, mode, type) and entries."""
        return {n: {**d.to_dict(), "entries": self.meta.entries.get(n, 0)}
                for n, d in sorted(self.meta.descriptors.items())}

    def _descriptor(self, name: str, uid: str | None, scope: str,
                    descriptor: StateDescriptor | None = None) -> tuple[str, StateInfo]:
        """The recorded descriptor of a state; a state registered only while processing (broadcast state in
        ``process_broadcast_element``) has none recorded, and is read with the ``descriptor`` given (as
        Flink's State Processor API always takes one)."""
        qname = name if "." in name else qualified_name(uid or self.uid, name)
        found = self.meta.descriptors.get(qname)
        if found is None and descriptor is not None and self.meta.entries.get(qname):
            return qname, StateInfo.from_descriptor(descriptor, scope)
        if found is None or found.scope != scope:
            known = sorted(n for n, d in self.meta.descriptors.items() if d.scope == scope)
            stored = sorted(n for n in set(self.meta.entries) - set(self.meta.descriptors) if "__" not in n)
            hint = (f"; states stored without a recorded type (registered while processing): {stored}: pass "
                    f"descriptor=<its descriptor>") if stored else ""
            raise ConfigError(f"{self.source.where} has no {scope} state {qname!r}; it has {known}{hint}")
        if descriptor is not None and descriptor.type_info.to_schema() != found.type:
            raise ConfigError(f"state {qname!r} is stored as {json.dumps(found.type)}, not "
                              f"{json.dumps(descriptor.type_info.to_schema())}: give its stored type")
        return qname, found

    def _keyed(self, name: str, uid: str | None, descriptor: StateDescriptor | None) -> _KeyedDecoding:
        """How a keyed state's stored rows decode (see ``_KeyedDecoding``)."""
        qname, descriptor = self._descriptor(name, uid, KEYED, descriptor)
        kind, stored = descriptor.kind, from_schema(descriptor.type)
        rows = (self.source.rows(self.spark, KEYED).filter(F.col("state_name") == qname)
                .select("key_group", typed_key(F.col("key"), self.key_type).alias("key"), "namespace",
                        "user_key", "value", "expiry"))
        # Under TTL with NeverReturnExpired, what had expired at the point's processing time is not shown.
        ttl, now = descriptor.ttl, self.meta.processing_time
        hide = ttl is not None and not ttl.return_expired and now is not None
        if hide:
            rows = rows.filter(~expired(now))
        if kind == "list":
            element, whole = stored, ListStateDescriptor("x", stored).stored_type

            def elements(row):
                if row["expiry"] is None:  # stored without TTL: the plain list
                    return list(enumerate(whole.loads(row["value"])))
                expiries, encoded = decode_stamped_list(row["value"])
                return list(enumerate(element.decode(e) for x, e in zip(expiries, encoded) if not hide or x > now))

            return _KeyedDecoding(rows, ("index", Types.INT()), element,
                                  _checked(elements, qname, f"LIST<{element.name}>"))
        if kind == "map":
            key_t, value_t = stored.key, stored.value
            return _KeyedDecoding(rows, ("user_key", key_t), value_t, _checked(
                lambda row: [(key_t.loads(row["user_key"]), value_t.loads(row["value"]))], qname,
                f"MAP<{key_t.name}, {value_t.name}>"))
        return _KeyedDecoding(rows, None, stored, _checked(lambda row: [(None, stored.loads(row["value"]))], qname,
                                                           stored.name))

    @_per_operator
    def keyed_state(self, name: str, uid: str | None = None, descriptor: StateDescriptor | None = None
                    ) -> DataFrame:
        """A keyed state's entries: ``key_group, key, namespace`` and, by kind, ``value`` (value, reducing,
        aggregating), ``index, value`` per element (list) or ``user_key, value`` per entry (map); typed. Values
        are decoded in the executors; one not of its declared type fails the read with a StoredValueError
        naming the key (``keyed_entries`` reads one key only)."""
        decoding = self._keyed(name, uid, descriptor)
        extra, value_t, decode = decoding.extra, decoding.value, decoding.decode  # no DataFrame in the closure
        head = f"key_group int, key {spark_key_type(self.key_type)}, namespace string"
        ddl = f"{head}, {extra[0]} {extra[1].spark_ddl()}, value {value_t.spark_ddl()}" if extra \
            else f"{head}, value {value_t.spark_ddl()}"
        return _convert(decoding.rows, ddl, lambda row: [
            (row["key_group"], row["key"], row["namespace"], *([extra[1].to_arrow(x)] if extra else []),
             value_t.to_arrow(v)) for x, v in decode(row)])

    @_per_operator
    def keyed_entries(self, name: str, key: Any, namespace: str = "", uid: str | None = None,
                      descriptor: StateDescriptor | None = None) -> list[dict]:
        """One key's entries of a keyed state, decoded: ``[{"value": v}]`` (value, reducing, aggregating),
        ``{"index", "value"}`` per element (list) or ``{"user_key", "value"}`` per entry (map); ``[]`` when the
        key has none. Only this key's stored values are decoded, so a damaged value of another key does not
        matter; one of this key is a StoredValueError naming it and the value.

        Example::

            reader.keyed_entries("count", 42)      # [{"value": 7}]
        """
        decoding = self._keyed(name, uid, descriptor)
        mine = decoding.rows.filter((F.col("key") == key_literal(self.key_type, key))
                                    & (F.col("namespace") == namespace))
        field = decoding.extra[0] if decoding.extra else None
        return [{field: x, "value": v} if field else {"value": v}
                for row in mine.collect() for x, v in decoding.decode(row.asDict())]

    @_per_operator
    def timers(self, uid: str | None = None) -> DataFrame:
        """The operator's timers (docs/writing/time.md): ``key_group, key`` (typed), ``namespace``, ``timestamp`` (epoch
        ms) and ``domain`` ("EVENT_TIME" or "PROCESSING_TIME"), a row per timer registered and not yet fired or
        deleted at this point."""
        names = timer_state_names(uid or self.uid)
        event = names[TimeDomain.EVENT_TIME]
        return (self.source.rows(self.spark, KEYED).filter(F.col("state_name").isin(list(names.values())))
                .select("key_group", typed_key(F.col("key"), self.key_type).alias("key"), "namespace",
                        F.col("expiry").alias("timestamp"),
                        F.when(F.col("state_name") == event, F.lit(TimeDomain.EVENT_TIME.name))
                        .otherwise(F.lit(TimeDomain.PROCESSING_TIME.name)).alias("domain")))

    @_per_operator
    def list_state(self, name: str, uid: str | None = None, descriptor: StateDescriptor | None = None
                   ) -> DataFrame:
        """An operator ListState or union list state: ``subtask, index, value`` per element (union state is
        stored once after a rescale; every subtask is given all of it on restore)."""
        qname, descriptor = self._descriptor(name, uid, OPERATOR, descriptor)
        if (descriptor.mode or SPLIT_DISTRIBUTE) not in (SPLIT_DISTRIBUTE, UNION):
            raise ConfigError(f"state {qname!r} is {descriptor.mode} state: read it with broadcast_state")
        element = from_schema(descriptor.type)
        list_type = ListStateDescriptor("x", element).stored_type
        rows = self.source.rows(self.spark, OPERATOR).filter(F.col("state_name") == qname)
        return _convert(rows.select("subtask", "value"), f"subtask int, index int, value {element.spark_ddl()}",
                        lambda row: [(row["subtask"], i, element.to_arrow(v))
                                     for i, v in enumerate(list_type.loads(row["value"]))])

    @_per_operator
    def broadcast_state(self, name: str, uid: str | None = None, descriptor: MapStateDescriptor | None = None
                        ) -> DataFrame:
        """A BroadcastState: ``subtask, key, value`` per entry of each subtask's copy."""
        qname, descriptor = self._descriptor(name, uid, OPERATOR, descriptor)
        if (descriptor.mode or BROADCAST) != BROADCAST:
            raise ConfigError(f"state {qname!r} is {descriptor.mode} state: read it with list_state")
        stored = from_schema(descriptor.type)
        rows = self.source.rows(self.spark, OPERATOR).filter(F.col("state_name") == qname)
        return _convert(rows.select("subtask", "value"),
                        f"subtask int, key {stored.key.spark_ddl()}, value {stored.value.spark_ddl()}",
                        lambda row: [(row["subtask"], stored.key.to_arrow(k), stored.value.to_arrow(v))
                                     for k, v in (stored.loads(row["value"]) or {}).items()])


class SavepointWriter:
    """Builds a new savepoint: from nothing (``bootstrap``) or from an existing one (``from_savepoint``).

    Example::

        (SavepointWriter.bootstrap(spark, "clicks", uid="user-activity", key_type=Types.LONG(), max_parallelism=128)
            .with_keyed_state(ValueStateDescriptor("events", Types.LONG()), df, key="user_id", value="n")
            .with_operator_state(ListStateDescriptor("seen", Types.STRING()), ["a", "b"])
            .write("bootstrapped"))   # then: lakestate restore clicks --savepoint clicks/bootstrapped
        (SavepointWriter.from_savepoint(spark, "clicks/v1")
            .remove_operator("old").rename_uid("main", "clicks").write("v2"))
    """

    def __init__(self, spark: SparkSession, settings: Settings, job_id: str, fields: dict,
                 keyed: DataFrame, operator: DataFrame):
        self.spark, self.settings, self.job_id = spark, settings, check_job_id(job_id)
        self.fields, self.keyed, self.operator = fields, keyed, operator
        self._later: dict[str, SavepointWriter] = {}  # a dataflow's later operators' parts, by uid

    @classmethod
    def bootstrap(cls, spark: SparkSession, job_id: str, *, uid: str, key_type: TypeInfo,
                  max_parallelism: int | None = None, parallelism: int = 1,
                  settings: Settings | None = None) -> "SavepointWriter":
        """An empty savepoint of job ``job_id`` whose operator has ``uid``, keyed by ``key_type``. A job restored
        from it starts reading its sources from the beginning (microbatch 0)."""
        try:
            check_state_name(uid, "operator uid")
        except ValueError as e:
            raise ConfigError(str(e)) from None
        check_key_type(key_type)
        maxp = max_parallelism or compute_default_max_parallelism(parallelism)
        try:
            check_parallelism(parallelism, maxp)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        # "backend" is what a restore from it uses unless told otherwise.
        fields = {"checkpoint_id": 0, "batch_id": -1, "uid": uid, "key_type": key_type.to_schema(),
                  "backend": "delta", "parallelism": parallelism, "max_parallelism": maxp,
                  "key_group_ranges": [r.to_list() for r in key_group_ranges(maxp, parallelism)],
                  "source_offsets": {}, "descriptors": {}, "entries": {}, "processing_time": None}
        return cls(spark, settings or Settings.load(), job_id, fields, spark.createDataFrame([], KEYED_TABLE.schema),
                   spark.createDataFrame([], OPERATOR_TABLE.schema))

    @classmethod
    def from_savepoint(cls, spark: SparkSession, ref: str, settings: Settings | None = None,
                       job_id: str | None = None) -> "SavepointWriter":
        """A copy of savepoint ``ref`` to change (written under ``job_id``, default the same job)."""
        settings = settings or Settings.load()
        meta = load_savepoint(settings, ref)
        source = _intact(spark, StatePoint(meta))
        parts = [source.operator(uid) for uid in source.uids]
        writers = [cls(spark, settings, job_id or meta.job_id, point_fields(p.meta), p.rows(spark, KEYED),
                       p.rows(spark, OPERATOR)) for p in parts]
        writers[0]._later = {w.fields["uid"]: w for w in writers[1:]}
        return writers[0]

    def operator_part(self, uid: str) -> "SavepointWriter":
        """The writer of a dataflow's later operator ``uid``'s part (its keyed and operator state), to change with
        ``with_keyed_state`` ...; ``write`` on the first writes them all. (The reader's is ``operator(uid)``; a
        writer's ``operator`` is its operator state table.)"""
        if uid == self.fields["uid"]:
            return self
        if uid not in self._later:
            raise ConfigError(f"the savepoint has no operator {uid!r}; its operators are "
                              f"{[self.fields['uid'], *self._later]}")
        return self._later[uid]

    def _register(self, descriptor: StateDescriptor, scope: str, mode: str | None = None) -> str:
        if not isinstance(descriptor, StateDescriptor):
            raise ConfigError(f"give a state descriptor (ValueStateDescriptor, ...), got {descriptor!r}")
        qname = qualified_name(self.fields["uid"], descriptor.name)
        if qname in self.fields["descriptors"]:
            raise ConfigError(f"the savepoint already has state {qname!r}; remove it first or use another name")
        self.fields["descriptors"][qname] = StateInfo.from_descriptor(descriptor, scope, mode)
        return qname

    def with_keyed_state(self, descriptor: StateDescriptor, rows: DataFrame, *, key: str = "key",
                         value: str = "value", user_key: str | None = None, namespace: str | None = None
                         ) -> "SavepointWriter":
        """Add keyed state from ``rows``: one row per key (a ListState's ``value`` column holds the whole list;
        a MapState has one row per entry, its key in column ``user_key``). Keys must have the savepoint's key
        type; ``namespace`` (a column) defaults to the void namespace."""
        key_type = from_schema(self.fields["key_type"])
        if isinstance(key, (list, tuple)):
            key, key_type = check_key(key, key_type, "with_keyed_state(key=...)")
        missing = [c for c in (*key_columns(key), value) if c not in rows.columns]
        if missing:
            raise ConfigError(f"columns {[*key_columns(key), value]} must be in the rows (they have {rows.columns})")
        actual = mistyped_key(rows, key, key_type)
        if actual is not None:
            raise ConfigError(f"{actual} but the savepoint's key type is {key_type.name} "
                              f"({spark_key_type(key_type)}); cast it")
        is_map = isinstance(descriptor, MapStateDescriptor)
        if is_map and (user_key is None or user_key not in rows.columns):
            raise ConfigError("a MapState needs user_key=<the column of the map keys>, one row per entry")
        qname = self._register(descriptor, KEYED)
        stored = descriptor.key_type if is_map else descriptor.stored_type
        value_type = descriptor.value_type if is_map else stored
        batch_id = self.fields["batch_id"]
        framed = rows.select(
            key_group_column(key_expression(key), self.fields["max_parallelism"]).alias("key_group"),
            key_text_of(key, key_type).alias("key"),
            (F.col(namespace).cast("string") if namespace else F.lit("")).alias("namespace"),
            (F.col(user_key) if is_map else F.lit(None)).alias("user_key"), F.col(value).alias("value"))

        def encode(row):
            text = value_type.dumps(dict(row["value"]) if isinstance(row["value"], list) and
                                    value_type.name == "MAP" else row["value"])
            return [KeyedRow(qname, row["key_group"], row["key"], row["namespace"],
                             user_key=stored.dumps(row["user_key"]) if is_map else None, value=text, expiry=None,
                             batch_id=batch_id)]

        self.keyed = self.keyed.unionByName(_convert(framed, KEYED_TABLE.schema, encode))
        return self

    def with_operator_state(self, descriptor: StateDescriptor, values: Iterable[Any] | dict, *,
                            mode: str = SPLIT_DISTRIBUTE) -> "SavepointWriter":
        """Add operator state: a ListState's elements (``mode`` "split": spread over the subtasks as a rescale
        would; "union": every subtask gets them all) or a BroadcastState's map (every subtask gets a copy)."""
        is_map = isinstance(descriptor, MapStateDescriptor)
        mode = BROADCAST if is_map else mode
        if mode not in (SPLIT_DISTRIBUTE, UNION, BROADCAST):
            raise ConfigError(f"mode {mode!r} is not one of {SPLIT_DISTRIBUTE!r}, {UNION!r}")
        qname = self._register(descriptor, OPERATOR, mode)
        p, stored = self.fields["parallelism"], descriptor.stored_type
        if is_map:
            texts = [stored.dumps(dict(values))] * p
        elif mode == UNION:
            texts = [stored.dumps(part) if part else None for part in union_stored([list(values)], p)]
        else:
            texts = [stored.dumps(part) if part else None for part in split_distribute([list(values)], p)]
        rows = [(qname, i, mode, t, self.fields["batch_id"], 0) for i, t in enumerate(texts) if t is not None]
        self.operator = self.operator.unionByName(self.spark.createDataFrame(rows, OPERATOR_TABLE.schema))
        return self

    def remove_operator(self, uid: str) -> "SavepointWriter":
        """Drop every state of operator ``uid`` (a dataflow's later operator: its whole part)."""
        if self._later.pop(uid, None) is not None:
            return self
        prefix = f"{uid}."
        for table in STATE_TABLES:
            setattr(self, table, getattr(self, table).filter(~F.col("state_name").startswith(prefix)))
        for key in ("descriptors", "entries"):
            self.fields[key] = {n: v for n, v in self.fields[key].items() if not n.startswith(prefix)}
        return self

    def rename_uid(self, old: str, new: str) -> "SavepointWriter":
        """Move the state of operator ``old`` to ``new`` (the savepoint's operator becomes ``new``)."""
        try:
            check_state_name(new, "operator uid")
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if old in self._later:  # a dataflow's later operator: its part moves to the new uid
            part = self._later.pop(old)
            self._later[new] = part.rename_uid(old, new)
            return self
        prefix = f"{old}."
        rename = F.when(F.col("state_name").startswith(prefix),
                        F.concat(F.lit(f"{new}."), F.expr(f"substring(state_name, {len(prefix) + 1})"))
                        ).otherwise(F.col("state_name"))
        for table in STATE_TABLES:
            setattr(self, table, getattr(self, table).withColumn("state_name", rename))
        for key in ("descriptors", "entries"):
            self.fields[key] = {(f"{new}.{n[len(prefix):]}" if n.startswith(prefix) else n): v
                                for n, v in self.fields[key].items()}
        if self.fields["uid"] == old:
            self.fields["uid"] = new
        return self

    def _part(self) -> tuple[dict, dict, tuple]:
        counts = {r["state_name"]: r["n"] for table in (self.keyed, self.operator)
                  for r in table.groupBy("state_name").agg(F.count("*").alias("n")).collect()}
        fields = {**self.fields, "entries": {n: c for n, c in sorted(counts.items())}, "layout": LAYOUT_VERSION}
        return {KEYED: self.keyed, OPERATOR: self.operator}, fields, ()

    def write(self, name: str, say=_SAY) -> SavepointMetadata:
        """Write it as savepoint ``<job>/<name>`` (a dataflow's: every operator's part); returns its metadata."""
        check_label(name)
        parts = {self.fields["uid"]: self._part(), **{uid: w._part() for uid, w in self._later.items()}}
        return write_savepoint(self.settings, self.job_id, name, parts, name, say)

