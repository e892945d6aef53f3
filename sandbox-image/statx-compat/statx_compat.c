/*
 * statx_compat: work around gVisor releases (e.g. Debian bookworm's runsc
 * 0.0~20221219) that reject statx(2) calls carrying AT_NO_AUTOMOUNT with
 * EINVAL. Debian's coreutils 9.1 passes that flag, so under such a runsc
 * `ls`, `ls -l` and `stat` fail with "Invalid argument".
 *
 * Preloaded via /etc/ld.so.preload: overrides glibc's statx() wrapper and,
 * only when the kernel says EINVAL and AT_NO_AUTOMOUNT was set, retries
 * without the flag (which changes nothing for non-automount paths). On a
 * kernel that accepts the flag the first call succeeds and nothing differs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int statx(int dirfd, const char *restrict path, int flags, unsigned int mask,
          struct statx *restrict buf)
{
	long r = syscall(SYS_statx, dirfd, path, flags, mask, buf);
	if (r == -1 && errno == EINVAL && (flags & AT_NO_AUTOMOUNT))
		r = syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
	return (int)r;
}
