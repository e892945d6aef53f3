// Package driver is the program that runs inside each sandbox container. It
// reads command records from /io/stdin, runs them one at a time per context
// (Python, JavaScript/TypeScript and R in long-lived kernels whose globals
// persist, or bash; several contexts run in parallel, contexts.go), and
// writes each command's events
// to its own file under /io/out, following the /io protocol
// (ioproto/PROTOCOL.md; its formats in package ioproto).
//
// The driver never dies from anything the user's code does: the code runs in
// child processes it supervises, and every failure of theirs becomes an
// event. Every command it takes ends with a done event, also when /io is
// full: what it stores is bounded by an out budget, and a reserve keeps
// room for done (budget.go). Output framing between a kernel and the
// driver carries a per-kernel secret, so output cannot spoof it
// (output.go).
package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Config configures a Driver.
type Config struct {
	// IODir is the protocol directory, /io in the container.
	IODir string
	// Workspace is the user's working directory, /workspace in the container.
	Workspace string
	// Python is the interpreter to run the kernel with.
	Python string
	// Wake chooses how new records are noticed: "auto" (inotify, with a
	// probe and a watchdog that fall back to polling), "inotify" or "poll".
	Wake string
	// Grace is how long a command may keep running after SIGINT before it is
	// killed.
	Grace time.Duration
	// MaxOutput caps the bytes of output and rich data one command may
	// emit, counted as stored (after JSON escaping, artifacts included);
	// the rest is discarded with a notice. It is lowered when it does not
	// fit the out budget; 0 means the most the budget allows.
	MaxOutput int64
	// OutBudget bounds the bytes /io/out takes on disk: retained commands,
	// the running command's worst case and the reserve (budget.go). 0 means
	// half of the /io file system's size, at most 1 GiB.
	OutBudget int64
	// KeepMin, KeepMax and MaxAge set the pruning of old commands' files.
	KeepMin, KeepMax int
	MaxAge           time.Duration
	// Logger receives the driver's own structured log.
	Logger *slog.Logger
	// Pool makes the driver honour an adopt record (adopt.go): set in a
	// warm-pool container (ioproto.EnvPoolDriver) only.
	Pool bool
	// Mounted tells whether a path is a mount point, for mounts records
	// (mounts.go); default: this process's mount namespace. MountsWait
	// bounds the wait for one record (default 60 s).
	Mounted    func(path string) (bool, error)
	MountsWait time.Duration

	// inherit is the kernel an adoption hands over (Serve); ioIdentity is
	// what IODir was when a pool driver started (New).
	inherit    *kernel
	ioIdentity os.FileInfo
}

