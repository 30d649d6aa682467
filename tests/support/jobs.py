"""Jobs used by the tests: small, deterministic, and touching every kind of state."""
from __future__ import annotations

from state_store import (
    AggregateFunction,
    AggregatingStateDescriptor,
    FileSource,
    JobSpec,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    Types,
    ValueStateDescriptor,
)

EVENT = Types.ROW_NAMED(["k", "v", "op", "seq"], [Types.STRING(), Types.LONG(), Types.STRING(), Types.LONG()])
RULE = Types.ROW_NAMED(["name", "factor"], [Types.STRING(), Types.LONG()])
OUTPUT = Types.ROW_NAMED(
    ["k", "batch", "count", "items", "tags", "total", "avg", "ns_count", "factor"],
    [Types.STRING(), Types.LONG(), Types.LONG(), Types.LIST(Types.LONG()), Types.MAP(Types.STRING(), Types.LONG()),
     Types.LONG(), Types.DOUBLE(), Types.LONG(), Types.LONG()],
)
FACTORS = MapStateDescriptor("factors", Types.STRING(), Types.LONG())


class Mean(AggregateFunction):
    def create_accumulator(self):
        return [0, 0]

    def add(self, value, acc):
        return [acc[0] + value, acc[1] + 1]

    def get_result(self, acc):
        return acc[0] / acc[1]

    def merge(self, a, b):
        return [a[0] + b[0], a[1] + b[1]]


class AllStates(KeyedBroadcastProcessFunction):
    """Per key: a count (Value), the values (List), tag counts (Map), a sum (Reducing), a mean (Aggregating),
    a per-namespace counter, plus operator, union, broadcast and raw state.

    An event with op 'clear' clears the key's state; op 'tag' counts v under tag 'even'/'odd'.
    """

    def __init__(self, count_type=None):
        self.count_type = count_type or Types.LONG()

    def initialize_state(self, ctx):
        store = ctx.get_operator_state_store()
        self.batches = store.get_list_state(ListStateDescriptor("batches_seen", Types.LONG()))
        self.union = store.get_union_list_state(ListStateDescriptor("subtasks", Types.INT()))
        raw = ctx.raw_operator_state()
        self.raw_batches = int(raw.decode()) if raw else 0

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", self.count_type, 0))
        self.items = ctx.get_list_state(ListStateDescriptor("items", Types.LONG()))
        self.tags = ctx.get_map_state(MapStateDescriptor("tags", Types.STRING(), Types.LONG()))
        self.total = ctx.get_reducing_state(ReducingStateDescriptor("total", lambda a, b: a + b, Types.LONG()))
        self.mean = ctx.get_aggregating_state(AggregatingStateDescriptor("mean", Mean(), Types.LIST(Types.LONG())))
        self.per_ns = ctx.get_state(ValueStateDescriptor("per_ns", Types.LONG(), 0))
        self.subtask = ctx.get_index_of_this_subtask()

    def process_broadcast_element(self, rule, ctx):
        ctx.get_broadcast_state(FACTORS).put(rule["name"], rule["factor"])

    def process(self, key, records, ctx):
        factor = ctx.get_broadcast_state(FACTORS).get("factor") or 1
        for r in records:
            if r["op"] == "clear":
                for s in (self.count, self.items, self.tags, self.total, self.mean):
                    s.clear()
                continue
            self.count.update(self.count.value() + 1)
            self.items.add(r["v"])
            if r["op"] == "tag":
                tag = "even" if r["v"] % 2 == 0 else "odd"
                self.tags.put(tag, (self.tags.get(tag) or 0) + 1)
            self.total.add(r["v"] * factor)
            self.mean.add(r["v"])
            self.per_ns.set_current_namespace(f"b{ctx.batch_id % 2}")
            self.per_ns.update(self.per_ns.value() + 1)
            self.per_ns.set_current_namespace("")
        self.per_ns.set_current_namespace(f"b{ctx.batch_id % 2}")
        ns_count = self.per_ns.value()
        self.per_ns.set_current_namespace("")
        yield {"k": key, "batch": ctx.batch_id, "count": self.count.value(), "items": self.items.get(),
               "tags": dict(self.tags.items()), "total": self.total.get(), "avg": self.mean.get(),
               "ns_count": ns_count, "factor": factor}

    def snapshot_state(self, ctx):
        self.batches.update([b for b in self.batches.get() if b != ctx.batch_id] + [ctx.batch_id])
        self.union.update([self.subtask])
        ctx.write_raw_operator_state(str(self.raw_batches + 1).encode())
        for kg in list(ctx.key_group_range)[:2]:
            ctx.write_raw_keyed_state(kg, f"kg{kg}".encode())


