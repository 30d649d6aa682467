#!/usr/bin/env bash
# The Airflow UI with Lakestate's DAGs and plugin loaded, on the embedded default (SQLite, local Spark):
# `airflow standalone` (API server with the UI, scheduler, DAG processor, triggerer) on http://localhost:8080.
# Log in as "admin"; Airflow's simple auth manager writes the password to
# $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated (this script prints it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS:-admin:admin}"
airflow db migrate > "$AIRFLOW_HOME.migrate.log" 2>&1 || { cat "$AIRFLOW_HOME.migrate.log"; exit 1; }
# The Spark connection the pipeline DAGs submit to; point it at a cluster with
#   airflow connections delete lakestate_spark && airflow connections add lakestate_spark --conn-type spark --conn-host spark://HOST --conn-port 7077
if ! airflow connections get lakestate_spark >/dev/null 2>&1; then
  airflow connections add lakestate_spark --conn-type spark --conn-host 'local[*]' >/dev/null
fi
PASSWORDS="$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated"
( for _ in $(seq 120); do
    if [ -s "$PASSWORDS" ]; then
      echo "[lakestate] Airflow UI: http://localhost:8080  user admin, password: $(python -c 'import json,sys; print(json.load(open(sys.argv[1]))["admin"])' "$PASSWORDS")"
      break
    fi
    sleep 1
  done ) &
exec airflow standalone
