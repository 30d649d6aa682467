#!/usr/bin/env bash
# A single-node Apache Kafka broker on 127.0.0.1, in KRaft mode (broker and controller in one JVM), run from the
# Maven Central jars scripts/setup.sh put in .cache/kafka-broker. For the tests, the Kafka demo and trying
# Lakestate's Kafka source by hand; not a production broker (one replica, no authentication).
#
#   scripts/kafka.sh start    # idempotent: a running broker is left as it is
#   scripts/kafka.sh status   # exit 0 when it runs
#   scripts/kafka.sh stop     # idempotent; its data stays (delete the folder to start empty)
#
# LAKESTATE_KAFKA_PORT (default 9092): the broker's port; its controller listens on the next one.
# LAKESTATE_KAFKA_DIR (default .kafka in the checkout, ignored by git): its data, log (broker.log) and pid file.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=${LAKESTATE_KAFKA_DIR:-$ROOT/.kafka}
PORT=${LAKESTATE_KAFKA_PORT:-9092}
CONTROLLER_PORT=$((PORT + 1))
JARS=$ROOT/.cache/kafka-broker
PID_FILE=$DIR/broker.pid
LOG=$DIR/broker.log

running() { [ -f "$PID_FILE" ] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; }
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
JAVA=(java -Xmx512m "-Dlog4j.configuration=file:$DIR/log4j.properties" -cp "$JARS/*")

write_config() {
  mkdir -p "$DIR/data"
  cat > "$DIR/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$DIR/data
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
  cat > "$DIR/log4j.properties" <<'EOF'
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaRaftServer=INFO
EOF
}

case "${1:-}" in
  start)
    if running; then
      echo "[kafka] already running (pid $(cat "$PID_FILE")) on 127.0.0.1:$PORT"
      exit 0
    fi
    if ! ls "$JARS"/kafka_2.13-*.jar >/dev/null 2>&1; then
      echo "[kafka] error: no broker jars in $JARS; run scripts/setup.sh (it fetches them with Maven)" >&2
      exit 2
    fi
    for port in "$PORT" "$CONTROLLER_PORT"; do
      if listening "$port"; then
        echo "[kafka] error: 127.0.0.1:$port is taken by another process; stop it or set LAKESTATE_KAFKA_PORT" >&2
        exit 2
      fi
    done
    write_config
    if [ ! -f "$DIR/data/meta.properties" ]; then  # a new broker: its storage formatted once, with a cluster id
      "${JAVA[@]}" kafka.tools.StorageTool format --ignore-formatted -c "$DIR/server.properties" \
        -t "$("${JAVA[@]}" kafka.tools.StorageTool random-uuid)" > "$DIR/format.log" 2>&1 \
        || { cat "$DIR/format.log" >&2; exit 1; }
    fi
    nohup "${JAVA[@]}" kafka.Kafka "$DIR/server.properties" >> "$LOG" 2>&1 < /dev/null &
    echo $! > "$PID_FILE"
    for _ in $(seq 1 120); do  # up to 60 s
      if ! running; then
        echo "[kafka] error: the broker stopped while starting; the end of $LOG:" >&2
        tail -20 "$LOG" >&2
        rm -f "$PID_FILE"
        exit 1
      fi
      if listening "$PORT"; then
        echo "[kafka] started (pid $(cat "$PID_FILE")) on 127.0.0.1:$PORT; data and log in $DIR"
        exit 0
      fi
      sleep 0.5
    done
    echo "[kafka] error: the broker did not listen on 127.0.0.1:$PORT within 60 s; see $LOG" >&2
    exit 1
    ;;
  status)
    if running; then
      echo "[kafka] running (pid $(cat "$PID_FILE")) on 127.0.0.1:$PORT"
    else
      echo "[kafka] not running"
      exit 1
    fi
    ;;
  stop)
    if ! running; then
      rm -f "$PID_FILE"
      echo "[kafka] not running"
      exit 0
    fi
    pid=$(cat "$PID_FILE")
    kill "$pid"
    for _ in $(seq 1 60); do  # a clean shutdown: up to 30 s, then kill -9
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$PID_FILE"
    echo "[kafka] stopped"
    ;;
  *)
    echo "usage: scripts/kafka.sh start|status|stop" >&2
    exit 2
    ;;
esac
