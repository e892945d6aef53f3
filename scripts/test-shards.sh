#!/usr/bin/env bash
# Runs the test suite as shards, several go test processes side by side,
# each with a timeout of its own, and prints what each took.
#
# Why shards: the end-to-end package (e2e/) alone outgrew go test's
# per-binary timeout on a new machine (its suites against Docker and its
# suites against Kubernetes ran one after the other in one test binary, for
# over 40 minutes), and most of its time is spent waiting: for containers,
# for kubelets, for idle timers and node-loss graces. Its Kubernetes suites
# and its Docker suites share nothing on the host (each cluster, each
# sandboxd has its own addresses, egress instance, state directory and
# containers: internal/kubetest/node and internal/nettest hand them out to
# concurrent processes), so they run as two shards beside the rest of the
# packages.
#
#   packages    every package but e2e (go test runs two at a time)
#   e2e-kube    e2e's Kubernetes suites: TestKube*
#   e2e-docker  the rest of e2e
#
# Usage: scripts/test-shards.sh OUTDIR [SHARD...]   (default: all shards)
# Environment: GO, TEST_TIMEOUT (per shard, default 40m), TEST_SLOWEST
# (threshold of the slowest-tests list, default 60s), TEST_ARGS (more go
# test flags for every shard, last: e.g. -v, or -run to try the script).
#
# Each shard's go test output goes to OUTDIR/<shard>.log and its events to
# OUTDIR/<shard>.json (gotestsum's --jsonfile); the logs are printed whole,
# one shard after another, as each shard ends, so no lines interleave.
# Exits non-zero if any shard failed.
set -uo pipefail

go_cmd="${GO:-go}"
timeout="${TEST_TIMEOUT:-40m}"
slowest="${TEST_SLOWEST:-60s}"
out="${1:?usage: $0 OUTDIR [SHARD...]}"
shift
mkdir -p "$out"

all_shards=(packages e2e-kube e2e-docker)
shards=("$@")
[ ${#shards[@]} -gt 0 ] || shards=("${all_shards[@]}")

# shard_args prints shard $1's go test arguments, one per line.
shard_args() {
	case "$1" in
	packages) "$go_cmd" list ./... | grep -v '/e2e$' ;;
	e2e-kube) printf '%s\n' -run '^TestKube' ./e2e ;;
	e2e-docker) printf '%s\n' -skip '^TestKube' ./e2e ;;
	*)
		echo "test-shards: unknown shard $1 (have: ${all_shards[*]})" >&2
		return 2
		;;
	esac
}

declare -A pid start rc secs
# An interrupted run takes its shards with it.
trap 'kill "${pid[@]}" 2>/dev/null; echo "test-shards: interrupted" >&2; exit 130' INT TERM
for s in "${shards[@]}"; do
	mapfile -t args < <(shard_args "$s") || exit 2
	[ ${#args[@]} -gt 0 ] || exit 2
	rm -f "$out/$s.log" "$out/$s.json"
	start[$s]=$(date +%s)
	"$go_cmd" tool gotestsum --format standard-quiet --jsonfile "$out/$s.json" -- \
		-count=1 -timeout "$timeout" "${args[@]}" ${TEST_ARGS:-} >"$out/$s.log" 2>&1 &
	pid[$s]=$!
	echo "test-shards: $s started (pid ${pid[$s]}, timeout $timeout)"
done

# Wait for the shards in the order they end, printing each log whole.
declare -A shard_of
for s in "${shards[@]}"; do shard_of[${pid[$s]}]=$s; done
running=("${pid[@]}")
while [ ${#running[@]} -gt 0 ]; do
	done_pid=
	wait -n -p done_pid "${running[@]}"
	code=$?
	if [ -z "${done_pid:-}" ]; then
		echo "test-shards: wait failed (exit $code) with shards still running: ${running[*]}" >&2
		exit 2
	fi
	s="${shard_of[$done_pid]}"
	next=()
	for p in "${running[@]}"; do [ "$p" = "$done_pid" ] || next+=("$p"); done
	running=("${next[@]}")
	rc[$s]=$code
	secs[$s]=$(($(date +%s) - ${start[$s]}))
	echo "::: test shard $s: exit $code after ${secs[$s]}s"
	cat "$out/$s.log"
done

status=0
echo "test-shards: wall time per shard"
for s in "${shards[@]}"; do
	mark=ok
	[ "${rc[$s]}" -eq 0 ] || { mark=FAIL; status=1; }
	printf '    %-4s %6ss  %s\n' "$mark" "${secs[$s]}" "$s"
done
echo "test-shards: tests slower than $slowest"
for s in "${shards[@]}"; do
	"$go_cmd" tool gotestsum tool slowest --jsonfile "$out/$s.json" --threshold "$slowest" 2>/dev/null |
		sed "s/^/    [$s] /"
done
exit "$status"
