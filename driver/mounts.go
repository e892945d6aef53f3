package driver

import (
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Mounts after start (ioproto/PROTOCOL.md): a mounts record names mount
// points the host added to the running container. The driver reads no
// record after it until each is a mount point, so that no command runs
// with a volume missing (a restarted container comes back without them
// until the host adds them again), and waits again for each such record
// before its saved offset when it starts over on the log.

// Defaults of Config.MountsWait and the poll between checks.
const (
	defaultMountsWait = 60 * time.Second
	mountsPoll        = 10 * time.Millisecond
)

// awaitPendingMounts waits for the mounts record in force when the driver
// started over on the log (the last before its offset), once, before the
// first command after the offset: a newer record read before that command
// replaces it.
func (d *Driver) awaitPendingMounts() {
	if d.pendingMounts == nil {
		return
	}
	rec := *d.pendingMounts
	d.pendingMounts = nil
	d.awaitMounts(rec)
}

// awaitMounts waits, at most Config.MountsWait, until every path of the
// mounts record rec is a mount point, and logs what is still missing
// after that.
func (d *Driver) awaitMounts(rec ioproto.Record) {
	deadline := time.Now().Add(d.cfg.MountsWait)
	logged := false
	for {
		missing := d.missingMounts(rec.Mounts)
		if len(missing) == 0 {
			if logged {
				d.log.Info("mounts record: every mount point is there; going on", "command_id", rec.CommandID)
			}
			return
		}
		if time.Now().After(deadline) {
			d.log.Warn("mounts record: mount points still missing; going on without them", "command_id", rec.CommandID,
				"missing", strings.Join(missing, ","), "waited", d.cfg.MountsWait)
			return
		}
		if !logged {
			d.log.Info("mounts record: waiting for the host to mount", "command_id", rec.CommandID, "missing", strings.Join(missing, ","))
			logged = true
		}
		time.Sleep(mountsPoll)
	}
}

// missingMounts lists the paths that are not mount points (or cannot be
// told to be).
func (d *Driver) missingMounts(paths []string) []string {
	var missing []string
	for _, p := range paths {
		if ok, err := d.cfg.Mounted(p); err != nil || !ok {
			missing = append(missing, p)
		}
	}
	return missing
}

// isMountPoint is Config.Mounted's default: the kernel's view of this
// process's mount namespace.
func isMountPoint(path string) (bool, error) { return mountinfo.Mounted(path) }
