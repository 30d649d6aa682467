#!/usr/bin/env bash
# A PostgreSQL server on 127.0.0.1 for Airflow's metadata database (Debian's postgresql package; scripts/setup.sh
# installs it where apt-get can), its data in a folder of the checkout. The role and database it creates, and the
# executor Airflow runs with them, are scripts/airflow-db.env's, which docker/compose.yaml reads too.
#
#   scripts/postgres.sh start    # idempotent: a running server is left as it is; the role and database made once
#   scripts/postgres.sh status   # exit 0 when it runs
#   scripts/postgres.sh stop     # idempotent; its data stays (delete the folder to start empty)
#   scripts/postgres.sh url      # Airflow's connection to it: export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=$(...)
#   scripts/postgres.sh install  # Debian's postgresql package, when its server programs are missing (scripts/test.sh)
#
# LAKESTATE_POSTGRES_PORT (default 5432): the server's port (it listens on 127.0.0.1 only).
# LAKESTATE_POSTGRES_DIR (default .postgres in the checkout, ignored by git): its data, log (server.log) and socket.
# PostgreSQL does not run as root: as root, the server and its files belong to the system user `postgres`.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=${LAKESTATE_POSTGRES_DIR:-$ROOT/.postgres}
PORT=${LAKESTATE_POSTGRES_PORT:-5432}
DATA=$DIR/data
LOG=$DIR/server.log
# shellcheck source=airflow-db.env
source scripts/airflow-db.env

pg_bin() {  # the folder of pg_ctl: on PATH, else the newest of Debian's /usr/lib/postgresql/<version>/bin
  if command -v pg_ctl >/dev/null; then
    dirname "$(readlink -f "$(command -v pg_ctl)")"
    return
  fi
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$found" ] && echo "$found"
}

as_owner() {  # a PostgreSQL program as the data's owner: this user, or `postgres` when this is root
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
running() { [ -f "$DATA/PG_VERSION" ] && [ -n "${BIN:-}" ] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }
psql_admin() { as_owner "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$DIR" -p "$PORT" -U postgres -d postgres "$@"; }

BIN=$(pg_bin || true)
case "${1:-}" in
  start)
    if [ -z "$BIN" ]; then
      echo "[postgres] error: no PostgreSQL server programs (pg_ctl); run scripts/setup.sh, or install Debian's" \
        "postgresql package (apt-get install postgresql)" >&2
      exit 2
    fi
    if running; then
      echo "[postgres] already running on 127.0.0.1:$PORT; data and log in $DIR"
      exit 0
    fi
    if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
      echo "[postgres] error: PostgreSQL does not run as root and there is no 'postgres' user to run it as;" \
        "run this script as another user" >&2
      exit 2
    fi
    if listening "$PORT"; then
      echo "[postgres] error: 127.0.0.1:$PORT is taken by another process; stop it or set LAKESTATE_POSTGRES_PORT" >&2
      exit 2
    fi
    mkdir -p "$DIR"
    [ "$(id -u)" = 0 ] && chown postgres "$DIR"
    if ! as_owner test -w "$DIR"; then
      echo "[postgres] error: the user 'postgres' cannot write $DIR (a folder on the way is closed to it);" \
        "set LAKESTATE_POSTGRES_DIR to a folder it can reach" >&2
      exit 2
    fi
    if [ ! -f "$DATA/PG_VERSION" ]; then  # a new server: its cluster made once (local socket only trusted)
      rm -rf "$DATA"
      as_owner "$BIN/initdb" -D "$DATA" -U postgres -E UTF8 --locale=C.UTF-8 --auth-local=trust \
        --auth-host=scram-sha-256 > "$DIR/initdb.log" 2>&1 || { cat "$DIR/initdb.log" >&2; exit 1; }
    fi
    if ! as_owner "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $PORT -c unix_socket_directories=$DIR" start > /dev/null; then
      echo "[postgres] error: the server did not start; the end of $LOG:" >&2
      tail -20 "$LOG" >&2
      exit 1
    fi
    # Airflow's role and database, made once (a password, as TCP connections need one).
    if [ -z "$(psql_admin -tAc "SELECT 1 FROM pg_roles WHERE rolname = '$POSTGRES_USER'")" ]; then
      psql_admin -c "CREATE ROLE \"$POSTGRES_USER\" LOGIN PASSWORD '$POSTGRES_PASSWORD'"
    fi
    if [ -z "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = '$POSTGRES_DB'")" ]; then
      psql_admin -c "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\""
    fi
    echo "[postgres] started on 127.0.0.1:$PORT (database $POSTGRES_DB, user $POSTGRES_USER); data and log in $DIR"
    ;;
  status)
    if running; then
      echo "[postgres] running on 127.0.0.1:$PORT"
    else
      echo "[postgres] not running"
      exit 1
    fi
    ;;
  stop)
    if ! running; then
      echo "[postgres] not running"
      exit 0
    fi
    as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w -t 60 stop > /dev/null
    echo "[postgres] stopped"
    ;;
  install)
    if [ -n "$BIN" ]; then
      exit 0
    fi
    echo "[setup] installing Debian's postgresql for Airflow's metadata database (the PostgreSQL tests)"
    bash scripts/debian-packages.sh postgresql
    BIN=$(pg_bin) && "$BIN/postgres" --version
    ;;
  url)
    echo "postgresql+psycopg2://$POSTGRES_USER:$POSTGRES_PASSWORD@127.0.0.1:$PORT/$POSTGRES_DB"
    ;;
  *)
    echo "usage: scripts/postgres.sh start|status|stop|url|install" >&2
    exit 2
    ;;
esac
