"""Nexmark's tables as Lakestate reads them, and its queries' texts (issue 63).

The generator's events (``generate.py``) are one table in Nexmark's nested schema (``ddl_gen.sql``'s ``datagen``:
``event_type`` and the ``person`` / ``auction`` / ``bid`` rows); ``ddl_views.sql``'s three views of it are
``person``, ``auction`` and ``bid`` here: each a ``QuerySource`` of that one source (its ``WHERE event_type = n``
and the view's columns), with ``dateTime`` the table's computed column (``ddl_gen.sql``'s ``CASE``) and the
watermark Nexmark declares on it, ``dateTime - INTERVAL '4' SECOND``, computed over all the table's records before
the view's filter, as Flink's is at the table. Only the queries' ``CREATE TABLE`` statements are replaced: by these
tables and by q13's side input, the bounded table Nexmark's ``SideInputGenerator`` writes (``key, value``: ``i, i``
for i below its row count).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from state_store import FileSource, KafkaSource, SqlTable, Types, udf
from state_store.sources.query import QuerySource
from state_store.sql.definition import row_type

QUERIES = Path(__file__).resolve().parent / "queries"  # nexmark/nexmark's Flink SQL at 6b3646c, Apache 2.0
WATERMARK = "`dateTime` - INTERVAL '4' SECOND"
VIEWS = {  # ddl_views.sql: each view's event type and its columns, in order
    "person": (0, "id BIGINT, name STRING, emailAddress STRING, creditCard STRING, city STRING, state STRING, "
                  "`dateTime` TIMESTAMP(3), extra STRING"),
    "auction": (1, "id BIGINT, itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT, "
                   "`dateTime` TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT, extra STRING"),
    "bid": (2, "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, `dateTime` TIMESTAMP(3), "
               "extra STRING"),
}
EVENT = Types.ROW_NAMED(["event_type", *VIEWS], [Types.INT(), *(row_type(s) for _, s in VIEWS.values())])
DATE_TIME = ("CASE WHEN event_type = 0 THEN person.`dateTime` WHEN event_type = 1 THEN auction.`dateTime` "
             "ELSE bid.`dateTime` END")  # ddl_gen.sql's computed column
SIDE_INPUT = row_type("key BIGINT, `value` STRING")
SIDE_INPUT_ROWS = 10_000  # q13's side input: Nexmark's side_input_gen.sh default


@udf(result_type=Types.LONG())
def count_char(text, char):
    """Nexmark's q14 function (``CountChar``): how many times ``char`` is in ``text``."""
    return None if text is None else text.count(char)


def view_source(events, view: str) -> QuerySource:
    """``ddl_views.sql``'s view ``view`` of the events: its rows of its event type, as its columns."""
    event_type, schema = VIEWS[view]
    columns = row_type(schema)
    return QuerySource(events, f"event_type = {event_type}",
                       tuple((c, DATE_TIME if c == "dateTime" else f"{view}.`{c}`") for c in columns.fields),
                       columns)


def nexmark_tables(events_dir: str, side_input_dir: str | None = None, files_per_batch: int = 1) -> dict:
    """Nexmark's views over the JSON-lines files of ``events_dir`` (``files_per_batch`` a microbatch), and q13's
    side input in ``side_input_dir`` (``write_side_input``'s)."""
    events = FileSource(events_dir, "json", EVENT, max_files_per_batch=files_per_batch)
    tables = {view: SqlTable(view_source(events, view), WATERMARK) for view in VIEWS}
    if side_input_dir is not None:
        tables["side_input"] = FileSource(side_input_dir, "json", SIDE_INPUT)
    return tables


def kafka_events(max_records_per_microbatch: int | None = None) -> KafkaSource:
    """The generator's events as the records of a Kafka topic (``generate.py --kafka-topic``): the topic
    ``$NEXMARK_TOPIC`` (default ``nexmark``) at ``$LAKESTATE_KAFKA_BOOTSTRAP`` (default ``127.0.0.1:9092``), from
    its earliest offsets, ``$NEXMARK_MAX_RECORDS`` (or ``max_records_per_microbatch``) a microbatch at most."""
    most = os.environ.get("NEXMARK_MAX_RECORDS")
    return KafkaSource(os.environ.get("LAKESTATE_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
                       topics=[os.environ.get("NEXMARK_TOPIC", "nexmark")], schema=EVENT,
                       max_records_per_microbatch=int(most) if most else max_records_per_microbatch)


def kafka_person() -> QuerySource:
    """``person`` over the topic of ``kafka_events``: a registry table's ``source`` (``registry_text``)."""
    return view_source(kafka_events(), "person")


def kafka_auction() -> QuerySource:
    """``auction`` over the topic of ``kafka_events``."""
    return view_source(kafka_events(), "auction")


def kafka_bid() -> QuerySource:
    """``bid`` over the topic of ``kafka_events``."""
    return view_source(kafka_events(), "bid")


def registry_text(queries=(5, 8), **entry) -> str:
    """The pipeline registry entries (``lakestate.toml``) of Nexmark's queries ``queries`` over the topic of
    ``kafka_events``: ``nexmark-q<n>``, its SQL text, its sink ``sinks/nexmark_q<n>`` and its tables (the views
    it reads, each a ``source`` here, with Nexmark's watermark); ``entry``: further fields of each (``parallelism
    = 2``, ``schedule = "none"``)."""
    lines = []
    for n in queries:
        text = select_text(n)
        lines += [f"[jobs.nexmark-q{n}]", f"sql = '''\n{text}'''", f'sink = "sinks/nexmark_q{n}"',
                  *(f"{k} = {json.dumps(v)}" for k, v in entry.items()), ""]
        for view in VIEWS:
            if re.search(rf"\bTABLE {view}\b|\b(FROM|JOIN) {view}\b", text):
                lines += [f"[jobs.nexmark-q{n}.tables.{view}]", f'source = "bench.nexmark.tables:kafka_{view}"',
                          f"watermark = {json.dumps(WATERMARK)}", ""]
    return "\n".join(lines)


def write_side_input(folder: Path, rows: int = SIDE_INPUT_ROWS) -> Path:
    """Nexmark's side input (``SideInputGenerator``: ``i, i`` for i below ``rows``) as Lakestate's JSON lines and
    Flink's CSV, in ``folder``; the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "side_input.json").write_text("".join(f'{{"key":{i},"value":"{i}"}}\n' for i in range(rows)))
    (folder / "side_input.csv").write_text("".join(f"{i},{i}\n" for i in range(rows)))
    return folder


def query_text(n: int) -> str:
    """Query ``n`` as Nexmark writes it, less its comments."""
    return "\n".join(line for line in (QUERIES / f"q{n}.sql").read_text().splitlines()
                     if not line.strip().startswith("--"))


def select_text(n: int) -> str:
    """Query ``n`` less its comments, its CREATE TABLE and CREATE FUNCTION statements and its INSERT INTO: its
    views, if any, then its SELECT."""
    text = query_text(n)
    views = re.findall(r"(CREATE VIEW .*?;)", text, re.S)
    return "\n".join([*views, re.search(r"INSERT INTO \w+\s+(.*)$", text, re.S).group(1).strip().rstrip(";")])
