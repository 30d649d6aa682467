"""A SQL job as the pipeline registry declares it (docs/writing/sql.md, "In the registry"), and the job it builds.

    [jobs.clicks-per-minute-sql]
    sql = \"\"\"SELECT country, window_start, window_end, COUNT(*) AS clicks
             FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
             GROUP BY country, window_start, window_end\"\"\"
    sink = "sinks/clicks_per_minute_sql"
    parallelism = 2                            # each stateful operator's (SqlJob's parallelism)

    [jobs.clicks-per-minute-sql.tables.clicks]
    path = "input/clicks"                      # a folder of files; relative: under the root ($LAKESTATE_ROOT)
    format = "parquet"                         # or "json" (JSON lines)
    schema = "user_id BIGINT, country STRING, ts BIGINT"
    watermark = "ts - INTERVAL '4' SECOND"     # Flink's WATERMARK FOR ... AS ...; leave out: no event time
    max_files_per_batch = 1                    # optional
    # or, for any other source: source = "package.module:factory" (returning a Source)

    [jobs.clicks-per-minute-sql.functions]     # optional: the scalar functions the query calls (@udf)
    count_char = "package.module:count_char"

The catalog's ``sql_entries`` checks the declaration's shape with the standard library alone (a DAG file parses
it); ``build_sql_job`` compiles it, where its errors name the SQL's construct. The catalog records the declaration
as the arguments of ``build_sql_job``, its entrypoint, so a registered SQL job is rebuilt from it as any
entrypoint's job is from its factory.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError


def row_type(schema: str):
    """The ``Types.ROW_NAMED`` of a column list in SQL (``"user_id BIGINT, country STRING, ts BIGINT"``)."""
    from sqlglot import exp
    from sqlglot.errors import ParseError

    from ..types import Types
    from .compile import column_type
    from .dialect import parse

    try:
        create = parse(f"CREATE TABLE t ({schema})")[0]
    except ParseError as e:  # names the position
        raise ConfigError(f"the schema {schema!r} is not a column list (name TYPE, ...): {e}") from None
    columns = [c for c in create.find_all(exp.ColumnDef)]
    if not columns or any(c.args.get("kind") is None for c in columns):
        raise ConfigError(f"the schema {schema!r} must give each column a type: \"user_id BIGINT, country STRING\"")
    return Types.ROW_NAMED([c.name for c in columns], [column_type(c.args["kind"]) for c in columns])


def _source(name: str, table: dict, root):
    from ..catalog.jobs import import_factory
    from ..sources.base import Source
    from ..sources.files import FileSource

    if "source" in table:
        source = import_factory(table["source"], f"table {name!r}'s source")()
        if not isinstance(source, Source):
            raise ConfigError(f"{table['source']} must return a Source (FileSource, KafkaSource, ...) for table "
                              f"{name!r}, got {type(source).__name__}")
        return source
    path = table["path"]
    if not (Path(path).is_absolute() or "://" in path):
        path = f"{str(root).rstrip('/')}/{path}"
    return FileSource(path, table["format"], row_type(table["schema"]),
                      max_files_per_batch=table.get("max_files_per_batch"))


def build_sql_job(job_id: str, sql: str, sink: str, tables: dict, parallelism: int | None = None,
                  functions: dict | None = None):
    """The job of a recorded SQL declaration (``catalog.sql_entries.check_definition``'s), compiled by
    ``SqlJob``: the SQL entrypoint, called with the declaration as its arguments (``functions``: each scalar
    function's name and "package.module:name")."""
    from ..catalog.jobs import import_factory
    from ..settings import Settings
    from .compile import SqlJob, SqlTable

    root = Settings.load().root
    declared = {name: SqlTable(_source(name, t, root), t.get("watermark")) for name, t in tables.items()}
    imported = {name: import_factory(where, f"function {name!r}") for name, where in (functions or {}).items()}
    return SqlJob(job_id, sql, tables=declared, sink=sink, parallelism=parallelism or 2, functions=imported)
