"""State TTL with Flink's semantics (docs/writing/ttl.md), on the store a subtask runs, with a clock the test sets.

An entry is expired when ``last_access + ttl <= now``; list elements and map entries expire one by one. Each
update type and visibility is checked for value, list, map, reducing and aggregating state, at the boundary.
"""
import math

import pytest

from state_store import ConfigError, StateTtlConfig
from state_store.functions import RuntimeContext
from state_store.state.descriptors import (
    MAX_TIMESTAMP,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from state_store.state.store import KeyedStateStore
from state_store.types import Types
from tests.support.jobs import Mean

TTL = 10
ON_WRITE, ON_READ = StateTtlConfig.UpdateType.OnCreateAndWrite, StateTtlConfig.UpdateType.OnReadAndWrite
NEVER, RETURN = (StateTtlConfig.StateVisibility.NeverReturnExpired,
                 StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)


def ttl(update=ON_WRITE, visibility=NEVER, ms=TTL):
    return StateTtlConfig.new_builder(ms).set_update_type(update).set_state_visibility(visibility).build()


class Clock:
    """A store, a context on it and the microbatch time; ``at(t)`` ends the microbatch (a flush) and starts
    one at time t for key 'k'."""

    def __init__(self):
        self.store = KeyedStateStore()
        self.ctx = RuntimeContext("op", self.store, 0, 1, 128)
        self.rows = []
        self.at(0)

    def at(self, now: int) -> "Clock":
        self.rows = self.store.flush()
        self.store.set_time(now)
        self.store.set_current_key("k", 3)
        return self


@pytest.fixture
def clock():
    return Clock()


# -- configuration -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, -5, math.nan, 0.5])
def test_a_ttl_that_is_not_a_positive_whole_number_of_ms_is_refused_with_the_fix(bad):
    with pytest.raises(ValueError, match="give a positive whole number of milliseconds"):
        StateTtlConfig.new_builder(bad)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, 2 ** 63, 1e300])
def test_an_infinite_or_too_long_ttl_is_refused_at_the_builder_naming_the_bound(bad):
    with pytest.raises(ConfigError, match=r"(too long: at most 9223372036854775807 ms|positive whole number)"):
        StateTtlConfig.new_builder(bad)
    assert StateTtlConfig.new_builder(MAX_TIMESTAMP).build().expiry(5) == MAX_TIMESTAMP  # the bound itself is fine


def test_the_defaults_are_flinks_and_disabling_background_cleanup_keeps_only_what_was_configured():
    import datetime

    config = StateTtlConfig.new_builder(datetime.timedelta(seconds=2)).build()
    assert (config.ttl_ms, config.update_type, config.state_visibility) == (2000, ON_WRITE, NEVER)
    assert (config.full_snapshot, config.incremental, config.compaction) == (False, (5, False), True)
    off = StateTtlConfig.new_builder(5).disable_cleanup_in_background().build()
    assert (off.full_snapshot, off.incremental, off.compaction) == (False, None, False)
    mine = StateTtlConfig.new_builder(5).cleanup_incrementally(100, True).cleanup_full_snapshot() \
        .disable_cleanup_in_background().build()
    assert (mine.full_snapshot, mine.incremental, mine.compaction) == (True, (100, True), False)
    with pytest.raises(ValueError, match="cleanup_size 0 is not usable"):
        StateTtlConfig.new_builder(5).cleanup_incrementally(0)
    with pytest.raises(TypeError, match="enable_time_to_live takes a StateTtlConfig"):
        ValueStateDescriptor("v", Types.LONG()).enable_time_to_live(5)


def test_the_expiry_sum_is_guarded_against_overflow():
    config = StateTtlConfig.new_builder(MAX_TIMESTAMP - 1).build()
    assert config.expiry(10) == MAX_TIMESTAMP  # never expires, instead of wrapping into the past


# -- value state ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("visibility", [NEVER, RETURN])
def test_a_value_expires_exactly_at_last_write_plus_ttl(clock, visibility):
    v = clock.ctx.get_state(ValueStateDescriptor("v", Types.LONG()).enable_time_to_live(ttl(ON_WRITE, visibility)))
    v.update(1)
    assert clock.at(3).rows == [("op.v", 3, "k", "", None, "1", 1, 3 - 3 + TTL)]  # written at 0: expires at 10
    assert v.value() == 1  # a read does not prolong under OnCreateAndWrite
    assert clock.at(TTL - 1).store.get("op.v", "", v._descriptor) == 1
    clock.at(TTL)
    assert v.value() == (1 if visibility == RETURN else None)  # returned once at most, and cleaned up
    assert v.value() is None
    assert clock.at(TTL + 1).rows == [("op.v", 3, "k", "", None, None, -1, None)]


