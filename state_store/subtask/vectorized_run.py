"""A subtask's side of a VectorizedKeyedFunction: one ``process_batch`` call per microbatch.

``runner.SubtaskRunner`` hands this its keyed records as Arrow slices of the
exchange batches (``add``, in no order) and calls ``run`` at the end of each
microbatch, before its flush. ``run`` sorts the records by key, reads the touched keys'
stored values column-wise, calls the function, writes the output table to the
sink file and the changed values (encoded column-wise, in the per-record
path's stored format) to the keyed table, makes them the stored values, and
counts them in the microbatch's stats as the per-record path does.

The stored values stay Arrow: each ValueState's (and ListState's) entries are a
table of key, text and expiry (a MapState's of key, user key and text), which
the state the run loaded (``load``) starts and each microbatch's changes replace
rows of; no Python object per entry.
"""
from __future__ import annotations

from ..errors import ConfigError, StoredValueError
from ..keys import arrow_keys, row_tuple
from ..records.layout import keyed_columns
from ..side_outputs import OutputTag
from ..state.ttl.rules import read_baseline, read_values, write_expiries
from ..timers import TimeDomain
from ..vectorized import BatchContext, as_table, batch_states, conform, state_column_type
from .batch_timers import BatchTimers
from .exchange import SORT_ONLY_COLUMNS, record_order
from .json_columns import decode_column, encode_column


