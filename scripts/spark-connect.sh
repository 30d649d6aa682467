#!/usr/bin/env bash
# A long-lived Spark Connect server for warm Lakestate runs: the pyspark install's own SparkConnectServer (its
# spark-connect jar ships in pyspark's jars/), with the Delta jars and Delta's SQL extension and catalog, and this
# project's interpreter for its Python workers.
#   scripts/spark-connect.sh [start] [--port N] [--master M]  start; Ctrl-C stops it
#   scripts/spark-connect.sh start --background [...]         start, return once it answers
#   scripts/spark-connect.sh stop                             stop the server this checkout started
#   scripts/spark-connect.sh status                           its sc:// URL, or why there is none (exit 1)
# Address: 127.0.0.1 only (Spark Connect has no authentication). Port: --port, else $LAKESTATE_CONNECT_PORT, else
# the first free one from 15002. Master: --master, else $LAKESTATE_SPARK_MASTER, else local[*]. It prints the
# sc:// URL once the server answers (a session on it: SparkSession.builder.remote(url)). A recorded server whose
# process is gone (kill -9) or whose port does not answer is not running: start ends what is left of it and
# starts a new one. Output: $LAKESTATE_CONNECT_DIR/server.log (default .spark-connect/, ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
ACTION=start PORT=${LAKESTATE_CONNECT_PORT:-} BACKGROUND=0 MASTER=${LAKESTATE_SPARK_MASTER:-local[*]}
while [ $# -gt 0 ]; do
  case $1 in
    start) ACTION=start ;;
    stop) ACTION=stop ;;
    status) ACTION=status ;;
    --port) PORT=$2; shift ;;
    --port=*) PORT=${1#*=} ;;
    --master) MASTER=$2; shift ;;
    --master=*) MASTER=${1#*=} ;;
    --background) BACKGROUND=1 ;;
    -h|--help) sed -n '2,13p' "$0" | cut -c3-; exit 0 ;;
    *) echo "spark-connect.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
HOST=127.0.0.1
[ "$ACTION" = start ] && bash scripts/setup.sh >/dev/null
source scripts/env.sh
DIR=${LAKESTATE_CONNECT_DIR:-$ROOT_DIR/.spark-connect}
mkdir -p "$DIR"
PIDFILE="$DIR/server.pid"  # "<pid = process group> <port> <run mark>"

# The processes this server started: those carrying its run mark (an environment variable every child inherits:
# spark-submit's JVM, its Python workers). A pid file left by a server that died names no one else's processes.
members() {
  local mark=$1 p
  for p in /proc/[0-9]*; do
    if { tr '\0' '\n' < "$p/environ"; } 2>/dev/null | grep -qxF "LAKESTATE_CONNECT_RUN=$mark"; then
      [ "$(ps -o stat= -p "${p#/proc/}" 2>/dev/null | cut -c1)" = Z ] || echo "${p#/proc/}"
    fi
  done
}

listening() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

answers() {  # whether a Spark Connect server answers on $1 (a real query, not just an open port), in bounded time
  python - "$1" <<'PY' >/dev/null 2>&1
import sys
from state_store.spark.connect import remote_session
spark = remote_session(sys.argv[1])  # probes the port first, gives up on a lost server (connect.LOST_AFTER)
assert spark.range(1).count() == 1
PY
}

stop_server() {
  local pid port mark pids
  [ -f "$PIDFILE" ] || { echo "[lakestate] no Spark Connect server of $ROOT_DIR to stop"; return 0; }
  read -r pid port mark < "$PIDFILE"
  pids=$(members "$mark")
  [ -n "$pids" ] || { rm -f "$PIDFILE"; echo "[lakestate] the Spark Connect server had stopped"; return 0; }
  echo "[lakestate] stopping the Spark Connect server sc://$HOST:$port (processes $(echo $pids))"
  kill -TERM $pids 2>/dev/null || true
  for _ in $(seq 60); do
    pids=$(members "$mark")
    [ -n "$pids" ] || break
    sleep 0.5
  done
  if [ -n "$pids" ]; then
    echo "[lakestate] still running after 30 s, killed: $(echo $pids)"
    kill -KILL $pids 2>/dev/null || true
  fi
  rm -f "$PIDFILE"
  echo "[lakestate] stopped"
}

# The recorded server: PID PORT MARK from the pid file, and what is wrong with it (empty when its process is alive
# and its port answers). A server killed (kill -9) leaves its pid file, and may leave Python workers carrying its
# mark: neither makes it running. Like scripts/kafka.sh, the port is asked.
recorded() {
  PID= PORT_RECORDED= MARK= WRONG=
  [ -f "$PIDFILE" ] || return 1
  read -r PID PORT_RECORDED MARK < "$PIDFILE"
  if ! { tr '\0' '\n' < "/proc/$PID/environ"; } 2>/dev/null | grep -qxF "LAKESTATE_CONNECT_RUN=$MARK" \
      || [ "$(ps -o stat= -p "$PID" 2>/dev/null | cut -c1)" = Z ]; then
    WRONG="its process $PID is gone"
  elif ! listening "$PORT_RECORDED"; then
    WRONG="its process $PID is alive but nothing answers on port $PORT_RECORDED"
  fi
}

starting() {  # after recorded: its process alive, not answering yet, and recorded within the start's 2 minutes
  [ "$WRONG" != "its process $PID is gone" ] && [ -n "$(find "$PIDFILE" -newermt '-150 seconds')" ]
}

running_url() {  # the URL of this checkout's server when its process is alive and its port answers
  recorded && [ -z "$WRONG" ] || return 1
  echo "sc://$HOST:$PORT_RECORDED"
}

case $ACTION in
  stop) stop_server; exit 0 ;;
  status)
    if url=$(running_url) && answers "$url"; then echo "$url"; exit 0; fi
    if recorded && [ -n "$WRONG" ] && starting; then
      echo "[lakestate] a Spark Connect server of $ROOT_DIR is starting (process $PID, port $PORT_RECORDED)" >&2
    elif recorded; then
      echo "[lakestate] the Spark Connect server of $ROOT_DIR recorded at sc://$HOST:$PORT_RECORDED does not" \
           "answer (${WRONG:-its port is open but a query got no answer}): scripts/spark-connect.sh start starts" \
           "a new one" >&2
    else
      echo "[lakestate] no Spark Connect server of $ROOT_DIR is running" >&2
    fi
    exit 1 ;;
