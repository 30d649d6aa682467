#!/usr/bin/env bash
# README command 1: set up (idempotent), then run the demo job through Airflow on the embedded default:
# `airflow dags test` of its pipeline DAG (SQLite metadata database under ./airflow-home), which submits the
# run with spark-submit to local[*] Spark and a warehouse under ./lakestate-data.
# The first run writes 5 input files; every later run adds one more, and the job resumes from its latest
# checkpoint and processes only the new file.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh

FILES=${DEMO_FILES:-5} EVENTS=${DEMO_EVENTS:-20000} KEYS=${DEMO_KEYS:-20000}
if [ -d "$LAKESTATE_ROOT/input/clicks" ] && ls "$LAKESTATE_ROOT"/input/clicks/*.parquet >/dev/null 2>&1; then
  python -m demo.generate --files 1 --events "$EVENTS" --keys "$KEYS"
else
  python -m demo.generate --files "$FILES" --events "$EVENTS" --keys "$KEYS"
fi
echo "[demo] Airflow metadata database in $AIRFLOW_HOME (SQLite)"
airflow db migrate > "$AIRFLOW_HOME.migrate.log" 2>&1 || { cat "$AIRFLOW_HOME.migrate.log"; exit 1; }
LOG="$AIRFLOW_HOME/demo-last-run.log"
echo "[demo] airflow dags test lakestate_clicks (the whole log: $LOG)"
# Show Lakestate's own progress lines and the outcome; the full Airflow log goes to $LOG.
airflow dags test lakestate_clicks 2>&1 | tee "$LOG" \
  | sed -nE -e 's/^.*(\[lakestate\] .*) \[airflow\..*$/\1/p' -e t -e '/^\[lakestate\]/p' \
      -e 's/^.*(DagRun Finished: dag_id=[^,]*).*(state=[a-z]+).*$/\1, \2/p'
grep -q "DagRun Finished: .*state=success" "$LOG" || { echo "[demo] the DAG run failed: see $LOG"; exit 1; }
echo
lakestate checkpoints --job clicks
echo
echo "state of user 42 at the latest checkpoint:"
lakestate state --job clicks --state events --key 42 2>/dev/null | tail -1
