#!/usr/bin/env bash
# README command 2 (and what .ci/run calls): set up (idempotent), then run the
# whole test suite against real Spark, Delta and Airflow. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The browser test needs Debian's Chromium; if it cannot be installed, that test fails (it is not skipped).
bash scripts/browser.sh || echo "[setup] chromium could not be installed: the browser test will fail"
# Airflow on PostgreSQL (tests/provider/test_postgres.py) needs Debian's postgresql; if it cannot be installed, that test fails.
bash scripts/postgres.sh install || echo "[setup] postgresql could not be installed: the PostgreSQL test will fail"
source scripts/env.sh
# The suite starts some hundreds of Python processes (Airflow, spark-submit, Spark's workers); where the
# environment sets PYTHONDONTWRITEBYTECODE (this machine's does), each would compile the project's modules again.
# Compiled once here; .pyc files are ignored by git and read whatever that variable says.
python -m compileall -q -j 0 state_store dags demo jobs plugins tests >/dev/null || true
# The suite's Spark JVMs but the shared SparkSession of each pytest (tests/conftest.py keeps C2 for it) are short:
# spark-submits and Spark Connect servers of one test. C1 alone compiles what they run for about half the CPU C2 adds
# (bench/README.md, "Cold JVMs"), which the other side's pytest, on the same two cores, gets instead.
export LAKESTATE_SESSION_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:-}"  # the shared sessions' (tests/conftest.py)
export SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:+$SPARK_SUBMIT_OPTS }-XX:TieredStopAtLevel=1"
mkdir -p test-artifacts
rm -f test-artifacts/durations*.txt  # only this run's
show_durations() {  # the head of each durations file the run wrote (tests/conftest.py)
  for f in test-artifacts/durations*.txt; do
    [ -f "$f" ] || continue
    echo "[test] durations ($f):"
    head -"$1" "$f"
  done
}

# Each pytest's environment carries this run's mark, which every process it starts inherits (tests/support/helpers.py,
# RUN_MARK): once the pytests end, the last step finds by it what the suite left running (a failed test's
# `airflow dags test` and its spark-submit were found 37 minutes later, issue 59), prints it, kills it and fails
# the run. This script itself does not carry the mark, nor does the check. Allowed to stay: a PostgreSQL server
# of the checkout's own folder (scripts/postgres.sh start leaves a running server as it is, and no test stops
# it); the tests' own servers (Kafka, Spark's cluster, PostgreSQL, Airflow) are stopped by their fixtures.
RUN_MARK="test.sh@$$.$(date +%s%N)"
left_behind() {
  env -u LAKESTATE_TEST_RUN python -c 'import sys; from tests.support.helpers import end_left_by_run
sys.exit(end_left_by_run(sys.argv[1], allowed=(sys.argv[2],)))' "$RUN_MARK" "$PWD/.postgres/"
}

# With arguments: one pytest with them (e.g. `-m unit`, a file, `-k name`).
if [ $# -gt 0 ]; then
  export LAKESTATE_ROOT="$(mktemp -d)/root"   # tests make their own roots; never touch the demo's
  status=0
  LAKESTATE_TEST_RUN=$RUN_MARK python -m pytest -p no:cacheprovider "$@" || status=$?
  show_durations 40
  left_behind || status=1
  exit $status
fi

# The whole suite starts with the linter (pyproject.toml's [tool.ruff], pinned in requirements.txt): it takes
# seconds, so a finding fails the run now, with ruff's report, not after the 25 minutes of tests. By hand:
# `ruff check`, and `ruff check --fix` for what it can fix itself (the imports' order).
if ! ruff check; then
  echo "[test] ruff check found the above: fix it (\`ruff check --fix\` fixes what it can, the imports' order too)"
  exit 1
fi

# The whole suite: the tiers (tests/conftest.py) in two processes side by side. The e2e tier mostly waits on
# processes of its own (Airflow's scheduler, a browser, pip, servers, a broker) while unit -> spark keeps the JVM
# of its shared session busy: side by side they use the machine's two cores that one after the other left half
# idle, and take about as long (README has the last fresh-clone figures). Each pytest has its own SparkSession,
# Airflow database, LAKESTATE_ROOT and durations file; the e2e side's output is kept in test-artifacts/e2e.log
# and printed once both end. The e2e tests marked `beside_spark` (pyproject.toml) run on the first side, after
# its spark tier: their processes are spark-submits, as busy as that side's, and with them the sides end together.
tier() {  # tier NAME PYTEST-ARGS...: one pytest, its durations in test-artifacts/durations-NAME.txt
  local name=$1; shift
  LAKESTATE_ROOT="$(mktemp -d)/root" LAKESTATE_DURATIONS="durations-$name.txt" LAKESTATE_TEST_RUN=$RUN_MARK \
    python -m pytest -p no:cacheprovider "$@"
}
started=$(date +%s)
tier e2e -m "e2e and not beside_spark" > test-artifacts/e2e.log 2>&1 &
e2e=$!
trap 'kill -INT $e2e 2>/dev/null || true' INT TERM  # pytest tears its fixtures down
status=0
tier unit-spark -m "not e2e or beside_spark" || status=$?
echo "[test] this side done after $(( $(date +%s) - started )) s (status $status); waiting for the e2e side"
e2e_status=0
wait $e2e || e2e_status=$?
echo "[test] the e2e side (test-artifacts/e2e.log), done after $(( $(date +%s) - started )) s (status $e2e_status):"
cat test-artifacts/e2e.log
show_durations 25
[ $status -eq 0 ] && status=$e2e_status
left_behind || status=1
exit $status