esac

if url=$(running_url); then
  echo "[lakestate] Spark Connect already running: $url (stop: scripts/spark-connect.sh stop)"
  exit 0
fi
if recorded; then
  if starting; then
    echo "[lakestate] a Spark Connect server of $ROOT_DIR is starting (process $PID, port $PORT_RECORDED): wait" \
         "for scripts/spark-connect.sh status, or stop it" >&2
    exit 1
  fi
  echo "[lakestate] the Spark Connect server recorded at sc://$HOST:$PORT_RECORDED does not answer ($WRONG):" \
       "ending what is left of it, starting a new one" >&2
  stop_server >/dev/null
fi
rm -f "$PIDFILE"

source scripts/ports.sh
choose_port 15002

# The session confs state_store/spark/session.py's build_spark sets, as server confs: every Connect session inherits them.
PYTHONPATH_WORKERS=$ROOT_DIR${PYTHONPATH:+:$PYTHONPATH}
CONF=(
  --conf spark.connect.grpc.binding.address=$HOST
  --conf spark.connect.grpc.binding.port=$PORT
  --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension
  --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog
  --conf spark.sql.shuffle.partitions=8
  --conf spark.sql.session.timeZone=UTC
  --conf spark.ui.showConsoleProgress=false
  --conf spark.databricks.delta.snapshotPartitions=2
  --conf spark.sql.adaptive.enabled=true
  --conf spark.sql.parquet.compression.codec=zstd
  --conf spark.python.sql.dataFrameDebugging.enabled=false
  --conf spark.sql.execution.arrow.maxBytesPerBatch=2147483647
  --conf "spark.executorEnv.PYTHONPATH=$PYTHONPATH_WORKERS"
  --conf spark.python.daemon.module=state_store.spark.worker_daemon
  --conf "spark.pyspark.python=$PYSPARK_PYTHON"
)
export LAKESTATE_CONNECT_RUN="$ROOT_DIR@$$.$(date +%s%N)"
LOG="$DIR/server.log"
# The Connect server's class comes with pyspark's own jars (spark-connect_2.13), so no --jars entry for it.
CMD=(spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer --name lakestate-connect
     --master "$MASTER" --jars "$LAKESTATE_JARS" "${CONF[@]}" ${LAKESTATE_CONNECT_SUBMIT_ARGS:-})
# Its own session and process group, so stop (and Ctrl-C here) reaches all of it and nothing else.
setsid "${CMD[@]}" > "$LOG" 2>&1 < /dev/null &
SERVER=$!
echo "$SERVER $PORT $LAKESTATE_CONNECT_RUN" > "$PIDFILE"
[ "$BACKGROUND" = 1 ] || trap 'echo; stop_server; exit 0' INT TERM

READY=0
for _ in $(seq 240); do
  kill -0 "$SERVER" 2>/dev/null || { echo "[lakestate] the Spark Connect server exited: see $LOG" >&2; tail -20 "$LOG" >&2
                                     stop_server >/dev/null; exit 1; }
  if grep -q "Spark Connect server started" "$LOG" && answers "sc://$HOST:$PORT"; then
    READY=1
    break
  fi
  sleep 0.5
done
if [ "$READY" = 0 ]; then
  echo "[lakestate] the Spark Connect server did not answer on sc://$HOST:$PORT in 2 minutes: see $LOG" >&2
  stop_server
  exit 1
fi
echo "sc://$HOST:$PORT"
echo "[lakestate] Spark Connect server up (log $LOG; stop: scripts/spark-connect.sh stop)" >&2
[ "$BACKGROUND" = 0 ] || exit 0
wait "$SERVER" || true
stop_server
