"""Flink SQL's dialect for sqlglot: Spark's (whose scalar expressions Lakestate keeps), with what Flink's
streaming SQL adds that sqlglot's Spark parser lacks: the windowing table-valued functions
(``TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))``, ``HOP``, ``CUMULATE``) and the group
window ``SESSION(dateTime, INTERVAL '10' SECOND)`` of a ``GROUP BY``. No Spark here."""
from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.tokens import TokenType

TVFS = ("TUMBLE", "HOP", "CUMULATE")


class WindowTVF(exp.Expression, exp.Func):
    """``TUMBLE`` / ``HOP`` / ``CUMULATE`` over a table: ``this`` the table, ``kind`` the function, ``expressions``
    its arguments after the table (the ``DESCRIPTOR`` and the intervals)."""

    arg_types = {"this": True, "kind": True, "expressions": False}


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
        args = []
        while self._match(TokenType.COMMA):
            args.append(self._parse_assignment())
        return self.expression(WindowTVF(this=table, kind=exp.Var(this=kind), expressions=args))
    return parse


def _group_window(kind: str):
    def parse(self):
        column = self._parse_column()
        args = [self._parse_assignment()] if self._match(TokenType.COMMA) else []
        return self.expression(GroupWindow(kind=exp.Var(this=kind), this=column, expressions=args))
    return parse


class Flink(Spark):
    """sqlglot's Spark dialect with Flink's windowing syntax (see the module docstring)."""

    class Parser(Spark.Parser):
        """Spark's parser, with the windowing functions and ``TABLE(...)`` of one in ``FROM``."""

        FUNC_TOKENS = {*Spark.Parser.FUNC_TOKENS, *((TokenType.SESSION,) if hasattr(TokenType, "SESSION") else ())}
        FUNCTION_PARSERS = {**Spark.Parser.FUNCTION_PARSERS, **{k: _window_tvf(k) for k in TVFS},
                            "DESCRIPTOR": lambda self: self.expression(Descriptor(this=self._parse_column())),
                            "SESSION": _group_window("SESSION")}

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


def window_of(table) -> tuple:
    """The table a FROM reads, and its windowing function as ``(kind, time column, size ms, slide ms)`` (None:
    the table itself)."""
    from ..errors import ConfigError

    def refuse(what: str) -> ConfigError:
        return ConfigError(f"SQL: {what} is not supported yet (docs/writing/sql.md lists what is)")

    if not (isinstance(table, exp.Table) and isinstance(table.this, WindowTVF)):
        return table, None
    tvf = table.this
    kind, args = tvf.args["kind"].name, tvf.expressions
    if kind not in ("TUMBLE", "HOP") or not args or not isinstance(args[0], Descriptor):
        raise refuse(f"{kind}(...)" if kind not in ("TUMBLE", "HOP") else "a window without DESCRIPTOR(...)")
    sizes = [interval_millis(a) for a in args[1:]]
    if kind == "TUMBLE" and len(sizes) == 1:
        return tvf.this, ("tumble", args[0].this.name, sizes[0], sizes[0])
    if kind == "HOP" and len(sizes) == 2:
        return tvf.this, ("hop", args[0].this.name, sizes[1], sizes[0])  # HOP(..., slide, size)
    raise refuse(f"{kind} with {len(sizes)} intervals (an offset)")
