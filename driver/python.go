package driver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

const (
	// kernelReadyTimeout bounds a kernel's start-up.
	kernelReadyTimeout = 30 * time.Second
	// syncWait bounds how long a control message waits for its sync markers
	// while no output arrives, syncWaitMax how long in all. The kernels
	// write a marker after all output before it, and the message after the
	// marker, so when a message arrives its output is at most a pipe and
	// the reader's queue away: it keeps arriving until the marker does,
	// however slowly the driver gets to read it (a sandbox's CPU quota
	// shared with busy processes). Markers only go missing when the user's
	// code broke the kernel's own descriptors; then order is best effort
	// rather than a stall.
	syncWait    = 500 * time.Millisecond
	syncWaitMax = 10 * time.Second
	// drainBound bounds the wait for the end of output after a process
	// ended and its group was killed: only a process that left the group
	// can still hold a pipe open, and it must not stall the command's end.
	drainBound = 2 * time.Second
)

// kernelOf returns c's kernel of kind, or nil.
func (d *Driver) kernelOf(c *execContext, kind string) *kernel {
	d.mu.Lock()
	defer d.mu.Unlock()
	return c.kernels[kind]
}

// ensureKernel returns the context's live kernel for lang, starting one
// when there is none, with the sandbox's environment env (that of the
// next command it runs). A kernel found dead between commands is reported
// with the context's next command of its kind. Only c's executor calls it.
func (d *Driver) ensureKernel(c *execContext, lang string, env *envState) (*kernel, error) {
	kind := kernelKind(lang)
	k := d.kernelOf(c, kind)
	if k != nil && k.alive() {
		return k, nil
	}
	if k != nil {
		c.addLost(kind, k.deathReason()+" between commands; "+k.spec.display+" globals defined before are gone")
		k.discard()
		d.setKernel(c, kind, nil)
	}
	k, err := d.startKernel(c, lang, env)
	if err != nil {
		d.log.Error("cannot start a kernel", "context_id", c.info.ID, "language", lang, "err", err)
		return nil, err
	}
	d.setKernel(c, kind, k)
	return k, nil
}

// startKernel is the one place a context's kernel is launched: in the
// context's working directory, with the sandbox's environment env.
func (d *Driver) startKernel(c *execContext, lang string, env *envState) (*kernel, error) {
	if k := d.takeInherited(c, kernelKind(lang)); k != nil {
		// It has the driver's environment at start: the next request
		// brings it env's variables.
		return k, nil
	}
	k, err := d.launcher.start(lang, c.dir, d.processEnv(env), kernelReadyTimeout)
	if err != nil {
		return nil, err
	}
	k.env = env
	return k, nil
}

func (c *execContext) addLost(kind, reason string) {
	if c.lostReasons[kind] != "" {
		reason = c.lostReasons[kind] + "; " + reason
	}
	c.lostReasons[kind] = reason
}

