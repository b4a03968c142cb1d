#!/usr/bin/env bash
# Runs Segment's cross-SDK conformance suite (segmentio/sdk-e2e-tests, not
# public) against this SDK's e2e-cli (contract: e2e/e2e-cli/README.md).
#
#   E2E_TESTS_DIR=/path/to/sdk-e2e-tests ./e2e/e2e-cli/run-e2e.sh [extra run-tests.sh args]
#
# E2E_TESTS_DIR defaults to ../sdk-e2e-tests next to the repository root. The
# suite needs Node.js 18+; it reads e2e-config.json from this directory.
set -euo pipefail

CLI_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$CLI_DIR/../.." && pwd)"
E2E_TESTS_DIR="${E2E_TESTS_DIR:-$REPO_ROOT/../sdk-e2e-tests}"

if [ ! -d "$E2E_TESTS_DIR" ]; then
  echo "run-e2e.sh: conformance suite not found at $E2E_TESTS_DIR" >&2
  echo "run-e2e.sh: clone segmentio/sdk-e2e-tests there or set E2E_TESTS_DIR" >&2
  exit 1
fi
E2E_TESTS_DIR="$(cd "$E2E_TESTS_DIR" && pwd)"
if [ ! -x "$E2E_TESTS_DIR/scripts/run-tests.sh" ]; then
  echo "run-e2e.sh: $E2E_TESTS_DIR/scripts/run-tests.sh is missing or not executable" >&2
  exit 1
fi
if ! command -v node >/dev/null 2>&1; then
  echo "run-e2e.sh: node (Node.js 18+) is required by the suite" >&2
  exit 1
fi
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)'; then
  echo "run-e2e.sh: Node.js 18+ is required, found $(node --version)" >&2
  exit 1
fi

BIN_DIR="$(mktemp -d)"
trap 'rm -rf "$BIN_DIR"' EXIT
BIN="$BIN_DIR/e2e-cli"

echo "run-e2e.sh: building $BIN" >&2
(cd "$REPO_ROOT" && go build -o "$BIN" ./e2e/e2e-cli)

echo "run-e2e.sh: running the suite in $E2E_TESTS_DIR" >&2
cd "$E2E_TESTS_DIR"
./scripts/run-tests.sh --sdk-dir "$CLI_DIR" --cli "$BIN" "$@"
