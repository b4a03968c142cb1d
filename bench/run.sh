#!/usr/bin/env bash
# SDK comparison: ours vs segment analytics-go v3.1.0 vs posthog-go v1.5.2.
#   ./run.sh            full run: N=200000 and 1000000 ×3 runs, faults at 200000
#   QUICK=1 ./run.sh    smoke run: N=20000, 1 run, faults at 20000
# Extra arguments go to cmd/compare (see: go run ./cmd/compare -h).
set -euo pipefail
cd "$(dirname "$0")"

mkdir -p bin results
# Build first so compile time is never measured.
go build -o bin/ ./cmd/sink ./cmd/driver ./cmd/compare

if [[ "${QUICK:-0}" == "1" ]]; then
	exec ./bin/compare -n 20000 -runs 1 -fault-n 20000 "$@"
fi
exec ./bin/compare "$@"
