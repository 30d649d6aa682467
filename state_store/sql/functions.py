"""User-defined scalar functions of SQL jobs (docs/writing/sql.md), as PyFlink's ``@udf(result_type=...)``:

    @udf(result_type=Types.LONG())
    def count_char(text, char):
        return None if text is None else text.count(char)

    SqlJob("q14", "SELECT auction, count_char(extra, 'c') AS c_counts FROM bid", tables=..., sink=...,
           functions={"count_char": count_char})

Spark evaluates a call where it evaluates the query's other expressions (as it reads a table, or a query's rows
between two operators), as an Arrow-optimised Python UDF of the declared result type. No Spark here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ConfigError
from ..types import TypeInfo


@dataclass(frozen=True)
class ScalarFunction:
    """A Python function of one row's values to one value of ``result_type`` (a ``Types`` type), callable as it
    is; made by ``udf``."""

    function: Callable
    result_type: TypeInfo

    def __call__(self, *args: Any) -> Any:
        """The function's value of ``args``, as it is called in the query."""
        return self.function(*args)


def udf(function: Callable | None = None, *, result_type: TypeInfo):
    """A SQL job's scalar function (the module docstring): ``@udf(result_type=Types.LONG())`` over a function,
    or ``udf(f, result_type=...)``."""
    if not isinstance(result_type, TypeInfo):
        raise ConfigError(f"udf(result_type=...) takes a type made with Types (Types.LONG(), ...), got "
                          f"{result_type!r}")

    def wrap(f: Callable) -> ScalarFunction:
        if not callable(f):
            raise ConfigError(f"udf(...) wraps a function, got {f!r}")
        return ScalarFunction(f, result_type)

    return wrap if function is None else wrap(function)


def checked(functions: dict | None) -> tuple[tuple[str, Callable, str], ...]:
    """``SqlJob``'s ``functions`` (name -> ``ScalarFunction``) as the sources carry them: (name, function, Spark
    type) each, the name lower-cased as Spark's are."""
    out = []
    for name, function in (functions or {}).items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"SqlJob(functions=...): {name!r} is no function name (letters, digits, _)")
        if not isinstance(function, ScalarFunction):
            raise ConfigError(f"SqlJob(functions={{{name!r}: ...}}) takes a function made with @udf(result_type="
                              f"Types....), got {type(function).__name__}")
        out.append((name.lower(), function.function, function.result_type.spark_ddl()))
    return tuple(out)
