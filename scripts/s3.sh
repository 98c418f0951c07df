#!/usr/bin/env bash
# Local S3-compatible server for fv-streams development, tests and examples: the S3 state store
# (src/state/s3-store.ts) runs against it. No Docker: SeaweedFS's `weed` is built from its Go
# module into .tools/bin and runs as `weed mini` (master, volume server, filer and S3 gateway in
# one process), on 127.0.0.1 only.
#
# Version: SeaweedFS v0.0.0-20261109003541-7506e5f91cd6 (`weed version`: 4.53), pinned once, in
# WEED_VERSION below. `go install` refuses it (its go.mod has replace directives), so install
# builds it as the main module instead: `go mod download` gives the module's folder, and
# `go build ./weed` runs inside it, where the replaces apply. Measured here (2 cores, 2026-12-05):
# a first build takes 204 s after OPA's (Go's caches warm), 308 s with an empty build cache (module
# sources already downloaded), 62 s again for the same version; a start 4 s, a stop 3 s.
# Why SeaweedFS rather than moto's server mode: it is a real object store (objects on disk that
# outlive a restart, SigV4 signatures checked against configured keys, ListObjectsV2 paging, the
# same error codes as S3), one static binary built with the Go the project already uses for OPA,
# where moto is an in-memory mock of AWS in a Python virtualenv.
#
#   scripts/s3.sh install      build .tools/bin/weed if it is missing or of another version
#   scripts/s3.sh up           install if needed, start the server on 127.0.0.1:$FV_S3_PORT and
#                              wait until a signed S3 request answers; no-op if it answers
#                              already, or if FV_S3_ENDPOINT points elsewhere
#   scripts/s3.sh down         stop the server started by this script (SIGTERM, then SIGKILL)
#   scripts/s3.sh status       "running (pid N) ..." -> exit 0, "not running" -> exit 3
#   scripts/s3.sh logs [-f]    tail the server log (.s3/logs/weed.out)
#   scripts/s3.sh reset        stop the server and delete its data (.s3/data); the binary stays
#
# Everything lives under <repo>/.s3 (git-ignored): data/ (volumes, filer metadata), logs/
# (weed.out, glog files, build.log), s3.json (the S3 identity, rendered from the env below),
# weed.pid. The binary: .tools/bin/weed, its version in .tools/weed-version.
# Ports, all on 127.0.0.1: S3 on FV_S3_PORT; master, volume server and filer on FV_S3_PORT+1..+3
# and the admin's gRPC on (FV_S3_PORT+4)+10000; each gRPC port is its HTTP port + 10000. WebDAV,
# the admin UI, Iceberg, Lance and telemetry are off.
# Env: FV_S3_PORT (default 8333), FV_S3_ACCESS_KEY (default fv-local), FV_S3_SECRET_KEY
#      (default fv-local-secret): the one identity the server accepts, and what
#      `s3OptionsFromEnv` (src/state/aws-s3-client.ts) sends by default.
#      FV_S3_ENDPOINT: when it names another server, `up` starts nothing.
#      FV_S3_HOME (default <repo>/.s3), FV_S3_READY_TIMEOUT (seconds, default 60),
#      FV_S3_STOP_TIMEOUT (seconds, default 20).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
WEED_MODULE=github.com/seaweedfs/seaweedfs
WEED_VERSION=v0.0.0-20261109003541-7506e5f91cd6
TOOLS_DIR="$REPO_ROOT/.tools"
WEED="$TOOLS_DIR/bin/weed"
WEED_STAMP="$TOOLS_DIR/weed-version"
if [[ -n "${FV_S3_HOME:-}" ]]; then S3_HOME="$(realpath -m "$FV_S3_HOME")"; else S3_HOME="$REPO_ROOT/.s3"; fi
HOME_NAME="${S3_HOME#"$REPO_ROOT"/}"
DATA_DIR="$S3_HOME/data"
LOG_DIR="$S3_HOME/logs"
PID_FILE="$S3_HOME/weed.pid"
IDENTITIES="$S3_HOME/s3.json"

