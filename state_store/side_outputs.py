"""Side outputs: Flink's ``OutputTag``, a second (third ...) stream of rows out of a keyed function.

    LATE = OutputTag("late", Types.ROW_NAMED(["key", "ts"], [Types.STRING(), Types.LONG()]))
    JobSpec(..., side_outputs=[LATE])          # declared on the job
    ctx.output(LATE, {"key": key, "ts": ts})   # in process, on_timer and process_broadcast_element

Each tag is a Delta table of its own next to the sink (``<sink>_<tag name>``), written in the run's commit with
the sink's ``_microbatch`` column and the same idempotence on replay. No Spark here.
"""
from __future__ import annotations

import re

from .errors import ConfigError
from .types import RowTypeInfo

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]{0,63}")  # fullmatch: "$" would let a trailing newline in
SIDE_PREFIX = "side:"  # a side output's table name among a run's outputs: "side:<tag name>"


class OutputTag:
    """A named side output and the type of its rows (``Types.ROW_NAMED``).

    Example::

        LATE = OutputTag("late", Types.ROW_NAMED(["k", "ts"], [Types.STRING(), Types.LONG()]))
        spec = JobSpec(..., side_outputs=[LATE])          # declared on the job: the table <sink>_late
        ctx.output(LATE, {"k": key, "ts": r["ts"]})       # in process, on_timer or process_broadcast_element
    """

    def __init__(self, name: str, type_info: RowTypeInfo):
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(f"OutputTag name {name!r} is not valid: use 1-64 letters, digits, '_' or '-', "
                              f"starting with a letter or digit")
        if not isinstance(type_info, RowTypeInfo):
            raise ConfigError(f"OutputTag {name!r}: declare its rows with Types.ROW_NAMED([...], [...])")
        self.name, self.type_info = name, type_info

    def __eq__(self, other) -> bool:
        return isinstance(other, OutputTag) and (self.name, self.type_info.to_schema()) == (
            other.name, other.type_info.to_schema())

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"OutputTag({self.name!r})"

    @property
    def table(self) -> str:
        """The tag's name among a run's output tables."""
        return SIDE_PREFIX + self.name


def sink_app_id(job_id: str) -> str:
    """The Delta ``txnAppId`` of job ``job_id``'s sink writes: its ``txnVersion`` is the last microbatch written."""
    return f"lakestate:{job_id}:sink"


def side_app_id(job_id: str, tag_name: str) -> str:
    """The Delta ``txnAppId`` of the writes of job ``job_id``'s side output ``tag_name``."""
    return f"lakestate:{job_id}:side:{tag_name}"


def side_output_sink(sink: str, tag_name: str) -> str:
    """Where a side output's table is, next to the sink ``sink`` (a warehouse path)."""
    return f"{sink.rstrip('/')}_{tag_name}"


def same_spelling(path) -> str:
    """A warehouse path as every spelling of it is written the same (``sinks/x``, ``sinks/./x``, ``sinks/x/``,
    ``sinks/y/../x``), without the warehouse to resolve it against (``Settings.sink`` resolves)."""
    import posixpath

    text = str(path)
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    return (scheme + sep if sep else "") + posixpath.normpath(rest)


def check_one_writer_per_table(tables: list[tuple[str, str]], resolve=same_spelling) -> None:
    """Refuse a job two of whose writers (``tables``: (who writes, warehouse path), from ``tables()`` of a
    ``JobSpec`` or ``Job``) write one table, however it is spelled (``resolve``): two writers of one table
    in one run commit under one ``txnAppId`` (the second's rows taken for a replay) and each one's clean-up would
    remove the other's files. The message names both writers."""
    seen: dict[str, str] = {}
    for who, path in tables:
        where = str(resolve(path))
        if where in seen:
            raise ConfigError(f"{seen[where]} and {who} both write table {where}; a table has one writer: give "
                              f"one of them another sink (a side output's table is '<job sink>_<tag name>')")
        seen[where] = who