func (c *Config) setDefaults() {
	if c.IODir == "" {
		c.IODir = "/io"
	}
	if c.Workspace == "" {
		c.Workspace = "/workspace"
	}
	if c.Python == "" {
		c.Python = "python3"
	}
	if c.Wake == "" {
		c.Wake = "auto"
	}
	if c.Grace <= 0 {
		c.Grace = 2 * time.Second
	}
	if c.KeepMin <= 0 {
		c.KeepMin = 100
	}
	if c.KeepMax < c.KeepMin {
		c.KeepMax = max(1000, c.KeepMin)
	}
	if c.MaxAge <= 0 {
		c.MaxAge = time.Hour
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Mounted == nil {
		c.Mounted = isMountPoint
	}
	if c.MountsWait <= 0 {
		c.MountsWait = defaultMountsWait
	}
}

// Driver runs the commands of one sandbox.
type Driver struct {
	cfg       Config
	log       *slog.Logger
	outDir    string
	stdinPath string
	launcher  *kernelLauncher

	// pendingMounts is the mounts record in force when the driver started
	// over on the log, not yet waited for (mounts.go); read and written by
	// the goroutine reading the log alone.
	pendingMounts *ioproto.Record

	mu sync.Mutex
	// seen holds every command ID met in the log, so that none runs twice
	// even after its files were pruned.
	seen map[string]struct{}
	// contexts are the sandbox's contexts by ID (contexts.go), the default
	// one included; each has its queue, running command and executor.
	contexts map[string]*execContext
	// readOffset is just past the last complete line handled.
	readOffset int64
	// finished lists the commands whose files are in /io/out and that are
	// done, oldest first, so pruning never has to list the directory.
	finished []finishedCmd
	// stdin holds the input of commands started with stdin (stdin.go).
	stdin stdinState
	// reserved is the disk the running commands may still take: the sum
	// of their worst cases (budget.go).
	reserved int64
	// env is the sandbox's environment as of the last record read: the
	// env records' variables (env.go). baseEnv is the driver's process
	// environment at start, under them.
	env     *envState
	baseEnv []string

	// runCtx and executors: executors of contexts created while running
	// start under runCtx, and Run waits for all of them.
	runCtx    context.Context
	executors sync.WaitGroup

	stateMu     sync.Mutex
	savedOffset int64

	statusMu sync.Mutex
	status   ioproto.DriverStatus
	// statusStale is set while the last write of status failed.
	statusStale bool

	// Disk accounting (budget.go): budget and maxOutput are fixed at
	// start; outUsed, the disk bytes of the finished commands' files, is
	// guarded by mu; reserveHeld by resMu (a leaf lock). roomMu makes
	// one executor at a time size its command's room.
	budget, maxOutput int64
	outUsed           int64
	resMu             sync.Mutex
	reserveHeld       int64
	roomMu            sync.Mutex
	// statfsHook replaces statfs in tests.
	statfsHook func(dir string) (free, total int64, err error)

	// Adoption (adopt.go): stopRun ends Run; adopting (mu) is set by the
	// adopt record, with the kernel to hand over.
	stopRun       context.CancelFunc
	adopting      bool
	adoptedKernel *kernel
}

type queued struct {
	rec   ioproto.Record
	start int64
	// env is the sandbox's environment where the record is in the log.
	env *envState
}

type running struct {
	id        string
	interrupt chan struct{}
}

// New prepares a driver; Run starts it.
func New(cfg Config) (*Driver, error) {
	cfg.setDefaults()
	d := &Driver{
		cfg:       cfg,
		log:       cfg.Logger,
		outDir:    filepath.Join(cfg.IODir, ioproto.OutDir),
		stdinPath: filepath.Join(cfg.IODir, ioproto.StdinFile),
		seen:      map[string]struct{}{},
		contexts:  map[string]*execContext{},
		env:       &envState{},
		baseEnv:   os.Environ(),
	}
	if cfg.Pool {
		st, err := os.Stat(cfg.IODir)
		if err != nil {
			return nil, err
		}
		d.cfg.ioIdentity = st
	}
	if err := os.MkdirAll(d.outDir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", d.outDir, err)
	}
	l, err := newKernelLauncher(cfg.Python, cfg.Workspace, d.log)
	if err != nil {
		return nil, err
	}
	d.launcher = l
	return d, nil
}

// Run serves the sandbox until ctx is cancelled. A cancelled driver leaves a
// command it was running without done; the next driver start finishes it as
// killed.
func (d *Driver) Run(ctx context.Context) error {
	reserveThreads()
	ctx, d.stopRun = context.WithCancel(ctx)
	defer d.stopRun()
	stdin, err := os.OpenFile(d.stdinPath, os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("open command log: %w", err)
	}
	defer stdin.Close()

	offset, err := d.recover(stdin)
	if err != nil {
		return err
	}
	d.setupBudget()
	w := newWaker(d.cfg.Wake, d.cfg.IODir, d.stdinPath, d.log)
	defer w.close()
	d.updateStatus(func(s *ioproto.DriverStatus) { s.Wake = w.mode() })
	d.log.Info("driver started", "boot", d.status.Boot, "offset", offset, "wake", w.mode())

	d.startExecutors(ctx)

	lr := ioproto.NewLineReader(stdin, offset, ioproto.MaxRecordLen)
	for {
		n := d.readAvailable(lr)
		if d.isAdopting() {
			break
		}
		if st, err := stdin.Stat(); err == nil {
			w.observed(st.Size())
		}
		if !w.wait(ctx, n > 0) {
			break
		}
		if mode := w.mode(); mode != d.currentWake() {
			d.updateStatus(func(s *ioproto.DriverStatus) { s.Wake = mode })
		}
	}
	d.executors.Wait()
	if d.isAdopting() {
		return &adopted{kernel: d.adoptedKernel}
	}
	return nil
}

// isAdopting reports whether an adopt record was honoured: nothing more
// may be written to /io.
func (d *Driver) isAdopting() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.adopting
}

