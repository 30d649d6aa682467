# Sourced by the scripts that start a server (airflow-ui.sh, spark-connect.sh): `choose_port FIRST` sets PORT to
# $PORT when it is free on $HOST (exits saying so when taken), else to the first free port from FIRST.

free_port() {  # the first port from $1 that $HOST can bind (as a server does: a closed server's connections
  # still in TIME_WAIT do not hold its port, a listening socket does)
  python - "$HOST" "$1" <<'PY'
import socket, sys
host, start = sys.argv[1], int(sys.argv[2])
for port in range(start, start + 100):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            continue
        print(port)
        break
else:
    sys.exit(f"[lakestate] no free port on {host} from {start} to {start + 99}")
PY
}

choose_port() {
  if [ -n "$PORT" ]; then
    if [ "$(free_port "$PORT")" != "$PORT" ]; then
      echo "[lakestate] port $PORT on $HOST is taken: choose another with --port" >&2
      exit 1
    fi
  else
    PORT=$(free_port "$1")
  fi
}
