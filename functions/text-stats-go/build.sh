#!/usr/bin/env bash
# Builds text-stats.wasm with Go 1.24+ (go-pdk comes from the Go module proxy; see go.mod).
set -euo pipefail
cd "$(dirname "$0")"
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags="-s -w" -o text-stats.wasm .
