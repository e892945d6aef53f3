#!/usr/bin/env bash
# ensure-runsc.sh: make sure the Docker engine has gVisor registered thrice,
# since the escape, fault, load, hostile-/io and network suites run under
# it too:
#
#   runsc      Debian's runsc, --network=none: sealed sandboxes (no network
#              stack at all)
#   runsc-net  --network=sandbox: networked sandboxes, gVisor's own netstack
#              on the interface sandboxd plumbs into the sandbox's network
#              namespace (orchestrator/backend/docker/network.go)
#   runsc-build  runsc-net's binary, --network=sandbox --overlay2=none: the
#              steps of template builds, whose writes must reach the
#              container's root file system on the host to be committed
#              (that gVisor keeps a root's writes in memory by default)
#
# runsc-net is not Debian's runsc: bookworm's (2022-12) refuses
# --network=sandbox on kernels from 6.11 on, which show
# /proc/sys/net/core/rmem_default in every network namespace, the file it
# took as the mark of the host's ("cannot run with network enabled in root
# network namespace"; fixed in gVisor in 2024, issue 10704). It is built
# from gVisor's Go module at a pinned version (RUNSC_NET_VERSION), once,
# into /usr/local/lib/sandboxd/gvisor-<version>/runsc.
#
# Idempotent: when `docker info` lists all three, with that binary, it
# exits at once. Otherwise it installs Debian's runsc if missing, builds
# runsc-net's, registers what is missing with `runsc install` (a merge into
# /etc/docker/daemon.json) and has dockerd reload its configuration (SIGHUP;
# runtimes are reloadable; dockerd is never restarted). Needs root, Go and
# a local dockerd.
#
# Environment:
#   RUNSC_WAIT_SECONDS  how long to wait for dockerd to list them (default 30)
#   RUNSC_NET_VERSION   gVisor's Go module version for runsc-net
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'runsc: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

RUNSC_NET_VERSION=${RUNSC_NET_VERSION:-v0.0.0-20260905035102-160fafc42237}
net_dir=/usr/local/lib/sandboxd/gvisor-$RUNSC_NET_VERSION
net_bin=$net_dir/runsc

# The runtimes the Docker engine has registered, as "name path" lines.
runtimes() { docker info --format '{{range $name, $rt := .Runtimes}}{{$name}} {{$rt.Path}}{{"\n"}}{{end}}'; }
# registered NAME [PATH]: the engine lists NAME (with PATH).
registered() { awk -v n="$1" -v p="${2:-}" '$1 == n && (p == "" || $2 == p) { f = 1 } END { exit !f }' <<<"$rts"; }

rts="$(runtimes)" || die "docker info failed (make docker sets up the engine, or says what is wrong)"
missing=()
registered runsc || missing+=(runsc)
registered runsc-net "$net_bin" && [ -x "$net_bin" ] || missing+=(runsc-net)
registered runsc-build "$net_bin" && [ -x "$net_bin" ] || missing+=(runsc-build)
if [ "${#missing[@]}" -eq 0 ]; then
	echo "runsc: runsc ($(runsc --version 2>/dev/null | sed -n 1p || echo 'not on PATH')), runsc-net and runsc-build (gVisor $RUNSC_NET_VERSION) registered with dockerd"
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	die "dockerd lacks ${missing[*]} (runtimes: $(tr '\n' ' ' <<<"$rts")) and registering them needs root: run make runsc as root"
fi
for rt in "${missing[@]}"; do
	case $rt in
	runsc)
		command -v runsc >/dev/null 2>&1 || scripts/ensure-debs.sh runsc runsc
		runsc install --runtime runsc -- --network=none
		;;
	runsc-net)
		if [ ! -x "$net_bin" ]; then
			command -v go >/dev/null 2>&1 || die "building runsc-net needs Go (gVisor $RUNSC_NET_VERSION from the module proxy)"
			log "building gVisor's runsc $RUNSC_NET_VERSION for runsc-net (about a minute)"
			mkdir -p "$net_dir"
			GOBIN=$net_dir CGO_ENABLED=0 GOFLAGS=-mod=mod go install "gvisor.dev/gvisor/runsc@$RUNSC_NET_VERSION"
		fi
		"$net_bin" install --runtime runsc-net -- --network=sandbox
		;;
	runsc-build)
		[ -x "$net_bin" ] || die "runsc-build needs runsc-net's binary ($net_bin)"
		"$net_bin" install --runtime runsc-build -- --network=sandbox --overlay2=none
		;;
	esac
done
pid="$(pidof dockerd)" || die "no local dockerd process to reload"
kill -HUP "$pid"
for _ in $(seq 1 "${RUNSC_WAIT_SECONDS:-30}"); do
	rts="$(runtimes)"
	if registered runsc && registered runsc-net "$net_bin" && registered runsc-build "$net_bin"; then
		echo "runsc: registered ${missing[*]} with dockerd"
		exit 0
	fi
	sleep 1
done
die "dockerd did not pick up ${missing[*]} (runtimes: $(runtimes | tr '\n' ' '))"
