package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Adoption (ioproto/PROTOCOL.md, *Adoption*): a warm-pool driver whose
// container the host gives to a waking sandbox. The host stacks that
// sandbox's volumes over /io and /workspace and appends an adopt record to
// the log this driver has open (its own, now hidden). The driver then ends
// this Driver without writing anything more to /io, which is another
// sandbox's now, and Serve starts a new one on the same paths: the ordinary
// start-up on the sandbox's /io, except that the default context keeps the
// Python kernel that already imported the image's data stack.
//
// A sandbox's own code can append to its own log, so an adopt record may be
// forged. It is honoured only by a pool driver (Config.Pool), once, while
// no command is queued or running, and only when /io is no longer the
// directory the driver started on: a forged one is logged and ignored.

// adoptKernelTimeout bounds the inherited kernel's answer to its adopt
// request; past it the kernel is killed and a fresh one started.
const adoptKernelTimeout = 10 * time.Second

// adopted ends Run when the driver was adopted; it carries the default
// context's Python kernel to the next Driver.
type adopted struct {
	kernel *kernel
}

func (*adopted) Error() string { return "the driver was adopted by another sandbox's /io" }

// Serve runs the driver until ctx ends: Run, and after an adoption a new
// Driver on what /io and /workspace show then, with the kernel handed over.
func Serve(ctx context.Context, cfg Config) error {
	for {
		d, err := New(cfg)
		if err != nil {
			if cfg.inherit != nil {
				cfg.inherit.kill()
			}
			return err
		}
		err = d.Run(ctx)
		var a *adopted
		if !errors.As(err, &a) {
			return err
		}
		d.log.Info("adopted: starting over on the new /io", "kernel_pid", pidOf(a.kernel))
		// The pool sandbox's env records are not the waking sandbox's;
		// the new Driver applies those of the new log.
		restoreProcessEnv(d.baseEnv, d.env)
		cfg.inherit, cfg.Pool, cfg.ioIdentity = a.kernel, false, nil
	}
}

func pidOf(k *kernel) int {
	if k == nil {
		return 0
	}
	return k.cmd.Process.Pid
}

// adoptRecord handles an adopt record (the reader goroutine): unless it is
// refused, it detaches the kernel to hand over and ends Run.
func (d *Driver) adoptRecord(rec ioproto.Record) {
	why := d.refuseAdopt()
	if why != "" {
		d.log.Warn("adopt record ignored", "command_id", rec.CommandID, "why", why)
		return
	}
	d.mu.Lock()
	c := d.contexts[ioproto.DefaultContext]
	var k *kernel
	if c != nil && d.env.gen == 0 {
		k = c.kernels[kindPython]
		delete(c.kernels, kindPython)
	} else if c != nil {
		// It has variables of env records in this (the pool's) log, which
		// a kernel cannot be made to forget: the new driver starts one.
		d.log.Warn("adopt record: the kernel has the pool sandbox's env records' variables; it is not handed over", "command_id", rec.CommandID)
	}
	d.adoptedKernel, d.adopting = k, true
	d.mu.Unlock()
	d.log.Info("adopt record: handing the kernel over to a new driver on the new /io", "command_id", rec.CommandID, "kernel_pid", pidOf(k))
	d.stopRun()
}

// refuseAdopt says why an adopt record is not honoured now, or "".
func (d *Driver) refuseAdopt() string {
	if !d.cfg.Pool {
		return "this driver is not a warm-pool driver"
	}
	if d.cfg.ioIdentity == nil {
		return "the identity of /io at start is unknown"
	}
	if st, err := os.Stat(d.cfg.IODir); err != nil || os.SameFile(st, d.cfg.ioIdentity) {
		return "/io is still the directory this driver started on"
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.adopting {
		return "already adopted"
	}
	for id, c := range d.contexts {
		if c.running != nil || len(c.queue) > 0 || len(c.ops) > 0 {
			return "context " + id + " has work"
		}
	}
	return ""
}

// takeInherited hands c the kernel an adoption carried over, ready in c's
// directory, or nil (then a new kernel is started). Only the default
// context's Python kernel is ever inherited.
func (d *Driver) takeInherited(c *execContext, kind string) *kernel {
	if c.info.ID != ioproto.DefaultContext || kind != kindPython {
		return nil
	}
	d.mu.Lock()
	k := d.cfg.inherit
	d.cfg.inherit = nil
	d.mu.Unlock()
	if k == nil {
		return nil
	}
	if err := k.adopt(c.dir, adoptKernelTimeout); err != nil {
		d.log.Warn("the inherited kernel could not be adopted; starting a new one", "err", err)
		k.kill()
		return nil
	}
	// The driver's environment at start, which this driver shares: its
	// first request brings it the new log's env records' variables.
	k.env = nil
	return k
}

// adopt asks the kernel to start over in dir as a fresh kernel would
// (working directory, namespace, cell counter) and waits for its answer;
// output it prints meanwhile belongs to no command and is dropped. (The
// handover was first written by a helper as kernel.control, whose marker
// and eof handling this keeps.)
func (k *kernel) adopt(dir string, timeout time.Duration) error {
	id := "adopt-" + fmt.Sprint(time.Now().UnixNano())
	if err := k.send(kernelRequest{ID: id, Op: "adopt", Path: dir}); err != nil {
		return err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case m, ok := <-k.msgs:
			if !ok {
				return errors.New("the kernel closed its control channel")
			}
			if m.ID != id {
				continue
			}
			// Its output markers count as handled, or the next command's
			// output would wait for them (streamOrder).
			k.emitted = max(k.emitted, m.Sync)
			if m.Type != "done" {
				continue
			}
			if m.Status != ioproto.StatusOK {
				return fmt.Errorf("the kernel refused: %s", m.EValue)
			}
			return nil
		case it := <-k.output:
			if it.eof {
				k.streams[streamIndex(it.stream)].eof = true
			}
		case <-k.exited:
			return errors.New("the kernel exited")
		case <-t.C:
			return fmt.Errorf("no answer within %v", timeout)
		}
	}
}
