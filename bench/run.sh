#!/usr/bin/env bash
# SDK comparison: ours vs segment analytics-go v3.1.0 vs posthog-go v1.5.2.
#   ./run.sh                    classic table (N=200000 and 1000000 ×3 runs, faults at 200000)
#                               and the scenario tables (paced 20 000 ev/s under 500/lostack/429,
#                               flat out clean vs 500, 30 s outage); ~16 min on 2 cores
#   ./run.sh -classic=false     the scenario tables only (~6 min)
#   QUICK=1 ./run.sh            smoke run of everything at small sizes (≤ 2 min)
# Extra arguments go to cmd/compare (see: ./bin/compare -h).
set -euo pipefail
cd "$(dirname "$0")"

mkdir -p bin results
# Build first so compile time is never measured.
go build -o bin/ ./cmd/sink ./cmd/driver ./cmd/compare

if [[ "${QUICK:-0}" == "1" ]]; then
	exec ./bin/compare -n 20000 -runs 1 -faults 500 -fault-n 20000 \
		-paced-n 40000 -flat-n 20000 -flat-runs 1 -outage 5s -outage-after 1s -outage-tail 2s "$@"
fi
exec ./bin/compare "$@"
