#!/usr/bin/env bash
# The whole test suite (npm test runs it after scripts/setup.sh). Unit and runtime suites run in
# one bun process; each real-broker file in test/integration/ runs in a process of its own,
# because a pure-JS consumer stall was seen to persist within one long-lived test process
# (see docs/ARCHITECTURE.md, known issues). Then Node: the tsc build, the Kafka port suite for
# both adapters and the in-memory one (node:test), and the integration files again once per Node engine
# (FV_TEST_ENGINE=node-confluent, node-platformatic; test/helpers/cli.ts). Exits non-zero when
# any run fails. FV_TEST_ENGINES narrows the engines (e.g. "bun" or "node-confluent").
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUN=node_modules/.bin/bun
ENGINES="${FV_TEST_ENGINES:-bun node-confluent node-platformatic}"
status=0
summary=()
log=$(mktemp)
failures=$(mktemp)
trap 'rm -f "$log" "$failures"' EXIT

# Runs one bun test process, echoes its output, and adds its pass/fail counts to the summary.
run_bun() {
  local label=$1; shift
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || status=1
  summary+=("$label: $(grep -aE '^ *[0-9]+ (pass|fail|skip)$' "$log" | tr -s ' \n' ' ')")
  # Keep what led up to each failure, so the end of the output (all CI shows) says why.
  if [ "$rc" != 0 ]; then
    { echo "--- $label (exit $rc)"; grep -aB 25 -E '^\(fail\)|^error: ' "$log" | tail -n 120; } >> "$failures"
  fi
}

if [[ " $ENGINES " == *" bun "* ]]; then
  units=()
  for dir in test/*/; do
    case "$dir" in test/integration/|test/helpers/|test/artifacts/) continue ;; esac
    units+=("$dir")
  done
  run_bun "bun units" "$BUN" test --timeout 300000 "${units[@]}"
  for file in test/integration/*.test.ts; do
    run_bun "bun $(basename "$file")" "$BUN" test --timeout 300000 "$file"
  done
fi

node_engines=()
for engine in node-confluent node-platformatic; do [[ " $ENGINES " == *" $engine "* ]] && node_engines+=("$engine"); done
if [ ${#node_engines[@]} -gt 0 ]; then
  echo "test: building dist/ for Node (npm run build)"
  if ! node_modules/.bin/tsc -p tsconfig.build.json || ! node_modules/.bin/tsc -p tsconfig.node.json; then
    echo "test: the Node build failed; skipping the Node runs" >&2
    exit 1
  fi
  addon=$(cat node_modules/.fv-librdkafka 2>/dev/null || echo "no: not checked (run scripts/setup.sh)")
  adapters=memory,platformatic
  if [[ "$addon" == yes:* ]]; then
    adapters=memory,platformatic,confluent
  elif [[ " ${node_engines[*]} " == *" node-confluent "* ]]; then
    echo "test: SKIPPING the Node + librdkafka runs: the addon is not available (${addon#no: })"
    summary+=("node-confluent: skipped, the addon is not available (${addon#no: })")
    node_engines=("${node_engines[@]/node-confluent}")
  fi
  # The port suite: the same tests for each adapter, on Node.
  FV_TEST_ADAPTERS=$adapters node --test --test-reporter=spec .fv/node/test/kafka/*.node.js 2>&1 | tee "$log"
  if [ "${PIPESTATUS[0]}" != 0 ]; then
    status=1
    { echo "--- node port suite"; grep -aA 25 '✖' "$log" | tail -n 120; } >> "$failures"
  fi
  summary+=("node port suite ($adapters): $(grep -aE '^ℹ (pass|fail|skipped) ' "$log" | tr -s ' \n' ' ')")
  for engine in "${node_engines[@]}"; do
    [ -n "$engine" ] || continue
    for file in test/integration/*.test.ts; do
      run_bun "$engine $(basename "$file")" env FV_TEST_ENGINE="$engine" "$BUN" test --timeout 300000 "$file"
    done
  done
fi

if [ -s "$failures" ]; then
  echo
  echo "test failures (the lines before each):"
  cat "$failures"
fi
echo
echo "test summary:"
printf '  %s\n' "${summary[@]}"
exit $status
