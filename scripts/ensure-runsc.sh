#!/usr/bin/env bash
# ensure-runsc.sh: make sure the Docker engine has gVisor's runsc registered,
# since the escape, fault, load and hostile-/io suites run under it too.
# Idempotent: if `docker info` lists the runtime it exits at once.
#
# scripts/ensure-docker.sh registers runsc when it installs or starts
# dockerd, but leaves an engine that already answers alone; this covers such
# an engine: install runsc (Debian package runsc) if missing, register it
# with `runsc install` (a merge into /etc/docker/daemon.json) and have
# dockerd reload its configuration (SIGHUP; runtimes are reloadable; dockerd
# is not restarted). Needs root and a local dockerd.
#
# Environment:
#   RUNSC_WAIT_SECONDS  how long to wait for dockerd to list runsc (default 30)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'runsc: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# The runtimes the Docker engine has registered.
runtimes() { docker info --format '{{range $name, $_ := .Runtimes}}{{$name}} {{end}}'; }

rts="$(runtimes)" || die "docker info failed (make docker sets up the engine, or says what is wrong)"
if grep -qw runsc <<<"$rts"; then
	echo "runsc: registered with dockerd ($(runsc --version 2>/dev/null | sed -n 1p || echo 'runsc not on PATH'))"
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	die "dockerd has no runsc runtime (runtimes: $rts) and registering one needs root: install gVisor's runsc (Debian package runsc), run 'runsc install --runtime runsc -- --network=none' as root and reload dockerd (kill -HUP its pid)"
fi
if ! command -v runsc >/dev/null 2>&1; then
	scripts/ensure-debs.sh runsc runsc
fi
runsc install --runtime runsc -- --network=none
pid="$(pidof dockerd)" || die "no local dockerd process to reload (runtimes: $rts)"
kill -HUP "$pid"
for _ in $(seq 1 "${RUNSC_WAIT_SECONDS:-30}"); do
	if runtimes | grep -qw runsc; then
		echo "runsc: registered with dockerd"
		exit 0
	fi
	sleep 1
done
die "dockerd did not pick up the runsc runtime (runtimes: $(runtimes))"
