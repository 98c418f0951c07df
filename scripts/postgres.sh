#!/usr/bin/env bash
# Local PostgreSQL for the Postgres sink (`[datasets.x] sink = "postgres"`): its tests, its
# benchmark and the README's example. No Docker: Debian's PostgreSQL (the `postgresql` package,
# installed with apt-get when missing and we are root), run from <repo>/.postgres.
#
#   scripts/postgres.sh up       start on 127.0.0.1:5432 and wait until it answers; no-op when a
#                                server already answers there (or FV_POSTGRES_URL points elsewhere)
#   scripts/postgres.sh down     stop the server started by this script (pg_ctl stop -m fast)
#   scripts/postgres.sh status   "running (pid N)" -> exit 0, "not running" -> exit 3
#   scripts/postgres.sh url      print the URL to connect with
#   scripts/postgres.sh psql ... psql on it
#   scripts/postgres.sh reset    stop the server and delete its data (.postgres/data)
#
# The server: user `postgres`, database `postgres`, trust authentication on 127.0.0.1 only, so
# the URL is postgres://postgres@127.0.0.1:5432/postgres. A development server, never for
# anything else. Everything lives under <repo>/.postgres (git-ignored): data/, server.log,
# run/ (the Unix socket). As root the server runs as the `postgres` user (initdb refuses root).
# Env: FV_POSTGRES_PORT (default 5432), FV_POSTGRES_HOME (default <repo>/.postgres: a second
#      server's own folder, e.g. for a test that stops its database), PG_BIN (the folder of initdb/pg_ctl; default: the newest
#      /usr/lib/postgresql/*/bin), FV_POSTGRES_READY_TIMEOUT (seconds, default 60).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -n "${FV_POSTGRES_HOME:-}" ]]; then WANTED_HOME="$(realpath -m "$FV_POSTGRES_HOME")"; else WANTED_HOME="$REPO_ROOT/.postgres"; fi
# As root the server runs as `postgres`, which must reach the folder: a checkout it cannot enter
# (under /root, say) keeps the server's data in /var/tmp instead, one folder per checkout. Decided
# again once the package is installed (the `postgres` user comes with it).
place_home() {
  HOME_DIR="$WANTED_HOME"
  if [[ "$(id -u)" = 0 ]] && id postgres >/dev/null 2>&1 && ! runuser -u postgres -- test -x "$(dirname "$HOME_DIR")" 2>/dev/null; then
    HOME_DIR="/var/tmp/fv-postgres-$(printf '%s' "$HOME_DIR" | cksum | cut -d' ' -f1)"
  fi
  DATA_DIR="$HOME_DIR/data"
  RUN_DIR="$HOME_DIR/run"
  LOG_FILE="$HOME_DIR/server.log"
}
place_home
PORT="${FV_POSTGRES_PORT:-5432}"
[[ "$PORT" =~ ^[0-9]+$ ]] || { echo "postgres.sh: FV_POSTGRES_PORT must be a port number, not $PORT" >&2; exit 2; }
URL="postgres://postgres@127.0.0.1:$PORT/postgres"
READY_TIMEOUT="${FV_POSTGRES_READY_TIMEOUT:-60}"

find_bin() {
  if [[ -n "${PG_BIN:-}" ]]; then echo "$PG_BIN"; return; fi
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  echo "$dir"
}