HOST=127.0.0.1
PORT="${FV_S3_PORT:-8333}"
[[ "$PORT" =~ ^[0-9]+$ ]] && (( PORT >= 1 && PORT <= 55530 )) || { echo "s3.sh: FV_S3_PORT must be a port number up to 55530 (its gRPC ports are 10000 above), not $PORT" >&2; exit 2; }
ENDPOINT="http://$HOST:$PORT"
ACCESS_KEY="${FV_S3_ACCESS_KEY:-fv-local}"
SECRET_KEY="${FV_S3_SECRET_KEY:-fv-local-secret}"
READY_TIMEOUT="${FV_S3_READY_TIMEOUT:-60}"
STOP_TIMEOUT="${FV_S3_STOP_TIMEOUT:-20}"

log() { echo "s3.sh: $*"; }
die() { echo "s3.sh: ERROR: $*" >&2; exit 1; }

# --- the binary ----------------------------------------------------------------

installed() {
  [[ -x "$WEED" && "$(cat "$WEED_STAMP" 2>/dev/null)" == "$WEED_VERSION" ]]
}

cmd_install() {
  if installed; then return 0; fi
  command -v go >/dev/null || die "Go is not installed: it is needed once, to build SeaweedFS's weed into .tools/bin (or put a weed $WEED_VERSION there and its version in .tools/weed-version)"
  mkdir -p "$TOOLS_DIR/bin" "$LOG_DIR"
  local start=$SECONDS dir build_log="$LOG_DIR/build.log"
  log "building SeaweedFS $WEED_VERSION into .tools/bin/weed (go build; 3 to 6 minutes the first time, see $HOME_NAME/logs/build.log) ..."
  dir="$(go mod download -json "$WEED_MODULE@$WEED_VERSION" 2>"$build_log" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')"
  [[ -n "$dir" && -d "$dir" ]] || { cat "$build_log" >&2; die "go mod download $WEED_MODULE@$WEED_VERSION failed (is the Go module proxy reachable?)"; }
  # Built inside the module's folder, it is the main module and its replace directives apply. The
  # module cache is read-only, but the build writes only the binary (into .tools/bin).
  if ! (cd "$dir" && go build -o "$WEED.tmp" ./weed) >>"$build_log" 2>&1; then
    tail -n 20 "$build_log" >&2
    rm -f "$WEED.tmp"
    die "go build of SeaweedFS failed (full output in $HOME_NAME/logs/build.log)"
  fi
  mv "$WEED.tmp" "$WEED"
  echo "$WEED_VERSION" >"$WEED_STAMP"
  log "built .tools/bin/weed ($("$WEED" version 2>/dev/null | head -n1 | sed 's/^version //')) in $((SECONDS - start)) s"
}

# --- the process ---------------------------------------------------------------

# Is $1 a live `weed mini` serving this checkout's data folder?
is_ours() {
  local pid="$1" cmd
  [[ "$pid" =~ ^[0-9]+$ && -r "/proc/$pid/cmdline" ]] || return 1
  cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
  [[ "$cmd" == *weed* && "$cmd" == *" mini "* && "$cmd" == *"-dir=$DATA_DIR "* ]]
}

our_pid() {
  local pid="" d
  if [[ -f "$PID_FILE" ]]; then
    pid="$(tr -dc '0-9' <"$PID_FILE" || true)"
    if is_ours "$pid"; then echo "$pid"; return 0; fi
  fi
  for d in /proc/[0-9]*; do
    pid="${d#/proc/}"
    if is_ours "$pid"; then echo "$pid"; return 0; fi
  done
  return 1
}