// recover rebuilds the driver's memory from /io after a (re)start: the boot
// count, the IDs of commands already in the log, and commands that a previous
// driver left without done. It returns the log offset to continue from.
func (d *Driver) recover(stdin *os.File) (int64, error) {
	var prev ioproto.DriverStatus
	_ = ioproto.ReadJSONFile(filepath.Join(d.cfg.IODir, ioproto.DriverStatusFile), &prev)
	d.status = ioproto.DriverStatus{Version: 1, PID: os.Getpid(), StartedAt: time.Now().UTC(), Boot: prev.Boot + 1, Languages: d.launcher.languages}
	// Publish the new boot before finishing what the previous driver left
	// running, so whoever sees those commands end sees this driver too.
	d.updateStatus(func(*ioproto.DriverStatus) {})

	var st ioproto.State
	if err := ioproto.ReadJSONFile(filepath.Join(d.cfg.IODir, ioproto.StateFile), &st); err != nil && !errors.Is(err, os.ErrNotExist) {
		// A state file is only ever replaced whole, so this is damage from
		// outside; re-reading the log is safe because output files and the
		// seen set still prevent double runs.
		d.log.Error("unreadable state file; re-reading the log from the start", "err", err)
		st.Offset = 0
	}
	if size, err := stdin.Seek(0, 2); err == nil && st.Offset > size {
		d.log.Error("state offset beyond the end of the log; re-reading from the start", "offset", st.Offset, "size", size)
		st.Offset = 0
	}
	lr := ioproto.NewLineReader(stdin, 0, ioproto.MaxRecordLen)
	// used gives, per context, the kernel kinds its commands used, so that
	// after a restart only those report lost globals.
	used := map[string]map[string]bool{ioproto.DefaultContext: {kindPython: true}}
	// mounts is the last mounts record before the offset: a restarted
	// container has its mounts back only once the host added them again.
	var mounts *ioproto.Record
	for {
		line, ok, err := lr.Next()
		if err != nil {
			return 0, fmt.Errorf("scan command log: %w", err)
		}
		if !ok || line.Start >= st.Offset {
			break
		}
		if rec, _, err := ioproto.ParseRecord(line.Data); err == nil && line.Err == nil && rec.Type == ioproto.KindEnv {
			// State, not a command: the sandbox's environment is applied
			// again before any interpreter starts.
			if err := d.applyEnvRecord(rec); err != nil {
				d.log.Warn("env record not applied", "command_id", rec.CommandID, "offset", line.Start, "err", err)
			}
			continue
		} else if err == nil && line.Err == nil && rec.Type == ioproto.KindMounts {
			// State too: the last one is waited for below (mounts.go).
			mounts = &rec
			continue
		}
		// Interrupts and input records name commands but are not commands
		// themselves.
		if rec, id, err := ioproto.ParseRecord(line.Data); id != "" && (err != nil || ioproto.NamesCommand(rec.Type)) {
			d.seen[id] = struct{}{}
			if err == nil && rec.Type == ioproto.KindExec {
				cid := cmpOr(rec.ContextID, ioproto.DefaultContext)
				if used[cid] == nil {
					used[cid] = map[string]bool{}
				}
				used[cid][kernelKind(rec.Language)] = true
			}
		}
	}
	// Waited for before the next command, unless a newer record after the
	// offset replaces it first (mounts.go).
	d.pendingMounts = mounts
	d.readOffset, d.savedOffset = st.Offset, st.Offset

	entries, err := os.ReadDir(d.outDir)
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", d.outDir, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			// A file a previous driver was writing when it died.
			os.Remove(filepath.Join(d.outDir, e.Name()))
			continue
		}
		id, ok := ioproto.CommandIDFromEventsFile(e.Name())
		if !ok {
			continue
		}
		d.seen[id] = struct{}{}
		ev, done, err := openEvents(d.outDir, id)
		if err != nil {
			d.log.Error("cannot open events file", "command_id", id, "err", err)
			continue
		}
		if !done {
			d.log.Warn("finishing a command the previous driver left running", "command_id", id)
			err = ev.emit(&ioproto.Event{Type: ioproto.EventDone, Status: ioproto.StatusKilled, StateLost: true, Time: time.Now().UTC(),
				Reason: "the sandbox restarted while the command ran; it was not run again"})
			if err != nil {
				d.log.Error("cannot finish command", "command_id", id, "err", err)
			}
		}
		ev.close()
	}
	d.finished = finishedFrom(entries)
	for _, c := range d.finished {
		d.outUsed += c.bytes
	}
	if d.status.Boot == 1 || st.Offset == 0 {
		used = nil // nothing ran before: nothing is lost
	}
	d.recoverContexts(used)
	return st.Offset, nil
}