def test_on_read_and_write_a_read_prolongs_a_live_value_but_never_revives_an_expired_one(clock):
    v = clock.ctx.get_state(ValueStateDescriptor("v", Types.LONG()).enable_time_to_live(ttl(ON_READ, RETURN)))
    v.update(1)
    clock.at(6)
    assert v.value() == 1  # prolonged: now expires at 16
    assert clock.at(15).rows == [("op.v", 3, "k", "", None, "1", 0, 16)]
    assert v.value() == 1
    clock.at(15 + TTL)
    assert v.value() == 1  # expired: returned once under ReturnExpiredIfNotCleanedUp, not prolonged
    assert v.value() is None


# -- list state: element by element ------------------------------------------------------------------------------
def test_list_elements_expire_one_by_one_and_the_row_lives_until_its_last(clock):
    items = clock.ctx.get_list_state(ListStateDescriptor("l", Types.STRING()).enable_time_to_live(ttl()))
    items.add("a")
    clock.at(5)
    items.add_all(["b", "c"])
    assert items.get() == ["a", "b", "c"]
    (row,) = clock.at(TTL - 1).rows
    assert (row[5], row[7]) == ('[[10,"a"],[15,"b"],[15,"c"]]', 15)  # the row's expiry is its last element's
    assert items.get() == ["a", "b", "c"]
    clock.at(TTL)
    assert items.get() == ["b", "c"]
    items.add("d")
    assert items.get() == ["b", "c", "d"]
    clock.at(15)
    assert items.get() == ["d"]
    clock.at(TTL + TTL)
    assert items.get() == []
    assert clock.at(21).rows[-1][5:] == (None, -1, None)


def test_list_update_restamps_every_element_and_return_expired_shows_them_once(clock):
    items = clock.ctx.get_list_state(ListStateDescriptor("l", Types.LONG()).enable_time_to_live(ttl(ON_WRITE, RETURN)))
    items.update([1, 2])
    clock.at(8)
    items.update([3])
    clock.at(TTL)
    assert items.get() == [3]
    clock.at(18)
    assert items.get() == [3]
    assert items.get() == []


def test_list_on_read_and_write_restamps_the_live_elements_it_returns(clock):
    items = clock.ctx.get_list_state(ListStateDescriptor("l", Types.LONG()).enable_time_to_live(ttl(ON_READ)))
    items.add(1)
    clock.at(9)
    assert items.get() == [1]
    clock.at(18)
    assert items.get() == [1]
    clock.at(28)
    assert items.get() == []


def test_list_add_under_on_read_and_write_stamps_only_the_new_element_as_flinks_ttl_list_state(clock):
    items = clock.ctx.get_list_state(ListStateDescriptor("l", Types.STRING()).enable_time_to_live(
        ttl(ON_READ, ms=1000)))
    items.add("a")
    clock.at(500)
    items.add("b")  # an add is no read: "a" still expires at 1000
    clock.at(1000)
    assert items.get() == ["b"]
    clock.at(1400)
    items.add("c")  # the next read still checks (and prolongs) the elements the add found
    assert items.get() == ["b", "c"]
    clock.at(2399)
    assert items.get() == ["b", "c"]

# -- map state: entry by entry ----------------------------------------------------------------------------------
def test_map_entries_expire_one_by_one_and_each_read_prolongs_only_its_entry(clock):
    m = clock.ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), Types.LONG()).enable_time_to_live(
        ttl(ON_READ)))
    m.put("x", 1)
    clock.at(5)
    m.put("y", 2)
    clock.at(9)
    assert m.get("y") == 2  # prolongs y to 19; x stays at 10
    clock.at(TTL)
    assert dict(m.items()) == {"y": 2}
    assert not m.contains("x")
    rows = {r[4]: r[5:] for r in clock.at(11).rows}
    assert rows['"x"'] == (None, -1, None)  # cleaned up on read
    clock.at(21)  # y last read (items) at 10: expired at 20
    assert m.is_empty()


