"""A subtask's side of a window on the vectorised path (``vectorized.VectorizedWindowAggregate``): a tumbling or
sliding event-time window of a ``ColumnAggregate``, with no Python call per record or window.

Per microbatch, over Arrow tables: each record's windows (Flink's ``TimeWindow.getWindowStartWithOffset``, a
sliding window's size/slide windows), the late ones left out (end - 1 at or below the watermark before the
microbatch, W(m-1); an element with no window left is counted as a dropped late record), the rest folded per key
and window (``group_by``) and merged into the open windows' accumulators (a join); then every open window whose
end - 1 is at or below the microbatch's watermark W(m) fires, in the per-record path's order (end, key group,
key), and goes. What is written is what the per-record window operator keeps: each open window's accumulator in
the ``window-contents`` state under the window's namespace ``"start:end"`` (its text encoded column-wise as the
per-record path encodes it) and an event-time timer at its end - 1; a fired window's entries are removed. So
checkpoints, savepoints, restores (also onto the per-record path, and from it), rescales and the State Processor
see the windows as they see the per-record operator's. No Spark here.
"""
from __future__ import annotations

from ..errors import ConfigError
from ..keys import arrow_key_columns
from ..records.layout import KeyedRow, keyed_columns
from ..state.descriptors import qualified_name
from ..timers import TimeDomain, timer_state_names
from ..windows.assigners import window_starts
from .exchange import SORT_ONLY_COLUMNS, record_order
from .json_columns import decode_column, encode_column

_GROUP = ["key", "key_group", "start"]


