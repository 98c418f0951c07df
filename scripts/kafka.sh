#!/usr/bin/env bash
# Local single-node Apache Kafka broker (KRaft, combined broker+controller) for
# fv-streams development, tests and CI. No Docker: the official broker jars are
# fetched from Maven Central with Maven (scripts/kafka/pom.xml) into .kafka/libs
# and run with the local JDK.
#
# Version: Apache Kafka 4.4.0 (kafka_2.13, Scala 2.13). It is the newest release on
# Maven Central (checked 2026-12 via maven-metadata.xml: 3.9.x, 4.0.x ... 4.3.2, 4.4.0)
# and it runs on Java 17: all its classes are Java 17 bytecode (class major 61, the
# 4.x broker baseline), verified by starting it here on OpenJDK 17.0.15.
# The version is pinned once, in scripts/kafka/pom.xml (<kafka.version>).
# Logging: the POM brings log4j-api/core but no slf4j binding (Kafka uses slf4j 1.7.36),
# so the POM adds log4j-slf4j-impl; config: scripts/kafka/log4j2.properties.
#
#   scripts/kafka.sh up          start the broker on 127.0.0.1:9092 (controller 127.0.0.1:9093)
#                                and wait until it answers; no-op if one already answers,
#                                or if STREAM_BROKERS points elsewhere
#   scripts/kafka.sh down        stop the broker started by this script (SIGTERM, then SIGKILL)
#   scripts/kafka.sh status      "running (pid N)" -> exit 0, "not running" -> exit 3
#   scripts/kafka.sh logs [-f]   tail the broker log (.kafka/logs/server.log)
#   scripts/kafka.sh reset       stop the broker and delete its data (.kafka/data); jars stay
#   scripts/kafka.sh selftest    topics, produce/consume, transactions, exactly-once round trip
#   scripts/kafka.sh create TOPIC PARTITIONS    create a topic (no-op if it exists)
#   scripts/kafka.sh dump TOPIC OUTFILE [--timestamps]   every read_committed record of TOPIC
#                                to OUTFILE, one "partition<TAB>offset<TAB>value" line each
#   scripts/kafka.sh lag TOPIC GROUP...         committed offsets of each group vs end offsets
#   scripts/kafka.sh transactions TOPIC [GROUP...]   transactions not complete, and each group's
#                                partitions of TOPIC whose committed offset is not stable
#
# Everything lives under <repo>/.kafka (git-ignored): libs/ jars, data/ log dirs,
# logs/ server.log + server.out, cluster-id, server.properties (rendered), kafka.pid.
# Env: KAFKA_HEAP_OPTS (default "-Xms512m -Xmx1g"), KAFKA_READY_TIMEOUT (seconds, default 90),
#      KAFKA_STOP_TIMEOUT (seconds, default 30), JAVA_HOME (optional, Java >= 17).
#      FV_KAFKA_HOME (default <repo>/.kafka): a second broker's own folder (data, logs, pid,
#      cluster-id, server.properties, lock); the jars stay shared in <repo>/.kafka/libs and tools.
#      FV_KAFKA_PORT (default 9092): its listener port; the controller listens on PORT+1.
#      (the fault soak, `npm run soak`, runs FV_KAFKA_HOME=<repo>/.kafka-soak FV_KAFKA_PORT=19092.)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
CONF_DIR="$SCRIPT_DIR/kafka"
SHARED_HOME="$REPO_ROOT/.kafka"
if [[ -n "${FV_KAFKA_HOME:-}" ]]; then KAFKA_HOME="$(realpath -m "$FV_KAFKA_HOME")"; else KAFKA_HOME="$SHARED_HOME"; fi
# How messages name the broker's folder: ".kafka" for the default one.
HOME_NAME="${KAFKA_HOME#"$REPO_ROOT"/}"
LIBS_DIR="$SHARED_HOME/libs"
DATA_DIR="$KAFKA_HOME/data"
LOG_DIR="$KAFKA_HOME/logs"
TOOLS_DIR="$SHARED_HOME/tools"
PID_FILE="$KAFKA_HOME/kafka.pid"
CLUSTER_ID_FILE="$KAFKA_HOME/cluster-id"
PROPS="$KAFKA_HOME/server.properties"
POM="$CONF_DIR/pom.xml"

