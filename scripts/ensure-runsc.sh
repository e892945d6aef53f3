#!/usr/bin/env bash
# ensure-runsc.sh: make sure the Docker engine has gVisor registered thrice,
# since the escape, fault, load, hostile-/io and network suites run under
# it too. The three are one runsc binary with different flags:
#
#   runsc        --network=none: sealed sandboxes (no network stack at all)
#   runsc-net    --network=sandbox: networked sandboxes, gVisor's own
#                netstack on the interface sandboxd plumbs into the
#                sandbox's network namespace
#                (orchestrator/backend/docker/network.go)
#   runsc-build  --network=sandbox --overlay2=none: the steps of template
#                builds, whose writes must reach the container's root file
#                system on the host to be committed (gVisor keeps a root's
#                writes in memory by default)
#
# each with --platform=systrap, stated rather than left to the binary's
# default: systrap intercepts system calls with seccomp's SIGSYS and a
# stub in the sandbox's own address space, where ptrace (the platform
# Debian bookworm's 2022 runsc, which runsc used to be, ran on here) stops
# the traced thread for each one: system calls cost a seventh to a tenth
# (BENCHMARKS.md, *gVisor platform*).
#
# The binary is built from gVisor's Go module at a pinned version
# (RUNSC_VERSION), once, into /usr/local/lib/sandboxd/gvisor-<version>/runsc.
# Debian's runsc is not used: bookworm's (2022-12) refuses
# --network=sandbox on kernels from 6.11 on, which show
# /proc/sys/net/core/rmem_default in every network namespace, the file it
# took as the mark of the host's ("cannot run with network enabled in root
# network namespace"; fixed in gVisor in 2024, issue 10704), and it
# has no systrap (its platforms: ptrace, kvm).
#
# Idempotent: when `docker info` lists all three with that binary and
# exactly those flags, it exits at once. Otherwise it builds the binary if
# missing, registers (or re-registers: a runsc of another path, Debian's,
# or with other flags) what differs with `runsc install` (a merge into
# /etc/docker/daemon.json that replaces the runtime's entry) and has
# dockerd reload its configuration (SIGHUP; runtimes are reloadable;
# dockerd is never restarted). Containers already running keep the runsc
# they started with; a container started after the reload (a restart, a
# wake) runs the new one. Needs root, Go and a local dockerd.
#
# Environment:
#   RUNSC_WAIT_SECONDS  how long to wait for dockerd to list them (default 30)
#   RUNSC_VERSION       gVisor's Go module version to build
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'runsc: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

RUNSC_VERSION=${RUNSC_VERSION:-v0.0.0-20260905035102-160fafc42237}
gvisor_dir=/usr/local/lib/sandboxd/gvisor-$RUNSC_VERSION
bin=$gvisor_dir/runsc

# Each runtime's flags, in the order runsc install writes them.
names=(runsc runsc-net runsc-build)
declare -A flags=(
	[runsc]="--platform=systrap --network=none"
	[runsc-net]="--platform=systrap --network=sandbox"
	[runsc-build]="--platform=systrap --network=sandbox --overlay2=none"
)

# The runtimes the Docker engine has registered, as "name path args..." lines.
runtimes() { docker info --format '{{range $name, $rt := .Runtimes}}{{$name}} {{$rt.Path}}{{range $rt.Args}} {{.}}{{end}}{{"\n"}}{{end}}'; }
# registered NAME: the engine lists NAME with the binary and its flags.
registered() { grep -qxF -- "$1 $bin ${flags[$1]}" <<<"$rts"; }
# differing: the names the engine lacks or has otherwise.
differing() {
	missing=()
	local n
	for n in "${names[@]}"; do
		registered "$n" || missing+=("$n")
	done
}

rts="$(runtimes)" || die "docker info failed (make docker sets up the engine, or says what is wrong)"
differing
if [ "${#missing[@]}" -eq 0 ] && [ -x "$bin" ]; then
	echo "runsc: runsc, runsc-net and runsc-build registered with dockerd (gVisor $RUNSC_VERSION, systrap)"
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	die "dockerd lacks ${missing[*]} as this script registers them (runtimes: $(tr '\n' ';' <<<"$rts")) and registering them needs root: run make runsc as root"
fi
if [ ! -x "$bin" ]; then
	command -v go >/dev/null 2>&1 || die "building runsc needs Go (gVisor $RUNSC_VERSION from the module proxy)"
	log "building gVisor's runsc $RUNSC_VERSION (about a minute)"
	mkdir -p "$gvisor_dir"
	GOBIN=$gvisor_dir CGO_ENABLED=0 GOFLAGS=-mod=mod go install "gvisor.dev/gvisor/runsc@$RUNSC_VERSION"
fi
for rt in "${missing[@]}"; do
	old="$(awk -v n="$rt" '$1 == n { $1 = ""; print substr($0, 2) }' <<<"$rts")"
	log "registering $rt: $bin ${flags[$rt]}${old:+ (was: $old)}"
	# shellcheck disable=SC2086 # the flags are words
	"$bin" install --runtime "$rt" -- ${flags[$rt]}
done
pid="$(pidof dockerd)" || die "no local dockerd process to reload"
kill -HUP "$pid"
for _ in $(seq 1 "${RUNSC_WAIT_SECONDS:-30}"); do
	rts="$(runtimes)"
	differing
	if [ "${#missing[@]}" -eq 0 ]; then
		echo "runsc: runsc, runsc-net and runsc-build registered with dockerd (gVisor $RUNSC_VERSION, systrap)"
		exit 0
	fi
	sleep 1
done
die "dockerd did not pick up ${missing[*]} (runtimes: $(runtimes | tr '\n' ';'))"
