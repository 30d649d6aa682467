#!/usr/bin/env bash
# The Airflow UI with Lakestate's DAGs and plugin loaded, on the embedded default (SQLite, local Spark):
# `airflow standalone` (API server with the UI, scheduler, DAG processor, triggerer) for $AIRFLOW_HOME.
#   scripts/airflow-ui.sh [--port N] [--host ADDR]  start; Ctrl-C stops it and everything it started
#   scripts/airflow-ui.sh --background [...]        start, return once the API server answers
#   scripts/airflow-ui.sh stop                      stop the standalone of $AIRFLOW_HOME and everything it started
# Port: --port, else $LAKESTATE_UI_PORT, else the first free one from 8080. Address: --host, else
# $LAKESTATE_UI_HOST, else 127.0.0.1 (this machine only; 0.0.0.0 opens it to the network).
# It prints the URL it really serves and where to log in: user "admin", the password Airflow's simple auth
# manager wrote to $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated (or the file
# $AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE names). Output: $AIRFLOW_HOME/standalone.log
# with --background. A standalone already running for $AIRFLOW_HOME is reused, not started twice; one that lost a
# component (its scheduler, triggerer or DAG processor exits when its database stops answering) is started again.
set -euo pipefail
cd "$(dirname "$0")/.."
ACTION=start PORT=${LAKESTATE_UI_PORT:-} HOST=${LAKESTATE_UI_HOST:-127.0.0.1} BACKGROUND=0
while [ $# -gt 0 ]; do
  case $1 in
    stop) ACTION=stop ;;
    --port) PORT=$2; shift ;;
    --port=*) PORT=${1#*=} ;;
    --host) HOST=$2; shift ;;
    --host=*) HOST=${1#*=} ;;
    --background) BACKGROUND=1 ;;
    -h|--help) sed -n '2,13p' "$0" | cut -c3-; exit 0 ;;
    *) echo "airflow-ui.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$ACTION" = stop ] || bash scripts/setup.sh
source scripts/env.sh
mkdir -p "$AIRFLOW_HOME"
PIDFILE="$AIRFLOW_HOME/lakestate-ui.pid"  # "<pid = process group> <port> <host> <run mark>"

# The processes this standalone started: every process carrying its run mark (an environment variable every
# child inherits), its process group while the group's leader carries the mark (a pid file left by a standalone
# that died names no one else's group), and their children at any depth (a LocalExecutor worker's process title
# overwrites the environment /proc shows). Never this script's own group.
marked() { { tr '\0' '\n' < "/proc/$1/environ"; } 2>/dev/null | grep -qxF "LAKESTATE_UI_RUN=$2"; }
members() {
  local pgid=$1 mark=$2 own p g state found more
  own=$(ps -o pgid= -p $$ | tr -d ' ')
  found=$({ if marked "$pgid" "$mark"; then pgrep -g "$pgid" || true; fi
            for p in /proc/[0-9]*; do
              if marked "${p#/proc/}" "$mark"; then echo "${p#/proc/}"; fi
            done; } | sort -un)
  more=$found
  while [ -n "$more" ]; do
    more=$(pgrep -P "$(echo $more | tr ' ' ,)" || true)
    found="$found $more"
  done
  echo $found | tr ' ' '\n' | sort -un | while read -r p; do
      # not a zombie (its parent reaps it), not this script's own group
      read -r g state < <(ps -o pgid=,stat= -p "$p" 2>/dev/null || true)
      if [ -n "${g:-}" ] && [ "$g" != "$own" ] && [ "${state:0:1}" != Z ]; then echo "$p"; fi
    done
}

# "pid:start time" of each of these processes, and which of them still run (not a pid used again since).
started_at() { { sed 's/.*) //' "/proc/$1/stat" | cut -d' ' -f1,20; } 2>/dev/null; }
# (A process gone since it was listed is left out; the function succeeds, or set -e would end the script at
# found=$(stamped ...) when the last one listed is such a one.)
stamped() { local p t; for p in "$@"; do t=$(started_at "$p") && [ -n "$t" ] && echo "$p:${t#* }"; done; return 0; }
still() {
  local e t
  for e in "$@"; do
    t=$(started_at "${e%%:*}") || continue
    if [ "${t#* }" = "${e#*:}" ] && [ "${t%% *}" != Z ]; then echo "${e%%:*}"; fi
  done
}
stop_ui() {
  local pid port host mark pids p found left
  [ -f "$PIDFILE" ] || { echo "[lakestate] no Airflow standalone of $AIRFLOW_HOME to stop"; return 0; }
  read -r pid port host mark < "$PIDFILE"
  pids=$(members "$pid" "$mark")
  [ -n "$pids" ] || { rm -f "$PIDFILE"; echo "[lakestate] the standalone of $AIRFLOW_HOME had stopped"; return 0; }
  echo "[lakestate] stopping the Airflow standalone of $AIRFLOW_HOME (http://$host:$port):"
  for p in $pids; do echo "  $p $({ tr '\0' ' ' < "/proc/$p/cmdline"; } 2>/dev/null | cut -c1-100)"; done
  found=$(stamped $pids)
  kill -TERM $pids 2>/dev/null || true
  for _ in $(seq 60); do
    pids=$(members "$pid" "$mark")
    [ -n "$pids" ] || break
    sleep 0.5
  done
  # What outlives the standalone itself: LocalExecutor workers whose scheduler did not send them its end (they
  # ignore SIGINT and outwait SIGTERM, and their process title hides the mark), found at the start by the group.
  left=$(still $found)
  if [ -n "$left" ]; then
    echo "[lakestate] left behind by the standalone, killed: $(echo $left)"
    kill -KILL $left 2>/dev/null || true
    for _ in $(seq 20); do [ -n "$(still $found)" ] || break; sleep 0.25; done
  fi
  if [ -n "$pids" ]; then
    echo "[lakestate] still running after 30 s, killed: $(echo $pids)"
    kill -KILL $pids 2>/dev/null || true
  fi
  rm -f "$PIDFILE"
  echo "[lakestate] stopped"
}