port_open() {
  (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null
}

# The answer to a signed ListBuckets: its HTTP status, a newline, then its body.
signed_list() {
  curl -s --max-time 5 --aws-sigv4 "aws:amz:us-east-1:s3" --user "$ACCESS_KEY:$SECRET_KEY" -w '\n%{http_code}' "$ENDPOINT/" 2>/dev/null || true
}

# A signed ListBuckets answered with a bucket list: the gateway is up, the filer behind it too,
# and our keys work.
answers() {
  local out
  out="$(signed_list)"
  [[ "${out##*$'\n'}" == 200 && "$out" == *"<ListAllMyBucketsResult"* ]]
}

# S3 answered the signed request, and refused our keys (the server runs with other ones).
refuses_keys() {
  local out
  out="$(signed_list)"
  [[ "${out##*$'\n'}" == 403 && ( "$out" == *"<Code>InvalidAccessKeyId</Code>"* || "$out" == *"<Code>SignatureDoesNotMatch</Code>"* ) ]]
}

# Any S3-looking answer at all (an <Error> document or a bucket list), for a server not ours.
speaks_s3() {
  curl -s --max-time 5 "$ENDPOINT/" 2>/dev/null | grep -q -e '<Error>' -e '<ListAllMyBucketsResult'
}

json_string() {
  local s="${1//\\/\\\\}"
  s="${s//\"/\\\"}"
  printf '"%s"' "$s"
}

render_identities() {
  mkdir -p "$S3_HOME"
  local tmp="$IDENTITIES.tmp"
  # The keys as JSON strings (a quote or backslash in them would otherwise break the file), readable by us only.
  ( umask 077
    printf '{"identities":[{"name":"fv-local","credentials":[{"accessKey":%s,"secretKey":%s}],"actions":["Admin","Read","List","Tagging","Write"]}]}\n' \
      "$(json_string "$ACCESS_KEY")" "$(json_string "$SECRET_KEY")" >"$tmp" )
  mv "$tmp" "$IDENTITIES"
}

keys_differ() {
  die "the S3 server (pid $1) runs with other keys than FV_S3_ACCESS_KEY=$ACCESS_KEY and FV_S3_SECRET_KEY (see $HOME_NAME/s3.json); to change them: scripts/s3.sh down, then up"
}

fail_start() {
  echo "s3.sh: ERROR: $1" >&2
  echo "---- tail of $HOME_NAME/logs/weed.out ----" >&2
  tail -n 25 "$LOG_DIR/weed.out" 2>/dev/null | cut -c1-400 >&2 || true
  local pid
  if pid="$(our_pid)"; then echo "s3.sh: the server process $pid is still alive (starting?): scripts/s3.sh down stops it" >&2; fi
  exit 1
}

wait_ready() {
  local pid="$1" start=$SECONDS deadline=$((SECONDS + READY_TIMEOUT))
  log "waiting up to ${READY_TIMEOUT}s for S3 on $ENDPOINT (pid $pid) ..."
  until answers; do
    kill -0 "$pid" 2>/dev/null || fail_start "the server process $pid exited during startup"
    if refuses_keys; then keys_differ "$pid"; fi
    (( SECONDS < deadline )) || fail_start "S3 did not answer a signed request on $ENDPOINT within ${READY_TIMEOUT}s"
    sleep 0.2
  done
  log "S3 is up on $ENDPOINT (pid $pid, ready after $((SECONDS - start)) s; access key $ACCESS_KEY)"
}

cmd_up() {
  local ep="${FV_S3_ENDPOINT:-}"
  ep="${ep%/}"
  if [[ -n "$ep" && "$ep" != "$ENDPOINT" && "$ep" != "http://localhost:$PORT" ]]; then
    log "FV_S3_ENDPOINT=$ep points to another server: no local server started"
    return 0
  fi
  local pid
  if pid="$(our_pid)"; then
    echo "$pid" >"$PID_FILE"
    if answers; then log "S3 already running and answering on $ENDPOINT (pid $pid); nothing to do"; return 0; fi
    if refuses_keys; then keys_differ "$pid"; fi
    wait_ready "$pid"
    return 0
  fi
  if port_open; then
    if answers; then log "an S3 server not started by this script already answers on $ENDPOINT with these keys; leaving it alone"; return 0; fi
    if speaks_s3; then die "an S3 server not started by this script listens on $ENDPOINT but refuses the access key $ACCESS_KEY (set FV_S3_ACCESS_KEY / FV_S3_SECRET_KEY, or FV_S3_PORT for another port)"; fi
    die "port $PORT is in use by something that does not answer as S3 (set FV_S3_PORT to a free port)"
  fi
  command -v curl >/dev/null || die "curl not found (needed to check that S3 answers)"
  cmd_install
  render_identities
  mkdir -p "$DATA_DIR" "$LOG_DIR"
  rm -f "$PID_FILE"
  log "starting SeaweedFS $WEED_VERSION (weed mini) with S3 on $ENDPOINT, data in $HOME_NAME/data"
  (
    cd "$S3_HOME"
    # setsid + nohup: its own session, so it outlives the calling shell. The inner bash writes its
    # pid, closes every inherited fd above 2 (a caller's pipe or our lock stays closed), then execs.
    # shellcheck disable=SC2016  # $$, $f and $@ are for the inner bash
    setsid nohup bash -c 'echo $$ > "$0"
      for f in /proc/$$/fd/*; do f=${f##*/}; if [ "$f" -gt 2 ]; then eval "exec $f>&-" 2>/dev/null; fi; done
      exec "$@"' "$PID_FILE" \
      "$WEED" -logdir="$LOG_DIR" -alsologtostderr=false mini \
      -dir="$DATA_DIR" -ip="$HOST" -ip.bind="$HOST" \
      -s3.port="$PORT" -master.port=$((PORT + 1)) -volume.port=$((PORT + 2)) -filer.port=$((PORT + 3)) -admin.port=$((PORT + 4)) \
      -s3.config="$IDENTITIES" -s3.autoCreateBucket=false -s3.allowBackslashInKey \
      -webdav=false -admin.ui=false -admin.port.legacy=0 -s3.port.iceberg=0 -s3.port.lance=0 -master.telemetry=false \
      >"$LOG_DIR/weed.out" 2>&1 </dev/null 9>&- &
  )
  local _
  for _ in $(seq 1 50); do [[ -s "$PID_FILE" ]] && break; sleep 0.1; done
  [[ -s "$PID_FILE" ]] || fail_start "the server did not start (no pid file)"
  pid="$(cat "$PID_FILE")"
  wait_ready "$pid"
}