HOST=127.0.0.1
PORT="${FV_KAFKA_PORT:-9092}"
[[ "$PORT" =~ ^[0-9]+$ ]] || { echo "kafka.sh: FV_KAFKA_PORT must be a port number, not $PORT" >&2; exit 2; }
CONTROLLER_PORT=$((PORT + 1))
BOOTSTRAP="$HOST:$PORT"
READY_TIMEOUT="${KAFKA_READY_TIMEOUT:-90}"
STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"
HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms512m -Xmx1g}"

KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM" | head -n1)"
[[ -n "$KAFKA_VERSION" ]] || { echo "kafka.sh: cannot read <kafka.version> from $POM" >&2; exit 1; }

log() { echo "kafka.sh: $*"; }
die() { echo "kafka.sh: ERROR: $*" >&2; exit 1; }

java_bin() {
  if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then echo "$JAVA_HOME/bin/java"; else command -v java || true; fi
}
javac_bin() {
  if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/javac" ]]; then echo "$JAVA_HOME/bin/javac"; else command -v javac || true; fi
}
JAVA="$(java_bin)"

require_java() {
  [[ -n "$JAVA" ]] || die "no java found (need Java 17+; set JAVA_HOME or install openjdk-17-jdk-headless)"
  local v
  v="$("$JAVA" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')"
  [[ "${v%%.*}" =~ ^[0-9]+$ && "${v%%.*}" -ge 17 ]] || die "Kafka $KAFKA_VERSION needs Java 17+, $JAVA is ${v:-unknown}"
}

# --- process helpers -------------------------------------------------------

# Is $1 a live process running our broker (kafka.Kafka with our rendered properties)?
is_our_broker() {
  local pid="$1"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  local cmd
  cmd="$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null || true)"
  [[ "$cmd" == *kafka.Kafka* && "$cmd" == *"$PROPS"* ]]
}

# Print the pid of our broker if it is running (pid file first, then a scan of
# /proc for a kafka.Kafka process using exactly this checkout's properties file).
our_pid() {
  local pid=""
  if [[ -f "$PID_FILE" ]]; then
    pid="$(tr -dc '0-9' < "$PID_FILE" || true)"
    if is_our_broker "$pid"; then echo "$pid"; return 0; fi
  fi
  local d
  for d in /proc/[0-9]*; do
    pid="${d#/proc/}"
    if is_our_broker "$pid"; then echo "$pid"; return 0; fi
  done
  return 1
}

