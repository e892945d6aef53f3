#!/usr/bin/env bash
# build-base-image.sh: build the sandbox base image (a minimal Debian bookworm
# root filesystem) offline with debootstrap and `docker import` it. No
# container registry is involved.
#
# Does nothing if the image already exists (set FORCE=1 to rebuild).
#
# The Debian mirror is never hard-coded: it is read from the host's apt
# sources (deb822 /etc/apt/sources.list.d/*.sources or one-line
# /etc/apt/sources.list). Override with DEBIAN_MIRROR / DEBIAN_SECURITY_MIRROR.
#
# Environment:
#   BASE_IMAGE              image to create (default sandboxd-base:bookworm)
#   SUITE                   Debian suite (default bookworm)
#   DEBIAN_MIRROR           mirror URI for $SUITE and $SUITE-updates
#   DEBIAN_SECURITY_MIRROR  mirror URI for $SUITE-security ("none" to omit)
#   BASE_INCLUDE            extra packages for debootstrap (default python3)
#   FORCE=1                 rebuild even if the image exists
set -euo pipefail

BASE_IMAGE="${BASE_IMAGE:-sandboxd-base:bookworm}"
SUITE="${SUITE:-bookworm}"
BASE_INCLUDE="${BASE_INCLUDE-python3}"

log() { printf 'build-base-image: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [ "${FORCE:-0}" != 1 ] && docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
	log "$BASE_IMAGE already present; nothing to do"
	exit 0
fi

[ "$(id -u)" -eq 0 ] || die "debootstrap needs root (uid=$(id -u))"

# find_mirror SUITE: print the first URI the host's apt sources use for SUITE.
find_mirror() {
	local want="$1" f
	# deb822 stanzas.
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk -v want="$want" '
			function flush() {
				if (types ~ /(^|[ \t])deb([ \t]|$)/ && enabled != "no" && uri != "") {
					n = split(suites, s, /[ \t]+/)
					for (i = 1; i <= n; i++) if (s[i] == want) { print uri; found = 1; exit }
				}
				types = ""; suites = ""; uri = ""; enabled = ""
			}
			/^[ \t]*#/ { next }
			/^[ \t]*$/ { flush(); next }
			{
				line = $0
				key = tolower(line); sub(/:.*/, "", key); gsub(/[ \t]/, "", key)
				val = line; sub(/^[^:]*:[ \t]*/, "", val); sub(/[ \t]+$/, "", val)
				if (key == "types") types = val
				else if (key == "suites") suites = val
				else if (key == "enabled") enabled = tolower(val)
				else if (key == "uris") { split(val, u, /[ \t]+/); uri = u[1] }
			}
			END { if (!found) flush() }
		' "$f" | head -n1
	done
	# One-line format.
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		awk -v want="$want" '
			$1 != "deb" { next }
			{
				i = 2
				if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
				if ($(i + 1) == want) { print $i; exit }
			}
		' "$f"
	done
}

MIRROR="${DEBIAN_MIRROR:-$(find_mirror "$SUITE" | head -n1)}"
[ -n "$MIRROR" ] || die "could not find a Debian mirror for '$SUITE' in /etc/apt/sources.list{,.d/}; set DEBIAN_MIRROR"
UPDATES_MIRROR="$(find_mirror "$SUITE-updates" | head -n1)"
[ -n "$UPDATES_MIRROR" ] || UPDATES_MIRROR="$MIRROR"
SECURITY_MIRROR="${DEBIAN_SECURITY_MIRROR:-$(find_mirror "$SUITE-security" | head -n1)}"
[ "$SECURITY_MIRROR" = none ] && SECURITY_MIRROR=""
log "mirror: $MIRROR (updates: $UPDATES_MIRROR, security: ${SECURITY_MIRROR:-none})"

if ! command -v debootstrap >/dev/null 2>&1 || [ ! -f /usr/share/keyrings/debian-archive-keyring.gpg ]; then
	# Through ensure-debs.sh, which takes the lock every apt-get of the
	# scripts takes: .ci/run builds this image beside the other steps.
	"$(dirname "$0")/ensure-debs.sh" --no-install-recommends build-base-image debootstrap debian-archive-keyring ||
		die "debootstrap is missing and could not be installed"
fi

# Not /tmp: it may be a small or nodev/noexec tmpfs.
WORK="$(mktemp -d /var/tmp/sandboxd-base.XXXXXX)"
ROOTFS="$WORK/rootfs"
cleanup() {
	# debootstrap may leave /proc, /sys, ... mounted if it failed midway.
	local m
	if [ -r /proc/mounts ]; then
		awk -v p="$WORK/" 'index($2, p) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do
			umount -l "$m" 2>/dev/null || true
		done
	fi
	rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT

start=$SECONDS
log "debootstrap --variant=minbase $SUITE (this takes about a minute)"
inc=()
[ -n "$BASE_INCLUDE" ] && inc=("--include=$BASE_INCLUDE")
if ! debootstrap --variant=minbase "${inc[@]}" "$SUITE" "$ROOTFS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1; then
	tail -n 40 "$WORK/debootstrap.log" >&2
	[ -f "$ROOTFS/debootstrap/debootstrap.log" ] && tail -n 40 "$ROOTFS/debootstrap/debootstrap.log" >&2
	die "debootstrap failed"
fi

# apt sources inside the image: same mirrors as the host.
{
	echo "deb $MIRROR $SUITE main"
	echo "deb $UPDATES_MIRROR $SUITE-updates main"
	[ -n "$SECURITY_MIRROR" ] && echo "deb $SECURITY_MIRROR $SUITE-security main"
} >"$ROOTFS/etc/apt/sources.list"

# Container-friendly tweaks (as Debian's official images do).
cat >"$ROOTFS/usr/sbin/policy-rc.d" <<'EOF'
#!/bin/sh
# Never start services during package installation inside a container image.
exit 101
EOF
chmod 0755 "$ROOTFS/usr/sbin/policy-rc.d"

cat >"$ROOTFS/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
cat >"$ROOTFS/etc/apt/apt.conf.d/docker-no-languages" <<'EOF'
Acquire::Languages "none";
EOF
cat >"$ROOTFS/etc/apt/apt.conf.d/docker-no-recommends" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
EOF
# Keep documentation out of the image (keeps copyright files).
cat >"$ROOTFS/etc/dpkg/dpkg.cfg.d/docker-excludes" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF

# Drop caches and host-specific files.
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin \
	"$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/log/*.log \
	"$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* \
	"$ROOTFS"/debootstrap
find "$ROOTFS/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$ROOTFS/usr/share/doc" -mindepth 1 -type d -empty -delete
: >"$ROOTFS/etc/resolv.conf"
: >"$ROOTFS/etc/hostname"
rm -f "$ROOTFS/etc/machine-id" && : >"$ROOTFS/etc/machine-id"

log "importing as $BASE_IMAGE"
tar --numeric-owner --xattrs -C "$ROOTFS" -c . | docker import \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'ENV LANG=C.UTF-8' \
	--change 'CMD ["/bin/bash"]' \
	--message "debootstrap --variant=minbase $SUITE" \
	- "$BASE_IMAGE" >/dev/null
log "built $BASE_IMAGE in $((SECONDS - start))s ($(docker image inspect -f '{{.Size}}' "$BASE_IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"