if [ "$ACTION" = stop ]; then
  stop_ui
  exit 0
fi

# The standalone's components that no longer run (its own children: "airflow scheduler", "airflow api_server -- ...").
# Airflow's scheduler, triggerer and DAG processor exit when their database stops answering (a PostgreSQL
# restarted under them) and the standalone does not start them again: deferred tasks (approvals) would never
# resume, nor new runs start.
# ps -ww: without it ps cuts its lines at $COLUMNS (80 in a CI shell), and a component named past it looks gone.
exited() {
  local kids c
  kids=$(ps -ww -o stat=,args= --ppid "$1" 2>/dev/null | awk '$1 !~ /^Z/ {$1 = ""; print}')
  for c in scheduler dag-processor triggerer api-server; do
    echo "$kids" | grep -Eq "airflow ${c//-/[-_]}( |$)" || echo "$c"
  done
}

if [ -f "$PIDFILE" ]; then
  read -r pid port host mark < "$PIDFILE"
  if [ -n "$(members "$pid" "$mark")" ]; then
    down=$(exited "$pid" | tr '\n' ' ')
    if [ -z "$down" ]; then
      echo "[lakestate] Airflow UI already running for $AIRFLOW_HOME: http://$host:$port" \
        "(stop: scripts/airflow-ui.sh stop)"
      exit 0
    fi
    echo "[lakestate] the Airflow standalone of $AIRFLOW_HOME lost its ${down% } (exited: see" \
      "$AIRFLOW_HOME/standalone.log; its database stopped answering?): starting it again on port $port"
    stop_ui
    PORT=${PORT:-$port}
  fi
  rm -f "$PIDFILE"
fi

source scripts/ports.sh
choose_port 8080
# Where this machine reaches the API server (the tasks' execution API too: Airflow's default is localhost:8080).
REACH=$HOST
case $HOST in 0.0.0.0|::|"") REACH=127.0.0.1 ;; esac
export AIRFLOW__API__HOST=$HOST AIRFLOW__API__PORT=$PORT
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://$REACH:$PORT/execution/"
# LocalExecutor starts this many worker processes up front (Airflow's default, 32, is a lot on a laptop: each task
# starts a Spark driver anyway).
export AIRFLOW__CORE__PARALLELISM=${AIRFLOW__CORE__PARALLELISM:-4}
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS:-admin:admin}"
airflow db migrate > "$AIRFLOW_HOME.migrate.log" 2>&1 || { cat "$AIRFLOW_HOME.migrate.log"; exit 1; }
# The Spark connection the pipeline DAGs submit to; point it at a cluster with
#   airflow connections delete lakestate_spark
#   airflow connections add lakestate_spark --conn-type lakestate_spark --conn-host spark://HOST --conn-port 7077
if ! airflow connections get lakestate_spark >/dev/null 2>&1; then
  airflow connections add lakestate_spark --conn-type lakestate_spark --conn-host 'local[*]' \
    > "$AIRFLOW_HOME.connection.log" 2>&1 || { cat "$AIRFLOW_HOME.connection.log"; exit 1; }
fi

export LAKESTATE_UI_RUN="$AIRFLOW_HOME@$$.$(date +%s%N)"
LOG="$AIRFLOW_HOME/standalone.log"
# Its own session and process group, so `stop` (and Ctrl-C here) reaches all of it and nothing else.
if [ "$BACKGROUND" = 1 ]; then
  setsid airflow standalone > "$LOG" 2>&1 < /dev/null &
else
  setsid airflow standalone < /dev/null &
fi
echo "$! $PORT $REACH $LAKESTATE_UI_RUN" > "$PIDFILE"
STANDALONE=$!
[ "$BACKGROUND" = 1 ] || trap 'echo; stop_ui; exit 0' INT TERM

# Where Airflow keeps the users' passwords: its setting when one is given, else the file it generates.
PASSWORDS="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:-$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated}"
READY=0
for _ in $(seq 300); do
  kill -0 "$STANDALONE" 2>/dev/null || { echo "[lakestate] airflow standalone exited: see $LOG" >&2; stop_ui; exit 1; }
  if [ -s "$PASSWORDS" ] && python -c 'import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=2)' \
       "http://$REACH:$PORT/api/v2/monitor/health" 2>/dev/null; then
    echo "[lakestate] Airflow UI: http://$REACH:$PORT  user admin, password:" \
      "$(python -c 'import json,sys; print(json.load(open(sys.argv[1]))["admin"])' "$PASSWORDS")" \
      "(listening on $HOST; stop: scripts/airflow-ui.sh stop)"
    READY=1
    break
  fi
  sleep 1
done
if [ "$READY" = 0 ]; then
  echo "[lakestate] the API server did not answer on http://$REACH:$PORT in 5 minutes: see $LOG" >&2
  stop_ui
  exit 1
fi
[ "$BACKGROUND" = 0 ] || exit 0
wait "$STANDALONE" || true
stop_ui