// readAvailable handles every complete line the log has now and returns how
// many it handled.
func (d *Driver) readAvailable(lr *ioproto.LineReader) int {
	n := 0
	for {
		line, ok, err := lr.Next()
		if err != nil {
			d.log.Error("read command log", "err", err)
			break
		}
		if !ok {
			break
		}
		n++
		d.handleLine(line)
		if d.isAdopting() {
			return n // /io is another sandbox's now: no state saved here
		}
		d.mu.Lock()
		d.readOffset = line.End
		d.mu.Unlock()
	}
	if n > 0 {
		d.saveState()
	}
	return n
}

// handleLine acts on one complete record.
func (d *Driver) handleLine(line ioproto.Line) {
	rec, id, err := ioproto.ParseRecord(line.Data)
	if line.Err != nil {
		err = fmt.Errorf("%w: line longer than %d bytes", ioproto.ErrMalformed, ioproto.MaxRecordLen)
	}
	if err != nil {
		d.reportMalformed(id, err, line.Start)
		return
	}
	switch rec.Type {
	case ioproto.KindInterrupt:
		d.interrupt(rec.CommandID)
	case ioproto.KindAdopt:
		d.adoptRecord(rec)
	case ioproto.KindEnv:
		d.envRecord(rec, line.Start)
	case ioproto.KindMounts:
		d.pendingMounts = nil
		d.awaitMounts(rec)
	case ioproto.KindContext:
		d.awaitPendingMounts()
		d.contextOp(rec)
	case ioproto.KindStdin, ioproto.KindStdinClose, ioproto.KindResize:
		d.stdinRecord(rec)
	case ioproto.KindExec, ioproto.KindSnapshot, ioproto.KindRestore:
		d.awaitPendingMounts()
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, dup := d.seen[rec.CommandID]; dup {
			d.log.Warn("skipping a command ID that is already in the log; commands never run twice", "command_id", rec.CommandID, "offset", line.Start)
			return
		}
		d.seen[rec.CommandID] = struct{}{}
		if _, err := os.Lstat(filepath.Join(d.outDir, ioproto.EventsFileName(rec.CommandID))); err == nil {
			d.log.Warn("skipping a command that already has output", "command_id", rec.CommandID)
			return
		}
		c, why := d.contextForLocked(rec)
		if c == nil {
			d.answerNotRunLocked(rec, why)
			return
		}
		c.queue = append(c.queue, queued{rec: rec, start: line.Start, env: d.env})
		d.noteStdinLocked(rec)
		c.poke()
	}
}

// reportMalformed answers a bad record in its command's events when it named
// a command that has none yet, and logs it otherwise.
func (d *Driver) reportMalformed(id string, err error, offset int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, dup := d.seen[id]
	if id == "" || dup {
		d.log.Error("skipping malformed record", "offset", offset, "command_id", id, "err", err)
		return
	}
	d.seen[id] = struct{}{}
	ev, cerr := createEvents(d.outDir, id, "", time.Now())
	if cerr != nil {
		d.log.Error("skipping malformed record", "offset", offset, "command_id", id, "err", err, "report_err", cerr)
		return
	}
	defer d.noteFinishedLocked(ev)
	defer ev.close()
	d.log.Warn("malformed record reported to its command", "offset", offset, "command_id", id, "err", err)
	_ = ev.emit(&ioproto.Event{Type: ioproto.EventError, EName: ioproto.MalformedRecordName, EValue: err.Error()})
	_ = ev.emit(&ioproto.Event{Type: ioproto.EventDone, Status: ioproto.StatusError, Time: time.Now().UTC(),
		Reason: "the command record was malformed and was not run: " + err.Error()})
}

// interrupt stops the running command, or cancels a queued one, in
// whichever context has it.
func (d *Driver) interrupt(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r := d.runningCommandLocked(id); r != nil {
		select {
		case r.interrupt <- struct{}{}:
		default:
		}
		return
	}
	for _, c := range d.contexts {
		for i, q := range c.queue {
			if q.rec.CommandID != id {
				continue
			}
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			d.cancelQueuedLocked(q.rec, "interrupted before it started; it did not run")
			return
		}
	}
	d.log.Info("interrupt for a command that is not running or queued; nothing to do", "command_id", id)
}

// runningCommandLocked returns the running command with ID id in any
// context, or nil. d.mu is held.
func (d *Driver) runningCommandLocked(id string) *running {
	for _, c := range d.contexts {
		if c.running != nil && c.running.id == id {
			return c.running
		}
	}
	return nil
}

