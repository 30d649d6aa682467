"""Sources: a Delta table read through its change data feed, a range of versions per microbatch."""
from __future__ import annotations

import pytest

from state_store import DeltaSource, InputError
from tests.helpers import run, sink_rows
from tests.jobs import count_job

pytestmark = pytest.mark.slow


def _append(spark, path, rows):
    spark.createDataFrame(rows, "k string, v long, op string, seq long").write.format("delta").mode("append").save(path)


def test_a_delta_source_is_read_version_range_by_version_range(spark, lake):
    path = str(lake.inputs / "delta-events")
    spark.createDataFrame([], "k string, v long, op string, seq long").write.format("delta") \
        .option("delta.enableChangeDataFeed", "true").save(path)
    _append(spark, path, [("a", 1, "add", 1), ("b", 2, "add", 2)])
    _append(spark, path, [("a", 3, "add", 3)])
    spec = count_job(lake, job_id="from-delta", source=DeltaSource(path, max_versions_per_batch=1))
    first = run(spark, spec, lake)
    # Version 0 creates the empty table, 1 and 2 append: one microbatch per version.
    assert [b["records_in"] for b in first.batches] == [0, 2, 1]
    _append(spark, path, [("b", 4, "add", 4)])
    second = run(spark, spec, lake)
    assert [b["records_in"] for b in second.batches] == [1]
    assert sink_rows(spark, lake, spec, with_microbatch=False) == sorted(
        ['{"k": "a", "n": 1}', '{"k": "b", "n": 1}', '{"k": "a", "n": 2}', '{"k": "b", "n": 2}'])


def test_a_delta_source_without_change_data_feed_is_refused_with_the_fix(spark, lake):
    path = str(lake.inputs / "plain")
    _append(spark, path, [("a", 1, "add", 1)])
    spec = count_job(lake, job_id="no-cdf", source=DeltaSource(path))
    with pytest.raises(InputError, match=r"no change data feed; run ALTER TABLE .*enableChangeDataFeed = true"):
        run(spark, spec, lake)
