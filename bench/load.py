"""Load on the production stack (issue 43): Airflow on PostgreSQL with the LocalExecutor (scripts/airflow-db.env's
parallelism 4), its runs on a Spark Connect server (or spark-submits), each part with a stack of its own.

    source scripts/env.sh
    python bench/load.py                      # both parts, on a warm Spark Connect server
    python bench/load.py --only ten           # ten jobs' pipeline DAGs on one schedule
    python bench/load.py --only hundred       # 100 runs of one job back to back, compaction on its schedule
    python bench/load.py --spark submit       # each run a spark-submit of its own (local[*]) instead

- ten: ten jobs (bench/load_jobs.py: workload R's count-sum job, an input folder each) whose pipeline DAGs share
  one cron schedule (every ``--interval`` minutes) for ``--minutes``; a new input file per job before each tick.
  Then the DAGs are paused and the runs left finish. Checks: every DAG run succeeded (none lost: failed or never
  ended), no run took a lease over from another (no "taking over" in any task log), each job's sink holds each
  event once (no key twice at one count; per key, the last count is its events), and the page (/lakestate/ and
  /lakestate/api/jobs, polled all along) answered in under 2 s.
- hundred: one job triggered ``--runs`` times back to back (a new input file before each: the same keys, so its
  state stays the same size) while the compaction DAG runs on its registry schedule (every ``--compact-every``
  minutes). After each run: the files and bytes of the job's folder (state tables, their Delta logs, metadata),
  the checkpoints kept, the run task's seconds. Prints them per tenth of the runs, then the folder at the first run
  after each compaction (its trough) and the last third of those against the first.

It prints figures and ends non-zero when a check fails; bench/README.md keeps what it printed.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.load_jobs import input_dir  # noqa: E402
from bench.workload import write_workload  # noqa: E402
from tests.support.airflow_server import airflow_db_settings, airflow_env, airflow_ui, get, send_json, token  # noqa: E402
from tests.support.ports import free_ports  # noqa: E402

PAGE_LIMIT_S = 2.0


def _script(name: str, env: dict, *args: str) -> str:
    done = subprocess.run(["bash", str(ROOT / "scripts" / name), *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    if done.returncode:
        sys.exit(f"scripts/{name} {' '.join(args)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout.strip()


@contextlib.contextmanager
def stack(base: Path, registry: str, spark: str):
    """PostgreSQL (scripts/postgres.sh), a Spark Connect server (scripts/spark-connect.sh) when ``spark`` is
    "connect", and Airflow's standalone on them (scripts/airflow-ui.sh): yields (Airflow's URL, a token, its
    environment, PostgreSQL's)."""
    pg_dir = Path(tempfile.mkdtemp(prefix="lakestate-load-pg-", dir="/tmp"))
    pg_dir.chmod(0o755)  # the system user postgres reaches it when this runs as root
    pg = {**os.environ, "LAKESTATE_POSTGRES_DIR": str(pg_dir / "pg"), "LAKESTATE_POSTGRES_PORT": str(free_ports(1)[0])}
    connect = {**os.environ, "LAKESTATE_CONNECT_DIR": str(base / "connect")}
    (base / "lakestate.toml").write_text(registry)
    settings = {k: v for k, v in airflow_db_settings().items() if k.startswith("AIRFLOW__")}
    env = {**airflow_env(base, base / "lakestate", base / "lakestate.toml"), **settings}
    with contextlib.ExitStack() as stop:
        _script("postgres.sh", pg, "start")
        stop.callback(shutil.rmtree, pg_dir, True)
        stop.callback(_script, "postgres.sh", pg, "stop")
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = _script("postgres.sh", pg, "url")
        if spark == "connect":
            url = _script("spark-connect.sh", connect, "start", "--background", "--port",
                          str(free_ports(1)[0])).splitlines()[-1]
            stop.callback(_script, "spark-connect.sh", connect, "stop")
            host, port = url[len("sc://"):].split(":")
            env["AIRFLOW_CONN_LAKESTATE_SPARK"] = json.dumps({"conn_type": "spark_connect", "host": host,
                                                               "port": int(port)})
        started = time.perf_counter()
        url = stop.enter_context(airflow_ui(env))
        print(f"  stack up in {time.perf_counter() - started:.0f} s: Airflow {url} on PostgreSQL, "
              f"{settings['AIRFLOW__CORE__EXECUTOR']} parallelism {settings['AIRFLOW__CORE__PARALLELISM']}, "
              f"spark: {spark}", flush=True)
        yield url, token(url), env, pg