class WindowRun:
    """The open windows of one ``SubtaskRunner`` and the microbatch's records (see the module docstring)."""

    loads_timers = True  # every stored keyed part comes here: a window's timer is its end - 1, not read

    def __init__(self, runner):
        self.runner, self.fn = runner, runner.plan.function
        uid = runner.plan.uid
        self.qname = qualified_name(uid, self.fn.contents.name)
        self.timer_name = timer_state_names(uid)[TimeDomain.EVENT_TIME]
        self.acc_type = self.fn.contents.type_info
        self._slices: list = []
        self._loaded: list = []
        self._open = None  # key, key_group, start and the flat accumulator columns (``_flat``) of each open window

    def load(self, part) -> None:
        """Stored keyed entries (a slice of an exchange batch: a ``RecordBatch`` in Spark), before the first
        microbatch; kept as a table, the form ``_take_over`` concatenates."""
        import pyarrow as pa

        part = part.select(["state_name", "key", "key_group", "namespace", "value"])
        self._loaded.append(pa.Table.from_batches([part]) if isinstance(part, pa.RecordBatch) else part)

    def add(self, batch) -> None:
        """Keyed records of the current microbatch: a slice of an exchange batch."""
        self._slices.append(batch.select(["key", "key_group", "record", "input", *SORT_ONLY_COLUMNS]))

    # -- the accumulator as flat columns -----------------------------------------------------------------------
    def _flat(self) -> list[tuple[str, str, str, object]]:
        """(flat column, aggregate name, op, arrow type) per accumulator column; avg has a count and a sum."""
        import pyarrow as pa

        out = []
        for name, op, _ in self.fn.aggregates:
            field = self.acc_type.fields[name]
            if op == "avg":
                out += [(name + "\0count", name, "count", pa.int64()), (name + "\0sum", name, "sum", pa.float64())]
            else:
                out.append((name, name, op, field.arrow_type()))
        return out

    def _take_over(self) -> None:
        """The open windows the run loaded: the Arrow parts, and any entry loaded row by row (the runner's store;
        its timers, all of them windows' ends, are dropped from the runner's: this run fires the windows)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        parts = [p.filter(pc.equal(p.column("state_name"), self.qname)) for p in self._loaded]
        self._loaded = []
        rows = self.runner.store.stored_namespaced(self.qname)
        if rows:
            keys, groups, namespaces, texts = zip(*rows)
            parts.append(pa.table({"state_name": pa.array([self.qname] * len(keys)), "key": pa.array(keys),
                                   "key_group": pa.array(groups, pa.int32()), "namespace": pa.array(namespaces),
                                   "value": pa.array(texts, pa.string())}))
        self.runner.timers.clear()
        schema = pa.schema([("key", pa.string()), ("key_group", pa.int32()), ("namespace", pa.string()),
                            ("value", pa.string())])
        stored = pa.concat_tables([p.select(schema.names).cast(schema) for p in parts if p.num_rows]
                                  or [schema.empty_table()]).combine_chunks()
        starts = pc.cast(pc.list_element(pc.split_pattern(stored.column("namespace"), ":"), 0), pa.int64())
        accs = decode_column(self.acc_type, stored.column("value").combine_chunks(),
                             stored.column("key").combine_chunks(), self.qname)
        columns = {"key": stored.column("key"), "key_group": stored.column("key_group"), "start": starts}
        for flat, name, _op, arrow_type in self._flat():
            field = accs.field(name)
            if "\0" in flat:
                field = field.field(flat.partition("\0")[2])
            columns[flat] = field.cast(arrow_type)
        self._open = pa.table(columns)

    # -- a microbatch --------------------------------------------------------------------------------------------
    def run(self) -> None:
        """The microbatch's records folded into their windows, then the due windows fired (also without records)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self._open is None:
            self._take_over()
        slices, self._slices = self._slices, []
        old = self._open
        if slices:
            partial = self._fold(pa.Table.from_batches(slices))
            opened = self._merge(old, partial)
        else:
            opened = old.append_column("stored", pa.repeat(True, old.num_rows)).append_column(
                "touched", pa.repeat(False, old.num_rows))
        ends = pc.add(opened.column("start"), self.fn.size - 1)
        due = pc.less_equal(ends, self.runner.next_watermark)
        fired = opened.filter(due)
        self._fire(fired)
        kept = opened.filter(pc.invert(due))
        self._write(kept, fired)
        self._open = kept.drop_columns(["stored", "touched"])

    def _fold(self, table):
        """The microbatch's records per key and window that is not late: key, key_group, start and the partial
        accumulator columns; late records counted."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        fn, runner = self.fn, self.runner
        if table.column("key").null_count:
            raise ConfigError("a record has a null key; filter or fill null keys in the source")
        table = table.take(record_order(table, runner.plan.order_by))  # a key's records in the per-record path's order
        records = pa.Table.from_struct_array(table.column("record").combine_chunks())
        column = records.column(fn.timestamp_column)
        if column.null_count:
            raise ConfigError(f"a record has a null event time in {fn.timestamp_column!r}; filter or fill it upstream")
        ts = column.to_numpy().astype(np.int64)
        n, size = len(ts), fn.size
        at, starts = window_starts(ts, size, fn.slide, fn.offset)
        live = starts + (size - 1) > runner.watermark
        stats = runner.stats
        stats.records_in += n
        stats.keys += pc.count_distinct(table.column("key")).as_py()
        stats.late_dropped += int(np.count_nonzero(np.bincount(at[live], minlength=n) == 0))
        at, starts = pa.array(at[live]), pa.array(starts[live])
        values = {"key": table.column("key").take(at).cast(pa.string()),
                  "key_group": table.column("key_group").take(at).cast(pa.int32()), "start": starts}
        aggregations = []
        for i, (_name, op, source) in enumerate(fn.aggregates):
            value = records.column(source).take(at) if source is not None else pa.repeat(1, len(at))
            values[f"v{i}"] = value.cast(pa.float64()) if op == "avg" else value
            aggregations += self._partial(f"v{i}", op, source)
        grouped = pa.table(values).group_by(_GROUP, use_threads=False).aggregate(aggregations)
        columns = {g: grouped.column(g) for g in _GROUP}
        flats = iter(self._flat())
        for i, (_name, op, _) in enumerate(fn.aggregates):
            for func in (("count", "sum") if op == "avg" else (op,)):
                flat, _, _, arrow_type = next(flats)
                columns[flat] = grouped.column(f"v{i}_{'count' if op == 'count' else func}").cast(arrow_type)
        return pa.table(columns)

    @staticmethod
    def _partial(column: str, op: str, source) -> list:
        import pyarrow.compute as pc

        if op == "count":
            return [(column, "count", pc.CountOptions(mode="all" if source is None else "only_valid"))]
        if op == "avg":
            return [(column, "count", pc.CountOptions(mode="only_valid")),
                    (column, "sum", pc.ScalarAggregateOptions(min_count=0))]
        if op == "sum":
            return [(column, "sum", pc.ScalarAggregateOptions(min_count=1))]
        if op == "last":
            return [(column, "last", pc.ScalarAggregateOptions(skip_nulls=False))]
        return [(column, op)]

    def _merge(self, old, partial):
        """The open windows with the microbatch's partial accumulators merged in; ``stored``: the window was open
        before the microbatch (its entries are in the table), ``touched``: it had records."""
        import pyarrow as pa
        import pyarrow.compute as pc

        marked = old.append_column("stored", pa.repeat(True, old.num_rows))
        renamed = marked.rename_columns([c if c in _GROUP else "old\0" + c for c in marked.column_names])
        joined = partial.join(renamed, keys=_GROUP, join_type="left outer")
        columns = {g: joined.column(g) for g in _GROUP}
        for flat, _, op, _ in self._flat():
            new, was = joined.column(flat), joined.column("old\0" + flat)
            if op == "count":
                columns[flat] = pc.add(new, pc.fill_null(was, 0))
            elif op == "sum":
                columns[flat] = pc.coalesce(pc.add(was, new), new, was)
            elif op in ("min", "max"):
                columns[flat] = (pc.min_element_wise if op == "min" else pc.max_element_wise)(was, new)
            else:  # last: the microbatch's
                columns[flat] = new
        columns["stored"] = pc.is_valid(joined.column("old\0stored"))
        merged = pa.table(columns)
        rest = marked.join(partial.select(_GROUP), keys=_GROUP, join_type="left anti")
        return pa.concat_tables([rest.append_column("touched", pa.repeat(False, rest.num_rows)),
                                 merged.append_column("touched", pa.repeat(True, merged.num_rows))
                                 .cast(rest.schema.append(pa.field("touched", pa.bool_())))])

    # -- firing and writing --------------------------------------------------------------------------------------
    def _fire(self, fired) -> None:
        """The due windows' rows to the sink, in the per-record path's order (end, key group, key)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        runner = self.runner
        runner.stats.timers_fired += fired.num_rows
        if not fired.num_rows:
            return
        fired = fired.take(pc.sort_indices(fired, [(g, "ascending") for g in ("start", "key_group", "key")]))
        fn = self.fn
        start = fired.column("start")
        row = {**arrow_key_columns(fn.key_name, runner.plan.key_type, fired.column("key").combine_chunks()),
               "window_start": start, "window_end": pc.add(start, fn.size)}
        for name, op, _ in fn.aggregates:
            out = fn.names.get(name, name)
            if op == "avg":
                count = fired.column(name + "\0count")
                row[out] = pc.if_else(pc.greater(count, 0), pc.divide(fired.column(name + "\0sum"),
                                                                         pc.cast(count, pa.float64())),
                                       pa.scalar(None, pa.float64()))
            else:
                row[out] = fired.column(name)
        out_type = runner.plan.output_type.arrow_type()
        output = pa.table([row[f.name] for f in out_type], schema=pa.schema(list(out_type)))
        runner.files.sink.add_table(runner.batch_id, output)
        runner.stats.records_out += output.num_rows

    def _write(self, kept, fired) -> None:
        """The keyed table's changes: touched open windows' accumulators (and a timer for each new one), and the
        removal of every fired window that was stored; counted in the microbatch's stats."""
        import pyarrow as pa
        import pyarrow.compute as pc

        upserts = kept.filter(kept.column("touched"))
        created = upserts.filter(pc.invert(upserts.column("stored")))
        removed = fired.filter(fired.column("stored"))
        if not (upserts.num_rows or removed.num_rows):
            return
        parts = [self._entries(self.qname, upserts, self._texts(upserts)),
                 self._entries(self.timer_name, created, None),
                 self._entries(self.qname, removed, pa.nulls(removed.num_rows, pa.string())),
                 self._entries(self.timer_name, removed, pa.nulls(removed.num_rows, pa.string()))]
        table = pa.concat_tables(parts)
        runner = self.runner
        runner.files.keyed.add_columns(runner.batch_id, [table.column(c) for c in table.column_names])
        stats = runner.stats
        stats.state_upserts += upserts.num_rows + created.num_rows
        stats.state_deletes += 2 * removed.num_rows
        if created.num_rows or removed.num_rows:  # each window has one entry of each
            for name in (self.qname, self.timer_name):
                stats.entries_delta[name] = stats.entries_delta.get(name, 0) + created.num_rows - removed.num_rows

    def _texts(self, windows):
        """The stored text of each window's accumulator, as the per-record path writes it."""
        import pyarrow as pa

        fields = []
        for name, op, _ in self.fn.aggregates:
            if op == "avg":
                fields.append(pa.StructArray.from_arrays(
                    [windows.column(name + "\0count").combine_chunks(),
                     windows.column(name + "\0sum").combine_chunks()],
                    ["count", "sum"]))
            else:
                fields.append(windows.column(name).combine_chunks())
        struct = pa.StructArray.from_arrays(fields, [n for n, _, _ in self.fn.aggregates])
        return encode_column(self.acc_type, struct)

    def _entries(self, state_name: str, windows, values):
        """Keyed table rows of ``state_name`` for ``windows``: the accumulator texts ``values``, or (None) the
        window's timer at its end - 1; a null value removes the entry."""
        import pyarrow as pa
        import pyarrow.compute as pc

        n, batch_id = windows.num_rows, self.runner.batch_id
        start = windows.column("start")
        end = pc.add(start, self.fn.size)
        namespace = pc.binary_join_element_wise(pc.cast(start, pa.string()), pc.cast(end, pa.string()), ":")
        if state_name == self.timer_name:
            timestamp = pc.subtract(end, 1)
            text = pc.cast(timestamp, pa.string())
            user_key, value = text, (text if values is None else values)
            expiry = timestamp if values is None else pa.nulls(n, pa.int64())
        else:
            user_key, value, expiry = pa.nulls(n, pa.string()), values, pa.nulls(n, pa.int64())
        columns = keyed_columns(state_name=pa.repeat(state_name, n), key_group=windows.column("key_group"),
                                key=windows.column("key"), namespace=namespace, user_key=user_key, value=value,
                                expiry=expiry, batch_id=pa.repeat(batch_id, n), generation=pa.repeat(0, n))
        return pa.table({name: (c.combine_chunks() if hasattr(c, "combine_chunks") else c)
                         for name, c in zip(KeyedRow._fields, columns)})
