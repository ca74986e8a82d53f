#!/usr/bin/env bash
# Apache Kafka 4.4, single node, KRaft combined mode (broker+controller), data on disk.
#   kafka.sh jars                 resolve kafka_2.13 + kafka-tools 4.4.0 from Maven Central into
#                                 bench/.cache/kafka-4.4.0/jars (cached; prints the directory)
#   kafka.sh start PORT DATADIR   format DATADIR, write server.properties, start, wait, print PID
#                                 (the controller listens on PORT+1)
#   kafka.sh stop DATADIR         SIGTERM, wait up to 60 s for a clean shutdown (then SIGKILL)
#   kafka.sh wait PORT [SECONDS]
#   kafka.sh classpath            print the classpath (for the tools and the Java conformance client)
# Env: KAFKA_HEAP_OPTS (default "-Xmx1g -Xms1g", as Kafka's own kafka-server-start.sh).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

KAFKA_VERSION=4.4.0
KAFKA_HOME="$CACHE_DIR/kafka-$KAFKA_VERSION"
JARS="$KAFKA_HOME/jars"

resolve_jars() {
  if [[ -f $KAFKA_HOME/.resolved ]]; then echo "$JARS"; return; fi
  mkdir -p "$JARS"
  echo "resolving Kafka $KAFKA_VERSION jars from Maven Central into $JARS" >&2
  mvn -B -q -Dstyle.color=never -f "$BENCH_DIR/peers/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$JARS" >&2
  [[ -f $JARS/kafka_2.13-$KAFKA_VERSION.jar && -f $JARS/kafka-tools-$KAFKA_VERSION.jar ]] \
    || die "jars not resolved"
  touch "$KAFKA_HOME/.resolved"
  echo "$JARS"
}

jvm() { # extra JVM options then class and args
  java ${KAFKA_HEAP_OPTS:--Xmx1g -Xms1g} -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
       -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
       -Djava.awt.headless=true -cp "$JARS/*" "$@"
}

write_config() { # PORT DATADIR
  local port=$1 datadir=$2 cport=$(($1 + 1))
  cat >"$datadir/server.properties" <<PROPS
# Written by bench/peers/kafka.sh: single-node KRaft (combined mode), data on disk.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$datadir/data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
  cat >"$datadir/log4j2.properties" <<PROPS
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $datadir/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.state.name = state.change.logger
logger.state.level = WARN
PROPS
}

start() { # PORT DATADIR
  local port=$1 datadir
  mkdir -p "$2"; datadir="$(cd "$2" && pwd)"
  resolve_jars >/dev/null
  check_port_free "$port"; check_port_free $((port + 1))
  write_config "$port" "$datadir"
  if [[ ! -f $datadir/data/meta.properties ]]; then
    local cluster_id
    cluster_id="$(jvm kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)"
    jvm -Dlog4j2.configurationFile="$datadir/log4j2.properties" kafka.tools.StorageTool format \
        -t "$cluster_id" -c "$datadir/server.properties" >"$datadir/format.log" 2>&1 \
      || { cat "$datadir/format.log" >&2; die "storage format failed"; }
  fi
  launch "$datadir" java ${KAFKA_HEAP_OPTS:--Xmx1g -Xms1g} -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
       -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
       -Djava.awt.headless=true -Dlog4j2.configurationFile="$datadir/log4j2.properties" \
       -cp "$JARS/*" kafka.Kafka "$datadir/server.properties"
  local pid; pid="$(cat "$datadir/broker.pid")"
  if ! wait_ready "$port" 90 "$pid"; then
    tail -20 "$datadir/server.log" "$datadir/broker.log" >&2 || true
    stop_pid "$pid" 10 TERM
    die "Kafka did not start"
  fi
  echo "$pid"
}

case "${1:-}" in
  jars) resolve_jars ;;
  classpath) echo "$(resolve_jars)/*" ;;
  start) [[ $# -eq 3 ]] || die "usage: start PORT DATADIR"; start "$2" "$3" ;;
  stop) [[ $# -eq 2 ]] || die "usage: stop DATADIR"; stop_from_datadir "$2" 60 TERM ;;
  wait) wait_ready "$2" "${3:-60}" ;;
  *) die "usage: kafka.sh jars|classpath|start PORT DATADIR|stop DATADIR|wait PORT [SECONDS]" ;;
esac
