#!/usr/bin/env bash
# ensure-debs.sh: make sure Debian packages are installed. Idempotent: the
# packages dpkg already lists as installed are left alone, and with none
# missing it exits at once without touching apt.
#
#   scripts/ensure-debs.sh [--no-install-recommends] WHAT PACKAGE...
#
# WHAT names the caller (a make target) in messages. Installing needs root
# and apt-get; without them it fails, naming the packages to install.
# apt-get waits up to APT_LOCK_SECONDS (default 300) for another apt or dpkg
# run to release its lock rather than failing at once.
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
for p in "$@"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ "${#missing[@]}" -gt 0 ] || exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "$what: missing Debian packages: ${missing[*]}" >&2
	echo "$what: installing them needs root and apt-get (uid=$(id -u), apt-get: $(command -v apt-get || echo none));" \
		"install them by hand (apt-get install ${recommends[*]:+${recommends[*]} }${missing[*]}) and re-run" >&2
	exit 1
fi

echo "$what: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
lock=(-o "DPkg::Lock::Timeout=${APT_LOCK_SECONDS:-300}")
apt-get "${lock[@]}" update -qq
apt-get "${lock[@]}" install -y -qq "${recommends[@]}" "${missing[@]}" >/dev/null
