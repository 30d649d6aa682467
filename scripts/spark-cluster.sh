#!/usr/bin/env bash
# A Spark standalone cluster on 127.0.0.1: a master and workers (default two, one core each), run from the pyspark
# install's own spark-class, each its own JVM, as the machines of a real cluster would run them. For the tests,
# and for trying Lakestate on a cluster by hand: submit to `scripts/spark-cluster.sh url` (spark-submit --master,
# or Airflow's connection lakestate_spark). Not a production cluster: no authentication, one machine.
#
#   scripts/spark-cluster.sh start    # idempotent: a running master and its workers are left as they are
#   scripts/spark-cluster.sh status   # exit 0 when the master runs with every worker registered
#   scripts/spark-cluster.sh stop     # idempotent: the workers (and their executors), then the master
#   scripts/spark-cluster.sh url      # the master's URL: spark://127.0.0.1:PORT
#
# LAKESTATE_CLUSTER_PORT (default 7077): the master's port; its web UI is on the next one, the workers' on the
#   ones after it.
# LAKESTATE_CLUSTER_WORKERS (default 2), LAKESTATE_CLUSTER_WORKER_CORES (1), LAKESTATE_CLUSTER_WORKER_MEMORY (2g).
# LAKESTATE_CLUSTER_DIR (default .spark-cluster in the checkout, ignored by git): logs, pid files (master.pid,
#   worker-N.pid) and the workers' folders, where each application's executor logs are.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=${LAKESTATE_CLUSTER_DIR:-$ROOT/.spark-cluster}
PORT=${LAKESTATE_CLUSTER_PORT:-7077}
WORKERS=${LAKESTATE_CLUSTER_WORKERS:-2}
CORES=${LAKESTATE_CLUSTER_WORKER_CORES:-1}
MEMORY=${LAKESTATE_CLUSTER_WORKER_MEMORY:-2g}
UI_PORT=$((PORT + 1))
PYTHON=$ROOT/.venv/bin/python
[ -x "$PYTHON" ] || PYTHON=$(command -v python3)

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
alive_workers() {  # the workers the master counts as alive, from its web UI's JSON; 0 when it does not answer
  "$PYTHON" - "$UI_PORT" <<'PY'
import json, sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/json/", timeout=2) as r:
        print(json.load(r).get("aliveworkers", 0))
except OSError:
    print(0)
PY
}
stop_pid() {  # a clean stop, up to 30 s, then kill -9; the pid file removed
  local file=$1 pid
  if running "$file"; then
    pid=$(cat "$file")
    kill "$pid"
    for _ in $(seq 1 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

case "${1:-}" in
  start)
    if running "$DIR/master.pid" && [ "$(alive_workers)" -ge "$WORKERS" ]; then
      echo "[cluster] already running: spark://127.0.0.1:$PORT with $WORKERS workers"
      exit 0
    fi
    SPARK_CLASS=$("$PYTHON" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class"))') \
      || { echo "[cluster] error: pyspark is not installed for $PYTHON; run scripts/setup.sh" >&2; exit 2; }
    mkdir -p "$DIR"
    export SPARK_LOCAL_IP=127.0.0.1 SPARK_LOG_DIR=$DIR SPARK_NO_DAEMONIZE=1
    if ! running "$DIR/master.pid"; then
      for port in "$PORT" "$UI_PORT"; do
        if listening "$port"; then
          echo "[cluster] error: 127.0.0.1:$port is taken by another process; stop it or set LAKESTATE_CLUSTER_PORT" >&2
          exit 2
        fi
      done
      nohup "$SPARK_CLASS" org.apache.spark.deploy.master.Master --host 127.0.0.1 --port "$PORT" \
        --webui-port "$UI_PORT" >> "$DIR/master.log" 2>&1 < /dev/null &
      echo $! > "$DIR/master.pid"
    fi
    for n in $(seq 1 "$WORKERS"); do
      running "$DIR/worker-$n.pid" && continue
      mkdir -p "$DIR/worker-$n"
      nohup "$SPARK_CLASS" org.apache.spark.deploy.worker.Worker "spark://127.0.0.1:$PORT" --host 127.0.0.1 \
        --cores "$CORES" --memory "$MEMORY" --webui-port $((UI_PORT + n)) --work-dir "$DIR/worker-$n" \
        >> "$DIR/worker-$n.log" 2>&1 < /dev/null &
      echo $! > "$DIR/worker-$n.pid"
    done
    for _ in $(seq 1 180); do  # up to 90 s
      for file in "$DIR"/master.pid "$DIR"/worker-*.pid; do
        if ! running "$file"; then
          log=${file%.pid}.log
          echo "[cluster] error: $(basename "${file%.pid}") stopped while starting; the end of $log:" >&2
          tail -20 "$log" >&2
          exit 1
        fi
      done
      if [ "$(alive_workers)" -ge "$WORKERS" ]; then
        echo "[cluster] started: spark://127.0.0.1:$PORT with $WORKERS workers of $CORES core(s) and $MEMORY;" \
          "web UI http://127.0.0.1:$UI_PORT; logs in $DIR"
        exit 0
      fi
      sleep 0.5
    done
    echo "[cluster] error: $WORKERS workers did not register with the master within 90 s; see the logs in $DIR" >&2
    exit 1
    ;;
  status)
    if running "$DIR/master.pid"; then
      alive=$(alive_workers)
      echo "[cluster] running: spark://127.0.0.1:$PORT with $alive of $WORKERS workers"
      [ "$alive" -ge "$WORKERS" ] || exit 1
    else
      echo "[cluster] not running"
      exit 1
    fi
    ;;
  stop)
    if [ ! -f "$DIR/master.pid" ] && ! ls "$DIR"/worker-*.pid >/dev/null 2>&1; then
      echo "[cluster] not running"
      exit 0
    fi
    for file in "$DIR"/worker-*.pid; do  # a worker stopped cleanly stops its executors
      [ -e "$file" ] && stop_pid "$file"
    done
    stop_pid "$DIR/master.pid"
    echo "[cluster] stopped"
    ;;
  url)
    echo "spark://127.0.0.1:$PORT"
    ;;
  *)
    echo "usage: scripts/spark-cluster.sh start|status|stop|url" >&2
    exit 2
    ;;
esac