def test_map_return_expired_shows_an_expired_entry_once(clock):
    m = clock.ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), Types.LONG()).enable_time_to_live(
        ttl(ON_WRITE, RETURN)))
    m.put("x", 1)
    clock.at(TTL)
    assert m.contains("x")
    assert not m.contains("x")


@pytest.mark.parametrize("update", [ON_WRITE, ON_READ])
def test_map_reads_see_the_microbatchs_puts_and_removes_after_a_read_found_an_expired_entry(update):
    clock = Clock()
    m = clock.ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), Types.LONG()).enable_time_to_live(
        ttl(update, RETURN, ms=1000)))
    m.put("p", 1)
    clock.at(500)
    m.put("s", 6)
    clock.at(1000)  # p expired, s live
    m.put("q", 2)
    assert m.get("q") == 2
    m.remove("s")
    assert m.get("s") is None
    assert not m.contains("s")
    m.put("q", m.get("q") + 1)
    assert dict(m.items()) == {"p": 1, "q": 3}  # p, expired, is returned by this one read
    rows = {r[4]: r[5] for r in clock.at(1001).rows}
    assert rows == {'"p"': None, '"q"': "3", '"s"': None}


def test_under_return_expired_each_expired_map_entry_is_returned_once_by_its_own_read(clock):
    m = clock.ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), Types.LONG()).enable_time_to_live(
        ttl(ON_WRITE, RETURN)))
    m.put_all({"x": 1, "z": 9, "p": 1, "w": 4})
    clock.at(TTL)
    assert m.get("x") == 1
    assert m.get("z") == 9  # Flink's TtlMapState checks entry by entry: x's read did not consume z
    assert (m.get("x"), m.get("z")) == (None, None)
    m.put("q", 2)
    assert m.get("p") == 1
    assert not m.is_empty()
    assert dict(m.items()) == {"w": 4, "q": 2}  # the entries iterator returns w, the last expired one, once
    assert dict(m.items()) == {"q": 2}
    assert sorted(r[4] for r in clock.at(TTL + 1).rows if r[5] is None) == ['"p"', '"w"', '"x"', '"z"']

# -- reducing and aggregating ----------------------------------------------------------------------------------
@pytest.mark.parametrize("visibility, expected", [(NEVER, 5), (RETURN, 6)])
def test_an_expired_reducing_value_is_dropped_unless_expired_values_are_returned(clock, visibility, expected):
    total = clock.ctx.get_reducing_state(ReducingStateDescriptor("r", lambda a, b: a + b, Types.LONG())
                                         .enable_time_to_live(ttl(ON_WRITE, visibility)))
    total.add(1)
    clock.at(TTL)
    total.add(5)  # as Flink's TtlReduceFunction: the expired value is folded in only under ReturnExpired
    assert total.get() == expected
    assert clock.at(TTL + 1).rows[-1][7] == 2 * TTL  # the new value lives from its write


@pytest.mark.parametrize("visibility, expected", [(NEVER, 6.0), (RETURN, 4.0)])
def test_an_expired_accumulator_starts_over_unless_expired_values_are_returned(clock, visibility, expected):
    mean = clock.ctx.get_aggregating_state(AggregatingStateDescriptor("a", Mean(), Types.LIST(Types.LONG()))
                                           .enable_time_to_live(ttl(ON_WRITE, visibility)))
    mean.add(2)
    clock.at(TTL - 1)
    assert mean.get() == 2.0
    clock.at(TTL)
    mean.add(6)
    assert mean.get() == expected


# -- across a reload (what the next run reads back from the table) --------------------------------------------------
def _reload(rows, now):
    """A new store holding ``rows`` (a flush's), at time ``now``, on key "k": a later run reading them back."""
    store = KeyedStateStore()
    for name, kg, key, ns, user_key, text, _, expiry in rows:
        store.load(name, key, ns, user_key, kg, text, expiry)
    store.set_time(now)
    store.set_current_key("k", 3)
    return store, RuntimeContext("op", store, 0, 1, 128)


