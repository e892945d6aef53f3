#!/usr/bin/env bash
# ensure-debs.sh: make sure Debian packages are installed. Idempotent: the
# packages dpkg already lists as installed are left alone, and with none
# missing it exits at once without touching apt.
#
#   scripts/ensure-debs.sh [--no-install-recommends] WHAT PACKAGE...
#
# WHAT names the caller (a make target) in messages. Installing needs root
# and apt-get; without them it fails, naming the packages to install.
# Installs are serialized among themselves (flock), so that targets run by
# make -j do not run apt-get at once, and apt-get install waits up to
# APT_LOCK_SECONDS (default 300) for another dpkg run to release its lock
# (apt-get update does not wait: it fails if another update holds the lists).
set -euo pipefail

recommends=()
if [ "${1:-}" = --no-install-recommends ]; then
	recommends=(--no-install-recommends)
	shift
fi
[ "$#" -ge 2 ] || { echo "usage: $0 [--no-install-recommends] WHAT PACKAGE..." >&2; exit 2; }
what="$1"
shift

missing=()
find_missing() {
	missing=()
	local p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
}
find_missing "$@"
[ "${#missing[@]}" -gt 0 ] || exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "$what: missing Debian packages: ${missing[*]}" >&2
	echo "$what: installing them needs root and apt-get (uid=$(id -u), apt-get: $(command -v apt-get || echo none));" \
		"install them by hand (apt-get install ${recommends[*]:+${recommends[*]} }${missing[*]}) and re-run" >&2
	exit 1
fi

exec 9>"${TMPDIR:-/tmp}/sandboxd-ensure-debs.lock"
flock 9
find_missing "$@" # again: another run may have installed them meanwhile
[ "${#missing[@]}" -gt 0 ] || exit 0
echo "$what: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get -o "DPkg::Lock::Timeout=${APT_LOCK_SECONDS:-300}" install -y -qq "${recommends[@]}" "${missing[@]}" >/dev/null