cmd_down() {
  local pid
  if ! pid="$(our_pid)"; then
    rm -f "$PID_FILE"
    log "S3 server not running; nothing to stop"
    return 0
  fi
  log "stopping the S3 server (pid $pid) ..."
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    log "the server did not stop within ${STOP_TIMEOUT}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
  rm -f "$PID_FILE"
  log "S3 server stopped"
}

cmd_status() {
  local pid
  if pid="$(our_pid)"; then
    if answers; then
      echo "running (pid $pid) on $ENDPOINT"
    elif refuses_keys; then
      echo "running (pid $pid) on $ENDPOINT, with other keys than FV_S3_ACCESS_KEY=$ACCESS_KEY (see $HOME_NAME/s3.json)"
    else
      echo "running (pid $pid), starting: $ENDPOINT does not answer yet"
    fi
    return 0
  fi
  if port_open && answers; then
    echo "running: an S3 server not started by this script answers on $ENDPOINT"
    return 0
  fi
  echo "not running"
  return 3
}

cmd_logs() {
  local f="$LOG_DIR/weed.out"
  [[ -f "$f" ]] || die "no server log yet ($f); run: scripts/s3.sh up"
  if [[ "${1:-}" == "-f" ]]; then exec tail -n 100 -F "$f"; fi
  tail -n 100 "$f"
}

cmd_reset() {
  cmd_down
  rm -rf "$DATA_DIR"
  log "deleted $HOME_NAME/data (the binary in .tools/bin stays); run scripts/s3.sh up for an empty server"
}

usage() {
  sed -n '18,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

# Serialize install/up/down/reset (parallel test files may all call `up`).
take_lock() {
  mkdir -p "$S3_HOME"
  command -v flock >/dev/null || return 0
  exec 9>"$S3_HOME/.lock"
  flock -w 900 9 || die "could not lock $S3_HOME/.lock within 900 s"
}

case "${1:-}" in
  install) take_lock; cmd_install ;;
  up) take_lock; cmd_up ;;
  down | stop) take_lock; cmd_down ;;
  status) cmd_status ;;
  logs) shift; cmd_logs "$@" ;;
  reset) take_lock; cmd_reset ;;
  -h | --help | help) usage ;;
  *) usage >&2; exit 2 ;;
esac