// runKernel runs a command in its language's kernel of context c and
// emits its events (not done).
func (d *Driver) runKernel(ctx context.Context, c *execContext, q queued, ev *eventsFile, intr <-chan struct{}) outcome {
	rec := q.rec
	if !slices.Contains(d.launcher.languages, rec.Language) {
		msg := fmt.Sprintf("this sandbox's image has no %s interpreter for %s (it supports %s)", languageName(rec.Language), rec.Language, strings.Join(d.launcher.languages, ", "))
		d.emit(ev, &ioproto.Event{Type: ioproto.EventError, EName: "LanguageUnavailable", EValue: msg})
		return outcome{status: ioproto.StatusError, reason: msg}
	}
	var res outcome
	kind := kernelKind(rec.Language)
	op := rec.Type == ioproto.KindSnapshot || rec.Type == ioproto.KindRestore
	if r := c.lostReasons[kind]; r != "" && !op {
		res.stateLost, res.reason = true, r
		delete(c.lostReasons, kind)
	}
	name := languageName(rec.Language)
	k, err := d.ensureKernel(c, rec.Language, q.env)
	if err != nil {
		d.emit(ev, &ioproto.Event{Type: ioproto.EventError, EName: "KernelUnavailable", EValue: err.Error()})
		return outcome{status: ioproto.StatusKilled, stateLost: true, reason: joinReason(res.reason, "could not start "+name+": "+err.Error())}
	}
	// Output that background threads printed between commands belongs to no
	// command; it is dropped rather than attributed to this one.
	k.resetOrder()
	for drained := false; !drained; {
		select {
		case it := <-k.output:
			if it.eof {
				k.streams[streamIndex(it.stream)].eof = true
			}
		default:
			drained = true
		}
	}
	k.unblockOutput()
	req := kernelRequest{ID: rec.CommandID, Code: rec.Code, Language: rec.Language, Env: rec.Env, SetEnv: d.setenvFor(k, q.env)}
	if op {
		req.Op, req.Path = rec.Type, snapshotPath(d.cfg.IODir, rec.Snapshot)
	}
	if err := k.send(req); err != nil {
		// The kernel died just now; the exited branch below reports it.
		d.log.Warn("kernel: send request", "err", err)
	}

	st := newStopper(rec.TimeoutMS)
	defer st.stop()
	var pending []kernelMsg
	var flush *time.Timer
	var flushC <-chan time.Time
	var flushSince time.Time
	msgs := k.msgs
	for {
		force := false
		select {
		case <-ctx.Done():
			return outcome{}
		case it := <-k.output:
			d.acceptOutput(k, ev, it)
			if flush != nil && time.Since(flushSince) < syncWaitMax {
				flush.Reset(min(syncWait, syncWaitMax-time.Since(flushSince)))
			}
		case m, ok := <-msgs:
			if !ok {
				msgs = nil
				break
			}
			if m.ID != rec.CommandID {
				d.log.Warn("kernel: message for another command ignored", "type", m.Type, "id", m.ID)
				break
			}
			pending = append(pending, m)
			if flush == nil {
				flush = time.NewTimer(syncWait)
				flushC = flush.C
				flushSince = time.Now()
			}
		case <-flushC:
			force = true
			flush, flushC = nil, nil
		case <-st.timeoutC:
			st.trigger(ioproto.StatusTimeout, d.cfg.Grace, func() { k.interrupt(rec.CommandID) })
		case <-intr:
			st.trigger(ioproto.StatusInterrupted, d.cfg.Grace, func() { k.interrupt(rec.CommandID) })
		case <-st.graceC:
			k.signal(syscall.SIGKILL)
		case <-k.exited:
			d.releaseHeld(k, ev, 0, true)
			d.releaseHeld(k, ev, 1, true)
			d.drainAfterExit(k, ev)
			pending = append(pending, drainMsgs(msgs)...)
			d.flushMsgs(k, ev, &pending, true)
			reason := k.deathReason()
			if st.status != "" && k.killedByDriver {
				reason = fmt.Sprintf("the command did not stop within %s of SIGINT (%s), so the %s process was killed and restarted", d.cfg.Grace, st.status, name)
			}
			k.discard()
			d.setKernel(c, kind, nil)
			return outcome{status: ioproto.StatusKilled, stateLost: true, reason: joinReason(res.reason, reason+"; "+name+" globals are gone")}
		}
		if m, done := d.flushMsgs(k, ev, &pending, force); done {
			res.status = ioproto.StatusOK
			res.executionCount = m.ExecutionCount
			res.hib = m.Hib
			if m.Status != ioproto.StatusOK {
				res.status = ioproto.StatusError
				if st.status != "" {
					res.status = st.status
				}
			}
			if st.status != "" {
				// The interrupted command's subprocesses end with it.
				killGroupExcept(k.cmd.Process.Pid, k.cmd.Process.Pid)
			}
			if res.status == ioproto.StatusTimeout {
				res.reason = joinReason(res.reason, fmt.Sprintf("timed out after %s and was interrupted (globals kept)", time.Duration(rec.TimeoutMS)*time.Millisecond))
			} else if res.status == ioproto.StatusInterrupted {
				res.reason = joinReason(res.reason, "interrupted on request (globals kept)")
			}
			if flush != nil {
				flush.Stop()
			}
			return res
		}
		if len(pending) == 0 && flush != nil {
			flush.Stop()
			flush, flushC = nil, nil
		}
	}
}

// flushMsgs emits pending control messages whose preceding output has been
// emitted (their sync markers reached on both streams), or all of them when
// force is set, and releases output held behind them. It returns the
// kernel's done message once that went out.
func (d *Driver) flushMsgs(k *kernel, ev *eventsFile, pending *[]kernelMsg, force bool) (kernelMsg, bool) {
	for {
		progressed := false
		for len(*pending) > 0 {
			m := (*pending)[0]
			if !force && !k.synced(m.Sync) {
				break
			}
			*pending = (*pending)[1:]
			progressed = true
			k.emitted = max(k.emitted, m.Sync)
			switch m.Type {
			case "display":
				d.emitBundle(ev, ioproto.EventDisplay, m.Data)
			case "result":
				d.emitBundle(ev, ioproto.EventResult, m.Data)
			case "error":
				d.emitError(ev, &ioproto.Event{Type: ioproto.EventError, EName: m.EName, EValue: m.EValue, Traceback: m.Traceback})
			case "done":
				// Output after done's marker belongs to no command.
				return m, true
			}
		}
		if !progressed {
			return kernelMsg{}, false
		}
		d.releaseHeld(k, ev, 0, false)
		d.releaseHeld(k, ev, 1, false)
	}
}

