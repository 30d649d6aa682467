"""Nexmark's q5 and q8 as a user runs them (issue 63): two entries of a pipeline registry
(``bench/nexmark/tables.py``'s ``registry_text``: the queries' SQL over Nexmark's views of a Kafka topic), the
topic fed by the generator (``generate.py --kafka-topic``'s ``write_topic``, two partitions), run by their
pipeline DAGs' tasks with a savepoint and a rescale from 2 to 3 between two runs, the second ending the input
(the DAG's ``end_of_input``): each final table equal to Flink's over the same events (the slice of
``test_queries.py``; its event time a ``TIMESTAMP``, per partition)."""
from __future__ import annotations

from bench.nexmark.engines import lakestate_table, rows_of, sql_job
from bench.nexmark.generate import parse_base_time, write_files, write_topic
from bench.nexmark.run import BASE_TIME, SLICE, digest
from bench.nexmark.tables import registry_text
from tests.nexmark.test_queries import EXPECTED
from tests.support.airflow_files import write_registry


def test_q5_and_q8_run_by_their_dags_over_kafka_through_a_savepoint_and_a_rescale_give_flinks_tables(
        spark, tmp_path, broker, monkeypatch):
    from state_store.catalog.job_store import JobStore
    from state_store.graph import as_job
    from state_store.settings import Settings
    from tests.support.airflow_inprocess import execute, in_process_dags

    events = write_files(tmp_path / "events", SLICE["events"], SLICE["files"], SLICE["seed"], SLICE["rate"],
                         parse_base_time(BASE_TIME))
    assert write_topic(events, "nexmark", broker["bootstrap"], 2) == SLICE["events"]
    for name, value in {"LAKESTATE_KAFKA_BOOTSTRAP": broker["bootstrap"], "NEXMARK_TOPIC": "nexmark",
                        "NEXMARK_MAX_RECORDS": "1000"}.items():
        monkeypatch.setenv(name, value)
    root = tmp_path / "lakestate"
    dags = in_process_dags(monkeypatch, write_registry(tmp_path, registry_text(parallelism=2)), root)
    settings = Settings.load(root=root)
    for n in (5, 8):
        job = f"nexmark-q{n}"
        run = dags[f"lakestate_{job}"].get_task("run")
        first, _, _ = execute(run, {"max_microbatches": 1}, f"lakestate_{job}")
        assert first["microbatches"] == [0]
        saved, _, _ = execute(dags["lakestate_savepoint"].get_task("savepoint"), {"job": job, "label": "first"},
                              "lakestate_savepoint")
        assert saved["path"] == str(root / "savepoints" / job / "first")
        _, said, _ = execute(dags["lakestate_rescale"].get_task("rescale"), {"job": job, "parallelism": 3},
                             "lakestate_rescale")
        assert "from parallelism 2 to 3" in "\n".join(said)
        last, said, _ = execute(run, {"end_of_input": True}, f"lakestate_{job}")
        assert last["microbatches"][0] == 1 and "restored checkpoint" in "\n".join(said)
        assert JobStore(settings.job_dir(job)).latest_checkpoint().parallelism == 3
        columns = [c for c in as_job(sql_job(n, events[0].parent, tmp_path)).operators[-1].output_type.fields
                   if c != "_kind"]
        rows = rows_of(lakestate_table(spark, settings.in_warehouse(f"sinks/nexmark_q{n}", "sink"), columns))
        stored = EXPECTED["queries"][f"q{n}"]
        assert (len(rows), digest(rows)) == (stored["rows"], stored["sha256"]), (rows[:3], stored["head"])