# Debian's package, when it is missing and we can install it.
install_postgres() {
  local bin
  bin=$(find_bin)
  if [[ -n "$bin" && -x "$bin/initdb" ]]; then echo "$bin"; return; fi
  if [[ "$(id -u)" = 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "postgres.sh: installing Debian's postgresql package..." >&2
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql >/dev/null 2>&1; }; } ||
      { echo "postgres.sh: could not install postgresql with apt-get; install it, or set PG_BIN to the folder of initdb and pg_ctl" >&2; exit 1; }
    bin=$(find_bin)
    # Debian's package creates and starts a cluster of its own (on 5432, with passwords) where
    # services may start: stopped, and left to start by hand, so it does not answer for ours.
    if command -v pg_lsclusters >/dev/null 2>&1; then
      pg_lsclusters -h 2>/dev/null | while read -r version name _; do
        pg_ctlcluster "$version" "$name" stop >/dev/null 2>&1 || true
        if [[ -f "/etc/postgresql/$version/$name/start.conf" ]]; then echo manual >"/etc/postgresql/$version/$name/start.conf"; fi
      done || true
    fi
  fi
  [[ -n "$bin" && -x "$bin/initdb" ]] || { echo "postgres.sh: PostgreSQL is not installed (no initdb under /usr/lib/postgresql/*/bin); install Debian's postgresql package, or set PG_BIN" >&2; exit 1; }
  echo "$bin"
}

# Runs a command as the server's owner: `postgres` when we are root, else ourselves.
as_owner() {
  if [[ "$(id -u)" = 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

answers() {
  local bin=$1
  "$bin/pg_isready" -q -h 127.0.0.1 -p "$PORT" >/dev/null 2>&1
}

server_pid() {
  [[ -f "$DATA_DIR/postmaster.pid" ]] && head -1 "$DATA_DIR/postmaster.pid" 2>/dev/null || true
}

cmd_up() {
  local bin
  bin=$(install_postgres)
  place_home
  if answers "$bin"; then return 0; fi
  mkdir -p "$HOME_DIR" "$RUN_DIR"
  [[ "$(id -u)" = 0 ]] && chown postgres: "$HOME_DIR" "$RUN_DIR"
  if [[ ! -f "$DATA_DIR/PG_VERSION" ]]; then
    rm -rf "$DATA_DIR"
    as_owner "$bin/initdb" -D "$DATA_DIR" -U postgres --auth=trust --encoding=UTF8 --no-locale >"$HOME_DIR/initdb.log" 2>&1 ||
      { cat "$HOME_DIR/initdb.log" >&2; echo "postgres.sh: initdb failed (log above)" >&2; exit 1; }
  fi
  # A crashed server leaves its pid file behind; pg_ctl sees through it when the pid is gone.
  as_owner "$bin/pg_ctl" -D "$DATA_DIR" -l "$LOG_FILE" -w -t "$READY_TIMEOUT" \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -c unix_socket_directories=$RUN_DIR -c max_connections=200 -c fsync=on" start >/dev/null ||
    { tail -20 "$LOG_FILE" >&2 2>/dev/null; echo "postgres.sh: the server did not start on 127.0.0.1:$PORT (log: $LOG_FILE, above)" >&2; exit 1; }
  local waited=0
  until answers "$bin"; do
    (( waited++ >= READY_TIMEOUT )) && { echo "postgres.sh: no answer on 127.0.0.1:$PORT after ${READY_TIMEOUT}s (log: $LOG_FILE)" >&2; exit 1; }
    sleep 1
  done
  echo "postgres.sh: PostgreSQL is up at $URL" >&2
}

cmd_down() {
  local bin
  bin=$(find_bin)
  [[ -f "$DATA_DIR/postmaster.pid" && -n "$bin" ]] || { echo "postgres.sh: not running" >&2; return 0; }
  as_owner "$bin/pg_ctl" -D "$DATA_DIR" -m fast -w stop >/dev/null 2>&1 || true
}

cmd_status() {
  local pid bin
  pid=$(server_pid)
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then echo "running (pid $pid)"; return 0; fi
  bin=$(find_bin)
  if [[ -n "$bin" ]] && answers "$bin"; then echo "running: a PostgreSQL not started by this script answers on 127.0.0.1:$PORT"; return 0; fi
  echo "not running"
  return 3
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  url) echo "$URL" ;;
  psql) shift; psql "$URL" "$@" ;;
  reset) cmd_down; rm -rf "$DATA_DIR"; echo "postgres.sh: data deleted" >&2 ;;
  *) echo "usage: scripts/postgres.sh up | down | status | url | psql [args] | reset" >&2; exit 2 ;;
esac