class CountOnly(KeyedProcessFunction):
    def __init__(self, count_type=None):
        self.count_type = count_type or Types.LONG()

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", self.count_type))

    def process(self, key, records, ctx):
        current = self.count.value() or 0
        self.count.update(current + len(records))
        yield {"k": key, "n": current + len(records)}


class TtlCount(CountOnly):
    """CountOnly whose count lives ``ttl`` (whatever the test gives, bad values too), its TTL config built in
    ``open()`` as users write it; with ``on_operator_state``, an operator list state gets the TTL instead."""

    def __init__(self, ttl, on_operator_state: bool = False):
        super().__init__()
        self.ttl, self.on_operator_state = ttl, on_operator_state

    def _config(self) -> StateTtlConfig:
        return StateTtlConfig.new_builder(self.ttl).build()

    def initialize_state(self, ctx):
        if self.on_operator_state:
            ctx.get_operator_state_store().get_list_state(
                ListStateDescriptor("seen", Types.LONG()).enable_time_to_live(self._config()))

    def open(self, ctx):
        descriptor = ValueStateDescriptor("count", Types.LONG())
        self.count = ctx.get_state(descriptor if self.on_operator_state
                                   else descriptor.enable_time_to_live(self._config()))


class FailingCount(CountOnly):
    """Raises in process: what a bug in a user's function looks like."""

    def process(self, key, records, ctx):
        raise ValueError(f"no records for {key} please")


COUNT_OUTPUT = Types.ROW_NAMED(["k", "n"], [Types.STRING(), Types.LONG()])


def all_states_job(lake, job_id="all-states", **overrides) -> JobSpec:
    spec = JobSpec(
        job_id=job_id,
        function=AllStates(),
        source=FileSource(str(lake.events), "json", EVENT, max_files_per_batch=1),
        broadcast_source=FileSource(str(lake.rules), "json", RULE),
        key="k",
        key_type=Types.STRING(),
        output_type=OUTPUT,
        sink=f"sinks/{job_id}",
        uid="all",
        parallelism=2,
        max_parallelism=16,
        checkpoint_interval=2,
        num_retained=2,
        order_by=["seq"],
    )
    return spec.with_overrides(**overrides)


def count_job(lake, job_id="counts", **overrides) -> JobSpec:
    spec = JobSpec(
        job_id=job_id, function=CountOnly(), source=FileSource(str(lake.events), "json", EVENT, max_files_per_batch=1),
        key="k", key_type=Types.STRING(), output_type=COUNT_OUTPUT, sink=f"sinks/{job_id}", uid="count",
        parallelism=2, max_parallelism=8, checkpoint_interval=1, num_retained=2, order_by=["seq"],
    )
    return spec.with_overrides(**overrides)


def events(batch: int, keys=("a", "b", "c", "d", "e"), per_key: int = 3) -> list[dict]:
    """Deterministic events of one input file."""
    rows = []
    for i, k in enumerate(keys):
        for j in range(per_key):
            seq = batch * 1000 + i * 10 + j
            op = "tag" if j == 0 else ("clear" if (k == "b" and batch == 1 and j == per_key - 1) else "add")
            rows.append({"k": k, "v": batch * 10 + j + i, "op": op, "seq": seq})
    return rows


# -- TTL: a job whose ValueState and ListState live TTL_MS under full-snapshot cleanup (test_ttl_tables,
# test_compaction), one whose only cleanup is incremental (sweep_job), and the clock their microbatches are
# planned by (ticking_clock: 1000 ms apart).
TTL_MS = 1500  # microbatches are 1000 ms apart: an entry not written for two microbatches has expired
TTL_OUT = Types.ROW_NAMED(["k", "batch", "last", "seen"],
                          [Types.STRING(), Types.LONG(), Types.LONG(), Types.LIST(Types.LONG())])


