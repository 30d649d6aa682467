#!/usr/bin/env bash
# README's Kafka command: set up (idempotent), start the Kafka broker (scripts/kafka.sh, 127.0.0.1:9092 unless
# LAKESTATE_KAFKA_PORT says otherwise; one already running is used), produce click events to topic `clicks`
# (4 partitions) and run the pipeline DAG lakestate_clicks_kafka through Airflow's scheduler (as scripts/demo.sh
# does for the files); then produce more and run it again: the second run reads only the new messages, from the
# offsets the first one checkpointed. It prints each run's microbatches, the offsets per partition and one user's
# row, and stops what it started (the broker's data stays in .kafka/, so a next demo continues).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
export LAKESTATE_KAFKA_BOOTSTRAP="127.0.0.1:${LAKESTATE_KAFKA_PORT:-9092}"
EVENTS=${DEMO_EVENTS:-20000} USERS=${DEMO_USERS:-2000}

STARTED=()
cleanup() {
  for what in "${STARTED[@]}"; do
    case $what in
      ui) bash scripts/airflow-ui.sh stop >/dev/null ;;
      kafka) bash scripts/kafka.sh stop ;;
    esac
  done
}
trap cleanup EXIT
if ! bash scripts/kafka.sh status >/dev/null 2>&1; then
  STARTED+=(kafka)
fi
bash scripts/kafka.sh start
python -m demo.kafka_clicks --events "$EVENTS" --users "$USERS"

source scripts/demo-common.sh
start_ui
if [ "$UI_STARTED" = 1 ]; then
  STARTED=(ui "${STARTED[@]}")  # stopped first: its runs may read the broker
fi
offsets() {
  python - <<'PY'
from state_store.catalog.job_store import JobStore
from state_store.settings import Settings

latest = JobStore(Settings.load().job_dir("clicks_kafka")).latest_checkpoint()
for topic, partitions in latest.source_offsets["main"]["offsets"].items():
    print(f"[demo] checkpoint {latest.checkpoint_id} (microbatch {latest.batch_id}): next offsets of topic {topic}: "
          + ", ".join(f"partition {p} -> {o}" for p, o in sorted(partitions.items(), key=lambda i: int(i[0]))))
PY
}

dag_run lakestate_clicks_kafka
offsets
python -m demo.kafka_clicks --events $(( EVENTS / 4 )) --users "$USERS"
dag_run lakestate_clicks_kafka
offsets
echo
lakestate checkpoints --job clicks_kafka
echo
echo "state of user 42 at the latest checkpoint:"
lakestate state --job clicks_kafka --state totals --key 42 2>/dev/null | tail -1
echo
echo "[demo] every run above is in the Airflow UI with its task logs ($AIRFLOW_HOME/logs): scripts/airflow-ui.sh"