port_open() {
  (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null
}

# --- jars, config, storage -------------------------------------------------

libs_ready() {
  [[ -f "$LIBS_DIR/kafka_2.13-$KAFKA_VERSION.jar" && -f "$LIBS_DIR/.pom.sha256" ]] &&
    [[ "$(cat "$LIBS_DIR/.pom.sha256")" == "$(sha256sum "$POM" | cut -d' ' -f1)" ]]
}

fetch_libs() {
  if libs_ready; then return 0; fi
  # Two broker folders share the jars: a second broker's `up` waits for the first one's fetch.
  if [[ "$KAFKA_HOME" != "$SHARED_HOME" ]] && command -v flock >/dev/null; then
    mkdir -p "$SHARED_HOME"
    exec 8>"$SHARED_HOME/.libs.lock"
    flock -w 600 8 || die "could not lock $SHARED_HOME/.libs.lock within 600 s"
    if libs_ready; then return 0; fi
  fi
  command -v mvn >/dev/null || die "mvn not found (needed once to fetch the Kafka jars from Maven Central; apt-get install maven)"
  log "fetching Apache Kafka $KAFKA_VERSION jars from Maven Central into .kafka/libs ..."
  local start=$SECONDS tmp="$SHARED_HOME/libs.tmp"
  rm -rf "$tmp"
  mkdir -p "$SHARED_HOME"
  # (Debian's mvn 3.8 prints bare ANSI resets even with -B: strip them.)
  mvn -q -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$tmp" 2>&1 | sed -e $'s/\x1b\\[[0-9;]*m//g' >&2 \
    || die "mvn could not fetch the Kafka jars (see the output above)"
  [[ -f "$tmp/kafka_2.13-$KAFKA_VERSION.jar" ]] || die "mvn finished but $tmp has no kafka_2.13-$KAFKA_VERSION.jar"
  sha256sum "$POM" | cut -d' ' -f1 > "$tmp/.pom.sha256"
  rm -rf "$LIBS_DIR" "$TOOLS_DIR"
  mv "$tmp" "$LIBS_DIR"
  local jars=("$LIBS_DIR"/*.jar)
  log "fetched ${#jars[@]} jars in $((SECONDS - start)) s"
}

# Compile scripts/kafka/KafkaCheck.java once (recompiled when the source or jars change).
build_tools() {
  local cls="$TOOLS_DIR/KafkaCheck.class" src="$CONF_DIR/KafkaCheck.java"
  if [[ -f "$cls" && "$cls" -nt "$src" && "$cls" -nt "$LIBS_DIR/.pom.sha256" ]]; then return 0; fi
  local javac
  javac="$(javac_bin)"
  [[ -n "$javac" ]] || die "javac not found (need a JDK 17+, not just a JRE)"
  mkdir -p "$TOOLS_DIR"
  "$javac" -nowarn -d "$TOOLS_DIR" -cp "$LIBS_DIR/*" "$src" || die "could not compile $src"
}

run_check() {
  "$JAVA" -Xmx256m -XX:TieredStopAtLevel=1 -Xshare:auto \
    -Dlog4j2.configurationFile="$CONF_DIR/log4j2-tools.properties" \
    -cp "$TOOLS_DIR:$LIBS_DIR/*" KafkaCheck "$@"
}

render_props() {
  mkdir -p "$DATA_DIR" "$LOG_DIR"
  local tmp="$PROPS.tmp"
  # The template's ports are 9092 (PLAINTEXT) and 9093 (controller): put ours in (through
  # placeholders, so a port one below the other cannot be replaced twice).
  sed -e "s|@KAFKA_DATA_DIR@|$DATA_DIR|g" \
    -e "s|127\.0\.0\.1:9092|@PLAIN_ADDR@|g" -e "s|127\.0\.0\.1:9093|@CONTROLLER_ADDR@|g" \
    -e "s|@PLAIN_ADDR@|$HOST:$PORT|g" -e "s|@CONTROLLER_ADDR@|$HOST:$CONTROLLER_PORT|g" \
    "$CONF_DIR/server.properties" > "$tmp"
  mv "$tmp" "$PROPS"
}

storage_tool() {
  "$JAVA" -Xmx256m -Dlog4j2.configurationFile="$CONF_DIR/log4j2-tools.properties" \
    -cp "$LIBS_DIR/*" kafka.tools.StorageTool "$@"
}

format_storage() {
  if [[ -f "$DATA_DIR/meta.properties" ]]; then return 0; fi
  if [[ ! -s "$CLUSTER_ID_FILE" ]]; then
    storage_tool random-uuid | tail -n1 | tr -d '[:space:]' > "$CLUSTER_ID_FILE.tmp"
    [[ -s "$CLUSTER_ID_FILE.tmp" ]] || die "kafka.tools.StorageTool random-uuid printed nothing"
    mv "$CLUSTER_ID_FILE.tmp" "$CLUSTER_ID_FILE"
  fi
  local cid
  cid="$(cat "$CLUSTER_ID_FILE")"
  log "formatting storage $HOME_NAME/data (cluster id $cid)"
  # controller.quorum.voters is set (static quorum), so no --standalone here.
  storage_tool format -t "$cid" -c "$PROPS" --ignore-formatted >/dev/null \
    || die "kafka.tools.StorageTool format failed"
}

# --- commands ----------------------------------------------------------------

wait_ready() {
  local pid="$1"
  log "waiting up to ${READY_TIMEOUT}s for the broker (pid $pid) to answer on $BOOTSTRAP ..."
  local start=$SECONDS deadline=$((SECONDS + READY_TIMEOUT))
  # First wait for the port (cheap), bailing out early if the JVM dies.
  while ! port_open; do
    if ! kill -0 "$pid" 2>/dev/null; then fail_start "the broker process $pid exited during startup"; fi
    if (( SECONDS >= deadline )); then fail_start "port $PORT did not open within ${READY_TIMEOUT}s"; fi
    sleep 0.3
  done
  # Then ask Kafka itself (describeCluster + listTopics) with the remaining time.
  local left=$((deadline - SECONDS)); (( left < 5 )) && left=5
  if ! run_check ready "$BOOTSTRAP" "$((left * 1000))"; then
    fail_start "the broker did not answer Kafka requests within ${READY_TIMEOUT}s"
  fi
  log "broker is up on $BOOTSTRAP (pid $pid, ready after $((SECONDS - start)) s)"
}

fail_start() {
  local from="${LOG_START_LINE:-1}" pid
  echo "kafka.sh: ERROR: $1" >&2
  if [[ -f "$LOG_DIR/server.log" ]]; then
    echo "---- errors in $HOME_NAME/logs/server.log (this start) ----" >&2
    tail -n +"$from" "$LOG_DIR/server.log" | grep -E '^\[[^]]*\] (ERROR|FATAL) |^Caused by: ' | tail -n 8 >&2 || true
    echo "---- tail of $HOME_NAME/logs/server.log ----" >&2
    tail -n +"$from" "$LOG_DIR/server.log" | tail -n 25 | cut -c1-400 >&2 || true
  fi
  echo "---- tail of $HOME_NAME/logs/server.out ----" >&2
  tail -n 20 "$LOG_DIR/server.out" >&2 2>/dev/null || true
  if pid="$(our_pid)"; then
    echo "kafka.sh: the broker process $pid is still alive (starting?): scripts/kafka.sh down stops it" >&2
  fi
  exit 1
}

# The broker keeps a file open per partition (at least), and its open-file limit is this shell's:
# test topics pile up over many runs (every test names its own), and past the limit the broker
# dies ("Too many open files", seen after ~19,000 partition folders under a limit of 20,000).
# Warns at 60% of the limit; with FV_KAFKA_RESET_WHEN_FULL=1 (npm test sets it) the data of a
# broker that is not running is reset.
check_partition_count() {
  [[ -d "$DATA_DIR" ]] || return 0
  local count limit
  count=$(find "$DATA_DIR" -mindepth 1 -maxdepth 1 -type d | wc -l)
  limit=$(ulimit -n)
  [[ "$limit" == unlimited ]] && return 0
  (( count * 10 < limit * 6 )) && return 0
  # Only a broker that is not running is reset: another run may be using a running one.
  if [[ "${FV_KAFKA_RESET_WHEN_FULL:-}" == 1 ]] && ! our_pid >/dev/null && ! port_open; then
    log "the broker's data holds $count partition folders, near this shell's open-file limit ($limit): resetting it (FV_KAFKA_RESET_WHEN_FULL=1; every topic is deleted)"
    cmd_down
    rm -rf "$DATA_DIR"
    return 0
  fi
  log "WARNING: the broker's data holds $count partition folders and the open-file limit is $limit: past it the broker dies (Too many open files). Delete topics, raise ulimit -n, or run scripts/kafka.sh reset (deletes every topic)"
}

cmd_up() {
  local sb="${STREAM_BROKERS:-}"
  sb="${sb//[[:space:]]/}"
  if [[ -n "$sb" && "$sb" != "127.0.0.1:$PORT" && "$sb" != "localhost:$PORT" ]]; then
    log "STREAM_BROKERS=$sb points to another cluster: no local broker started"
    return 0
  fi

  check_partition_count
  local pid
  if pid="$(our_pid)"; then
    echo "$pid" > "$PID_FILE"
    require_java; build_tools
    if port_open && run_check ready "$BOOTSTRAP" 5000 >/dev/null 2>&1; then
      log "broker already running and answering on $BOOTSTRAP (pid $pid); nothing to do"
      return 0
    fi
    # Ours but still starting: wait for it instead of starting a second one.
    wait_ready "$pid"
    return 0
  fi

  if port_open; then
    if libs_ready && [[ -n "$JAVA" ]]; then
      build_tools
      if run_check ready "$BOOTSTRAP" 10000 >/dev/null; then
        log "a Kafka broker not started by this script already answers on $BOOTSTRAP; leaving it alone"
        return 0
      fi
      die "port $PORT is in use by something that does not answer as a Kafka broker"
    fi
    log "something already listens on $BOOTSTRAP (not started by this script); assuming it is a Kafka broker and leaving it alone"
    return 0
  fi

  require_java
  fetch_libs
  build_tools
  render_props
  format_storage

  mkdir -p "$LOG_DIR"
  rm -f "$PID_FILE"
  LOG_START_LINE=1
  if [[ -f "$LOG_DIR/server.log" ]]; then LOG_START_LINE=$(( $(wc -l < "$LOG_DIR/server.log") + 1 )); fi
  log "starting Apache Kafka $KAFKA_VERSION (KRaft, node 1) on $BOOTSTRAP, controller $HOST:$CONTROLLER_PORT"
  # shellcheck disable=SC2086  # HEAP_OPTS is a list of JVM flags
  (
    cd "$KAFKA_HOME"
    # setsid + nohup: own session, survives the calling shell. The inner bash writes
    # its own pid, closes every inherited fd above 2 (so the broker never holds a
    # caller's pipe or our lock open), then execs java: the pid file holds the JVM's pid.
    # shellcheck disable=SC2016  # $$, $f and $@ are for the inner bash
    setsid nohup bash -c 'echo $$ > "$0"
      for f in /proc/$$/fd/*; do f=${f##*/}; if [ "$f" -gt 2 ]; then eval "exec $f>&-" 2>/dev/null; fi; done
      exec "$@"' "$PID_FILE" \
      "$JAVA" $HEAP_OPTS -server \
      -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
      -XX:+ExplicitGCInvokesConcurrent -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
      -Dkafka.logs.dir="$LOG_DIR" \
      -Dlog4j2.configurationFile="$CONF_DIR/log4j2.properties" \
      -cp "$LIBS_DIR/*" kafka.Kafka "$PROPS" \
      > "$LOG_DIR/server.out" 2>&1 < /dev/null 9>&- &
  )
  local _
  for _ in $(seq 1 50); do [[ -s "$PID_FILE" ]] && break; sleep 0.1; done
  [[ -s "$PID_FILE" ]] || fail_start "the broker did not start (no pid file)"
  pid="$(cat "$PID_FILE")"
  wait_ready "$pid"
}

