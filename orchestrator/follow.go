package orchestrator

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// prunedCheckDelay is how long a follower whose command has no events file
// waits before it reads the driver's state to learn whether the output was
// pruned. A command that runs soon creates its file well within it.
const prunedCheckDelay = 50 * time.Millisecond

// Bounds on what a follower reads from files the sandbox writes: the driver
// keeps well inside them, sandboxed code trying to exhaust sandboxd's memory
// does not.
const (
	// maxEventLine bounds one events line: a 64 KiB output chunk can grow
	// six-fold with JSON escaping, and display events carry MIME values of
	// up to 256 KiB each inline.
	maxEventLine = 8 << 20
	// maxArtifactBytes bounds one artifact read back into an event.
	maxArtifactBytes = 64 << 20
)

// Follow streams a command's events with Seq > afterSeq, in order, calling fn
// for each, and returns nil once it has delivered the done event (at once, if
// done's seq is not above afterSeq: there is nothing left to send). Events
// whose values the driver moved to artifact files come with those values
// back in Data (base64 for binary MIME types) and no Refs.
//
// A command that is queued has no events yet: Follow waits for them. It
// wakes on inotify events for the sandbox's io/out directory, and re-checks
// every second in case notifications were lost. Follow returns
//   - ErrNotFound if the command is not in the sandbox's log, its output has
//     been pruned (noticed at the first re-check, after prunedCheckDelay),
//     or the sandbox is deleted meanwhile;
//   - ErrFailedPrecondition if the sandbox dies before the command is done;
//   - fn's error, if fn fails;
//   - ctx.Err() when ctx ends.
//
// The start of a Follow, and each second of it, refresh the sandbox's idle
// TTL: a sandbox being watched is in use even while a long command prints
// nothing.
func (m *Manager) Follow(ctx context.Context, sandboxID, commandID string, afterSeq int64, fn func(Event) error) error {
	if err := validateCommandID(commandID); err != nil {
		return err
	}
	if afterSeq < 0 {
		return invalidf("after_seq %d is negative", afterSeq)
	}
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return err
	}
	recordEnd, ok, err := sb.log.lookup(commandID)
	if err != nil {
		return m.logError(sb, err)
	}
	if !ok {
		return notFoundf("command %s not found in sandbox %s", commandID, sb.id)
	}

	root, err := os.OpenRoot(filepath.Join(sb.dir, ioDir))
	if err != nil {
		return fmt.Errorf("open sandbox io directory: %w", err)
	}
	defer root.Close()
	// Subscribe before the first read: a write between the read and the
	// wait then still wakes us.
	sub := m.watch.subscribe(filepath.Join(sb.dir, ioDir, ioproto.OutDir), commandID)
	defer sub.cancel()

	f := &follower{m: m, sb: sb, root: root, cmd: commandID, last: afterSeq, fn: fn}
	defer f.close()
	// The first re-check comes after prunedCheckDelay, the others every
	// m.recheck.
	tick := time.NewTicker(min(prunedCheckDelay, m.recheck))
	defer tick.Stop()
	recheck := false
	for {
		// Look at the sandbox's state before reading: if it was already dead,
		// everything its driver wrote is in the file, and a read that finds no
		// done means there will never be one.
		dead := isClosed(sb.deadCh)
		done, err := f.drain()
		if err != nil || done {
			return err
		}
		if dead {
			return preconditionf("sandbox %s died before command %s finished: %s; acquire a new sandbox", sb.id, commandID, sb.reasonOrUnknown())
		}
		// A missing events file means that the command has not started yet
		// or that its output was pruned. Telling the two apart costs a read
		// of the driver's state file, so only the re-checks do it, not every
		// pass: a command about to start (as after nearly every Submit) never
		// pays for it, and pruned output is reported after prunedCheckDelay.
		if recheck && f.file == nil && f.pruned(recordEnd) {
			return notFoundf("the output of command %s in sandbox %s is no longer available: it was pruned", commandID, sb.id)
		}
		recheck = false
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.closing:
			return unavailablef("sandboxd is shutting down")
		case <-sb.goneCh:
			return notFoundf("sandbox %s was deleted while following command %s", sb.id, commandID)
		case <-sub.C:
		case <-sb.deadCh:
		case <-tick.C:
			tick.Reset(m.recheck)
			recheck = true
			m.reg.touch(sb)
		}
	}
}

// follower is the state of one Follow call.
type follower struct {
	m    *Manager
	sb   *sandbox
	root *os.Root // the sandbox's io directory
	cmd  string
	last int64 // highest seq delivered (or skipped as not wanted)
	fn   func(Event) error
	file *os.File
	lr   *ioproto.LineReader
}

func (f *follower) close() {
	if f.file != nil {
		f.file.Close()
	}
}

