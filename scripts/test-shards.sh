#!/usr/bin/env bash
# Runs the test suite as shards: go test processes, each with a timeout of
# its own, a few at a time, and prints what each took.
#
# Why shards: the end-to-end package (e2e/) alone outgrew go test's
# per-binary timeout on a new machine (its suites against Docker and
# against Kubernetes ran one after the other in one test binary, for over
# 40 minutes). Its suites share nothing on the host (each cluster, each
# sandboxd has its own addresses, egress instance, state directory and
# containers: internal/kubetest/node, internal/nettest and
# internal/sandboxdproc hand them out to concurrent processes), so they
# run as shards beside the rest of the packages, each shard a test binary
# with its own timeout.
#
#   e2e-kube-real   TestKubeRealNode: real nodes (kubelet, containerd, CNI)
#   e2e-docker      e2e's suites against Docker but those of e2e-state
#   packages        every package but e2e (go test runs two at a time)
#   e2e-state       hibernation, fast wake, claim-then-shape crashes, snapshots, templates, webhooks
#                   and lifetimes against Docker
#   e2e-kube        TestKube (the test kubelet) and TestKubeDeployed
#
# They run SHARDS_AT_ONCE at a time (default 2), in that order (the
# longest first), the next starting as one ends: the machine this is
# sized for has two cores, and more at once only makes each slower, until
# timing-bound tests fail. Three at once (with the packages shard's own
# two binaries, up to four test binaries) passed once on a new machine
# and failed a second run on four such tests (a fairness ratio under a
# flood, a teardown within 30 s, a fork bomb's pids, a deadline's edge);
# two at once is about the load make test had as one go test run.
#
# Usage: scripts/test-shards.sh OUTDIR [SHARD...]   (default: all shards)
# Environment: GO, TEST_TIMEOUT (per shard, default 40m), SHARDS_AT_ONCE,
# TEST_SLOWEST (threshold of the slowest-tests list, default 60s),
# TEST_ARGS (more go test flags for every shard, last: e.g. -v).
#
# Each shard's go test output goes to OUTDIR/<shard>.log and its events to
# OUTDIR/<shard>.json (gotestsum's --jsonfile); each log is printed whole
# as its shard ends, so no lines interleave. Exits non-zero if any shard
# failed.
set -uo pipefail

go_cmd="${GO:-go}"
timeout="${TEST_TIMEOUT:-40m}"
slowest="${TEST_SLOWEST:-60s}"
at_once="${SHARDS_AT_ONCE:-2}"
out="${1:?usage: $0 OUTDIR [SHARD...]}"
shift
mkdir -p "$out"

all_shards=(e2e-kube-real e2e-docker packages e2e-state e2e-kube)
shards=("$@")
[ ${#shards[@]} -gt 0 ] || shards=("${all_shards[@]}")

# The Docker suites of e2e-state (the rest of e2e's Docker suites are
# e2e-docker's).
state='^TestE2E(Hibernate|FastWake|ClaimShape|SnapshotCrash|TemplateKill9|Webhooks|Lifetime)'

# shard_args prints shard $1's go test arguments, one per line.
shard_args() {
	case "$1" in
	packages) "$go_cmd" list ./... | grep -v '/e2e$' ;;
	e2e-kube-real) printf '%s\n' -run '^TestKubeRealNode$' ./e2e ;;
	e2e-kube) printf '%s\n' -run '^(TestKube|TestKubeDeployed)$' ./e2e ;;
	e2e-state) printf '%s\n' -run "$state" ./e2e ;;
	e2e-docker) printf '%s\n' -skip "^TestKube|$state" ./e2e ;;
	*)
		echo "test-shards: unknown shard $1 (have: ${all_shards[*]})" >&2
		return 2
		;;
	esac
}

declare -A pid start rc secs shard_of
# An interrupted run takes its shards with it.
trap 'kill "${pid[@]}" 2>/dev/null; echo "test-shards: interrupted" >&2; exit 130' INT TERM

launch() {
	local s="$1" args
	mapfile -t args < <(shard_args "$s") || exit 2
	[ ${#args[@]} -gt 0 ] || exit 2
	rm -f "$out/$s.log" "$out/$s.json"
	start[$s]=$(date +%s)
	"$go_cmd" tool gotestsum --format standard-quiet --jsonfile "$out/$s.json" -- \
		-count=1 -timeout "$timeout" "${args[@]}" ${TEST_ARGS:-} >"$out/$s.log" 2>&1 &
	pid[$s]=$!
	shard_of[${pid[$s]}]=$s
	echo "test-shards: $s started at $(date +%T) (timeout $timeout)"
}

queue=("${shards[@]}")
running=()
while [ ${#queue[@]} -gt 0 ] || [ ${#running[@]} -gt 0 ]; do
	while [ ${#queue[@]} -gt 0 ] && [ ${#running[@]} -lt "$at_once" ]; do
		launch "${queue[0]}"
		running+=("${pid[${queue[0]}]}")
		queue=("${queue[@]:1}")
	done
	done_pid=
	wait -n -p done_pid "${running[@]}"
	code=$?
	if [ -z "${done_pid:-}" ]; then
		echo "test-shards: wait failed (exit $code) with shards still running: ${running[*]}" >&2
		exit 2
	fi
	next=()
	for p in "${running[@]}"; do [ "$p" = "$done_pid" ] || next+=("$p"); done
	running=("${next[@]}")
	s="${shard_of[$done_pid]}"
	rc[$s]=$code
	secs[$s]=$(($(date +%s) - ${start[$s]}))
	echo "::: test shard $s: exit $code after ${secs[$s]}s"
	cat "$out/$s.log"
done

status=0
echo "test-shards: wall time per shard (at most $at_once at once)"
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
