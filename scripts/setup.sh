#!/usr/bin/env bash
# Installs what is missing, then makes sure the local Kafka answers. Used by `npm start` and
# `npm test`; quick when everything is already there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# 1. Node packages (bun and deno come from npm). Reinstall when the lockfile changed.
stamp=node_modules/.fv-installed
if [ ! -x node_modules/.bin/bun ] || [ ! -x node_modules/.bin/deno ] || [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ]; then
  echo "setup: installing node packages (npm ci)..." >&2
  npm ci --no-audit --no-fund --loglevel=error >&2
  touch "$stamp"
fi

# 2. The broker (skipped when STREAM_BROKERS points elsewhere).
bash scripts/kafka.sh up >&2