// streamOrder tracks one output pipe of the kernel. Items wait in held while
// a sync marker at their head names a control message not yet emitted, so
// output printed after a display() cannot overtake it.
type streamOrder struct {
	held []outputItem
	// reached is the last marker up to which all output has been emitted.
	reached int64
	eof     bool
}

func streamIndex(stream string) int {
	if stream == ioproto.EventStderr {
		return 1
	}
	return 0
}

// resetOrder forgets held output of a previous command.
func (k *kernel) resetOrder() {
	for i := range k.streams {
		k.streams[i].held = nil
	}
}

// acceptOutput queues an output item behind earlier held ones and emits
// what may go out now.
func (d *Driver) acceptOutput(k *kernel, ev *eventsFile, it outputItem) {
	s := &k.streams[streamIndex(it.stream)]
	s.held = append(s.held, it)
	d.releaseHeld(k, ev, streamIndex(it.stream), false)
}

// releaseHeld emits a stream's held items up to the first marker whose
// control message has not been emitted; with all set, it emits everything.
func (d *Driver) releaseHeld(k *kernel, ev *eventsFile, i int, all bool) {
	s := &k.streams[i]
	for len(s.held) > 0 {
		it := s.held[0]
		switch {
		case it.eof:
			s.eof = true
		case it.sync > 0:
			s.reached = max(s.reached, it.sync)
			if !all && k.emitted < it.sync {
				return
			}
		default:
			d.emitText(ev, it.stream, it.text)
		}
		s.held = s.held[1:]
	}
}

// synced reports whether all output written before marker n has been
// emitted on both streams, so control message n may follow it.
func (k *kernel) synced(n int64) bool {
	for _, s := range k.streams {
		if !s.eof && s.reached < n {
			return false
		}
	}
	return true
}

// drainAfterExit emits output still in the pipes of a kernel that died; no
// control message will come to release held output, so all of it goes out.
func (d *Driver) drainAfterExit(k *kernel, ev *eventsFile) {
	// Children the kernel left behind hold its pipes open; they go first.
	killGroup(k.cmd.Process.Pid)
	t := time.NewTimer(drainBound)
	defer t.Stop()
	accept := func(it outputItem) {
		i := streamIndex(it.stream)
		k.streams[i].held = append(k.streams[i].held, it)
		d.releaseHeld(k, ev, i, true)
	}
	for !(k.streams[0].eof && k.streams[1].eof) {
		select {
		case it := <-k.output:
			accept(it)
		case <-t.C:
			for more := true; more; {
				select {
				case it := <-k.output:
					accept(it)
				default:
					more = false
				}
			}
			return
		}
	}
	d.releaseHeld(k, ev, 0, true)
	d.releaseHeld(k, ev, 1, true)
}

func drainMsgs(msgs <-chan kernelMsg) []kernelMsg {
	var out []kernelMsg
	for msgs != nil {
		select {
		case m, ok := <-msgs:
			if !ok {
				return out
			}
			out = append(out, m)
		default:
			return out
		}
	}
	return out
}

// emit writes an event, logging failures (a full disk must not stop the
// driver). After a write failed for lack of space, the command's further
// output is dropped, and its done event says so.
func (d *Driver) emit(ev *eventsFile, e *ioproto.Event) {
	err := ev.emit(e)
	if err == nil {
		return
	}
	if isNoSpace(err) && ev.ioErr == nil {
		ev.ioErr = err
		ev.dropped += max(int64(len(e.Text)), 1)
		d.setHealth(ioproto.HealthIOFull, "/io is full: cannot write the events of command "+ev.id+" ("+errnoText(err)+")")
	}
	if d.log != nil {
		d.log.Error("write event", "command_id", ev.id, "type", e.Type, "err", err)
	}
}

func joinReason(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// stopper escalates the end of a command: SIGINT on timeout or interrupt,
// then SIGKILL when the grace period passes. The first trigger wins.
type stopper struct {
	timeoutC <-chan time.Time
	graceC   <-chan time.Time
	status   string
	timers   []*time.Timer
}

func newStopper(timeoutMS int64) *stopper {
	s := &stopper{}
	if timeoutMS > 0 {
		t := time.NewTimer(time.Duration(timeoutMS) * time.Millisecond)
		s.timers = append(s.timers, t)
		s.timeoutC = t.C
	}
	return s
}

func (s *stopper) trigger(status string, grace time.Duration, interrupt func()) {
	if s.status != "" {
		return
	}
	s.status = status
	s.timeoutC = nil
	interrupt()
	t := time.NewTimer(grace)
	s.timers = append(s.timers, t)
	s.graceC = t.C
}

func (s *stopper) stop() {
	for _, t := range s.timers {
		t.Stop()
	}
}
