"""TTL's read and restamp rules, the one place they are stated (Flink's ``AbstractTtlDecorator``).

Each rule has a scalar form, which the TTL wrappers (``ttl.handles``) apply to one entry, and beside it an Arrow
form, which a vectorized run (``vectorized_run``) applies to a column of stored values at once: the two paths
of a keyed function read and stamp state the same way because they call the same rules. ``ttl.tables`` renders
``is_expired`` as a Spark column for the table-wide cleanups.

- Expired: an entry is expired when ``expiry <= now`` (``last_access + ttl <= now``); one without an expiry
  (stored before its state had TTL) never is.
- Read: a read removes an expired entry (and returns it that once only under ReturnExpiredIfNotCleanedUp);
  it restamps a live one under OnReadAndWrite, and always one without an expiry (its first access with TTL).
- Write: an entry written at ``now`` expires at ``ttl.expiry(now)``; a removal leaves no expiry.

pyarrow is imported inside the Arrow forms: the wrappers run without it loaded.
"""
from __future__ import annotations


def is_expired(expiry: int | None, now: int) -> bool:
    """True when an entry with ``expiry`` is expired at ``now``; one without (stored before its state had TTL)
    never is."""
    return expiry is not None and expiry <= now


def stamp(ttl, now: int) -> int:
    """The expiry of an entry written (or restamped) at ``now``."""
    return ttl.expiry(now)


def after_read(ttl, now: int, expiry: int | None) -> int | None:
    """The new expiry a read at ``now`` gives a live entry with ``expiry``, or None when it keeps its own: a
    read restamps under OnReadAndWrite, and always an entry stored without an expiry."""
    if ttl.update_on_read or expiry is None:
        return stamp(ttl, now)
    return None


def write_expiry(ttl, now: int, value) -> int | None:
    """The expiry a write of ``value`` at ``now`` stores: none without TTL or for a removal (``value`` None)."""
    return None if ttl is None or value is None else stamp(ttl, now)


# -- the same rules over Arrow: one stored value per row -------------------------------------------------------
def expired_mask(texts, expiries, now: int):
    """``is_expired`` per row: which stored values (``texts``, null: none stored) are expired at ``now``."""
    import pyarrow.compute as pc

    return pc.and_(pc.is_valid(texts), pc.fill_null(pc.less_equal(expiries, now), False))


def read_values(ttl, now: int, texts, expiries, values):
    """``values`` (decoded from ``texts``) as a read at ``now`` returns them: an expired one null, unless
    ReturnExpiredIfNotCleanedUp returns it this once."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if ttl is None or ttl.return_expired:
        return values
    return pc.if_else(expired_mask(texts, expiries, now), pa.scalar(None, values.type), values)


def read_baseline(ttl, now: int, texts, expiries):
    """(texts, expiries) after each row's value was read at ``now``: an expired value removed, a live one
    restamped as ``after_read`` says; a row without a value is left as it is."""
    import pyarrow as pa
    import pyarrow.compute as pc

    expired = expired_mask(texts, expiries, now)
    live = pc.and_(pc.is_valid(texts), pc.invert(expired))
    restamp = live if ttl.update_on_read else pc.and_(live, pc.is_null(expiries))
    none = pa.scalar(None, pa.int64())
    new_expiries = pc.if_else(restamp, pa.scalar(stamp(ttl, now), pa.int64()), pc.if_else(expired, none, expiries))
    return pc.if_else(expired, pa.scalar(None, pa.string()), texts), new_expiries


def write_expiries(ttl, now: int, written):
    """``write_expiry`` per row of ``written`` (encoded values, null: a removal)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    stamped = pa.scalar(None if ttl is None else stamp(ttl, now), pa.int64())
    return pc.if_else(pc.is_valid(written), stamped, pa.scalar(None, pa.int64()))
