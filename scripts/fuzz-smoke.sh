#!/usr/bin/env bash
# Runs every Fuzz function of every package for FUZZ_TIME in turn (go test
# -fuzz takes one target at a time). A failing input is written under the
# package's testdata/fuzz/<target>/ and fails the run.
#
# One exception, retried once: Go 1.26's fuzz coordinator can report its own
# -fuzztime deadline as a failure ("context deadline exceeded") when a
# worker is still busy as the deadline passes, which a loaded machine makes
# likely (golang/go#75804, fixed in Go 1.27). Such a failure writes no
# input. A target that fails that way is run once more; a failure that
# wrote an input, or a second failure, fails the run.
set -uo pipefail

go_cmd="${GO:-go}"
fuzz_time="${FUZZ_TIME:-10s}"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT

inputs() { find "$1/testdata/fuzz/$2" -type f 2>/dev/null | sort; }

run_target() {
	local dir="$1" fn="$2"
	"$go_cmd" test -run '^$' -fuzz "^${fn}\$" -fuzztime "$fuzz_time" "$dir" 2>&1 | tee "$out"
	return "${PIPESTATUS[0]}"
}

for dir in $(grep -rlE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(' . | xargs -n1 dirname | sort -u); do
	for fn in $(grep -hoE '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go | sed 's/^func //'); do
		echo "fuzz-smoke: $fn ($dir) for $fuzz_time"
		before="$(inputs "$dir" "$fn")"
		if run_target "$dir" "$fn"; then
			continue
		fi
		if [ "$(inputs "$dir" "$fn")" = "$before" ] && grep -q '^    context deadline exceeded$' "$out"; then
			echo "fuzz-smoke: $fn stopped on the fuzz coordinator's own deadline with no failing input (golang/go#75804); once more"
			run_target "$dir" "$fn" && continue
		fi
		echo "fuzz-smoke: $fn FAILED" >&2
		exit 1
	done
done
