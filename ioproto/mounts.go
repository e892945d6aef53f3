package ioproto

import (
	"fmt"
	"path"
	"strings"
)

// KindMounts is the record that names mount points the host adds to a
// running sandbox's container after it started (PROTOCOL.md, *Mounts
// after start*): a warm-pool sandbox claimed with volumes, or one carried
// by a pool container. A container that restarts comes back without such
// mounts until the host adds them again, so the driver, on meeting the
// record (and again whenever it starts over on the log), waits until every
// path in Record.Mounts is a mount point before it runs any later command:
// no command runs with a volume missing, writing into the container's own
// file system instead. The last such record is the one in force: a later
// one replaces the set (a volume deleted by force is no longer waited
// for). Like an env record it has a command ID but is no command.
const KindMounts = "mounts"

// MountsRecordIDPrefix starts the command ID of the mounts records the
// host appends ("sbx-mounts-<random>").
const MountsRecordIDPrefix = "sbx-mounts-"

// MaxRecordMounts bounds a mounts record's paths (a sandbox's volumes are
// bounded far below it).
const MaxRecordMounts = 64

// MountsRecord returns the mounts record with command ID id naming paths
// (EncodeRecord validates it).
func MountsRecord(id string, paths []string) Record {
	return Record{Type: KindMounts, CommandID: id, Mounts: paths}
}

// validateMountsRecord checks a mounts record: at most MaxRecordMounts
// absolute, clean paths other than /, each at most 4096 bytes (none: no
// mount is required any more).
func (r *Record) validateMountsRecord() error {
	if len(r.Mounts) > MaxRecordMounts {
		return fmt.Errorf("%w: a mounts record names %d paths; want at most %d", ErrMalformed, len(r.Mounts), MaxRecordMounts)
	}
	for _, p := range r.Mounts {
		if len(p) > 4096 || !strings.HasPrefix(p, "/") || p == "/" || path.Clean(p) != p || strings.ContainsRune(p, 0) {
			if len(p) > 80 {
				p = p[:80] + "…"
			}
			return fmt.Errorf("%w: mount point %q: want an absolute, clean path other than /", ErrMalformed, p)
		}
	}
	return nil
}
