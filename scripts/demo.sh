#!/usr/bin/env bash
# README command 1: set up (idempotent), then run the demo job with spark-submit
# on the embedded default: local[*] Spark and a warehouse under ./lakestate-data.
# The first run writes 5 input files; every later run adds one more, and the
# job resumes from its latest checkpoint and processes only the new file.
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
lakestate register demo.clicks:job
spark-submit --master "${LAKESTATE_SPARK_MASTER:-local[*]}" --jars "$LAKESTATE_JARS" \
  --conf spark.log.level=WARN --driver-memory 4g \
  jobs/run_microbatches.py --job clicks
echo
lakestate checkpoints --job clicks
echo
echo "state of user 42 at the latest checkpoint:"
lakestate state --job clicks --state events --key 42 2>/dev/null | tail -1
