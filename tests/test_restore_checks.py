"""Restore and rescale refuse what would do nothing or leave a checkpoint no later run can use, and a rescale to
the parallelism the job already has writes nothing (issues 18 and 25)."""
from __future__ import annotations

import pytest

from state_store import Types, ValueStateDescriptor
from state_store.catalog import JobMeta
from state_store.cli import main
from state_store.errors import ConfigError
from state_store.restore import RestoreSource, rescale_job, restore_job
from state_store.savepoint import list_savepoints, load_savepoint
from state_store.state_processor import SavepointWriter

from .helpers import run
from .jobs import count_job, events
from .test_cli import registered  # noqa: F401 - the fixture: a count job registered as 'cli-counts'

QUIET = dict(say=lambda m: None)


def _savepoint(spark, lake):
    rows = spark.createDataFrame([("a", 5)], "k string, n bigint")
    (SavepointWriter.bootstrap(spark, "sp", uid="count", key_type=Types.STRING(), max_parallelism=8, parallelism=2,
                               settings=lake.settings)
     .with_keyed_state(ValueStateDescriptor("count", Types.LONG()), rows, key="k", value="n").write("x", **QUIET))
    return RestoreSource(load_savepoint(lake.settings, "sp/x"))


def test_a_uid_map_that_maps_nothing_is_refused_naming_the_uids_the_savepoint_has(spark, lake):
    spec = count_job(lake, job_id="rj")
    with pytest.raises(ConfigError, match=r"--uid-map nope=rj maps nothing: savepoint .*sp/x has no operator uid "
                                          r"'nope'; the uids it has are \['count'\]"):
        restore_job(spark, lake.settings, spec, _savepoint(spark, lake), uid_map=["nope=rj"], **QUIET)
    assert not lake.settings.job_dir("rj").exists()  # refused before anything was written


def test_restore_to_the_memory_backend_is_refused_in_one_line_before_anything_is_written(spark, lake, registered,
                                                                                        capsys):
    _savepoint(spark, lake)
    assert main(["restore", "cli-counts", "--savepoint", "sp/x", "--backend", "memory", *registered]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lakestate: error: a restore or rescale writes a checkpoint for "
                                                   "the job's next run, and the memory backend keeps checkpoints "
                                                   "only in the process that took them; choose --backend delta or "
                                                   "hashmap")
    assert not lake.settings.job_dir("cli-counts").exists()


@pytest.mark.slow
def test_a_rescale_of_a_job_on_the_memory_backend_is_refused_before_anything_is_written(spark, lake):
    spec = count_job(lake, backend="memory")
    lake.write_events("e0.json", events(0))
    run(spark, spec, lake)
    with pytest.raises(ConfigError, match=r"the memory backend keeps checkpoints only in the process that took "
                                          r"them; choose --backend delta or hashmap"):
        rescale_job(spark, lake.settings, spec, 3, **QUIET)
    assert JobMeta(lake.settings.job_dir(spec.job_id)).checkpoint_ids() == [1]
