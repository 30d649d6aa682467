"""A SQL job's registry entry (``sql``, ``sink``, ``tables``; state_store/sql/definition.py shows one), checked
with the standard library alone, as a DAG file parses it. What it gives is recorded as the arguments of the SQL
entrypoint, ``SQL_ENTRYPOINT``, which compiles the query when the job is built."""
from __future__ import annotations

import re

from ..errors import ConfigError

SQL_FIELDS = ("sql", "sink", "tables", "functions")
TABLE_FIELDS = ("source", "path", "format", "schema", "watermark", "max_files_per_batch")
SQL_ENTRYPOINT = "state_store.sql.definition:build_sql_job"  # a SQL job's factory, given the declaration


def _check_table(where: str, name: str, table) -> dict:
    at = f"{where} table {name!r}"
    if not isinstance(table, dict):
        raise ConfigError(f"{at}: must be a table of fields ({', '.join(TABLE_FIELDS)}) under "
                          f"[{where.split('[', 1)[-1].rstrip(']')}.tables.{name}]")
    unknown = sorted(set(table) - set(TABLE_FIELDS))
    if unknown:
        raise ConfigError(f"{at}: unknown field {unknown[0]!r}; the fields are {', '.join(TABLE_FIELDS)}")
    for field in ("source", "path", "format", "schema", "watermark"):
        if field in table and not (isinstance(table[field], str) and table[field].strip()):
            raise ConfigError(f"{at}: field {field!r} must be a non-empty string, got {table[field]!r}")
    if "source" in table:
        if set(table) & {"path", "format", "schema", "max_files_per_batch"}:
            raise ConfigError(f"{at}: give either source = \"package.module:factory\" or path, format and schema, "
                              f"not both")
        if not re.fullmatch(r"[\w.]+:[\w.]+", table["source"]):
            raise ConfigError(f"{at}: field 'source' must look like 'package.module:factory', got {table['source']!r}")
    else:
        missing = [f for f in ("path", "format", "schema") if f not in table]
        if missing:
            raise ConfigError(f"{at}: a table of files needs path, format and schema (missing {missing[0]!r}), or "
                              f"give source = \"package.module:factory\"")
        if table["format"] not in ("json", "parquet"):
            raise ConfigError(f"{at}: field 'format' must be 'json' or 'parquet', got {table['format']!r}")
    files = table.get("max_files_per_batch")
    if files is not None and (not isinstance(files, int) or isinstance(files, bool) or files < 1):
        raise ConfigError(f"{at}: field 'max_files_per_batch' must be a positive integer, got {files!r}")
    return dict(table)


def check_definition(where: str, job_id: str, entry: dict) -> dict:
    """Registry entry ``job_id``'s SQL declaration (``sql``, ``sink``, ``tables``, and ``parallelism`` when it
    gives one; ``where`` names the entry) as the catalog records it, checked field by field; a ConfigError
    naming the first bad field."""
    sql, sink, tables = entry.get("sql"), entry.get("sink"), entry.get("tables")
    if not isinstance(sql, str) or not sql.strip():
        raise ConfigError(f"{where}: field 'sql' must be the query's text (one SELECT), got {sql!r}")
    if not isinstance(sink, str) or not sink.strip():
        raise ConfigError(f"{where}: a SQL job needs field 'sink', the table its rows go to (\"sinks/<name>\")")
    if not isinstance(tables, dict) or not tables:
        raise ConfigError(f"{where}: a SQL job needs its tables, each under [{where.split('[', 1)[-1].rstrip(']')}"
                          f".tables.<name>] (path, format, schema, watermark; or source)")
    functions = entry.get("functions", {})
    if not isinstance(functions, dict) or not all(isinstance(f, str) and re.fullmatch(r"[\w.]+:[\w.]+", f)
                                                  for f in functions.values()):
        raise ConfigError(f"{where}: field 'functions' names each scalar function the query calls and where it is "
                          f"(count_char = \"package.module:count_char\", made with @udf), got {functions!r}")
    return {"job_id": job_id, "sql": sql, "sink": sink, "parallelism": entry.get("parallelism"),
            "tables": {n: _check_table(where, n, t) for n, t in tables.items()},
            **({"functions": dict(functions)} if functions else {})}