def query(pg: dict, sql: str) -> list[list[str]]:
    """Rows of ``sql`` in Airflow's database."""
    db = airflow_db_settings()
    done = subprocess.run(["psql", "-X", "-At", "-h", "127.0.0.1", "-p", pg["LAKESTATE_POSTGRES_PORT"], "-U",
                           db["POSTGRES_USER"], "-d", db["POSTGRES_DB"], "-F", "|", "-c", sql], capture_output=True,
                          text=True, env={**os.environ, "PGPASSWORD": db["POSTGRES_PASSWORD"]}, timeout=60)
    if done.returncode:
        sys.exit(f"psql: {done.stderr}")
    return [line.split("|") for line in done.stdout.splitlines()]


def wait_parsed(url: str, api: str, dag_ids: list[str], timeout_s: float = 300) -> None:
    deadline = time.time() + timeout_s
    for dag_id in dag_ids:
        while get(f"{url}/api/v2/dags/{dag_id}", api)[0] != 200:
            if time.time() > deadline:
                sys.exit(f"{dag_id} was not parsed in {timeout_s:.0f} s")
            time.sleep(1)


class PagePoller(threading.Thread):
    """GETs the Lakestate page and its JSON API in turn, every ``every_s``, until stopped: (path, seconds,
    status) of each."""

    PATHS = ("/lakestate/", "/lakestate/api/jobs")

    def __init__(self, url: str, api: str, every_s: float = 1.0):
        super().__init__(daemon=True)
        self.url, self.api, self.every_s = url, api, every_s
        self.seen: list[tuple[str, float, int]] = []
        self.done = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.done.is_set():
            path = self.PATHS[n % len(self.PATHS)]
            started = time.perf_counter()
            try:
                status = get(self.url + path, self.api)[0]
            except OSError:
                status = 0
            self.seen.append((path, time.perf_counter() - started, status))
            n += 1
            self.done.wait(self.every_s)

    def report(self) -> list[str]:
        problems = []
        for path in self.PATHS:
            took = sorted(s for p, s, _ in self.seen if p == path)
            bad = [st for p, _, st in self.seen if p == path and st != 200]
            p95 = took[int(0.95 * (len(took) - 1))]
            print(f"  page {path}: {len(took)} requests, median {statistics.median(took):.3f} s, p95 {p95:.3f} s, "
                  f"max {took[-1]:.3f} s, not 200: {len(bad)}")
            if took[-1] >= PAGE_LIMIT_S or bad:
                problems.append(f"the page {path} took {took[-1]:.2f} s at most (limit {PAGE_LIMIT_S} s), "
                                f"{len(bad)} answers not 200")
        return problems


def log_lines(env: dict, needle: str) -> list[str]:
    """The lines of the task logs under ``env``'s AIRFLOW_HOME that contain ``needle``."""
    logs = Path(env["AIRFLOW_HOME"]) / "logs"
    return [line for p in logs.rglob("*.log") for line in p.read_text(errors="replace").splitlines() if needle in line]


def lease_problems(env: dict) -> list[str]:
    """A run takes the job over only from its own DAG run's reservation (the lease sensor's), never from another
    holder (a stale lease: its process gone or silent past its timeout)."""
    taken = log_lines(env, "taking over from run")
    handed = [line for line in taken if "it was reserved for this run" in line]
    waited = log_lines(env, "for the job to be free")
    print(f"  lease: {len(handed)} handovers from a run's own reservation, {len(taken) - len(handed)} takeovers "
          f"of another holder, {len(waited)} waits for a holder", flush=True)
    return [f"a lease taken over: {line}" for line in taken if line not in handed]