def test_expiries_survive_a_reload_and_ttl_turned_off_shows_every_stored_value(clock):
    items = clock.ctx.get_list_state(ListStateDescriptor("l", Types.LONG()).enable_time_to_live(ttl()))
    value = clock.ctx.get_state(ValueStateDescriptor("v", Types.LONG()).enable_time_to_live(ttl()))
    items.add_all([1, 2])
    value.update(7)
    rows = clock.at(1).rows

    def reloaded(now, list_descriptor, value_descriptor):
        _, ctx = _reload(rows, now)
        return ctx.get_list_state(list_descriptor).get(), ctx.get_state(value_descriptor).value()

    with_ttl = (ListStateDescriptor("l", Types.LONG()).enable_time_to_live(ttl()),
                ValueStateDescriptor("v", Types.LONG()).enable_time_to_live(ttl()))
    assert reloaded(TTL - 1, *with_ttl) == ([1, 2], 7)
    assert reloaded(TTL, *with_ttl) == ([], None)
    # TTL turned off (Flink 2.2: the TTL metadata is ignored): every stored value is visible, expired or not.
    assert reloaded(TTL, ListStateDescriptor("l", Types.LONG()), ValueStateDescriptor("v", Types.LONG())) == (
        [1, 2], 7)


def test_state_stored_before_ttl_was_on_lives_a_full_ttl_from_its_first_read_with_ttl(clock):
    clock.ctx.get_state(ValueStateDescriptor("v", Types.LONG())).update(4)
    clock.ctx.get_list_state(ListStateDescriptor("l", Types.STRING())).add("a")
    clock.ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), Types.LONG())).put("x", 1)
    rows = clock.at(1).rows

    def reloaded(now, rows):
        store, ctx = _reload(rows, now)
        return (store, ctx.get_state(ValueStateDescriptor("v", Types.LONG()).enable_time_to_live(ttl())),
                ctx.get_list_state(ListStateDescriptor("l", Types.STRING()).enable_time_to_live(ttl())),
                ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), Types.LONG()).enable_time_to_live(ttl())))

    store, v, items, m = reloaded(100, rows)
    assert (v.value(), m.get("x")) == (4, 1)
    items.add("b")  # an add is the list's first access with TTL: "a" is stamped too, not left unreadable
    rows = store.flush()
    assert {r[0]: r[7] for r in rows} == {"op.v": 100 + TTL, "op.l": 100 + TTL, "op.m": 100 + TTL}
    assert reloaded(105, rows)[2].get() == ["a", "b"]


def test_operator_state_with_a_ttl_is_refused_naming_the_fix():
    from state_store.state.operator import OperatorStateStore

    store = OperatorStateStore("op", {}, {})
    with pytest.raises(ValueError, match="TTL applies to keyed state only"):
        store.get_list_state(ListStateDescriptor("offsets", Types.LONG()).enable_time_to_live(ttl()))


def test_an_unknown_update_type_or_visibility_names_the_choices():
    with pytest.raises(ValueError, match=r"update type 'OnRead' is not one of StateTtlConfig.UpdateType."
                                         r"OnCreateAndWrite or .OnReadAndWrite"):
        StateTtlConfig.new_builder(5).set_update_type("OnRead")
    with pytest.raises(ValueError, match="state visibility 'Always' is not one of StateTtlConfig.StateVisibility"):
        StateTtlConfig.new_builder(5).set_state_visibility("Always")


def test_incremental_cleanup_visits_size_per_subtask_per_microbatch_and_per_record_with_every_record():
    from state_store.records.metadata import StateInfo
    from state_store.state.ttl.cleanup import cleanup_width

    def states(*configs):
        return {f"op.s{i}": StateInfo.from_descriptor(ValueStateDescriptor(f"s{i}", Types.LONG()).enable_time_to_live(
            StateTtlConfig.new_builder(TTL).cleanup_incrementally(size, every).build()))
            for i, (size, every) in enumerate(configs)}

    records = [2000, 0, 7]  # three microbatches, 2 subtasks
    assert cleanup_width(states((5, False)), 2, records) == 5 * 2 * 3
    assert cleanup_width(states((5, True)), 2, records) == 5 * (2 * 3 + 2007)
    assert cleanup_width(states((1, False), (3, True)), 2, records) == 3 * (2 * 3 + 2007)  # the largest, per record


