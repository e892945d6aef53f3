#!/usr/bin/env bash
# ensure-docker.sh: make sure a Docker daemon is installed, configured and
# answering. Idempotent: if `docker info` already works it exits at once.
#
# On a fresh Debian machine (as root) it installs docker.io, writes/merges
# /etc/docker/daemon.json, starts dockerd in the background and waits for
# it to answer.
#
# gVisor is not this script's: scripts/ensure-runsc.sh (make runsc) builds
# one current runsc and registers its runtimes (runsc, runsc-net,
# runsc-build) in the same daemon.json, and this script leaves every
# runtime there as it is, so that starting dockerd again (a reboot, the
# fault suite's restart of dockerd) keeps them.
#
# Environment:
#   DOCKER_WAIT_SECONDS  how long to wait for the daemon to answer (default 60)
#   DOCKERD_LOG          where dockerd's output goes (default /var/log/dockerd.log)
#   DOCKER_DAEMON_JSON, DOCKER_PID_FILE
#                        override /etc/docker/daemon.json, /var/run/docker.pid
#                        (for testing this script)
set -euo pipefail

WAIT_SECONDS="${DOCKER_WAIT_SECONDS:-60}"
DOCKERD_LOG="${DOCKERD_LOG:-/var/log/dockerd.log}"
DAEMON_JSON="${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}"
PID_FILE="${DOCKER_PID_FILE:-/var/run/docker.pid}"

log() { printf 'ensure-docker: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

docker_ok() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }

# Fast path.
if docker_ok; then
	exit 0
fi

is_root() { [ "$(id -u)" -eq 0 ]; }
is_debian() { [ -f /etc/debian_version ] && command -v apt-get >/dev/null 2>&1; }

# Is a dockerd process running? (pgrep may be missing on minimal systems.)
dockerd_running() {
	if command -v pgrep >/dev/null 2>&1; then
		pgrep -x dockerd >/dev/null 2>&1
		return
	fi
	local c
	for c in /proc/[0-9]*/comm; do
		[ "$(cat "$c" 2>/dev/null)" = dockerd ] && return 0
	done
	return 1
}

# --- 1. Install -------------------------------------------------------------
if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
	if ! is_root || ! is_debian; then
		log "Docker is not installed and cannot be installed automatically"
		log "(automatic install needs root on Debian; uid=$(id -u), debian=$([ -f /etc/debian_version ] && echo yes || echo no))."
		command -v dockerd >/dev/null 2>&1 || log "missing: dockerd (Debian package docker.io)"
		command -v docker >/dev/null 2>&1 || log "missing: docker CLI (Debian package docker.io)"
		log "Install Docker Engine, start it, and re-run."
		exit 1
	fi
	log "installing docker.io via apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update
	apt-get install -y docker.io
fi
command -v dockerd >/dev/null 2>&1 || die "dockerd still not found after install"

# From here on we need to (re)configure or start the daemon.
if dockerd_running; then
	if [ -S /var/run/docker.sock ] && ! is_root; then
		die "dockerd is running but 'docker info' fails; are you in the 'docker' group? (uid=$(id -u)). Try: sudo usermod -aG docker \$USER, or run as root."
	fi
fi
is_root || die "dockerd is installed but not answering, and starting it needs root (uid=$(id -u))."

# --- 2. daemon.json ---------------------------------------------------------
# Merge our settings into daemon.json without clobbering anything else
# (the runtimes included: make runsc's).

py=""
for cand in /usr/bin/python3 python3; do
	if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import json' >/dev/null 2>&1; then
		py="$cand"
		break
	fi
done

mkdir -p "$(dirname "$DAEMON_JSON")"
if [ -n "$py" ]; then
	"$py" - "$DAEMON_JSON" <<'PY'
import json, os, sys
path = sys.argv[1]
cfg = {}
if os.path.exists(path) and os.path.getsize(path) > 0:
    try:
        with open(path) as f:
            cfg = json.load(f)
    except ValueError as e:
        sys.exit("ensure-docker: ERROR: %s is not valid JSON (%s); fix it by hand" % (path, e))
    if not isinstance(cfg, dict):
        sys.exit("ensure-docker: ERROR: %s is not a JSON object" % path)
orig = json.dumps(cfg, sort_keys=True)
cfg["live-restore"] = True
# Experimental mode exposes `docker checkpoint` (CRIU under runc, runsc's own
# checkpoint under gVisor), which hibernation's memory level uses.
cfg["experimental"] = True
if json.dumps(cfg, sort_keys=True) != orig:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    print("ensure-docker: updated " + path, file=sys.stderr)
PY
elif [ ! -s "$DAEMON_JSON" ]; then
	# No python3: only safe to write a fresh file.
	printf '{\n  "live-restore": true,\n  "experimental": true\n}\n' >"$DAEMON_JSON"
	log "wrote $DAEMON_JSON"
else
	log "WARNING: python3 not found; leaving existing $DAEMON_JSON untouched (cannot merge safely)"
fi

# --- 3. Start dockerd -------------------------------------------------------
start_dockerd() {
	if [ -f "$PID_FILE" ]; then
		log "removing stale $PID_FILE (no dockerd process running)"
		rm -f "$PID_FILE"
	fi
	# Prefer the init system when there is one.
	if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
		if systemctl start docker >/dev/null 2>&1; then
			log "started docker via systemctl"
			return
		fi
	fi
	mkdir -p "$(dirname "$DOCKERD_LOG")"
	log "starting dockerd in the background (log: $DOCKERD_LOG)"
	# setsid: fully detach so the daemon survives this script's session.
	if command -v setsid >/dev/null 2>&1; then
		nohup setsid dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
	else
		nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
	fi
	disown || true
}

starts=0
if dockerd_running; then
	# Running but not answering yet (e.g. still starting up, or shutting
	# down after a kill): wait, and start a new one if it goes away.
	log "dockerd process exists; waiting for it to answer"
else
	start_dockerd
	starts=1
fi

fail() {
	log "$1"
	if [ -f "$DOCKERD_LOG" ]; then
		log "last lines of $DOCKERD_LOG:"
		tail -n 40 "$DOCKERD_LOG" >&2 || true
	fi
	exit 1
}
deadline=$((SECONDS + WAIT_SECONDS))
gone=0
while ! docker_ok; do
	[ "$SECONDS" -lt "$deadline" ] || fail "dockerd did not answer within ${WAIT_SECONDS}s"
	sleep 1
	# A daemon that died (two checks in a row, to ride out start-up) is
	# started again once: the one we waited for may have been on its way out.
	if dockerd_running; then gone=0; else gone=$((gone + 1)); fi
	if [ "$gone" -ge 2 ]; then
		[ "$starts" -lt 2 ] || fail "dockerd exited before answering"
		log "dockerd is gone; starting it"
		start_dockerd
		starts=$((starts + 1))
		gone=0
	fi
done
log "docker is up ($(docker version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
