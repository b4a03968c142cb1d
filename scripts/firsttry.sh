#!/usr/bin/env bash
# Lists the library files one batch runs through when it is delivered on its
# first try: scripts/firsttry.go, built with coverage, writes the counters just
# before and just after the delivery, and every file with a block that ran in
# between is printed with the number of such blocks.
set -euo pipefail
cd "$(dirname "$0")/.."
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/before" "$t/after"
go build -cover -covermode=atomic -coverpkg=./... -o "$t/firsttry" scripts/firsttry.go
mkdir -p "$t/exit"; GOCOVERDIR="$t/exit" "$t/firsttry" "$t/before" "$t/after"
go tool covdata textfmt -i="$t/before" -o "$t/before.txt"
go tool covdata textfmt -i="$t/after" -o "$t/after.txt"
if [ -n "${FIRSTTRY_KEEP:-}" ]; then cp "$t/before.txt" "$t/after.txt" "$FIRSTTRY_KEEP"; fi
mod=$(go list -m)
awk -v mod="$mod/" '
	FNR == 1 { f++; next }
	{ key = $1; if (f == 1) b[key] += $NF; else a[key] += $NF }
	END {
		for (k in a) if (a[k] > b[k]) { split(k, p, ":"); file = p[1]; if (index(file, mod) != 1) continue; sub(mod, "", file); hits[file]++ }
		for (file in hits) printf "%4d %s\n", hits[file], file
	}' "$t/before.txt" "$t/after.txt" | sort -k2
