"""State TTL's configuration (Flink's StateTtlConfig and its builder): what a descriptor's
``enable_time_to_live`` takes, and the ``ttl`` record a checkpoint keeps of it (``to_dict``)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ...errors import ConfigError

MAX_TIMESTAMP = (1 << 63) - 1  # Long.MAX_VALUE: an expiry that never comes


def _one_of(value: str, options: type, what: str) -> str:
    """``value`` if it is one of the constants of ``options`` (an enum-like class), else a clear error."""
    names = [n for n in vars(options) if not n.startswith("_")]
    if value not in names:
        raise ValueError(f"{what} {value!r} is not one of StateTtlConfig.{options.__name__}."
                         + " or .".join(names))
    return value


@dataclass(frozen=True)
class TtlSpec:
    """A state's TTL as a checkpoint records it (its descriptor's ``ttl`` record): what the handles, the tables
    and the cleanup act on. ``StateTtlConfig`` is what users build; ``StateTtlConfig.to_spec()`` gives this."""

    ttl_ms: int
    update_type: str = "OnCreateAndWrite"
    state_visibility: str = "NeverReturnExpired"
    full_snapshot: bool = False
    incremental: tuple[int, bool] | None = None  # (entries per visit, also per record)
    compaction: bool = False

    @property
    def update_on_read(self) -> bool:
        """Whether a read restamps an entry (``OnReadAndWrite``), not only a write."""
        return self.update_type == StateTtlConfig.UpdateType.OnReadAndWrite

    @property
    def return_expired(self) -> bool:
        """Whether a read still sees an expired entry that no cleanup has dropped yet
        (``ReturnExpiredIfNotCleanedUp``)."""
        return self.state_visibility == StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp

    def uses(self, strategy: str) -> bool:
        """Whether this state is cleaned up by ``strategy`` ("full_snapshot", "incremental", "compaction")."""
        return bool(getattr(self, strategy))

    def to_dict(self) -> dict:
        """This configuration as a checkpoint records it."""
        out = asdict(self)
        out["incremental"] = list(self.incremental) if self.incremental else None
        return out

    @classmethod
    def from_dict(cls, data: dict | None) -> "TtlSpec | None":
        """The configuration a checkpoint recorded (``to_dict``'s), None for a state without TTL."""
        if not data:
            return None
        incremental = data.get("incremental")
        return cls(ttl_ms=data["ttl_ms"], update_type=data.get("update_type", "OnCreateAndWrite"),
                   state_visibility=data.get("state_visibility", "NeverReturnExpired"),
                   full_snapshot=bool(data.get("full_snapshot")),
                   incremental=(int(incremental[0]), bool(incremental[1])) if incremental else None,
                   compaction=bool(data.get("compaction")))


class StateTtlConfig:
    """Flink's StateTtlConfig: how long a keyed state entry lives after its last access, and how expired
    entries are hidden and cleaned up. Build it with ``StateTtlConfig.new_builder(ttl)``; time is processing
    time, the microbatch's timestamp.

    An entry is expired when ``last_access + ttl <= now`` (a sum past the largest timestamp never expires).
    List elements and map entries expire one by one.

    Example::

        ttl = (StateTtlConfig.new_builder(timedelta(hours=1))
               .set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)   # default OnCreateAndWrite
               .cleanup_full_snapshot()
               .build())
        last_seen = ctx.get_state(ValueStateDescriptor("last_seen", Types.LONG()).enable_time_to_live(ttl))
    """

    class UpdateType:
        """When an entry's time to live starts again (Flink's ``StateTtlConfig.UpdateType``)."""

        OnCreateAndWrite = "OnCreateAndWrite"  # the default: reads do not prolong an entry's life
        OnReadAndWrite = "OnReadAndWrite"

    class StateVisibility:
        """Whether a read sees an expired entry not yet cleaned up (Flink's ``StateTtlConfig.StateVisibility``)."""

        NeverReturnExpired = "NeverReturnExpired"  # the default
        ReturnExpiredIfNotCleanedUp = "ReturnExpiredIfNotCleanedUp"

    DEFAULT_CLEANUP_SIZE = 5  # Flink's default incremental cleanup: 5 entries per microbatch's access

    def __init__(self, ttl_ms: int, update_type: str, state_visibility: str, full_snapshot: bool,
                 incremental: tuple[int, bool] | None, compaction: bool, background: bool):
        self.ttl_ms, self.update_type, self.state_visibility = ttl_ms, update_type, state_visibility
        self.full_snapshot, self.background = full_snapshot, background
        # Background cleanup is on by default: incremental (5 entries) and the compaction filter, unless turned
        # off with disable_cleanup_in_background(), which leaves only what was configured explicitly.
        self.incremental = incremental if incremental or not background else (self.DEFAULT_CLEANUP_SIZE, False)
        self.compaction = compaction or background

    @staticmethod
    def new_builder(ttl) -> "StateTtlConfig.Builder":
        """A builder for a config whose entries live ``ttl`` (a ``datetime.timedelta`` or whole milliseconds),
        with Flink's defaults; e.g. ``StateTtlConfig.new_builder(timedelta(hours=1)).build()``.

        :param ttl: how long an entry lives after its last write (or read, with ``update_ttl_on_read_and_write``).
        """
        return StateTtlConfig.Builder(ttl)

    @property
    def update_on_read(self) -> bool:
        """True when a read prolongs an entry's life (OnReadAndWrite)."""
        return self.update_type == self.UpdateType.OnReadAndWrite

    @property
    def return_expired(self) -> bool:
        """True when a read returns an expired entry it finds, once (ReturnExpiredIfNotCleanedUp)."""
        return self.state_visibility == self.StateVisibility.ReturnExpiredIfNotCleanedUp

    def expiry(self, last_access: int) -> int:
        """When an entry last accessed at ``last_access`` expires (overflow-guarded, as Flink's TtlUtils)."""
        return min(last_access + self.ttl_ms, MAX_TIMESTAMP)

    def to_dict(self) -> dict:
        """The ``ttl`` record a checkpoint keeps with the state's descriptor (its on-disk shape: keep it)."""
        return {"ttl_ms": self.ttl_ms, "update_type": self.update_type, "state_visibility": self.state_visibility,
                "full_snapshot": self.full_snapshot,
                "incremental": list(self.incremental) if self.incremental else None,
                "compaction": self.compaction}

    def to_spec(self) -> TtlSpec:
        """What a checkpoint records of this configuration."""
        return TtlSpec.from_dict(self.to_dict())

    def __repr__(self) -> str:
        return f"StateTtlConfig({self.to_dict()})"

    class Builder:
        """``StateTtlConfig.new_builder(ttl)``: the options, each a method, then ``build()``."""

        def __init__(self, ttl):
            import datetime

            if isinstance(ttl, datetime.timedelta):
                ms = ttl / datetime.timedelta(milliseconds=1)
            elif isinstance(ttl, (int, float)) and not isinstance(ttl, bool):
                ms = ttl
            else:
                raise TypeError(f"a TTL is a datetime.timedelta or a number of milliseconds, got {ttl!r}")
            # ConfigError, so the CLI says it in one line when register or a run's start meets it on the driver.
            if ms > MAX_TIMESTAMP:  # before int(), which an infinity overflows
                raise ConfigError(f"TTL {ttl!r} is too long: at most {MAX_TIMESTAMP} ms (Long.MAX_VALUE, as in "
                                  f"Flink); for entries that never expire, leave TTL off")
            if not ms > 0 or ms != int(ms):  # also refuses NaN and -inf
                raise ConfigError(f"TTL {ttl!r} is not usable: give a positive whole number of milliseconds (or "
                                  f"a timedelta of at least 1 ms); an entry lives this long after its last access")
            self._ttl_ms, self._update = int(ms), StateTtlConfig.UpdateType.OnCreateAndWrite
            self._visibility = StateTtlConfig.StateVisibility.NeverReturnExpired
            self._full_snapshot, self._incremental, self._compaction, self._background = False, None, False, True

        def set_update_type(self, update_type: str) -> "StateTtlConfig.Builder":
            """What renews an entry's life (a ``StateTtlConfig.UpdateType``); returns this builder."""
            self._update = _one_of(update_type, StateTtlConfig.UpdateType, "update type")
            return self

        def update_ttl_on_create_and_write(self) -> "StateTtlConfig.Builder":
            """Only writes renew an entry's life (the default); returns this builder."""
            return self.set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)

        def update_ttl_on_read_and_write(self) -> "StateTtlConfig.Builder":
            """Reads renew an entry's life too; returns this builder."""
            return self.set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)

        def set_state_visibility(self, visibility: str) -> "StateTtlConfig.Builder":
            """Whether a read may return an expired entry (a ``StateTtlConfig.StateVisibility``); returns this
            builder."""
            self._visibility = _one_of(visibility, StateTtlConfig.StateVisibility, "state visibility")
            return self

        def never_return_expired(self) -> "StateTtlConfig.Builder":
            """A read never returns an expired entry (the default); returns this builder."""
            return self.set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)

        def return_expired_if_not_cleaned_up(self) -> "StateTtlConfig.Builder":
            """A read returns an expired entry it finds, once; returns this builder."""
            return self.set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)

        def cleanup_full_snapshot(self) -> "StateTtlConfig.Builder":
            """Leave expired entries out of full snapshots (savepoints, ``hashmap`` checkpoints); returns this
            builder."""
            self._full_snapshot = True
            return self

        def cleanup_incrementally(self, cleanup_size: int, run_cleanup_for_every_record: bool = False
                                  ) -> "StateTtlConfig.Builder":
            """Each microbatch checks the next ``cleanup_size`` entries of a cursor over all key groups (per record
            too with ``run_cleanup_for_every_record``); returns this builder.

            :param cleanup_size: entries checked a microbatch (Flink's default: 5).
            :param run_cleanup_for_every_record: check ``cleanup_size`` more per record processed.
            """
            if not isinstance(cleanup_size, int) or isinstance(cleanup_size, bool) or cleanup_size <= 0:
                raise ValueError(f"cleanup_size {cleanup_size!r} is not usable: give a whole number above 0 "
                                 f"(Flink's default is 5)")
            self._incremental = (cleanup_size, bool(run_cleanup_for_every_record))
            return self

        def cleanup_in_compaction(self) -> "StateTtlConfig.Builder":
            """The compaction job drops expired entries (Flink's RocksDB compaction filter); returns this
            builder."""
            self._compaction = True
            return self

        def disable_cleanup_in_background(self) -> "StateTtlConfig.Builder":
            """Turn off the default background cleanup (incremental and compaction); what is configured
            explicitly stays on. Returns this builder."""
            self._background = False
            return self

        def build(self) -> "StateTtlConfig":
            """The config, for ``descriptor.enable_time_to_live(config)``."""
            return StateTtlConfig(self._ttl_ms, self._update, self._visibility, self._full_snapshot,
                                  self._incremental, self._compaction, self._background)
