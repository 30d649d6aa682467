#!/usr/bin/env bash
# README command 2 (and what .ci/run calls): set up (idempotent), then run the
# whole test suite against real Spark, Delta and Airflow. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
export LAKESTATE_ROOT="$(mktemp -d)/root"   # tests make their own roots; never touch the demo's
exec python -m pytest -p no:cacheprovider "$@"