class Remember(KeyedProcessFunction):
    """Per key: the last value (ValueState) and the values seen (ListState), both under a TTL with full snapshot
    cleanup; emits what it read before writing."""

    def ttl(self):
        return StateTtlConfig.new_builder(TTL_MS).cleanup_full_snapshot().build()

    def open(self, ctx):
        config = self.ttl()
        last, seen = ValueStateDescriptor("last", Types.LONG()), ListStateDescriptor("seen", Types.LONG())
        if config is not None:
            last, seen = last.enable_time_to_live(config), seen.enable_time_to_live(config)
        self.last, self.seen = ctx.get_state(last), ctx.get_list_state(seen)

    def process(self, key, records, ctx):
        yield {"k": key, "batch": ctx.batch_id, "last": self.last.value(), "seen": sorted(self.seen.get())}
        for r in records:
            self.last.update(r["v"])
            self.seen.add(r["v"])


def ttl_job(lake, backend, function=None, name=None):
    name = name or f"ttl-{backend}"
    return JobSpec(job_id=name, function=function or Remember(),
                   source=FileSource(str(lake.events), "json", EVENT, max_files_per_batch=1), key="k",
                   key_type=Types.STRING(), output_type=TTL_OUT, sink=f"sinks/{name}", uid="ttl", parallelism=2,
                   max_parallelism=8, checkpoint_interval=1, num_retained=3, backend=backend)


def ticking_clock():
    ticks = iter(range(0, 100_000, 1000))  # microbatch b is planned at b * 1000 ms
    return lambda: next(ticks)


class Sweep(KeyedProcessFunction):
    """A ValueState under TTL whose only cleanup is incremental: one entry per subtask per microbatch."""

    def open(self, ctx):
        config = StateTtlConfig.new_builder(TTL_MS).cleanup_incrementally(1).disable_cleanup_in_background().build()
        self.last = ctx.get_state(ValueStateDescriptor("last", Types.LONG()).enable_time_to_live(config))

    def process(self, key, records, ctx):
        self.last.update(records[-1]["v"])
        return []


def sweep_job(lake, job_id, backend):
    # Microbatch 0 writes k0..k5, which nothing writes again (expired from 1500 ms); microbatches 1-5 write z.
    lake.write_events("e0.json", [{"k": f"k{i}", "v": i, "op": "add", "seq": i} for i in range(6)])
    for batch in range(1, 6):
        lake.write_events(f"e{batch}.json", [{"k": "z", "v": batch, "op": "add", "seq": batch * 100}])
    return JobSpec(job_id=job_id, function=Sweep(), source=FileSource(str(lake.events), "json", EVENT,
                                                                      max_files_per_batch=1),
                   key="k", key_type=Types.STRING(), output_type=TTL_OUT, sink=f"sinks/{job_id}", uid="ttl",
                   parallelism=2, max_parallelism=8, checkpoint_interval=1, num_retained=10, backend=backend)


class NoState(CountOnly):
    def open(self, ctx):
        pass

    def process(self, key, records, ctx):
        yield {"k": key, "n": 0}


# A SQL job of three operators (a window aggregation, then a window Top-N over its rows): per window of 10 s, the
# two countries with the most clicks. Its rows are tests/api/test_sql.py's CLICK.
SQL_WINDOW_TOP = ("SELECT window_start, country, clicks, rn FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "
                  "window_start, window_end ORDER BY clicks DESC, country) AS rn FROM (SELECT window_start, "
                  "window_end, country, COUNT(*) AS clicks FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), "
                  "INTERVAL '10' SECOND)) GROUP BY window_start, window_end, country)) WHERE rn <= 2")


def sql_window_top(clicks_dir, job_id: str):
    """``SQL_WINDOW_TOP`` over the JSON files of ``clicks_dir``, a file a microbatch, into ``sinks/<job_id>``."""
    from state_store import SqlJob, SqlTable

    click = Types.ROW_NAMED(["user", "country", "amount", "ts"],
                            [Types.STRING(), Types.STRING(), Types.LONG(), Types.LONG()])
    return SqlJob(job_id, SQL_WINDOW_TOP, sink=f"sinks/{job_id}", tables={"clicks": SqlTable(
        FileSource(str(clicks_dir), "json", click, max_files_per_batch=1), "ts - INTERVAL '4' SECOND")})