class VectorizedRun:
    """The records of the microbatch being processed, and the call at its end, for one ``SubtaskRunner``."""

    loads_timers = True  # every stored keyed part comes here: state as Arrow, timers to ``BatchTimers``
    fires_timers = True  # ``fire_timers``: on_timer_batch, a call for a microbatch's due timers

    def __init__(self, runner):
        self.runner = runner
        self._slices: list = []
        self._key_offsets = None  # where each key's records start, and their end (``_sorted``)
        self._loaded: list = []  # Arrow slices of the stored keyed entries the run loaded
        self._entries: dict = {}  # state -> Arrow table of its stored key, text, expiry (``_stored``)
        self._calling = "process_batch"  # the call whose result is being taken (``_call``)
        self._staged: dict = {}  # state -> tables of the entries the microbatch's calls changed (``_stage``)
        self.timers = BatchTimers(runner.plan.uid)

    def load(self, part) -> None:
        """Stored keyed entries (a slice of an exchange batch), before the first microbatch: state kept as Arrow,
        timers given to ``BatchTimers``."""
        import pyarrow as pa
        import pyarrow.compute as pc

        names = pa.array(list(self.timers.names.values()), pa.string())
        timer = pc.is_in(part.column("state_name"), value_set=names)
        if pc.any(timer).as_py():
            self.timers.load(part.filter(timer))
            part = part.filter(pc.invert(timer))
        self._loaded.append(part.select(["state_name", "key", "namespace", "user_key", "value", "expiry"]))

    def _stored(self, qname: str, map_state: bool = False):
        """The state's stored entries: a table of ``key``, ``text``, ``expiry`` (of ``key``, ``user_key``,
        ``text`` for a map), made on first use from what the run loaded, and any entry that reached the subtask's
        store row by row."""
        import pyarrow as pa
        import pyarrow.compute as pc

        table = self._entries.get(qname)
        if table is None:
            parts = [p.filter(pc.and_(pc.equal(p.column("state_name"), qname),
                                      pc.equal(p.column("namespace"), "")))
                     for p in self._loaded]
            if map_state:  # a map's entries, each under its user key
                return self._stored_map(qname, parts)
            parts = [pa.table({"key": p.column("key"), "text": p.column("value"), "expiry": p.column("expiry")})
                     for p in parts if p.num_rows]
            rows = self.runner.store.stored_entries(qname)
            if rows:
                keys, texts, expiries = zip(*rows)
                parts.append(pa.table({"key": pa.array(keys, pa.string()), "text": pa.array(texts, pa.string()),
                                       "expiry": pa.array(expiries, pa.int64())}))
            schema = pa.schema([("key", pa.string()), ("text", pa.string()), ("expiry", pa.int64())])
            table = (pa.concat_tables([p.cast(schema) for p in parts]).combine_chunks() if parts
                     else schema.empty_table())
            self._entries[qname] = table
        return table

    def _stored_map(self, qname: str, parts: list):
        import pyarrow as pa

        schema = pa.schema([("key", pa.string()), ("user_key", pa.string()), ("text", pa.string())])
        tables = [pa.table({"key": p.column("key"), "user_key": p.column("user_key"), "text": p.column("value")})
                  for p in parts if p.num_rows]
        rows = self.runner.store.stored_map_entries(qname)
        if rows:
            tables.append(pa.table(dict(zip(schema.names, map(list, zip(*rows))))))
        table = (pa.concat_tables([t.cast(schema) for t in tables]).combine_chunks() if tables
                 else schema.empty_table())
        self._entries[qname] = table
        return table

    def _replace(self, qname: str, keys, texts, expiries) -> None:
        """Make ``texts`` (null: removed) and ``expiries`` the stored values of ``keys``."""
        import pyarrow as pa
        import pyarrow.compute as pc

        table = self._stored(qname)
        kept = table.filter(pc.invert(pc.is_in(table.column("key"), value_set=keys)))
        live = pc.is_valid(texts)
        changed = pa.table({"key": keys, "text": texts, "expiry": expiries}).filter(live)
        self._entries[qname] = pa.concat_tables([kept, changed.cast(kept.schema)]).combine_chunks()

    def add(self, batch) -> None:
        """Keyed records of the current microbatch: a slice of an exchange batch."""
        self._slices.append(batch.select(["key", "key_group", "record", "input", *SORT_ONLY_COLUMNS]))

    def run(self) -> None:
        """The microbatch's ``process_batch`` call (none without records) and its writes."""
        import pyarrow as pa

        slices, self._slices = self._slices, []
        if not slices:
            return
        runner = self.runner
        states = batch_states(runner.runtime_ctx, runner.function)
        keys, records = self._sorted(pa.Table.from_batches(slices))
        state, stored = self._state(keys, states)
        output, new_state = self._call("process_batch", records, state, keys, runner.watermark)
        stats = runner.stats
        stats.records_in += records.num_rows
        stats.keys += keys.num_rows
        self._results(keys, states, stored, output, new_state)

    def fire_timers(self, watermark: int) -> None:
        """After the microbatch's ``process_batch``: the timers due at ``watermark`` and at its processing time, in
        one ``on_timer_batch`` call, then again for timers that call registered at or below the clocks, until
        none is due (the per-record path's loop, a call per round instead of per timer)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        runner = self.runner
        clocks = ((TimeDomain.EVENT_TIME, watermark),
                  (TimeDomain.PROCESSING_TIME, runner.timer_service.processing_time))
        states = None  # the function's states, asked once a microbatch, when a timer is first due
        while True:
            due = []
            for domain, now in clocks:
                popped = self.timers.pop_due(domain, now)
                due.append(popped.append_column("time_domain", pa.array(np.full(popped.num_rows, int(domain)),
                                                                        pa.int8())))
            fired = pa.concat_tables(due)
            if not fired.num_rows:
                return
            runner.stats.timers_fired += fired.num_rows
            if not runner.function.has_batch_timers:  # timers restored into a function without: as on_timer
                continue
            # a key's timers together (keys in key-group order), each key's in firing order: event time first
            fired = fired.sort_by([("key_group", "ascending"), ("key", "ascending"), ("time_domain", "ascending"),
                                   ("timestamp", "ascending")])
            texts = fired.column("key").combine_chunks()
            n = len(texts)
            starts = pa.array([0], pa.int64())
            if n > 1:
                starts = pa.concat_arrays([starts, pc.add(pc.indices_nonzero(
                    pc.not_equal(texts.slice(1), texts.slice(0, n - 1))), 1)])
            keys = pa.table({"text": texts.take(starts), "key": arrow_keys(runner.plan.key_type, texts.take(starts)),
                             "key_group": fired.column("key_group").combine_chunks().take(starts)})
            self._key_offsets = np.append(starts.to_numpy(), n)
            table = pa.table({"key": arrow_keys(runner.plan.key_type, texts), "timestamp": fired.column("timestamp"),
                              "time_domain": fired.column("time_domain")})
            states = states if states is not None else batch_states(runner.runtime_ctx, runner.function)
            state, stored = self._state(keys, states)
            output, new_state = self._call("on_timer_batch", table, state, keys, watermark)
            self._results(keys, states, stored, output, new_state)

    def _timers(self, keys, domain: int, delete: bool, key_values, timestamps) -> None:
        """``BatchContext``'s timer calls: each of ``key_values`` (keys of this call's ``state``) gets (or loses) a
        timer of ``domain`` at the timestamp beside it."""
        import pyarrow as pa
        import pyarrow.compute as pc

        known = keys.column("key").combine_chunks()
        wanted = key_values.combine_chunks() if isinstance(key_values, pa.ChunkedArray) else (
            key_values if isinstance(key_values, pa.Array) else pa.array(list(key_values), known.type))
        stamps = timestamps.combine_chunks() if isinstance(timestamps, pa.ChunkedArray) else (
            timestamps if isinstance(timestamps, pa.Array) else pa.array(list(timestamps), pa.int64()))
        what = f"ctx.{'delete' if delete else 'register'}_{('event', 'processing')[domain]}_time_timers"
        if len(wanted) != len(stamps):
            raise ConfigError(f"{what}: {len(wanted)} keys but {len(stamps)} timestamps; give one timestamp per key")
        if stamps.null_count:
            raise ConfigError(f"{what}: a timestamp is null; give every timer a timestamp (epoch ms)")
        try:
            stamps = pc.cast(stamps, pa.int64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise ConfigError(f"{what}: the timestamps are not 64-bit longs of epoch milliseconds ({e})") from None
        at = _key_positions(known, wanted)
        if at.null_count:
            stray = wanted.filter(pc.is_null(at))[0].as_py()
            raise ConfigError(f"{what}: key {stray!r} is not a key of this call's state; register timers for the "
                              f"keys of the state table")
        texts = keys.column("text").combine_chunks().take(at)
        if delete:
            self.timers.delete(TimeDomain(domain), texts, stamps)
        else:
            self.timers.register(TimeDomain(domain), texts, keys.column("key_group").combine_chunks().take(at), stamps)

    def _results(self, keys, states: dict, stored: dict, output, new_state) -> None:
        """What a call returned: its output to the sink, its side outputs, its state changes written."""
        runner, stats = self.runner, self.runner.stats
        if output is not None:
            out_type = runner.plan.output_type.arrow_type()
            output = conform(output, list(out_type), f"{self._calling}'s output",
                             "return the columns of the job's output_type")
            runner.files.sink.add_table(runner.batch_id, output)
            stats.records_out += output.num_rows
        self._side_tables()
        updates = {} if new_state is None else self._updates(keys, states, new_state)
        for qname, descriptor in states.items():
            if descriptor.kind == "map":
                if qname in updates:
                    self._write_map(qname, descriptor, keys, updates[qname])
            elif qname in updates or descriptor.ttl_config is not None:  # TTL: expired values go, reads restamp
                self._write_state(qname, descriptor, keys, stored[qname], updates.get(qname))

    def _sorted(self, table):
        """(a table of the distinct keys: ``text``, ``key`` (typed), ``key_group``, in key order; the records
        table sorted by key, a key's records as the per-record path reads them: ``exchange.record_order``);
        where each key's records start is kept for the context."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        key_type = self.runner.plan.key_type
        if table.column("key").null_count:
            raise ConfigError("a record has a null key; filter or fill null keys in the source")
        typed = arrow_keys(key_type, table.column("key"))
        # A row key (a composite key) is ordered and told apart by its text, which is as unique (Arrow does not
        # compare structs); other keys by their value.
        ordered = table.column("key") if pa.types.is_struct(typed.type) else typed
        order = record_order(table, self.runner.plan.order_by, ordered)
        table, typed, ordered = table.take(order), typed.take(order).combine_chunks(), ordered.take(order)
        ordered = ordered.combine_chunks()
        records = pa.Table.from_struct_array(table.column("record").combine_chunks())
        n = len(typed)
        starts = pa.array([0], pa.int64())
        if n > 1:
            changed = pc.not_equal(ordered.slice(1), ordered.slice(0, n - 1))
            starts = pa.concat_arrays([starts, pc.add(pc.indices_nonzero(changed), 1)])
        keys = pa.table({"text": table.column("key").take(starts), "key": typed.take(starts),
                         "key_group": table.column("key_group").take(starts)})
        self._key_offsets = np.append(starts.to_numpy(), n)
        return keys, records

    def _state(self, keys, states: dict):
        """The ``state`` table the function gets, and each state's stored texts and expiries (beside ``keys``).
        With TTL, every key's value is read as ``ttl.rules.read_values`` says."""
        import pyarrow as pa
        import pyarrow.compute as pc

        store = self.runner.store
        text_keys = keys.column("text").combine_chunks()
        columns, stored = {"key": keys.column("key")}, {}
        for qname, descriptor in states.items():
            if descriptor.kind == "map":
                columns[descriptor.name] = self._map_column(qname, descriptor, text_keys)
                continue
            entries = self._stored(qname)
            at = pc.index_in(text_keys, value_set=entries.column("key"))
            texts, expiries = entries.column("text").take(at), entries.column("expiry").take(at)
            texts, expiries = texts.combine_chunks(), expiries.combine_chunks()
            stored[qname] = texts, expiries
            column = decode_column(descriptor.stored_type, texts, text_keys, qname)
            columns[descriptor.name] = read_values(descriptor.ttl_config, store.now, texts, expiries, column)
        return pa.table(columns), stored

    def _map_column(self, qname: str, descriptor, text_keys):
        """A map state's column beside ``text_keys``: each key's stored entries as an Arrow map (user keys in
        their stored texts' order, as the per-record path's ``keys()``), null where it has none."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        entries = self._stored(qname, map_state=True)
        mine = entries.filter(pc.is_in(entries.column("key"), value_set=text_keys))
        mine = mine.append_column("at", pc.index_in(mine.column("key"), value_set=text_keys))
        mine = mine.sort_by([("at", "ascending"), ("user_key", "ascending")])
        counts = np.bincount(mine.column("at").to_numpy(), minlength=len(text_keys))
        offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]), pa.int32())
        texts = mine.column("key").combine_chunks()
        user_keys = decode_column(descriptor.key_type, mine.column("user_key").combine_chunks(), texts, qname)
        values = decode_column(descriptor.value_type, mine.column("text").combine_chunks(), texts, qname)
        maps = pa.MapArray.from_arrays(offsets, user_keys, values, type=state_column_type(descriptor))
        return pc.if_else(pa.array(counts > 0), maps, pa.scalar(None, maps.type))

    def _write_map(self, qname: str, descriptor, keys, update) -> None:
        """A map state's new maps of the keys at ``update``'s positions, each replacing the key's whole map: the
        entries added or changed written, those gone written as removed (tombstones), the rest left alone."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        at, maps = update
        text_keys = keys.column("text").combine_chunks().take(at)
        entries_of = pa.StructArray.from_arrays([maps.keys, maps.items], names=["user_key", "value"])
        maps = pa.ListArray.from_arrays(maps.offsets, entries_of, mask=maps.is_null())  # Arrow's list kernels
        lengths = pc.fill_null(pc.list_value_length(maps), 0).to_numpy()
        flat = pc.list_flatten(maps)
        parent = pa.array(np.repeat(np.arange(len(maps)), lengths))
        new = pa.table({"key": text_keys.take(parent),
                        "user_key": encode_column(descriptor.key_type, flat.field(0)),
                        "new": encode_column(descriptor.value_type, flat.field(1))})
        if new.group_by(["key", "user_key"]).aggregate([]).num_rows != new.num_rows:
            raise ConfigError(f"{self._calling}'s new state of {descriptor.name!r} maps a user key twice in one "
                              f"key's map; give each user key once")
        entries = self._stored(qname, map_state=True)
        touched = pc.is_in(entries.column("key"), value_set=text_keys)
        old = entries.filter(touched).rename_columns(["key", "user_key", "old"])
        both = new.join(old, keys=["key", "user_key"], join_type="full outer")
        new_text, old_text = both.column("new"), both.column("old")
        written = both.filter(pc.invert(_same(new_text, old_text)))
        n = written.num_rows
        self._entries[qname] = pa.concat_tables(
            [entries.filter(pc.invert(touched)), new.rename_columns(["key", "user_key", "text"])]).combine_chunks()
        if not n:
            return
        key_groups = keys.column("key_group").combine_chunks().take(
            pc.index_in(written.column("key"), value_set=keys.column("text").combine_chunks()))
        self._stage(qname, key_groups, written.column("key"), written.column("user_key"), written.column("new"),
                    pa.nulls(n, pa.int64()), written.column("old"), pa.nulls(n, pa.int64()))

    def _call(self, name: str, records, state, keys, watermark: int):
        """The function's ``process_batch`` (or ``on_timer_batch``) over ``records`` (or the timers) and ``state``."""
        from functools import partial

        runner = self.runner
        function = runner.function
        self._calling = function.call_names.get(name, name)  # what errors about it and its result name
        ctx = self._ctx = BatchContext(runner.batch_id, runner.store.now, watermark, runner.subtask,
                                       runner.plan.key_type, self._key_offsets)
        ctx.timers = partial(self._timers, keys)
        pandas = function.batch_format == "pandas"
        try:
            result = getattr(function, name)(records.to_pandas() if pandas else records,
                                              state.to_pandas() if pandas else state, ctx)
        except (StoredValueError, ConfigError):
            raise
        except Exception as e:  # reported with where it happened
            raise runner._user_error(self._calling, e, None) from e
        if not isinstance(result, tuple) or len(result) != 2:
            raise ConfigError(f"{self._calling} returned {type(result).__name__}; return a pair (output rows, new "
                              f"state rows), e.g. (pyarrow.Table, pyarrow.Table) or (table, None)")
        return result

    def _side_tables(self) -> None:
        """The tables ``process_batch`` sent to side outputs (``BatchContext.output``), checked and written."""
        runner = self.runner
        for tag, rows in self._ctx.side_tables:
            declared = runner.plan.side_outputs.get(getattr(tag, "name", None))
            if not isinstance(tag, OutputTag) or declared is None:
                raise ConfigError(f"ctx.output({tag!r}, ...): the job declares no such side output; add it to "
                                  f"side_outputs=[...] (declared: {sorted(runner.plan.side_outputs)})")
            table = conform(rows, list(declared.arrow_type()), f"the rows of side output {tag.name!r}",
                            "give the tag's columns")
            if not table.num_rows:
                continue
            runner.files.sides[tag.table].add_table(runner.batch_id, table)
            runner.stats.side_out += table.num_rows
            runner.stats.side_rows[tag.name] = runner.stats.side_rows.get(tag.name, 0) + table.num_rows

    def _updates(self, keys, states: dict, new_state) -> dict:
        """Qualified state name -> (the positions among ``keys`` of the keys ``new_state`` writes, ascending;
        their new values), checked."""
        import pyarrow as pa
        import pyarrow.compute as pc

        declared = {d.name: (qname, d) for qname, d in states.items()}
        key_field = pa.field("key", keys.column("key").type)
        what = f"{self._calling}'s new state"
        new_state = as_table(new_state, what)
        names = new_state.column_names
        unknown = [n for n in names if n != "key" and n not in declared]
        if "key" not in names or unknown:
            raise ConfigError(f"{what} has columns {names}: it needs 'key' and columns named "
                              f"after the declared states {sorted(declared)}" +
                              (f" ({unknown} are not declared)" if unknown else ""))
        fields = [key_field] + [pa.field(n, state_column_type(declared[n][1])) for n in names if n != "key"]
        new_state = conform(new_state, fields, what, "return 'key' and state columns")
        at = self._positions(keys, new_state.column("key").combine_chunks(), what)
        order = pc.sort_indices(at)  # in key order, as the per-record path's flush writes them
        at = at.take(order)
        updates = {}
        for name in names:
            if name != "key":
                column = new_state.column(name).combine_chunks().take(order)
                if declared[name][1].kind == "list":  # an empty list clears the state, as ListState.update([])
                    column = pc.if_else(pc.equal(pc.fill_null(pc.list_value_length(column), 0), 0),
                                        pa.scalar(None, column.type), column)
                updates[declared[name][0]] = at, column
        return updates

    @staticmethod
    def _positions(keys, new_keys, what: str):
        """Where each key of the new state is among the microbatch's keys (an error for a key not there, or
        given twice)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        known = keys.column("key").combine_chunks()
        if new_keys.equals(known):  # the state table's own key column (most functions return it): no lookup
            return pa.array(np.arange(len(known), dtype=np.int32))
        at = _key_positions(known, new_keys)
        if at.null_count:
            stray = new_keys.filter(pc.is_null(at))[0].as_py()
            raise ConfigError(f"{what} has key {stray!r}, which has no record in this microbatch "
                              f"of this subtask; return values for keys of the state table only")
        if pc.count_distinct(at).as_py() != len(at):
            raise ConfigError(f"{what} has a key twice; return one row per key")
        return at

    def _write_state(self, qname: str, descriptor, keys, stored, update) -> None:
        """One state's changes: ``update`` (positions, values) or None; with TTL, expired values removed and
        reads restamped (``ttl.rules.read_baseline``). What changed is written and stored."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        old_text, old_expiry = stored
        ttl, now = descriptor.ttl_config, self.runner.store.now
        new_text, new_expiry = (old_text, old_expiry) if ttl is None else read_baseline(ttl, now, *stored)
        if update is not None:
            at, values = update
            mask = np.zeros(len(old_text), dtype=bool)
            mask[at.to_numpy()] = True
            written = encode_column(descriptor.stored_type, values)
            new_text = pc.replace_with_mask(new_text, pa.array(mask), written)
            new_expiry = pc.replace_with_mask(new_expiry, pa.array(mask), write_expiries(ttl, now, written))
        changed = pc.invert(pc.and_(_same(new_text, old_text), _same(new_expiry, old_expiry)))
        self._write_changes(qname, keys, pc.indices_nonzero(changed), old_text, new_text, new_expiry, old_expiry)

    def _write_changes(self, qname: str, keys, at, old_text, new_text, new_expiry, old_expiry) -> None:
        """The entries at ``at``: made the stored values, and staged for the keyed table (``_stage``)."""
        import pyarrow as pa

        n = len(at)
        if not n:
            return
        new, expiry = new_text.take(at), new_expiry.take(at)
        text_keys = keys.column("text").combine_chunks().take(at)
        self._replace(qname, text_keys, new, expiry)
        self._stage(qname, keys.column("key_group").combine_chunks().take(at), text_keys, pa.nulls(n, pa.string()),
                    new, expiry, old_text.take(at), old_expiry.take(at))

    def _stage(self, qname: str, key_groups, keys, user_keys, values, expiries, olds, old_expiries) -> None:
        """Entries a call changed, with what they held before it: written at the microbatch's end (``flush``),
        once each, as the per-record path's flush writes a microbatch's changes."""
        import pyarrow as pa

        self._staged.setdefault(qname, []).append(pa.table({
            "key_group": pa.array(key_groups, pa.int32()), "key": keys, "user_key": user_keys, "value": values,
            "expiry": pa.array(expiries, pa.int64()), "old": olds, "old_expiry": pa.array(old_expiries, pa.int64())}))

    def flush(self) -> None:
        """The microbatch's staged changes to the keyed table and the stats: an entry changed by several calls
        (``process_batch``, then ``on_timer_batch``) once, with its last value, and not at all when that is what it
        held before the microbatch."""
        import pyarrow as pa
        import pyarrow.compute as pc

        staged, self._staged = self._staged, {}
        runner = self.runner
        for columns in self.timers.flush(runner.batch_id, runner.stats):
            runner.files.keyed.add_columns(runner.batch_id, columns)
        for qname, parts in staged.items():
            table = parts[0]
            if len(parts) > 1:
                keep = pc.ScalarAggregateOptions(skip_nulls=False)  # a null is a removal: a value like another
                table = pa.concat_tables(parts).group_by(["key", "user_key"], use_threads=False).aggregate(
                    [("key_group", "first"), ("value", "last", keep), ("expiry", "last", keep), ("old", "first", keep),
                     ("old_expiry", "first", keep)]).rename_columns(
                    ["key", "user_key", "key_group", "value", "expiry", "old", "old_expiry"])
                same = pc.and_(_same(table.column("value"), table.column("old")),
                               _same(table.column("expiry"), table.column("old_expiry")))
                table = table.filter(pc.invert(same))
            n = table.num_rows
            if not n:
                continue
            value, old = table.column("value"), table.column("old")
            batch_id = runner.batch_id
            runner.files.keyed.add_columns(batch_id, keyed_columns(
                state_name=pa.repeat(qname, n), key_group=table.column("key_group"), key=table.column("key"),
                namespace=pa.repeat("", n), user_key=table.column("user_key"), value=value,
                expiry=table.column("expiry"), batch_id=pa.repeat(batch_id, n), generation=pa.repeat(0, n)))
            deletes = value.null_count
            stats = runner.stats
            stats.state_deletes += deletes
            stats.state_upserts += n - deletes
            created = pc.sum(pc.and_(pc.is_valid(value), pc.is_null(old))).as_py() or 0
            removed = pc.sum(pc.and_(pc.is_null(value), pc.is_valid(old))).as_py() or 0
            if created or removed:  # as ``MicrobatchStats.count_writes``: a state that gained and lost entries
                stats.entries_delta[qname] = stats.entries_delta.get(qname, 0) + created - removed


def _key_positions(known, wanted):
    """Where each of ``wanted`` (typed keys) is among ``known`` (a call's keys), null where it is not; a composite
    key by its values, as Arrow looks up no structs."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_struct(known.type):
        where = {row_tuple(k): i for i, k in enumerate(known.to_pylist())}
        return pa.array([where.get(row_tuple(k)) for k in wanted.to_pylist()], pa.int32())
    return pc.index_in(wanted, value_set=known)


def _same(a, b):
    """Element-wise: equal, two nulls counting as equal."""
    import pyarrow.compute as pc

    return pc.if_else(pc.is_null(a), pc.is_null(b), pc.fill_null(pc.equal(a, b), False))