// cancelQueuedLocked answers a queued command that will not run with
// started and done (interrupted, reason). d.mu is held.
func (d *Driver) cancelQueuedLocked(rec ioproto.Record, reason string) {
	ev, err := createEvents(d.outDir, rec.CommandID, rec.Language, time.Now())
	if err != nil {
		d.log.Error("cannot cancel queued command", "command_id", rec.CommandID, "err", err)
		return
	}
	_ = ev.emit(&ioproto.Event{Type: ioproto.EventDone, Status: ioproto.StatusInterrupted, Time: time.Now().UTC(), Reason: reason})
	ev.close()
	d.noteFinishedLocked(ev)
}

// saveState persists the offset before which every record has been acted
// on: the start of the oldest exec queued in any context, or the read
// position.
func (d *Driver) saveState() {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	d.mu.Lock()
	off := d.readOffset
	for _, c := range d.contexts {
		if len(c.queue) > 0 {
			off = min(off, c.queue[0].start)
		}
	}
	d.mu.Unlock()
	if off == d.savedOffset {
		return
	}
	if err := ioproto.WriteJSONFileAtomic(filepath.Join(d.cfg.IODir, ioproto.StateFile), ioproto.State{Version: 1, Offset: off}, 0o644); err != nil {
		d.log.Error("save state", "err", err)
		return
	}
	d.savedOffset = off
}

// updateStatus changes and publishes /io/driver.json.
func (d *Driver) updateStatus(change func(*ioproto.DriverStatus)) {
	d.statusMu.Lock()
	defer d.statusMu.Unlock()
	change(&d.status)
	d.statusStale = false
	if err := ioproto.WriteJSONFileAtomic(filepath.Join(d.cfg.IODir, ioproto.DriverStatusFile), d.status, 0o644); err != nil {
		// Retried with the next change of health.
		d.statusStale = true
		d.log.Error("write driver status", "err", err)
	}
}

func (d *Driver) currentWake() string {
	d.statusMu.Lock()
	defer d.statusMu.Unlock()
	return d.status.Wake
}

// take starts c's next queued command: it creates its events file, which
// from then on marks it as taken, and only then lets the saved offset pass it.
// When /io has no room (roomOK false, or creating the file fails for lack
// of space even after pruning), the command is answered at once with a done
// event saying so, and take returns no command.
func (d *Driver) take(c *execContext, lim limits, roomOK bool, why string) (queued, *eventsFile, *running) {
	d.mu.Lock()
	// The state file may lag: a record after its offset whose events file
	// exists is never run again. Saving it while the command runs keeps its
	// temp file and rename off the command's path.
	defer func() { go d.saveState() }()
	defer d.mu.Unlock()
	// Pending restart or delete records go first: a command taken now
	// would run in the interpreter they are about to end.
	if len(c.queue) > 0 && !c.deleted && len(c.ops) == 0 {
		q := c.queue[0]
		c.queue = c.queue[1:]
		if !roomOK {
			d.answerNotRunLocked(q.rec, "/io is full: "+why)
			return queued{}, nil, nil
		}
		var wake *ioproto.HibResult
		if q.rec.Type == ioproto.KindExec {
			wake = c.pendingWake
		}
		ev, err := createEventsWake(d.outDir, q.rec.CommandID, q.rec.Language, c.info.ID, wake, time.Now())
		if isNoSpace(err) {
			d.removeFiles(d.selectLocked(func(int64) bool { return true }))
			ev, err = createEventsWake(d.outDir, q.rec.CommandID, q.rec.Language, c.info.ID, wake, time.Now())
		}
		if err == nil && wake != nil {
			c.pendingWake = nil
		}
		switch {
		case errors.Is(err, errExists):
			d.log.Warn("skipping a command that already has output", "command_id", q.rec.CommandID)
			return queued{}, nil, nil
		case isNoSpace(err):
			d.answerNotRunLocked(q.rec, "/io is full: cannot create the command's events file ("+errnoText(err)+")")
			return queued{}, nil, nil
		case err != nil:
			d.answerNotRunLocked(q.rec, "cannot create the command's events file: "+err.Error())
			return queued{}, nil, nil
		}
		ev.lim = lim
		c.running = &running{id: q.rec.CommandID, interrupt: make(chan struct{}, 1)}
		return q, ev, c.running
	}
	return queued{}, nil, nil
}

