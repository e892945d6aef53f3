package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Contexts (ioproto/context.go, PROTOCOL.md "Contexts"): each context has
// its own queue, running command, interpreter and executor goroutine, so
// commands of one context run one at a time in log order while different
// contexts run in parallel. The reader goroutine (handleLine) routes exec
// records to their context's queue and acts on context records at once;
// what needs the context's interpreter (restart, delete) it hands to the
// context's executor, which answers the record once done.
//
// The default context exists in every sandbox and behaves as the driver did
// before contexts: Python kernel warm at start, Python and bash commands in
// one queue, working directory /workspace.
//
// /io/contexts.json is the durable list of contexts: it is written, under
// d.mu, before the done event of every context record that changes it, and
// a restarted driver rebuilds its contexts from it (their interpreters are
// fresh: the next Python command of each reports state_lost). The log alone
// could not rebuild them: whether a create succeeded depends on the file
// system at the time (its cwd had to exist).

// execContext is one context.
type execContext struct {
	info ioproto.ContextInfo
	// dir is the absolute working directory.
	dir string
	// The fields below are guarded by d.mu.
	queue   []queued
	running *running
	// ops are context records for the executor (restart, delete), each
	// with its events file (started written).
	ops []contextOpTask
	// deleted is set by a delete record; the executor then ends.
	deleted bool
	// kernels holds the context's running kernel of each kind
	// (kernelKind): written by the executor under d.mu; the reader
	// goroutine reads it under d.mu to kill them on restart and delete.
	// A created context has at most its language's kernel; the default
	// context starts one per kind at that kind's first command (Python's at
	// once).
	kernels map[string]*kernel
	// work wakes the executor.
	work chan struct{}

	// lostReasons, the executor's, by kernel kind, is reported with the
	// context's next command of that kind: the globals the caller built
	// before are gone.
	lostReasons map[string]string
	// pendingWake (d.mu) is how a restore record brought the state back,
	// put in the started event of the context's next exec (hibernate.go).
	pendingWake *ioproto.HibResult
}

type contextOpTask struct {
	rec ioproto.Record
	ev  *eventsFile
}

func newExecContext(info ioproto.ContextInfo, workspace string) *execContext {
	return &execContext{info: info, dir: filepath.Join(workspace, filepath.FromSlash(info.Cwd)), work: make(chan struct{}, 1),
		kernels: map[string]*kernel{}, lostReasons: map[string]string{}}
}

// poke wakes the context's executor.
func (c *execContext) poke() {
	select {
	case c.work <- struct{}{}:
	default:
	}
}

// warm reports whether the context keeps an interpreter ready between
// commands: that of its language (Python for the default context).
func (c *execContext) warm() bool { return kernelKind(c.info.Language) != "" }

// accepts reports why an exec of language lang cannot run in c, or "".
// The default context runs every language, as before contexts; a created
// context runs its own language, and bash (a fresh shell in its directory).
func (c *execContext) accepts(lang string) string {
	if c.info.ID == ioproto.DefaultContext || lang == c.info.Language || lang == ioproto.LanguageBash {
		return ""
	}
	return fmt.Sprintf("context %s runs %s, not %s", c.info.ID, c.info.Language, lang)
}

// setKernel publishes c's kernel of kind (nil: none); the default
// context's Python kernel also goes in /io/driver.json as before contexts.
func (d *Driver) setKernel(c *execContext, kind string, k *kernel) {
	d.mu.Lock()
	if k == nil {
		delete(c.kernels, kind)
	} else {
		c.kernels[kind] = k
	}
	d.mu.Unlock()
	if k != nil && kind == kindPython && c.info.ID == ioproto.DefaultContext {
		d.updateStatus(func(s *ioproto.DriverStatus) { s.KernelPID = k.cmd.Process.Pid })
	}
}

// killKernels ends every kernel of c. Only c's executor calls it.
func (d *Driver) killKernels(c *execContext) {
	d.mu.Lock()
	ks := c.kernels
	c.kernels = map[string]*kernel{}
	d.mu.Unlock()
	for _, k := range ks {
		k.kill()
	}
}