def sink_problems(env: dict, job_id: str) -> list[str]:
    """Each event of the job's input once in its sink: no key twice at one count, per key the last count its
    events (read with delta-rs, no Spark)."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    root = Path(env["LAKESTATE_ROOT"])
    events = pq.read_table(input_dir(job_id, root)).to_pandas().groupby("key").size().sort_index()
    sink = DeltaTable(str(root / "warehouse" / "sinks" / job_id)).to_pandas()
    problems = []
    if sink.duplicated(["key", "count"]).any():
        problems.append(f"{job_id}: a key at the same count twice in the sink (a microbatch written twice)")
    if sink.groupby("key")["count"].max().sort_index().tolist() != events.tolist():
        problems.append(f"{job_id}: the sink's last counts are not the input's events per key")
    return problems


def runs_of(pg: dict, dag_like: str) -> list[list[str]]:
    """(dag id, run id, run type, state, seconds of its run task or '') of every DAG run of ``dag_like``."""
    return query(pg, "SELECT r.dag_id, r.run_id, r.run_type, r.state, coalesce(t.duration::text, '') "
                     "FROM dag_run r LEFT JOIN task_instance t ON t.dag_id = r.dag_id AND t.run_id = r.run_id "
                     f"AND t.task_id = 'run' WHERE r.dag_id LIKE '{dag_like}' ORDER BY r.id")


def ten(args, base: Path) -> list[str]:
    jobs = [f"load{n}" for n in range(args.jobs)]
    cron = f"*/{args.interval} * * * *" if args.interval > 1 else "* * * * *"
    registry = "".join(f'[jobs.{j}]\nentrypoint = "bench.load_jobs:{j}"\nschedule = "{cron}"\n\n' for j in jobs)
    root = base / "lakestate"
    for j in jobs:
        write_workload(input_dir(j, root), 1, args.events, args.keys)
    print(f"ten: {len(jobs)} jobs on schedule '{cron}' for {args.minutes} min, {args.events} events a file "
          f"over {args.keys} keys", flush=True)
    with stack(base, registry, args.spark) as (url, api, env, pg):
        dag_ids = [f"lakestate_{j}" for j in jobs]
        wait_parsed(url, api, dag_ids)
        poller = PagePoller(url, api)
        poller.start()
        started, written = time.time(), 1
        tick = 60 * args.interval
        while (next_tick := (time.time() // tick + 1) * tick) - started < args.minutes * 60:
            time.sleep(max(0.0, next_tick - 5 - time.time()))  # a new file for each job, before each tick
            for j in jobs:
                write_workload(input_dir(j, root), 1, args.events, args.keys)
            written += 1
            done = [r for r in runs_of(pg, "lakestate_load%") if r[3] == "success"]
            print(f"  {time.time() - started:5.0f} s: {written} files a job, {len(done)} runs done", flush=True)
            time.sleep(max(0.0, next_tick + 1 - time.time()))
        time.sleep(5)  # the scheduler makes the last tick's runs
        # The schedule ends as a user ends it: the registry's entries say "none" (pausing would freeze the runs
        # under way). Then every DAG is run once more, by hand, so that the last files are read whatever runs
        # the scheduler skipped while a job's run went on past a tick (max_active_runs=1, no catch-up).
        (base / "lakestate.toml").write_text(registry.replace(f'schedule = "{cron}"', 'schedule = "none"'))
        wait_unscheduled(url, api, dag_ids)
        while any(r[3] in ("queued", "running") for r in runs_of(pg, "lakestate_load%")):
            time.sleep(2)
        scheduled = len(runs_of(pg, "lakestate_load%"))
        last = [trigger(url, api, d) for d in dag_ids]
        for dag_id, run_id in zip(dag_ids, last):
            wait_finished(url, api, dag_id, run_id)
        poller.done.set()
        poller.join()
        runs = runs_of(pg, "lakestate_load%")
        took = sorted(float(r[4]) for r in runs if r[4])
        per_job = {j: sum(r[0] == f"lakestate_{j}" for r in runs) for j in jobs}
        print(f"  {scheduled} scheduled DAG runs and {len(runs) - scheduled} by hand in {time.time() - started:.0f} s "
              f"({min(per_job.values())}-"
              f"{max(per_job.values())} a job), states {sorted({r[3] for r in runs})}; run task median "
              f"{statistics.median(took):.1f} s, max {took[-1]:.1f} s")
        problems = [f"{r[0]} {r[1]}: {r[3]}" for r in runs if r[3] != "success"]
        problems += lease_problems(env)
        for j in jobs:
            problems += sink_problems(env, j)
        problems += poller.report()
        return problems


def job_folder(env: dict, job_id: str) -> tuple[int, int, int, int]:
    """(files, bytes, Delta log files, checkpoints kept) of job ``job_id``'s folder."""
    from state_store.catalog.job_store import JobStore
    from state_store.settings import Settings

    folder = Settings.load(root=env["LAKESTATE_ROOT"]).job_dir(job_id)
    files = [p for p in Path(folder).rglob("*") if p.is_file()]
    logs = sum(1 for p in files if "_delta_log" in p.parts)
    return len(files), sum(p.stat().st_size for p in files), logs, len(JobStore(folder).checkpoint_ids())