cmd_down() {
  local pid
  if ! pid="$(our_pid)"; then
    rm -f "$PID_FILE"
    log "broker not running; nothing to stop"
    return 0
  fi
  log "stopping broker (pid $pid) ..."
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    log "broker did not stop within ${STOP_TIMEOUT}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
  rm -f "$PID_FILE"
  log "broker stopped"
}

cmd_status() {
  local pid
  if pid="$(our_pid)"; then
    if port_open; then
      echo "running (pid $pid) on $BOOTSTRAP"
    else
      echo "running (pid $pid), starting: $BOOTSTRAP not open yet"
    fi
    return 0
  fi
  if port_open; then
    echo "running: a broker not started by this script listens on $BOOTSTRAP"
    return 0
  fi
  echo "not running"
  return 3
}

cmd_logs() {
  local f="$LOG_DIR/server.log"
  [[ -f "$f" ]] || die "no broker log yet ($f); run: scripts/kafka.sh up"
  if [[ "${1:-}" == "-f" ]]; then exec tail -n 100 -F "$f"; fi
  tail -n 100 "$f"
}

cmd_reset() {
  cmd_down
  rm -rf "$DATA_DIR" "$KAFKA_HOME/server.properties"
  log "deleted $HOME_NAME/data (jars in .kafka/libs kept); run scripts/kafka.sh up for a fresh broker"
}

