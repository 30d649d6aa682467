"""Sources: what a microbatch reads, and offsets that say how far a job has read (Flink's ``Source``).

- ``base``: the ``Source`` base class (the whole contract a run uses, in its order), the position columns and
  the pins of an end offset, the event-time checks every source makes;
- ``files`` (``FileSource``), ``delta_cdf`` (``DeltaSource``), ``kafka`` (``KafkaSource``) and ``edge``
  (``EdgeSource``, the input of a dataflow's later operator).

This package is the wing's face: the rest of Lakestate imports its names from here. It imports the top level
only (errors, types, side_outputs), and no Spark at load.
"""
from .base import (
                   PINNED,
                   POSITION_COLUMNS,
                   READ,
                   SINK_MICROBATCH,
                   Source,
                   checked_max_event_time,
                   null_event_times,
                   position,
                   warn_changed,
)
from .delta_cdf import DeltaSource
from .edge import EdgeSource
from .files import FileSource
from .kafka import KafkaSource

__all__ = ["PINNED", "POSITION_COLUMNS", "READ", "SINK_MICROBATCH", "DeltaSource", "EdgeSource", "FileSource",
           "KafkaSource", "Source", "checked_max_event_time", "null_event_times", "position",
           "warn_changed"]
