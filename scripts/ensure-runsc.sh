#!/usr/bin/env bash
# ensure-runsc.sh: make sure the Docker engine has gVisor's runsc registered
# twice, since the escape, fault, load, hostile-/io and network suites run
# under it too:
#
#   runsc      runsc --network=none     sealed sandboxes (no network stack)
#   runsc-net  runsc --network=sandbox  networked sandboxes: gVisor's own
#              netstack on the interface sandboxd plumbs into the sandbox's
#              network namespace (orchestrator/backend/docker/network.go)
#
# Idempotent: if `docker info` lists both runtimes it exits at once.
#
# scripts/ensure-docker.sh registers both when it installs or starts
# dockerd, but leaves an engine that already answers alone; this covers such
# an engine: install runsc (Debian package runsc) if missing, register each
# missing runtime with `runsc install` (a merge into
# /etc/docker/daemon.json) and have dockerd reload its configuration
# (SIGHUP; runtimes are reloadable; dockerd is never restarted). Needs root
# and a local dockerd.
#
# Environment:
#   RUNSC_WAIT_SECONDS  how long to wait for dockerd to list them (default 30)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'runsc: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# The runtimes the Docker engine has registered.
runtimes() { docker info --format '{{range $name, $_ := .Runtimes}}{{$name}} {{end}}'; }
# has NAME: the engine lists the runtime NAME (a whole word of runtimes).
has() { grep -qE "(^| )$1( |$)" <<<"$rts"; }

# The runtimes wanted, and gVisor's network mode for each.
declare -A network=([runsc]=none [runsc-net]=sandbox)

rts="$(runtimes)" || die "docker info failed (make docker sets up the engine, or says what is wrong)"
missing=()
for rt in runsc runsc-net; do
	has "$rt" || missing+=("$rt")
done
if [ "${#missing[@]}" -eq 0 ]; then
	echo "runsc: runsc and runsc-net registered with dockerd ($(runsc --version 2>/dev/null | sed -n 1p || echo 'runsc not on PATH'))"
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	die "dockerd lacks the runtimes ${missing[*]} (runtimes: $rts) and registering them needs root: install gVisor's runsc (Debian package runsc), run 'runsc install --runtime runsc -- --network=none' and 'runsc install --runtime runsc-net -- --network=sandbox' as root and reload dockerd (kill -HUP its pid)"
fi
if ! command -v runsc >/dev/null 2>&1; then
	scripts/ensure-debs.sh runsc runsc
fi
for rt in "${missing[@]}"; do
	runsc install --runtime "$rt" -- "--network=${network[$rt]}"
done
pid="$(pidof dockerd)" || die "no local dockerd process to reload (runtimes: $rts)"
kill -HUP "$pid"
for _ in $(seq 1 "${RUNSC_WAIT_SECONDS:-30}"); do
	rts="$(runtimes)"
	if has runsc && has runsc-net; then
		echo "runsc: registered ${missing[*]} with dockerd"
		exit 0
	fi
	sleep 1
done
die "dockerd did not pick up ${missing[*]} (runtimes: $(runtimes))"
