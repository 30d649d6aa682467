# Sourced by demo.sh and demo-kafka.sh (after env.sh): the Airflow standalone a demo's runs go through, and one run.

# start_ui: the standalone of scripts/airflow-ui.sh in the background, on 127.0.0.1 at a free port, or the one
# already running for $AIRFLOW_HOME; UI_STARTED=1 when this demo started it (and so should stop it).
start_ui() {
  local ui
  ui=$(bash scripts/airflow-ui.sh --background 2>&1) || { echo "$ui" | tail -30; exit 1; }
  echo "$ui" | grep '^\[lakestate\]'
  case $ui in
    *"already running"*) UI_STARTED=0 ;;
    *) UI_STARTED=1 ;;
  esac
}

# dag_run DAG_ID [CONF_JSON]: a DAG run through the scheduler, showing Lakestate's own progress lines (from the
# task logs) and the outcome; the demo stops when it fails.
dag_run() {
  python scripts/demo_run.py "$@" || { echo "[demo] the DAG run failed: its task logs are named above"; exit 1; }
}
