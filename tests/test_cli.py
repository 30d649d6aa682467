"""The lakestate command line: register, list jobs and checkpoints, show one key's state."""
from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from state_store.catalog.job_store import JobStore
from state_store.cli import main
from tests.support.helpers import maven_layout, write_stored_values
from tests.support.jobs import events


def test_jobs_lists_registered_jobs_and_unknown_job_is_a_clear_error(lake, registered, capsys):
    assert main(["jobs", *registered]) == 0
    assert "cli-counts" in capsys.readouterr().out
    assert main(["checkpoints", "--job", "nope", *registered]) == 2
    assert "job 'nope' is not registered" in capsys.readouterr().err


def test_run_then_list_checkpoints_and_show_the_state_of_one_key(spark, lake, registered, capsys):
    lake.write_events("e0.json", events(0))
    lake.write_events("e1.json", events(1))
    assert main(["run", "--job", "cli-counts", "--max-microbatches", "1", *registered]) == 0
    assert "1 microbatches" in capsys.readouterr().out
    assert main(["run", "--job", "cli-counts", *registered]) == 0
    out = capsys.readouterr().out
    assert "restored checkpoint 1" in out and "source drained" in out

    assert main(["checkpoints", "--job", "cli-counts", *registered]) == 0
    table = capsys.readouterr().out
    assert "keyed@v" in table and table.splitlines()[0].split()[:2] == ["checkpoint", "microbatch"]

    assert main(["state", "--job", "cli-counts", "--state", "count", "--key", "a", *registered]) == 0
    shown = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (shown["value"], shown["microbatch"], shown["kind"]) == (6, 1, "value")
    assert main(["state", "--job", "cli-counts", "--state", "count", "--key", "a", "--checkpoint", "1",
                 *registered]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["value"] == 3
    assert main(["state", "--job", "cli-counts", "--state", "nothing", "--key", "a", *registered]) == 2
    assert "has no keyed state 'count.nothing'" in capsys.readouterr().err


def test_run_refuses_a_non_positive_microbatch_count(registered, capsys):
    assert main(["run", "--job", "cli-counts", "--max-microbatches", "0", *registered]) == 2
    assert "--max-microbatches must be positive" in capsys.readouterr().err


def test_register_refuses_to_repoint_a_job_id_without_replace(registered, tmp_path, capsys):
    other = tmp_path / "cli_job_module_two.py"
    other.write_text((tmp_path / "cli_job_module.py").read_text())
    assert main(["register", "cli_job_module_two:job", *registered]) == 2
    err = capsys.readouterr().err
    assert "job 'cli-counts' is already registered from cli_job_module:job" in err and "--replace" in err
    assert main(["jobs", *registered]) == 0
    assert main(["register", "cli_job_module:job", *registered]) == 0  # the same entrypoint again: a refresh
    assert main(["register", "cli_job_module_two:job", "--replace", *registered]) == 0
    capsys.readouterr()
    from state_store.catalog.jobs import JobCatalog
    from state_store.settings import Settings

    assert JobCatalog(Settings.load(root=registered[1])).get("cli-counts")["entrypoint"] == "cli_job_module_two:job"


def test_register_refuses_a_table_that_another_registered_job_writes(registered, tmp_path, capsys):
    """Issue 37 #3: sink x with side output late_a and sink x_late with side output a both write x_late_a."""
    (tmp_path / "two_tables.py").write_text(textwrap.dedent("""
        from state_store import OutputTag, Types
        from cli_job_module import _L
        from tests.support.jobs import count_job

        def tag(name):
            return OutputTag(name, Types.ROW_NAMED(["k"], [Types.STRING()]))

        def first():
            return count_job(_L, job_id="first", sink="sinks/x", side_outputs=[tag("late_a")])

        def second():
            return count_job(_L, job_id="second", sink="sinks/x_late", side_outputs=[tag("a")])

        def third():
            return count_job(_L, job_id="third", sink="sinks/cli-counts")
    """))
    assert main(["register", "two_tables:first", *registered]) == 0
    assert main(["register", "two_tables:second", *registered]) == 2
    err = capsys.readouterr().err
    assert re.search(r"job 'second' would write table .*sinks/x_late_a, which registered job 'first' writes", err)
    assert main(["register", "two_tables:third", *registered]) == 2  # a sink another job's sink is
    assert "which registered job 'cli-counts' writes" in capsys.readouterr().err
    assert sorted(p.stem for p in (Path(registered[1]) / "warehouse" / "_lakestate" / "jobs").glob("*.json")) == [
        "cli-counts", "first"]
    assert main(["register", "two_tables:first", *registered]) == 0  # a job may register again over its own tables


def test_a_root_or_warehouse_that_is_a_file_is_named(tmp_path, capsys):
    root = tmp_path / "not-a-folder"
    root.write_text("x")
    assert main(["jobs", "--root", str(root)]) == 2
    assert f"the root {root} is a file, not a folder" in capsys.readouterr().err
    # state's options before its edit are edit's too (no default of edit's overwrites them)
    assert main(["state", "--root", str(root), "edit", "--savepoint", "j/x", "DELETE FROM s"]) == 2
    assert f"the root {root} is a file, not a folder" in capsys.readouterr().err
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "wh").write_text("x")
    assert main(["jobs", "--root", str(tmp_path / "r"), "--warehouse", str(tmp_path / "r" / "wh")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_register_into_a_warehouse_that_cannot_be_written_is_a_clear_error(registered, tmp_path, capsys):
    import os

    if os.geteuid() == 0:  # root writes through permissions, not into /sys
        root = Path("/sys/lakestate-test-root")
    else:
        root = tmp_path / "read-only"
        root.mkdir()
        root.chmod(0o500)
    capsys.readouterr()
    assert main(["register", "cli_job_module:job", "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert f"cannot create the warehouse {root}/warehouse" in err and "choose a folder you can write to" in err


def test_a_factory_that_fails_is_named_in_one_line(capsys, lake):
    assert main(["register", "tests.support.jobs:count_job", "--root", str(lake.root)]) == 2
    err = capsys.readouterr().err
    assert "entrypoint tests.support.jobs:count_job failed while building the job: TypeError" in err
    assert "Traceback" not in err


def test_state_parses_the_key_with_the_jobs_key_type_and_says_when_there_is_no_entry(spark, lake, monkeypatch,
                                                                                      tmp_path, capsys):
    (tmp_path / "cli_long_key_module.py").write_text(textwrap.dedent(f"""
        from pathlib import Path
        from state_store import Types
        from tests.support.jobs import count_job

        class _L:
            events = Path({str(lake.events)!r})

        def job():
            return count_job(_L, job_id="by-seq", key="seq", key_type=Types.LONG(),
                             output_type=Types.ROW_NAMED(["k", "n"], [Types.LONG(), Types.LONG()]))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    lake.write_events("e0.json", events(0))
    root = ["--root", str(lake.root)]
    assert main(["register", "cli_long_key_module:job", *root]) == 0
    assert main(["run", "--job", "by-seq", *root]) == 0
    capsys.readouterr()
    assert main(["state", "--job", "by-seq", "--state", "count", "--key", "010", *root]) == 0  # seq 10 = key 10
    shown = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (shown["key"], shown["value"], shown["checkpoint"]) == (10, 1, 1)
    assert main(["state", "--job", "by-seq", "--state", "count", "--key", "999", *root]) == 1
    assert "no entry for key 999 " in capsys.readouterr().out
    assert main(["state", "--job", "by-seq", "--state", "count", "--key", "x1", *root]) == 2
    assert "key 'x1' is not a LONG, the key type of job 'by-seq'" in capsys.readouterr().err


def test_a_failed_run_prints_one_clear_line_and_keeps_the_full_trace_in_a_log(spark, lake, monkeypatch, tmp_path,
                                                                               capsys):
    (tmp_path / "cli_failing_module.py").write_text(textwrap.dedent(f"""
        from pathlib import Path
        from tests.support.jobs import FailingCount, count_job

        class _L:
            events = Path({str(lake.events)!r})

        def job():
            return count_job(_L, job_id="failing", function=FailingCount())
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    lake.write_events("e0.json", events(0))
    root = ["--root", str(lake.root)]
    assert main(["register", "cli_failing_module:job", *root]) == 0
    capsys.readouterr()
    assert main(["run", "--job", "failing", *root]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert re.search(r"failed before anything was written: UserFunctionError: process\(\) raised ValueError: no "
                     r"records for (\w) please \(at key '\1' of microbatch 0", err), err
    log = Path(err.rsplit("(full trace: ", 1)[1].rstrip(")"))
    assert log.parent == lake.root / "logs" and "Traceback" in log.read_text()


@pytest.mark.e2e
def test_a_run_on_a_spark_connect_address_where_nothing_listens_fails_in_seconds_naming_it(registered, tmp_path):
    """Spark Connect's client retries an unreachable server for ten minutes without a word: the run probes the
    address first. In a process of its own: a remote session marks the whole process as Connect."""
    import subprocess
    import sys
    import time

    from tests.support.ports import free_ports

    url = f"sc://127.0.0.1:{free_ports()[0]}"
    root = Path(registered[1])
    before = sorted(str(p) for p in root.rglob("*"))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "state_store.cli", "run", "--job", "cli-counts", "--remote", url,
                           *registered], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parent.parent)
    seconds = time.monotonic() - started
    assert done.returncode == 2 and seconds < 15, (seconds, done.stderr[-2000:])
    err = done.stderr.strip()
    assert err.startswith(f"lakestate: error: no Spark Connect server answers at {url} ") and "\n" not in err, err
    assert "scripts/spark-connect.sh status" in err and "scripts/spark-connect.sh start" in err, err
    assert sorted(str(p) for p in root.rglob("*")) == before  # refused before anything was written


def test_an_unforeseen_error_is_one_line_too(lake, monkeypatch, capsys):
    import state_store.cli as cli

    def broken(args, settings):
        raise RuntimeError("disk on fire\nsecond line")

    monkeypatch.setattr(cli, "cmd_jobs", broken)
    assert main(["jobs", "--root", str(lake.root)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("lakestate: error: unexpected RuntimeError: disk on fire (full trace: ") and "\n" not in err


def _catalog_jobs(root) -> Path:
    from state_store.settings import Settings

    return Settings.load(root=root).catalog_dir / "jobs"


def test_jobs_names_a_truncated_or_incomplete_job_record_and_lists_the_others(registered, capsys):
    jobs = _catalog_jobs(registered[1])
    good = (jobs / "cli-counts.json").read_text()
    (jobs / "truncated.json").write_text(good[:len(good) // 2])
    (jobs / "no-spec.json").write_text(json.dumps({"entrypoint": "cli_job_module:job", "registered_at": 1}))
    capsys.readouterr()
    assert main(["jobs", *registered]) == 0
    out, err = capsys.readouterr()
    assert "cli-counts" in out and "truncated" not in out and "no-spec" not in out
    assert re.search(r"lakestate: warning: job record .*truncated\.json cannot be read \(JSONDecodeError", err), err
    assert re.search(r"lakestate: warning: job record .*no-spec\.json has no 'spec'", err), err
    assert "lakestate register" in err and "unexpected" not in err
    assert main(["checkpoints", "--job", "truncated", *registered]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lakestate: error: job record ") and "truncated.json cannot be read" in err, err


def test_jobs_names_a_stray_file_that_is_not_a_job_id_and_lists_the_rest(registered, capsys):
    jobs = _catalog_jobs(registered[1])
    (jobs / "Bad Job.json").write_text((jobs / "cli-counts.json").read_text())
    capsys.readouterr()
    assert main(["jobs", *registered]) == 0
    out, err = capsys.readouterr()
    assert "cli-counts" in out and "Bad Job" not in out
    assert re.search(r"lakestate: warning: .*Bad Job\.json is not a job record: job id 'Bad Job' is not valid",
                     err), err


def test_register_with_replace_repairs_a_damaged_job_record(registered, capsys):
    record = _catalog_jobs(registered[1]) / "cli-counts.json"
    record.write_text(record.read_text()[:40])
    capsys.readouterr()
    assert main(["register", "cli_job_module:job", *registered]) == 2
    assert "cannot be read" in capsys.readouterr().err
    assert main(["register", "cli_job_module:job", "--replace", *registered]) == 0
    assert json.loads(record.read_text())["entrypoint"] == "cli_job_module:job"


def test_a_stray_file_among_checkpoints_is_ignored_with_a_warning_by_every_command(spark, lake, registered, capsys):
    import shutil

    lake.write_events("e0.json", events(0))
    assert main(["run", "--job", "cli-counts", *registered]) == 0
    checkpoints = lake.settings.job_dir("cli-counts") / "_meta" / "checkpoints"
    shutil.copy(checkpoints / "chk-1.json", checkpoints / "chk-11 (copy).json")
    lake.write_events("e1.json", events(1))
    for command in (["jobs"], ["checkpoints", "--job", "cli-counts"],
                    ["state", "--job", "cli-counts", "--state", "count", "--key", "a"], ["run", "--job", "cli-counts"]):
        capsys.readouterr()
        assert main([*command, *registered]) == 0, (command, capsys.readouterr().err)
        err = capsys.readouterr().err
        assert err.count("chk-11 (copy).json") == 1, (command, err)
        assert re.search(r"lakestate: warning: ignoring .*chk-11 \(copy\)\.json: not a name Lakestate writes there "
                         r"\(chk-<N>\.json\)", err), (command, err)
    assert JobStore(lake.settings.job_dir("cli-counts"), warn=print).checkpoint_ids() == [1, 2]


def test_every_reader_of_a_damaged_table_or_savepoint_gives_the_clear_damage_error(spark, lake, registered, capsys):
    from urllib.parse import unquote

    from state_store.delta.log import table_files
    from state_store.errors import RestoreError
    from state_store.ops.state_processor import SavepointReader

    lake.write_events("e0.json", events(0))
    assert main(["run", "--job", "cli-counts", *registered]) == 0
    assert main(["savepoint", "cli-counts", "--label", "sp", *registered]) == 0
    keyed, saved = lake.settings.job_dir("cli-counts") / "state" / "keyed", lake.settings.savepoints / "cli-counts/sp"
    version = JobStore(lake.settings.job_dir("cli-counts")).latest_checkpoint().state["keyed"].version
    state = ["state", "--job", "cli-counts", "--state", "count", "--key", "a", *registered]
    of_checkpoint = lambda: SavepointReader.for_checkpoint(spark, "cli-counts", settings=lake.settings)  # noqa: E731
    gone = r"needs 1 data file\(s\) that are gone: .*restore them from a backup"
    damages = [  # the file damaged, how, the commands that read it, the reader, what the error says
        (keyed / "_delta_log" / f"{version:020d}.json", lambda p: p.write_text(p.read_text()[:30]), [state],
         of_checkpoint, r"_delta_log/0+\d+\.json is corrupt \(line 1"),
        (keyed / unquote(sorted(table_files(keyed, version))[0]), Path.unlink, [state], of_checkpoint, gone),
        (saved / "keyed" / unquote(sorted(table_files(saved / "keyed"))[0]), Path.unlink,
         [[*state, "--savepoint", "cli-counts/sp"], ["restore", "cli-counts", "--savepoint", "cli-counts/sp",
                                                    *registered]],
         lambda: SavepointReader.for_savepoint(spark, "cli-counts/sp", lake.settings), gone)]
    for path, damage, commands, reader, problem in damages:
        kept = path.read_bytes()
        damage(path)
        for command in commands:
            capsys.readouterr()
            assert main(command) == 2, command
            err = capsys.readouterr().err.strip()
            assert re.fullmatch(rf"lakestate: error: (checkpoint 1 of job 'cli-counts'|savepoint \S+/sp) cannot be "
                                rf"(read|restored): .*{problem}.*", err), err
        with pytest.raises(RestoreError, match=problem):
            reader()
        path.write_bytes(kept)


def test_state_decodes_only_the_key_asked_for_and_names_a_bad_stored_value(spark, lake, registered, capsys):
    import pickle

    lake.write_events("e0.json", events(0))
    assert main(["run", "--job", "cli-counts", *registered]) == 0
    bad = {"a": pickle.dumps(3, protocol=0).decode(), "b": "[" * 200_000 + "]" * 200_000, "c": '{"n": 3}'}
    write_stored_values(spark, lake, "cli-counts", "count.count", bad)  # values of the wrong type
    state = ["state", "--job", "cli-counts", "--state", "count", *registered]
    capsys.readouterr()
    assert main([*state, "--key", "d"]) == 0  # a healthy key
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["value"] == 3
    for k, text in bad.items():
        assert main([*state, "--key", k]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"lakestate: error: state 'count.count' of key '{k}' holds a stored value that is not "
                              f"its declared LONG: ") and f"(stored: {text[:20]!r}"[:-1] in err, err
        assert "\n" not in err and len(err) < 2000


def test_state_takes_a_key_over_128_kib_from_a_file_or_standard_input(spark, lake, registered, capsys, monkeypatch,
                                                                      tmp_path):
    import io

    key = "k" * 200_000  # over the 128 KiB a single command-line argument may have
    lake.write_events("e0.json", [{"k": key, "v": 1, "op": "add", "seq": 1}, {"k": "a", "v": 1, "op": "add", "seq": 2}])
    assert main(["run", "--job", "cli-counts", *registered]) == 0
    (tmp_path / "key.txt").write_text(key + "\n")  # as an editor or `echo` leaves it
    state = ["state", "--job", "cli-counts", "--state", "count", *registered]
    for source, stdin in ((str(tmp_path / "key.txt"), None), ("-", key)):
        if stdin is not None:
            monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        capsys.readouterr()
        assert main([*state, "--key-file", source]) == 0
        shown = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert (shown["key"], shown["value"]) == (key, 1)
    assert main([*state, "--key-file", str(tmp_path / "nope.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lakestate: error: cannot read the key from ") and "nope.txt" in err, err


def test_jars_fetches_deltas_jars_once_checked_against_their_sha1_and_sessions_get_them(tmp_path, monkeypatch,
                                                                                           capsys):
    """`lakestate jars`: a jar that does not match its published SHA-1 is refused and leaves nothing; a good
    fetch puts both jars in LAKESTATE_JARS_DIR, where `fetched_jars` (delta_jars' last source) finds them; a
    second fetch keeps them. The hook's use of them, in an installed wheel: tests/e2e/test_package.py."""
    from state_store.spark.jars import fetched_jars

    monkeypatch.setenv("LAKESTATE_JARS_DIR", str(tmp_path / "cache"))
    names = ["delta-spark_2.13-4.0.0.jar", "delta-storage-4.0.0.jar"]
    url = maven_layout(tmp_path / "maven", {n: n.encode() * 100 for n in names})
    (tmp_path / "maven" / "io/delta/delta-storage/4.0.0" / names[1]).write_bytes(b"damaged")
    assert main(["jars", "--repository", url, "--root", str(tmp_path / "root")]) == 2
    assert "does not match its published SHA-1" in capsys.readouterr().err and fetched_jars() == []
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [names[0]]  # complete jars only, no part
    maven_layout(tmp_path / "maven", {names[1]: names[1].encode() * 100})
    for said in ("fetched delta-storage", "Delta's jars are in"):
        assert main(["jars", "--repository", url, "--root", str(tmp_path / "root")]) == 0
        assert said in capsys.readouterr().out
    assert [Path(j).name for j in fetched_jars()] == names


def test_rescale_restore_and_dispose_need_approved_by_when_the_entry_asks_or_the_registry_cannot_tell(
        tmp_path, monkeypatch, capsys):
    """What the entry's require_approval asks, the command asks too: refused without --approved-by, naming the
    flag, before anything is read or Spark starts; a registry that does not parse, or a bad field in the job's
    own entry, cannot say the entry does not ask, so the same holds (naming the problem). With --approved-by the
    command goes on (here to the next check: no such job or savepoint) and says who approved."""
    registry, root = tmp_path / "lakestate.toml", ["--root", str(tmp_path / "root")]
    monkeypatch.setenv("LAKESTATE_REGISTRY", str(registry))
    commands = {"rescale": ["rescale", "clicks", "--parallelism", "3"],
                "restore": ["restore", "clicks", "--checkpoint", "1"], "dispose": ["dispose", "clicks/before"]}
    entry = '[jobs.clicks]\nentrypoint = "demo.clicks:job"\n'
    for text, said in [(entry + 'require_approval = ["rescale", "restore", "dispose"]\n', "lists {op} in require_"
                        "approval"),
                       (entry + 'max_state_bytes = "1GB"\n', "field 'max_state_bytes' must be an integer"),
                       (entry + "[jobs.clicks]\n", "[jobs.clicks] is declared again")]:
        registry.write_text(text)
        for op, argv in commands.items():
            assert main([*argv, *root]) == 2
            err = capsys.readouterr().err
            assert said.format(op=op) in err and "give --approved-by NAME" in err, err
            assert main([*argv, *root, "--approved-by", "alice"]) == 2
            out, err = capsys.readouterr()
            assert f"[lakestate] {op} of job clicks approved by alice (" in out, out
            assert "--approved-by" not in err and ("not registered" in err or "no complete savepoint" in err), err
    # An entry that does not ask: no flag needed (the next check speaks), and nothing about an approval.
    registry.write_text(entry + 'require_approval = ["restore"]\n')
    assert main([*commands["rescale"], *root]) == 2
    assert "approv" not in "".join(capsys.readouterr())