# -- where TTL lives: one factory wraps the plain handles --------------------------------------------------------
KINDS = [
    ("get_state", lambda: ValueStateDescriptor("s", Types.LONG()), "ValueState"),
    ("get_list_state", lambda: ListStateDescriptor("s", Types.LONG()), "ListState"),
    ("get_map_state", lambda: MapStateDescriptor("s", Types.STRING(), Types.LONG()), "MapState"),
    ("get_reducing_state", lambda: ReducingStateDescriptor("s", lambda a, b: a + b, Types.LONG()), "ReducingState"),
    ("get_aggregating_state", lambda: AggregatingStateDescriptor("s", Mean(), Types.LIST(Types.LONG())),
     "AggregatingState"),
]


@pytest.mark.parametrize("getter, descriptor, plain", KINDS)
def test_the_factory_wraps_the_plain_handle_in_its_ttl_wrapper_only_when_the_descriptor_has_ttl(getter, descriptor,
                                                                                                 plain):
    from state_store.state import handles as plain_handles
    from state_store.state.ttl import handles

    without = getattr(Clock().ctx, getter)(descriptor())
    assert type(without) is getattr(plain_handles, plain)
    wrapped = getattr(Clock().ctx, getter)(descriptor().enable_time_to_live(ttl()))
    assert type(wrapped) is getattr(handles, "Ttl" + plain)
    assert type(wrapped.original) is getattr(plain_handles, plain)
    # The kind-free getter gives the same handle: a new kind needs no getter of its own.
    assert type(Clock().ctx.get_keyed_state(descriptor().enable_time_to_live(ttl()))) is type(wrapped)
    assert type(Clock().ctx.get_keyed_state(descriptor())) is type(without)


def test_a_plain_handle_never_checks_an_expiry_so_an_expired_entry_is_read_and_left_as_stored():
    rows = [("op.v", 3, "k", "", None, "7", 1, 5), ("op.l", 3, "k", "", None, "[[5,1],[50,2]]", 1, 50),
            ("op.m", 3, "k", "", '"x"', "1", 1, 5)]
    store, ctx = _reload(rows, 100)
    assert ctx.get_state(ValueStateDescriptor("v", Types.LONG())).value() == 7
    assert ctx.get_list_state(ListStateDescriptor("l", Types.LONG())).get() == [1, 2]
    assert ctx.get_map_state(MapStateDescriptor("m", Types.STRING(), Types.LONG())).items() == [("x", 1)]
    assert store.flush() == []  # nothing removed, nothing restamped


# -- the rules' one home: the per-entry and the column-wise forms agree ---------------------------------------------
@pytest.mark.parametrize("update", [ON_WRITE, ON_READ])
@pytest.mark.parametrize("visibility", [NEVER, RETURN])
def test_the_scalar_and_arrow_ttl_rules_agree_on_every_read_and_write(update, visibility):
    """The TTL wrappers apply ``ttl.rules``' scalar forms per entry, a vectorized run its Arrow forms per
    column: one grid (a value stored or not; no expiry, past, at the boundary, future) through both."""
    import pyarrow as pa

    from state_store.state.ttl import rules

    config, now = ttl(update, visibility), 100
    grid = [(text, expiry) for text in ("7", None) for expiry in (None, now - 5, now, now + 5)]
    texts = pa.array([t for t, _ in grid], pa.string())
    expiries = pa.array([x for _, x in grid], pa.int64())
    values = pa.array([None if t is None else int(t) for t, _ in grid], pa.int64())
    expected = []
    for text, expiry in grid:
        if text is None:  # nothing stored: a read finds nothing and changes nothing
            expected.append((None, expiry, None))
        elif rules.is_expired(expiry, now):  # removed; returned this once under ReturnExpiredIfNotCleanedUp
            expected.append((None, None, 7 if config.return_expired else None))
        else:
            restamp = rules.after_read(config, now, expiry)
            expected.append((text, expiry if restamp is None else restamp, 7))
    after_texts, after_expiries = rules.read_baseline(config, now, texts, expiries)
    returned = rules.read_values(config, now, texts, expiries, values)
    assert list(zip(after_texts.to_pylist(), after_expiries.to_pylist(), returned.to_pylist())) == expected
    assert rules.expired_mask(texts, expiries, now).to_pylist() == [
        t is not None and rules.is_expired(x, now) for t, x in grid]
    for on in (config, None):  # a write (null: a removal), with TTL and without
        assert rules.write_expiries(on, now, texts).to_pylist() == [rules.write_expiry(on, now, t) for t, _ in grid]
