"""Flink SQL's dialect for sqlglot: Spark's (whose scalar expressions Lakestate keeps), with what Flink's
streaming SQL adds that sqlglot's Spark parser lacks: the windowing table-valued functions
(``TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))``, ``HOP``, ``CUMULATE``, ``SESSION(TABLE
bid PARTITION BY bidder, ...)``) and the group window ``SESSION(dateTime, INTERVAL '10' SECOND)`` of a ``GROUP
BY``; and Spark's ``window(ts, '10 seconds')`` first in a ``GROUP BY``, where sqlglot stops at ``WINDOW``, a
clause's keyword. Flink's functions that Spark lacks or has otherwise are read as their Spark equivalent
(``SPLIT_INDEX``, ``REGEXP_EXTRACT``'s null where nothing matches, and ``PROCTIME()`` as ``CURRENT_TIMESTAMP()``).
``group_window`` reads a ``GROUP BY``'s window: Flink's ``SESSION``, Spark's ``window()`` and
``session_window()``. No Spark here."""
from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.tokens import TokenType

TVFS = ("TUMBLE", "HOP", "CUMULATE")


class WindowTVF(exp.Expression, exp.Func):
    """``TUMBLE`` / ``HOP`` / ``CUMULATE`` / ``SESSION`` over a table: ``this`` the table, ``kind`` the function,
    ``expressions`` its arguments after the table (the ``DESCRIPTOR`` and the intervals), ``partition_by`` a
    session's ``PARTITION BY`` columns."""

    arg_types = {"this": True, "kind": True, "expressions": False, "partition_by": False}


class Descriptor(exp.Expression, exp.Func):
    """``DESCRIPTOR(column)``: the time column a windowing function reads."""

    arg_types = {"this": True}


class GroupWindow(exp.Expression, exp.Func):
    """A group window of a ``GROUP BY`` (``SESSION(column, gap)``): ``kind``, the time column, its interval."""

    arg_types = {"kind": True, "this": True, "expressions": False}


def _window_tvf(kind: str):
    def parse(self):
        self._match(TokenType.TABLE)
        table = self._parse_table_parts()
        partition = []
        if self._match(TokenType.PARTITION_BY):  # one column, or (k1, k2, ...)
            partition = self._parse_wrapped_csv(self._parse_column) if self._match(TokenType.L_PAREN, advance=False) \
                else [self._parse_column()]
        args = []
        while self._match(TokenType.COMMA):
            args.append(self._parse_assignment())
        return self.expression(WindowTVF(this=table, kind=exp.Var(this=kind), expressions=args,
                                         partition_by=partition))
    return parse


def _group_window(kind: str):
    def parse(self):
        if self._curr is not None and self._curr.token_type == TokenType.TABLE:  # SESSION(TABLE t ...): the TVF
            return _window_tvf(kind)(self)
        column = self._parse_column()
        args = [self._parse_assignment()] if self._match(TokenType.COMMA) else []
        return self.expression(GroupWindow(kind=exp.Var(this=kind), this=column, expressions=args))
    return parse


def _split_index(args: list):
    """Flink's ``SPLIT_INDEX(s, separator, i)``: the i-th (from 0) piece of ``s`` split at each ``separator``,
    every piece kept (empty ones too); null for a negative or too large ``i``, an empty or null ``s`` (Flink's
    ``SqlFunctionUtils.splitIndex``), as Spark's ``split`` (of the separator quoted as a regular expression)
    and ``try_element_at``."""
    from ..errors import ConfigError

    if len(args) != 3 or not (isinstance(args[1], exp.Literal) and args[1].is_string and args[1].name):
        raise ConfigError("SQL: SPLIT_INDEX(s, separator, index) takes a non-empty string separator, such as "
                          "SPLIT_INDEX(url, '/', 3)")
    text, index = args[0].sql(dialect="spark"), args[2].sql(dialect="spark")
    pattern = exp.Literal.string(f"\\Q{args[1].name}\\E").sql(dialect="spark")
    return sqlglot.parse_one(f"CAST(CASE WHEN {index} >= 0 AND {text} <> '' THEN try_element_at(split({text}, "
                             f"{pattern}, -1), {index} + 1) END AS STRING)", read="spark")


