package driver

import (
	"context"
	"os"
	"path/filepath"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Hibernation (ioproto/PROTOCOL.md, *Hibernation*): the host asks, with a
// snapshot record queued in the default context, that the Python kernel's
// globals be saved into /io/hibernate/<name>, then removes the container.
// A woken sandbox's log gets a restore record first: the fresh kernel
// loads them back (level globals), or, with level files, nothing is loaded
// and the next command reports the globals lost. Either way the next exec
// of the default context carries the outcome in its started event (wake).

// snapshotPath is where snapshot file name lives inside the container.
func snapshotPath(ioDir, name string) string {
	return filepath.Join(ioDir, ioproto.HibernateDir, name)
}

// runHib runs a snapshot or restore record in context c (the default one).
func (d *Driver) runHib(ctx context.Context, c *execContext, q queued, ev *eventsFile, intr <-chan struct{}) outcome {
	rec := q.rec
	if rec.Type == ioproto.KindRestore && rec.Level == ioproto.LevelMemory {
		// The runtime restored this very process tree from its checkpoint:
		// every interpreter is as it was.
		res := &ioproto.HibResult{Level: ioproto.LevelMemory, Reason: "every process was checkpointed and restored as it was"}
		d.setWake(c, res, true)
		return outcome{status: ioproto.StatusOK, hib: res}
	}
	if rec.Type == ioproto.KindRestore && rec.Level == ioproto.LevelFiles {
		res := &ioproto.HibResult{Level: ioproto.LevelFiles, Reason: "the sandbox was hibernated with level files: /workspace is kept, the Python globals are gone"}
		d.setWake(c, res, false)
		return outcome{status: ioproto.StatusOK, hib: res}
	}
	if rec.Type == ioproto.KindSnapshot {
		if err := os.MkdirAll(filepath.Join(d.cfg.IODir, ioproto.HibernateDir), 0o755); err != nil {
			return outcome{status: ioproto.StatusError, reason: "create the snapshot directory: " + err.Error(),
				hib: &ioproto.HibResult{Level: ioproto.LevelFiles, Reason: err.Error()}}
		}
	}
	res := d.runKernel(ctx, c, q, ev, intr)
	if ctx.Err() != nil && res.status == "" {
		return res
	}
	if res.hib == nil || res.status != ioproto.StatusOK || res.hib.Level != ioproto.LevelGlobals {
		why := res.reason
		if res.hib != nil && res.hib.Reason != "" {
			why = joinReason(why, res.hib.Reason)
		}
		res.hib = &ioproto.HibResult{Level: ioproto.LevelFiles, Reason: joinReason(rec.Type+" of the Python globals failed", why)}
		if res.status == ioproto.StatusOK {
			res.status = ioproto.StatusError
		}
	}
	if rec.Type == ioproto.KindRestore {
		d.setWake(c, res.hib, res.hib.Level == ioproto.LevelGlobals)
	}
	return res
}

// setWake records how a restore brought the state back, for the context's
// next exec. restored clears the Python kernel's "state lost" notice that
// the container's restart left (the globals are back); otherwise the notice
// says why they are gone. Other kernels' globals (JavaScript, R, Java) are
// never kept: they stay reported as lost, and are listed here too.
func (d *Driver) setWake(c *execContext, res *ioproto.HibResult, restored bool) {
	w := *res
	for kind, why := range c.lostReasons {
		if kind == kindPython {
			continue
		}
		w.Lost = append(w.Lost, ioproto.LostName{Name: "(" + kind + " globals)", Why: why})
	}
	if restored {
		delete(c.lostReasons, kindPython)
	} else {
		c.lostReasons[kindPython] = joinReason(res.Reason, "Python globals defined before are gone")
	}
	d.mu.Lock()
	c.pendingWake = &w
	d.mu.Unlock()
}