// run executes one command and writes its events up to done.
func (d *Driver) run(ctx context.Context, c *execContext, q queued, ev *eventsFile, intr <-chan struct{}) {
	rec := q.rec
	start := time.Now()
	ws := watchWorkspace(d.cfg.Workspace, start)
	var res outcome
	switch {
	case rec.Type == ioproto.KindSnapshot || rec.Type == ioproto.KindRestore:
		res = d.runHib(ctx, c, q, ev, intr)
	case rec.Language == ioproto.LanguageBash:
		res = d.runBash(ctx, c.dir, q, ev, intr)
	default:
		res = d.runKernel(ctx, c, q, ev, intr)
	}
	if ctx.Err() != nil && res.status == "" {
		// The driver is stopping; the next start reports the command.
		return
	}
	truncated := outputTruncation(ev, d.outputCap(ev))
	done := &ioproto.Event{
		Type:            ioproto.EventDone,
		Status:          res.status,
		DurationMS:      time.Since(start).Milliseconds(),
		StateLost:       res.stateLost,
		Reason:          joinReason(res.reason, truncated),
		OutputTruncated: truncated != "",
		ExitCode:        res.exitCode,
		ExecutionCount:  res.executionCount,
		Files:           ws.changed(ioproto.MaxFiles),
		Time:            time.Now().UTC(),
		Snapshot:        res.hib,
	}
	if err := d.finish(ev, done); err != nil {
		d.log.Error("write done event", "command_id", rec.CommandID, "err", err)
	}
	d.log.Info("command finished", "command_id", rec.CommandID, "context_id", c.info.ID, "language", rec.Language, "status", res.status, "duration_ms", done.DurationMS, "state_lost", res.stateLost)
}

// outcome is how a command ended.
type outcome struct {
	status    string
	reason    string
	stateLost bool
	exitCode  *int
	// executionCount is the Python kernel's cell counter after the command.
	executionCount *int64
	// hib is a snapshot or restore record's outcome (hibernate.go).
	hib *ioproto.HibResult
}

// finish writes a command's done event, which must not be lost: when /io
// is full it prunes every finished command's files, and then releases the
// reserve, before it gives up. The done line is kept under maxDoneLine by
// shortening its list of changed files.
func (d *Driver) finish(ev *eventsFile, done *ioproto.Event) error {
	for len(done.Files) > 0 {
		line, err := ioproto.EncodeEvent(done)
		if err != nil || len(line) <= maxDoneLine {
			break
		}
		done.Files = done.Files[:len(done.Files)/2]
	}
	err := ev.emit(done)
	if !isNoSpace(err) {
		return err
	}
	d.mu.Lock()
	doomed := d.selectLocked(func(int64) bool { return true })
	d.mu.Unlock()
	d.removeFiles(doomed)
	if err = ev.emit(done); !isNoSpace(err) {
		return err
	}
	if d.releaseReserve() {
		d.setHealth(ioproto.HealthIOFull, "/io is full: the driver used its reserve to finish command "+ev.id)
		err = ev.emit(done)
	}
	return err
}

// answerNotRunLocked answers a command that will not run with started and
// a done event with status error and the reason, using the reserve when
// /io is full. d.mu is held.
func (d *Driver) answerNotRunLocked(rec ioproto.Record, reason string) {
	id := rec.CommandID
	ev, err := createEvents(d.outDir, id, rec.Language, time.Now())
	if isNoSpace(err) && d.releaseReserve() {
		ev, err = createEvents(d.outDir, id, rec.Language, time.Now())
	}
	if strings.HasPrefix(reason, "/io is full") || isNoSpace(err) {
		// After the reserve's release, so the status has room too.
		d.setHealth(ioproto.HealthIOFull, reason)
	}
	if err != nil {
		// Nothing can be written to /io/out at all.
		d.log.Error("cannot start command, nor answer it", "command_id", id, "reason", reason, "err", err)
		return
	}
	defer d.noteFinishedLocked(ev)
	defer ev.close()
	d.log.Error("command not run", "command_id", id, "reason", reason)
	done := &ioproto.Event{Type: ioproto.EventDone, Status: ioproto.StatusError, Time: time.Now().UTC(),
		Reason: reason + "; the command was not run"}
	if err := ev.emit(done); isNoSpace(err) && d.releaseReserve() {
		err = ev.emit(done)
	} else if err != nil {
		d.log.Error("write done event", "command_id", id, "err", err)
	}
}

// errnoText is the system error inside err ("no space left on device"),
// without the host-specific path around it.
func errnoText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}
