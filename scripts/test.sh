#!/usr/bin/env bash
# README command 2 (and what .ci/run calls): set up (idempotent), then run the
# whole test suite against real Spark, Delta and Airflow. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The browser test needs Debian's Chromium; if it cannot be installed, that test fails (it is not skipped).
bash scripts/browser.sh || echo "[setup] chromium could not be installed: the browser test will fail"
source scripts/env.sh
export LAKESTATE_ROOT="$(mktemp -d)/root"   # tests make their own roots; never touch the demo's
# The slowest tests are listed at the end, to see where the suite's time goes (README: "under 40 minutes").
exec python -m pytest -p no:cacheprovider --durations=15 "$@"