// drain delivers every complete event available now. It reports done=true
// after the done event.
func (f *follower) drain() (done bool, err error) {
	if f.file == nil {
		file, _, err := openRegular(f.root, path.Join(ioproto.OutDir, ioproto.EventsFileName(f.cmd)), os.O_RDONLY)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil // not started yet
		}
		if err != nil {
			return false, eventsError(f.sb, f.cmd, err)
		}
		f.file, f.lr = file, ioproto.NewLineReader(file, 0, maxEventLine)
	}
	for {
		line, ok, err := f.lr.Next()
		if err != nil {
			return false, fmt.Errorf("read events of command %s: %w", f.cmd, err)
		}
		if !ok {
			return false, nil
		}
		if line.Err != nil {
			f.m.log.Warn("skipping over-long events line", "sandbox_id", f.sb.id, "command_id", f.cmd, "offset", line.Start)
			continue
		}
		ev, err := ioproto.ParseEvent(line.Data)
		if err != nil {
			f.m.log.Warn("skipping malformed events line", "sandbox_id", f.sb.id, "command_id", f.cmd, "offset", line.Start, "error", err)
			continue
		}
		if ev.Seq <= f.last {
			if ev.Type == ioproto.EventDone {
				return true, nil // the caller has everything, done included
			}
			continue
		}
		f.last = ev.Seq
		if len(ev.Refs) > 0 {
			f.resolveRefs(&ev)
		}
		if err := f.fn(ev); err != nil {
			return false, err
		}
		if ev.Type == ioproto.EventDone {
			return true, nil
		}
	}
}

// eventsError classifies a failure to open an events file.
func eventsError(sb *sandbox, cmd string, err error) error {
	if errors.Is(err, errTampered) || isEscape(err) {
		return preconditionf("the events file of command %s in sandbox %s was altered from inside the sandbox; its output cannot be read", cmd, sb.id)
	}
	return fmt.Errorf("open events of command %s: %w", cmd, err)
}

// resolveRefs reads an event's artifacts back into its Data. An artifact that
// cannot be read (pruned, tampered with) is left out and logged: the rest of
// the event is still worth delivering.
func (f *follower) resolveRefs(ev *Event) {
	for mime, name := range ev.Refs {
		data, err := f.readArtifact(name)
		if err != nil {
			f.m.log.Warn("cannot read artifact", "sandbox_id", f.sb.id, "command_id", f.cmd, "seq", ev.Seq, "mime", mime, "artifact", name, "error", err)
			continue
		}
		if ev.Data == nil {
			ev.Data = make(map[string]string, len(ev.Refs))
		}
		if ioproto.IsBinaryMIME(mime) {
			ev.Data[mime] = base64.StdEncoding.EncodeToString(data)
		} else {
			ev.Data[mime] = string(data)
		}
	}
	ev.Refs = nil
}

// readArtifact reads artifact name from io/out. Names come from a file the
// sandbox can write, so only a plain name of this command's artifacts is
// accepted, and the read goes through os.Root.
func (f *follower) readArtifact(name string) ([]byte, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || strings.HasPrefix(name, ".") || !strings.HasPrefix(name, f.cmd+".") {
		return nil, fmt.Errorf("invalid artifact name %q", name)
	}
	file, _, err := openRegular(f.root, path.Join(ioproto.OutDir, name), os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	data, err := io.ReadAll(io.LimitReader(file, maxArtifactBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxArtifactBytes {
		return nil, fmt.Errorf("artifact is larger than %d bytes", maxArtifactBytes)
	}
	return data, nil
}

// pruned reports whether the command's events file is missing because the
// driver pruned it (rather than because the command has not started): the
// driver's state says it has acted on the command's record.
// Any doubt (no state yet, unreadable state) means "not pruned": keep waiting.
func (f *follower) pruned(recordEnd int64) bool {
	file, _, err := openRegular(f.root, ioproto.StateFile, os.O_RDONLY)
	if err != nil {
		return false
	}
	defer file.Close()
	var st ioproto.State
	b, err := io.ReadAll(io.LimitReader(file, 4096))
	if err != nil || json.Unmarshal(b, &st) != nil || st.Offset < recordEnd {
		return false
	}
	// The driver creates the events file before it moves its offset past the
	// record; look once more in case the file appeared just now.
	_, err = f.root.Lstat(path.Join(ioproto.OutDir, ioproto.EventsFileName(f.cmd)))
	return errors.Is(err, fs.ErrNotExist)
}

// reasonOrUnknown returns the reason a dead sandbox died.
func (sb *sandbox) reasonOrUnknown() string {
	if _, r := sb.status(); r != "" {
		return r
	}
	return "unknown reason"
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