def _regexp_extract(args: list):
    """Flink's ``REGEXP_EXTRACT(s, regex[, group])``: the group (default 0, the whole match) of the first match,
    null where nothing matches (Spark's ``regexp_extract`` gives ``''`` then, and takes group 1 by default)."""
    from ..errors import ConfigError

    if len(args) not in (2, 3):
        raise ConfigError("SQL: REGEXP_EXTRACT(s, regex[, group]) takes two or three arguments, such as "
                          "REGEXP_EXTRACT(url, 'id=([^&]*)', 1)")
    text, pattern = args[0].sql(dialect="spark"), args[1].sql(dialect="spark")
    group = args[2].sql(dialect="spark") if len(args) == 3 else "0"
    return sqlglot.parse_one(f"CASE WHEN {text} RLIKE {pattern} THEN regexp_extract({text}, {pattern}, {group}) END",
                             read="spark")


class Flink(Spark):
    """sqlglot's Spark dialect with Flink's windowing syntax (see the module docstring)."""

    class Parser(Spark.Parser):
        """Spark's parser, with the windowing functions and ``TABLE(...)`` of one in ``FROM``."""

        FUNC_TOKENS = {*Spark.Parser.FUNC_TOKENS, *((TokenType.SESSION,) if hasattr(TokenType, "SESSION") else ())}
        FUNCTION_PARSERS = {**Spark.Parser.FUNCTION_PARSERS, **{k: _window_tvf(k) for k in TVFS},
                            "DESCRIPTOR": lambda self: self.expression(Descriptor(this=self._parse_column())),
                            "SESSION": _group_window("SESSION")}
        FUNCTIONS = {**Spark.Parser.FUNCTIONS, "SPLIT_INDEX": _split_index, "REGEXP_EXTRACT": _regexp_extract,
                     "PROCTIME": lambda args: exp.CurrentTimestamp()}  # processing time: Spark's current_timestamp()

        def _parse_table(self, *args, **kwargs):
            """``TABLE(<windowing function>) [AS alias]`` as a table, else Spark's tables."""
            if (self._curr is not None and self._curr.token_type == TokenType.TABLE and self._next is not None
                    and self._next.token_type == TokenType.L_PAREN):
                self._advance(2)
                function = self._parse_function()
                self._match_r_paren()
                table = self.expression(exp.Table(this=function))
                alias = self._parse_table_alias()
                if alias:
                    table.set("alias", alias)
                return table
            return super()._parse_table(*args, **kwargs)

        def _parse_group(self, skip_group_by_token: bool = False):
            """Spark's ``GROUP BY window(ts, ...), k``: its first ``window(...)`` parsed as the function it is."""
            if not (self._curr is not None and self._curr.token_type == TokenType.GROUP_BY and self._next is not None
                    and self._next.token_type == TokenType.WINDOW):
                return super()._parse_group(skip_group_by_token)
            self._advance()
            first = self._parse_disjunction()
            if not self._match(TokenType.COMMA):
                return self.expression(exp.Group(expressions=[first]))
            group = super()._parse_group(skip_group_by_token=True)
            group.set("expressions", [first, *group.expressions])
            return group


def parse(sql: str) -> list:
    """The statements of ``sql`` in Flink's dialect (sqlglot expressions); sqlglot's ParseError as it is."""
    return [s for s in sqlglot.parse(sql, read=Flink) if s is not None]


_UNITS = {"MILLISECOND": 1, "SECOND": 1_000, "MINUTE": 60_000, "HOUR": 3_600_000, "DAY": 86_400_000}


def interval_millis(interval) -> int:
    """The milliseconds of ``INTERVAL '10' SECOND`` (a ConfigError naming the fix for anything else)."""
    from ..errors import ConfigError

    def refuse(what: str) -> ConfigError:
        return ConfigError(f"SQL: {what} is not supported yet; write it as INTERVAL '10' SECOND (docs/writing/sql.md "
                           f"lists what is)")

    if not isinstance(interval, exp.Interval) or not isinstance(interval.this, exp.Literal):
        raise refuse(f"the interval {interval.sql() if interval is not None else None!r}")
    unit = interval.args["unit"].name.upper().rstrip("S") if interval.args.get("unit") else "MILLISECOND"
    if unit not in _UNITS:
        raise refuse(f"the interval unit {unit}")
    return int(float(interval.this.name) * _UNITS[unit])