// contextForLocked returns the context an exec record runs in, or nil and
// the reason it cannot run. d.mu is held.
func (d *Driver) contextForLocked(rec ioproto.Record) (*execContext, string) {
	id := cmpOr(rec.ContextID, ioproto.DefaultContext)
	c := d.contexts[id]
	if c == nil {
		return nil, fmt.Sprintf("unknown context %s (never created, or deleted)", id)
	}
	if why := c.accepts(rec.Language); why != "" {
		return nil, why
	}
	return c, ""
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// recoverContexts rebuilds the contexts at start-up from /io/contexts.json
// (the default one always exists). used, when the sandbox restarted since
// commands ran, gives the kernel kinds each context's commands used: the
// context's next command of such a kind reports that its globals are gone.
func (d *Driver) recoverContexts(used map[string]map[string]bool) {
	var list ioproto.Contexts
	path := filepath.Join(d.cfg.IODir, ioproto.ContextsFile)
	if st, err := os.Stat(path); err == nil && st.Size() > ioproto.MaxContextsFileBytes {
		d.log.Error("contexts file too large; only the default context is kept", "bytes", st.Size())
	} else if err := ioproto.ReadJSONFile(path, &list); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.log.Error("unreadable contexts file; only the default context is kept", "err", err)
		list = ioproto.Contexts{}
	}
	def := ioproto.ContextInfo{ID: ioproto.DefaultContext, Language: ioproto.LanguagePython, Cwd: ".", CreatedAt: d.status.StartedAt}
	for _, ci := range list.Contexts {
		if ci.ID == ioproto.DefaultContext && !ci.CreatedAt.IsZero() {
			def.CreatedAt = ci.CreatedAt
		}
	}
	d.contexts[def.ID] = newExecContext(def, d.cfg.Workspace)
	for _, ci := range list.Contexts {
		probe := ioproto.Record{Type: ioproto.KindContext, CommandID: "recover", Op: ioproto.ContextCreate, ContextID: ci.ID, Language: ci.Language, Cwd: ci.Cwd}
		if err := probe.Validate(); err != nil || d.contexts[ci.ID] != nil || len(d.contexts) > ioproto.MaxContexts {
			if ci.ID != ioproto.DefaultContext {
				d.log.Warn("contexts file: entry dropped", "context_id", ci.ID, "err", err)
			}
			continue
		}
		ci.Cwd = probe.Cwd
		d.contexts[ci.ID] = newExecContext(ci, d.cfg.Workspace)
	}
	for id, kinds := range used {
		c := d.contexts[id]
		if c == nil {
			continue
		}
		for kind := range kinds {
			if spec := kernelSpecs[kind]; spec != nil {
				c.lostReasons[kind] = "the sandbox restarted since the previous command; " + spec.display + " globals defined before are gone"
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writeContextsLocked()
}

// writeContextsLocked publishes the contexts in /io/contexts.json, oldest
// first. d.mu is held, so writes do not overtake each other.
func (d *Driver) writeContextsLocked() error {
	list := ioproto.Contexts{Version: 1, Contexts: []ioproto.ContextInfo{}}
	for _, c := range d.contexts {
		list.Contexts = append(list.Contexts, c.info)
	}
	slices.SortFunc(list.Contexts, func(a, b ioproto.ContextInfo) int {
		if a.ID == ioproto.DefaultContext || b.ID == ioproto.DefaultContext {
			return boolInt(b.ID == ioproto.DefaultContext) - boolInt(a.ID == ioproto.DefaultContext)
		}
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	err := ioproto.WriteJSONFileAtomic(filepath.Join(d.cfg.IODir, ioproto.ContextsFile), list, 0o644)
	if err != nil {
		d.log.Error("write contexts file", "err", err)
	}
	return err
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// startExecutors starts the executors of the contexts known at start-up.
func (d *Driver) startExecutors(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runCtx = ctx
	for _, c := range d.contexts {
		d.startExecutorLocked(c)
	}
}

func (d *Driver) startExecutorLocked(c *execContext) {
	d.executors.Add(1)
	ctx := d.runCtx
	go func() {
		defer d.executors.Done()
		d.execute(ctx, c)
	}()
}

// execute runs c's queued commands one at a time, and the context records
// handed to it, until ctx is cancelled or c is deleted.
func (d *Driver) execute(ctx context.Context, c *execContext) {
	if c.warm() {
		_, _ = d.ensureKernel(c, c.info.Language, d.envForNext(c))
	}
	defer d.killKernels(c)
	for {
		if d.runContextOps(c) {
			return
		}
		if !d.hasQueued(c) {
			select {
			case <-ctx.Done():
				return
			case <-c.work:
			}
			continue
		}
		// Room first: pruning, the next command's caps, or the verdict
		// that /io is too full to run it.
		lim, ok, why := d.makeRoom()
		q, ev, run := d.take(c, lim, ok, why)
		if ev == nil {
			d.releaseRoom(lim)
			continue
		}
		d.run(ctx, c, q, ev, run.interrupt)
		ev.close()
		d.noteFinished(ev)
		d.releaseRoom(lim)
		d.mu.Lock()
		c.running = nil
		pending := len(c.ops) > 0
		d.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if kind := kernelKind(q.rec.Language); kind != "" && !pending && d.kernelOf(c, kind) == nil && slices.Contains(d.launcher.languages, q.rec.Language) {
			// The command cost its kernel; have the next one ready.
			_, _ = d.ensureKernel(c, q.rec.Language, d.envForNext(c))
		}
		d.prune()
	}
}

func (d *Driver) hasQueued(c *execContext) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(c.queue) > 0 && !c.deleted
}

// runContextOps carries out the restart and delete records handed to c's
// executor, and reports whether c is deleted (its executor then ends).
func (d *Driver) runContextOps(c *execContext) (deleted bool) {
	d.mu.Lock()
	ops := c.ops
	c.ops = nil
	deleted = c.deleted
	d.mu.Unlock()
	for _, op := range ops {
		d.killKernels(c)
		// The caller asked for fresh globals: no state_lost for them.
		clear(c.lostReasons)
		done := &ioproto.Event{Type: ioproto.EventDone, Status: ioproto.StatusOK, Time: time.Now().UTC()}
		if op.rec.Op == ioproto.ContextRestart && !deleted && c.warm() {
			if _, err := d.ensureKernel(c, c.info.Language, d.envForNext(c)); err != nil {
				done.Status, done.Reason = ioproto.StatusError, "the context was restarted, but its interpreter could not start: "+err.Error()
			}
		}
		if op.rec.Op == ioproto.ContextRestart && deleted {
			done.Reason = "the context was deleted"
		}
		d.finishOp(op.ev, done)
		d.log.Info("context "+op.rec.Op+" done", "context_id", c.info.ID, "command_id", op.rec.CommandID)
	}
	return deleted
}

// finishOp writes a context record's done and notes it finished.
func (d *Driver) finishOp(ev *eventsFile, done *ioproto.Event) {
	if err := d.finish(ev, done); err != nil {
		d.log.Error("write done event", "command_id", ev.id, "err", err)
	}
	ev.close()
	d.noteFinished(ev)
}

// contextOp acts on a context record at once: a create is answered here;
// restart and delete stop the context's running command, and its executor
// answers them once the interpreter is gone (and, for restart, a fresh one
// is ready).
func (d *Driver) contextOp(rec ioproto.Record) {
	ev, done := d.contextOpLocked(rec)
	if done == nil {
		return
	}
	if done.Status != ioproto.StatusOK {
		d.log.Warn("context "+rec.Op+" refused", "context_id", rec.ContextID, "command_id", rec.CommandID, "reason", done.Reason)
		d.emit(ev, &ioproto.Event{Type: ioproto.EventError, EName: done.EName, EValue: done.Reason})
		done.EName = ""
	} else {
		d.log.Info("context "+rec.Op+" done", "context_id", rec.ContextID, "command_id", rec.CommandID)
	}
	d.finishOp(ev, done)
}

// contextOpLocked does contextOp's work under d.mu and returns the done
// event to write, if it is to be written now (nil: skipped, or handed to
// the executor).
func (d *Driver) contextOpLocked(rec ioproto.Record) (*eventsFile, *ioproto.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, dup := d.seen[rec.CommandID]; dup {
		d.log.Warn("skipping a command ID that is already in the log; commands never run twice", "command_id", rec.CommandID)
		return nil, nil
	}
	d.seen[rec.CommandID] = struct{}{}
	ev, err := createEventsIn(d.outDir, rec.CommandID, rec.Language, rec.ContextID, time.Now())
	if errors.Is(err, errExists) {
		d.log.Warn("skipping a context record that already has output", "command_id", rec.CommandID)
		return nil, nil
	}
	if err != nil {
		d.answerNotRunLocked(rec, "cannot create the record's events file: "+err.Error())
		return nil, nil
	}
	fail := func(kind, reason string) (*eventsFile, *ioproto.Event) {
		return ev, &ioproto.Event{Type: ioproto.EventDone, Status: ioproto.StatusError, Time: time.Now().UTC(), Reason: reason, EName: kind}
	}
	c := d.contexts[rec.ContextID]
	switch rec.Op {
	case ioproto.ContextCreate:
		if c != nil {
			return fail(ioproto.ContextErrExists, fmt.Sprintf("context %s already exists", rec.ContextID))
		}
		if n := len(d.contexts) - 1; n >= ioproto.MaxContexts {
			return fail(ioproto.ContextErrTooMany, fmt.Sprintf("the sandbox has %d contexts besides the default one; the limit is %d (delete one first)", n, ioproto.MaxContexts))
		}
		if why := d.checkContextDir(rec.Cwd); why != "" {
			return fail(ioproto.ContextErrCwd, why)
		}
		c = newExecContext(ioproto.ContextInfo{ID: rec.ContextID, Language: rec.Language, Cwd: rec.Cwd,
			CreatedAt: time.Now().UTC(), CreatedBy: rec.CommandID}, d.cfg.Workspace)
		d.contexts[c.info.ID] = c
		if err := d.writeContextsLocked(); err != nil {
			delete(d.contexts, c.info.ID)
			return fail(ioproto.ContextErrIO, "cannot record the context in /io/"+ioproto.ContextsFile+": "+errnoText(err))
		}
		d.startExecutorLocked(c)
		return ev, &ioproto.Event{Type: ioproto.EventDone, Status: ioproto.StatusOK, Time: time.Now().UTC()}
	default: // restart, delete
		if c == nil {
			return fail(ioproto.ContextErrUnknown, fmt.Sprintf("unknown context %s (never created, or deleted)", rec.ContextID))
		}
		reason := "the context was restarted"
		if rec.Op == ioproto.ContextDelete {
			if c.info.ID == ioproto.DefaultContext {
				return fail(ioproto.ContextErrDefault, "the default context cannot be deleted (restart it for fresh globals)")
			}
			reason = "the context was deleted"
			delete(d.contexts, c.info.ID)
			if err := d.writeContextsLocked(); err != nil {
				d.contexts[c.info.ID] = c
				return fail(ioproto.ContextErrIO, "cannot record the deletion in /io/"+ioproto.ContextsFile+": "+errnoText(err))
			}
			c.deleted = true
			for _, q := range c.queue {
				d.cancelQueuedLocked(q.rec, "the context was deleted before the command started; it did not run")
			}
			c.queue = nil
		}
		d.stopRunningLocked(c, reason)
		c.ops = append(c.ops, contextOpTask{rec: rec, ev: ev})
		c.poke()
		return nil, nil
	}
}

// stopRunningLocked ends c's interpreter at once, and with it a Python
// command running in it (killed, state lost, with reason); a running bash
// command is interrupted (SIGINT, then SIGKILL after the grace period).
// d.mu is held.
func (d *Driver) stopRunningLocked(c *execContext, reason string) {
	for _, k := range c.kernels {
		k.stopReason.Store(&reason)
		_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
	}
	if c.running != nil {
		select {
		case c.running.interrupt <- struct{}{}:
		default:
		}
	}
}

// checkContextDir explains why cwd (clean, relative) cannot be a context's
// working directory, or returns "": it must be an existing directory that
// resolves to a place under the workspace.
func (d *Driver) checkContextDir(cwd string) string {
	root, err := filepath.EvalSymlinks(d.cfg.Workspace)
	if err != nil {
		return "the workspace is not accessible: " + errnoText(err)
	}
	full, err := filepath.EvalSymlinks(filepath.Join(d.cfg.Workspace, filepath.FromSlash(cwd)))
	if err != nil {
		return fmt.Sprintf("cwd %s: %s under /workspace", cwd, errnoText(err))
	}
	if full != root && !strings.HasPrefix(full, root+string(filepath.Separator)) {
		return fmt.Sprintf("cwd %s leaves /workspace (through a symbolic link)", cwd)
	}
	st, err := os.Stat(full)
	if err != nil {
		return fmt.Sprintf("cwd %s: %s", cwd, errnoText(err))
	}
	if !st.IsDir() {
		return fmt.Sprintf("cwd %s is not a directory", cwd)
	}
	return ""
}