def trigger(url: str, api: str, dag_id: str) -> str:
    status, body = send_json(f"{url}/api/v2/dags/{dag_id}/dagRuns", api, {"logical_date": None}, method="POST")
    if status != 200:
        sys.exit(f"trigger {dag_id}: {status} {body}")
    return json.loads(body)["dag_run_id"]


def wait_finished(url: str, api: str, dag_id: str, run_id: str) -> dict:
    while True:
        run = json.loads(get(f"{url}/api/v2/dags/{dag_id}/dagRuns/{quote(run_id)}", api)[1])
        if run["state"] in ("success", "failed"):
            return run
        time.sleep(0.5)


def wait_unscheduled(url: str, api: str, dag_ids: list[str], timeout_s: float = 300) -> None:
    """Until the DAG processor has read the registry again and every DAG of ``dag_ids`` has no schedule."""
    deadline = time.time() + timeout_s
    for dag_id in dag_ids:
        while json.loads(get(f"{url}/api/v2/dags/{dag_id}", api)[1]).get("timetable_summary") not in (None, "None"):
            if time.time() > deadline:
                sys.exit(f"{dag_id} still has a schedule {timeout_s:.0f} s after the registry said none")
            time.sleep(2)


def print_tenths(rows: list[tuple], tasks: list[float]) -> None:
    """Per tenth of the runs: the job folder's files, MB and Delta log files after each run (mean and max: a
    saw, down at each compaction), the checkpoints kept, the DAG run's and its run task's seconds."""
    tenth = max(1, len(rows) // 10)
    print("  | runs | files, mean / max | MB, mean / max | Delta log files, mean / max | checkpoints | "
          "DAG run s | run task s |\n  | --- | --- | --- | --- | --- | --- | --- |")
    for first in range(0, len(rows), tenth):
        part, took = rows[first:first + tenth], tasks[first:first + tenth]
        column = lambda i, part=part: [r[i] for r in part]  # noqa: E731
        print(f"  | {first + 1}-{first + len(part)} | {statistics.mean(column(0)):,.0f} / {max(column(0)):,} | "
              f"{statistics.mean(column(1)) / 1e6:.2f} / {max(column(1)) / 1e6:.2f} | "
              f"{statistics.mean(column(2)):.0f} / {max(column(2))} | {max(column(3))} | "
              f"{statistics.mean(column(4)):.1f} | {statistics.mean(took):.1f} |")


def print_troughs(troughs: list[tuple]) -> None:
    """The job folder at the first run after each compaction (its trough: what compaction kept, plus one run),
    and the last third's mean against the first's: flat disk has a ratio near 1."""
    print("  after each compaction (+ one run): run, files, MB, Delta log files, checkpoints")
    for n, files, size, logs, kept in troughs:
        print(f"    run {n:3}: {files:5,} files, {size / 1e6:5.2f} MB, {logs:3} log files, {kept} checkpoints")
    third = len(troughs) // 3
    if third:
        first, last = troughs[:third], troughs[-third:]
        for i, name in ((1, "files"), (2, "bytes"), (3, "log files")):
            ratio = statistics.mean(t[i] for t in last) / statistics.mean(t[i] for t in first)
            print(f"  troughs, last third / first third ({third} compactions each): {name} x{ratio:.2f}")


def hundred(args, base: Path) -> list[str]:
    job = "steady"
    cron = f"*/{args.compact_every} * * * *"
    registry = f'[jobs.{job}]\nentrypoint = "bench.load_jobs:{job}"\n\n[compaction]\nschedule = "{cron}"\n'
    root = base / "lakestate"
    print(f"hundred: {args.runs} runs of one job back to back, compaction on '{cron}', {args.events} events a "
          f"file over {args.keys} keys", flush=True)
    with stack(base, registry, args.spark) as (url, api, env, pg):
        wait_parsed(url, api, [f"lakestate_{job}", "lakestate_compaction"])
        rows, problems, troughs = [], [], []
        for n in range(1, args.runs + 1):
            write_workload(input_dir(job, root), 1, args.events, args.events)  # the same keys each time
            run = wait_finished(url, api, f"lakestate_{job}", trigger(url, api, f"lakestate_{job}"))
            if run["state"] != "success":
                problems.append(f"run {n}: {run['state']}")
            took = (datetime.fromisoformat(run["end_date"]) - datetime.fromisoformat(run["start_date"])).total_seconds()
            rows.append((*job_folder(env, job), took))
            done = int(query(pg, "SELECT count(*) FROM task_instance WHERE dag_id = 'lakestate_compaction' AND "
                                 "task_id = 'per_job.compact' AND state = 'success'")[0][0])
            if done > len(troughs):  # a compaction ended since the last run: the folder is its trough + one run
                troughs.append((n, *rows[-1][:4]))
            if n % 10 == 0:
                print(f"  run {n:3}: {rows[-1][0]:5} files, {rows[-1][1] / 1e6:6.2f} MB, {rows[-1][2]:4} Delta log "
                      f"files, {rows[-1][3]} checkpoints", flush=True)
        tasks = [float(r[4]) for r in runs_of(pg, f"lakestate_{job}") if r[4]]
        print_tenths(rows, tasks)
        print_troughs(troughs)
        compacted = query(pg, "SELECT r.start_date, t.start_date, t.end_date, r.state FROM dag_run r JOIN "
                              "task_instance t ON t.dag_id = r.dag_id AND t.run_id = r.run_id AND t.task_id = "
                              "'per_job.compact' WHERE r.dag_id = 'lakestate_compaction' ORDER BY r.id")
        waits = [(datetime.fromisoformat(t) - datetime.fromisoformat(r)).total_seconds()
                 for r, t, _, _ in compacted if t]
        print(f"  compactions: {len(compacted)} runs ({sorted({c[3] for c in compacted})}), from the DAG run's "
              f"start to its compact task's: median {statistics.median(waits):.0f} s, max {max(waits):.0f} s")
        problems += lease_problems(env) + sink_problems(env, job)
        return problems


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped (SIGTERM)"))  # the stack is stopped on the way out
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=("ten", "hundred"))
    parser.add_argument("--spark", choices=("connect", "submit"), default="connect")
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--interval", type=int, default=1, help="minutes between the ten jobs' ticks")
    parser.add_argument("--minutes", type=float, default=5, help="how long the ten jobs' schedule runs")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--compact-every", type=int, default=2, help="minutes between compactions")
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=1000)
    args = parser.parse_args()
    problems = []
    for part in (ten, hundred):
        if args.only in (None, part.__name__):
            base = Path(tempfile.mkdtemp(prefix=f"lakestate-load-{part.__name__}-"))
            found = part(args, base)
            if found:  # the job's folders and Airflow's task logs, to read why
                print(f"  kept {base} (Airflow's task logs: {base}/airflow-home/logs)")
            else:
                shutil.rmtree(base)
            problems += found
    print("\n".join(["problems:", *problems]) if problems else "all checks passed")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