def refuse(construct: str, fix: str = ""):
    """The ConfigError of SQL that is not supported yet, naming the construct (and the fix, if any)."""
    from ..errors import ConfigError

    return ConfigError(f"SQL: {construct} is not supported yet{'; ' + fix if fix else ''} (docs/writing/sql.md "
                       f"lists what is)")


def window_of(table) -> tuple:
    """The table a FROM reads, and its windowing function as ``(kind, time column, size ms, slide ms)`` (None:
    the table itself): "tumble", "hop", "cumulate" (its max size, its step) or "session" (its gap twice, and a
    fifth item: its PARTITION BY columns)."""
    if not (isinstance(table, exp.Table) and isinstance(table.this, WindowTVF)):
        return table, None
    tvf = table.this
    kind, args = tvf.args["kind"].name, tvf.expressions
    if not args or not isinstance(args[0], Descriptor):
        raise refuse("a window without DESCRIPTOR(...)")
    sizes, column = [interval_millis(a) for a in args[1:]], args[0].this.name
    if kind == "TUMBLE" and len(sizes) == 1:
        return tvf.this, ("tumble", column, sizes[0], sizes[0])
    if kind == "HOP" and len(sizes) == 2:
        return tvf.this, ("hop", column, sizes[1], sizes[0])  # HOP(..., slide, size)
    if kind == "CUMULATE" and len(sizes) == 2:
        return tvf.this, ("cumulate", column, sizes[1], sizes[0])  # CUMULATE(..., step, max size)
    if kind == "SESSION" and len(sizes) == 1:
        return tvf.this, ("session", column, sizes[0], sizes[0],
                          tuple(c.name for c in tvf.args.get("partition_by") or []))
    raise refuse(f"{kind} with {len(sizes)} intervals (an offset)")


_SPARK_UNITS = {"millisecond": 1, "second": 1_000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000,
                "week": 604_800_000}


def spark_duration(node) -> int:
    """The milliseconds of a duration of Spark's ``window()``: '10 seconds', '1 minute 30 seconds', or an
    ``INTERVAL``."""
    if isinstance(node, exp.Interval):
        return interval_millis(node)
    words = node.name.lower().split() if isinstance(node, exp.Literal) and node.is_string else []
    if not words or len(words) % 2:
        raise refuse(f"the duration {node.sql()} (give '10 seconds', '5 minutes', ...)")
    total = 0
    for amount, unit in zip(words[::2], words[1::2]):
        unit = unit.rstrip("s") if unit not in ("ms",) else "millisecond"
        if unit not in _SPARK_UNITS or not amount.isdigit():
            raise refuse(f"the duration {node.sql()} (give '10 seconds', '5 minutes', ...)")
        total += int(amount) * _SPARK_UNITS[unit]
    return total


def group_window(node) -> tuple | None:
    """A ``GROUP BY`` item's window as ``(kind, time column, size, slide, partition, name)``, ``name`` the
    struct Spark's functions give (``window``, ``session_window``; None for Flink's ``SESSION``); None for
    another item."""
    if isinstance(node, GroupWindow) and node.args["kind"].name == "SESSION" and len(node.expressions) == 1:
        gap = interval_millis(node.expressions[0])
        return "session", node.this.name, gap, gap, None, None
    name = node.name.lower() if isinstance(node, exp.Anonymous) else None
    if name not in ("window", "session_window"):
        return None
    args = node.expressions
    if not args or not isinstance(args[0], exp.Column):
        raise refuse(f"{node.sql()} (the first argument is the table's event time column)")
    if name == "session_window" and len(args) == 2:
        gap = spark_duration(args[1])
        return "session", args[0].name, gap, gap, None, name
    if name == "window" and len(args) in (2, 3):
        size = spark_duration(args[1])
        slide = spark_duration(args[2]) if len(args) == 3 else size
        return ("tumble" if slide == size else "hop"), args[0].name, size, slide, None, name
    raise refuse(f"{node.sql()} with {len(args)} arguments (a start time)")
