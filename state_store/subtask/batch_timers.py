"""A vectorised run's timers as Arrow tables: what ``SubtaskTimers`` is to the per-record path, a column at a time.

Each time domain keeps its live timers as a table of ``timestamp``, ``key_group``, ``key`` (one row per timer: a
timer registered twice is kept once), and the set stored at the last flush beside it. ``register`` and
``delete`` take columns, ``pop_due`` takes every timer at or below a clock at once, and ``flush`` gives the
keyed table's rows of what changed since the last flush in the per-record path's form (``SubtaskTimers.flush``:
user key and value the timestamp's text, expiry the timestamp; a removed timer's value and expiry null), so a
job moves between ``on_timer`` and ``on_timer_batch`` through a savepoint. No Python object per timer.
"""
from __future__ import annotations

from ..errors import ConfigError
from ..records.layout import keyed_columns
from ..timers import TimeDomain, timer_state_names


def _schema():
    import pyarrow as pa

    return pa.schema([("timestamp", pa.int64()), ("key_group", pa.int32()), ("key", pa.string()),
                      ("id", pa.string())])


def _ids(table):
    """A timer's identity as one string column (timestamp and key; a key's key group follows from the key)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.binary_join_element_wise(pc.cast(table.column("timestamp"), pa.string()), table.column("key"), "\x1f")


def _timers(timestamps, key_groups, keys):
    """Timers as a table of ``_schema``, each with its id made once (the live tables keep it)."""
    import pyarrow as pa

    table = pa.table({"timestamp": pa.array(timestamps, pa.int64()) if not isinstance(timestamps, (pa.Array,
                      pa.ChunkedArray)) else timestamps, "key_group": key_groups, "key": keys})
    table = table.cast(pa.schema(list(_schema())[:3]))
    return table.append_column("id", _ids(table))


class BatchTimers:
    """One subtask's timers of one run, per time domain, as Arrow tables (see the module docstring)."""

    def __init__(self, uid: str):
        self.names = timer_state_names(uid)
        self._domains = {name: domain for domain, name in self.names.items()}
        empty = _schema().empty_table()
        self._live = dict.fromkeys(TimeDomain, empty)
        self._stored = dict.fromkeys(TimeDomain, empty)
        self.loaded = 0  # stored timers given to this subtask

    def load(self, part) -> None:
        """Stored timers: rows of the keyed table (an exchange batch's slice) of this operator's timer states."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if pc.any(pc.not_equal(part.column("namespace"), "")).as_py():
            raise ConfigError("the restored state has timers in namespaces (a window's); a VectorizedKeyedFunction's "
                              "timers have none: restore it into the window job it was taken from")
        for name, domain in self._domains.items():
            mine = part.filter(pc.equal(part.column("state_name"), name))
            if mine.num_rows:
                table = _timers(mine.column("expiry"), mine.column("key_group"), mine.column("key"))
                self._live[domain] = pa.concat_tables([self._live[domain], table]).combine_chunks()
                self._stored[domain] = self._live[domain]
                self.loaded += mine.num_rows

    def register(self, domain: TimeDomain, keys, key_groups, timestamps) -> None:
        """A timer of ``domain`` for each key at the timestamp beside it (columns); those already live are kept."""
        import pyarrow as pa
        import pyarrow.compute as pc

        new = _timers(timestamps, key_groups, keys)
        live = self._live[domain]
        new = new.filter(pc.invert(pc.is_in(new.column("id"), value_set=live.column("id"))))
        if new.num_rows:
            first = new.group_by(["timestamp", "key", "id"], use_threads=False).aggregate([("key_group", "first")])
            if first.num_rows != new.num_rows:  # a timer given twice in one call: once
                new = first.select(["timestamp", "key_group_first", "key", "id"]).rename_columns(_schema().names)
            self._live[domain] = pa.concat_tables([live, new.cast(_schema())]).combine_chunks()

    def delete(self, domain: TimeDomain, keys, timestamps) -> None:
        """Delete the timer of ``domain`` for each key at the timestamp beside it, where there is one."""
        import pyarrow as pa
        import pyarrow.compute as pc

        gone = pa.table({"timestamp": pa.array(timestamps, pa.int64()), "key": keys})
        live = self._live[domain]
        self._live[domain] = live.filter(pc.invert(pc.is_in(live.column("id"), value_set=_ids(gone))))

    def pop_due(self, domain: TimeDomain, up_to: int):
        """Every timer of ``domain`` at or below ``up_to``, removed, in firing order (timestamp, key group, key)."""
        import pyarrow.compute as pc

        live = self._live[domain]
        due = pc.less_equal(live.column("timestamp"), up_to)
        fired = live.filter(due)
        if fired.num_rows:
            self._live[domain] = live.filter(pc.invert(due))
        return fired.sort_by([("timestamp", "ascending"), ("key_group", "ascending"), ("key", "ascending")])

    def flush(self, batch_id: int, stats) -> list:
        """The keyed table's columns of the timers registered, deleted or fired since the last flush (counted in
        ``stats`` as the per-record path's are); they become the stored ones. Empty: nothing changed."""
        import pyarrow as pa
        import pyarrow.compute as pc

        parts = []
        for domain, name in self.names.items():
            live, stored = self._live[domain], self._stored[domain]
            if live is stored:
                continue
            live_ids, stored_ids = live.column("id"), stored.column("id")
            added = live.filter(pc.invert(pc.is_in(live_ids, value_set=stored_ids)))
            removed = stored.filter(pc.invert(pc.is_in(stored_ids, value_set=live_ids)))
            self._stored[domain] = live
            for table, alive in ((added, True), (removed, False)):
                n = table.num_rows
                if not n:
                    continue
                text = pc.cast(table.column("timestamp"), pa.string())
                parts.append(keyed_columns(
                    state_name=pa.repeat(name, n), key_group=table.column("key_group"), key=table.column("key"),
                    namespace=pa.repeat("", n), user_key=text, value=text if alive else pa.nulls(n, pa.string()),
                    expiry=table.column("timestamp") if alive else pa.nulls(n, pa.int64()),
                    batch_id=pa.repeat(batch_id, n), generation=pa.repeat(0, n)))
                if alive:
                    stats.state_upserts += n
                else:
                    stats.state_deletes += n
                stats.entries_delta[name] = stats.entries_delta.get(name, 0) + (n if alive else -n)
        return parts
