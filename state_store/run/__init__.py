"""The steps of a run's protocol (``runtime`` states it and sequences them), one room per step, over one
``RunContext``: ``planning`` (restore point, write-ahead plans), ``frame`` (beside ``exchange``: the driver
half of the exchange), ``commit`` (sink check, writes, source offsets, the TTL step, commit markers) and
``checkpointing``."""
