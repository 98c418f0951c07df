#!/usr/bin/env bash
# Builds enrich-order.wasm with AssemblyScript from npm (run from anywhere).
set -euo pipefail
cd "$(dirname "$0")"
../../node_modules/.bin/asc index.ts --outFile enrich-order.wasm --use abort=index/myAbort -O3 --runtime minimal
