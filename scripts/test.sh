#!/usr/bin/env bash
# README command 2 (and what .ci/run calls): set up (idempotent), then run the
# whole test suite against real Spark, Delta and Airflow. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The browser test needs Debian's Chromium; if it cannot be installed, that test fails (it is not skipped).
bash scripts/browser.sh || echo "[setup] chromium could not be installed: the browser test will fail"
source scripts/env.sh
# The suite starts some hundreds of Python processes (Airflow, spark-submit, Spark's workers); where the
# environment sets PYTHONDONTWRITEBYTECODE (this machine's does), each would compile the project's modules again.
# Compiled once here; .pyc files are ignored by git and read whatever that variable says.
python -m compileall -q -j 0 state_store dags demo jobs plugins tests >/dev/null || true
mkdir -p test-artifacts

# With arguments: one pytest with them (e.g. `-m unit`, a file, `-k name`).
if [ $# -gt 0 ]; then
  export LAKESTATE_ROOT="$(mktemp -d)/root"   # tests make their own roots; never touch the demo's
  status=0
  python -m pytest -p no:cacheprovider "$@" || status=$?
  [ -f test-artifacts/durations.txt ] && { echo "[test] durations (test-artifacts/durations.txt):"; head -40 test-artifacts/durations.txt; }
  exit $status
fi

# The whole suite: the tiers (tests/conftest.py) in two processes side by side. The e2e tier mostly waits on
# processes of its own (Airflow's scheduler, a browser, pip, servers) while unit -> spark keeps the JVM of its
# shared session busy: side by side they use the machine's two cores that one after the other left half idle.
# Each process has its own SparkSession, Airflow database and LAKESTATE_ROOT; the e2e output is kept in
# test-artifacts/e2e.log and printed once both end. Where the time went: test-artifacts/durations-*.txt.
rm -f test-artifacts/durations*.txt
started=$(date +%s)
( export LAKESTATE_ROOT="$(mktemp -d)/root" LAKESTATE_DURATIONS=durations-e2e.txt
  exec python -m pytest -p no:cacheprovider -m e2e ) > test-artifacts/e2e.log 2>&1 &
e2e=$!
trap 'kill -INT $e2e 2>/dev/null || true' INT TERM  # pytest tears its fixtures down
status=0
( export LAKESTATE_ROOT="$(mktemp -d)/root" LAKESTATE_DURATIONS=durations-unit-spark.txt
  exec python -m pytest -p no:cacheprovider -m "not e2e" ) || status=$?
echo "[test] unit and spark tiers done after $(( $(date +%s) - started )) s (status $status); waiting for the e2e tier"
e2e_status=0
wait $e2e || e2e_status=$?
echo "[test] e2e tier (test-artifacts/e2e.log), done after $(( $(date +%s) - started )) s (status $e2e_status):"
cat test-artifacts/e2e.log
for f in test-artifacts/durations-unit-spark.txt test-artifacts/durations-e2e.txt; do
  [ -f "$f" ] && { echo "[test] durations ($f):"; head -30 "$f"; }
done
[ $status -eq 0 ] && status=$e2e_status
exit $status
