"""State TTL in one room, as Flink's ``runtime/state/ttl`` package: keyed state handles never see it.

- ``config``: ``StateTtlConfig`` and its builder (what ``enable_time_to_live`` takes).
- ``rules``: what an expiry means (expired, what a read removes and restamps, what a write stamps), per entry and
  per Arrow column, the one definition the wrappers and a vectorized run both apply.
- ``handles``: the TTL wrappers (``TtlValueState`` ...) around the plain handles, and the factory that wraps a
  handle when its descriptor has TTL (Flink's ``TtlStateFactory``).
- ``tables``: the Spark side: which states have TTL, which rows are expired, dropping them.
- ``cleanup``: the incremental cleanup a run does in Spark after its state is written.

Only the pure configuration is re-exported here: importing this package must neither start Spark (a subtask's
core is tested without a JVM) nor import the handles, which need ``descriptors`` (itself importing ``config``).
"""
from .config import MAX_TIMESTAMP, StateTtlConfig

__all__ = ["MAX_TIMESTAMP", "StateTtlConfig"]