cmd_selftest() {
  require_java
  libs_ready || die "no Kafka jars yet; run: scripts/kafka.sh up"
  build_tools
  port_open || die "nothing listens on $BOOTSTRAP; run: scripts/kafka.sh up"
  run_check selftest "$BOOTSTRAP"
}

# Commands that talk to the running broker through KafkaCheck (see scripts/kafka/KafkaCheck.java).
cmd_tool() {
  local mode="$1"
  shift
  require_java
  libs_ready || die "no Kafka jars yet; run: scripts/kafka.sh up"
  build_tools
  port_open || die "nothing listens on $BOOTSTRAP; run: scripts/kafka.sh up"
  run_check "$mode" "$BOOTSTRAP" "$@"
}

usage() {
  sed -n '15,28p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

# Serialize up/down/reset of this checkout's broker (parallel test runners may all call `up`).
take_lock() {
  mkdir -p "$KAFKA_HOME"
  command -v flock >/dev/null || return 0
  exec 9>"$KAFKA_HOME/.lock"
  flock -w 180 9 || die "could not lock $KAFKA_HOME/.lock within 180 s"
}

case "${1:-}" in
  up) take_lock; cmd_up ;;
  down | stop) take_lock; cmd_down ;;
  status) cmd_status ;;
  logs) shift; cmd_logs "$@" ;;
  reset) take_lock; cmd_reset ;;
  selftest) cmd_selftest ;;
  create) shift; [[ $# -eq 2 ]] || die "usage: scripts/kafka.sh create TOPIC PARTITIONS"; cmd_tool create "$@" ;;
  dump) shift; [[ $# -ge 2 ]] || die "usage: scripts/kafka.sh dump TOPIC OUTFILE [--timestamps]"; cmd_tool dump "$@" ;;
  lag) shift; [[ $# -ge 2 ]] || die "usage: scripts/kafka.sh lag TOPIC GROUP..."; cmd_tool lag "$@" ;;
  transactions) shift; [[ $# -ge 1 ]] || die "usage: scripts/kafka.sh transactions TOPIC [GROUP...]"; cmd_tool transactions "$@" ;;
  -h | --help | help) usage ;;
  *) usage >&2; exit 2 ;;
esac
