package driver

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Disk accounting. /io is a small volume (orchestrator/backend/docker/volume.go) that the
// driver must never fill by itself, because a driver that cannot create a
// command's events file cannot answer it, and the caller then waits forever.
// So the driver bounds what it stores by design:
//
//   - The out budget (Config.OutBudget; by default half of the /io volume as
//     statfs reports it, at most defaultOutBudget) bounds everything in
//     /io/out: the retained commands' events files and artifacts, the running
//     commands' worst cases (one per context running a command), and the
//     reserve. Before each command the driver prunes the oldest finished
//     commands until its worst case fits next to those of the commands
//     running already, on top of the count and age rules; what does not fit
//     lowers that command's cap.
//   - A command's worst case is bounded: its output cap counts bytes as
//     stored (JSON-escaped text and data, artifacts), its events file may
//     take at most the cap plus a framing allowance, and what follows the
//     cap (the notice, errors, done) is shortened to fit tailAllowance.
//   - Others can take space on the volume too (the host's command log, or
//     sandboxed code, which runs as the driver's user). So before each
//     command the driver also asks statfs how much is free, prunes further
//     when that is less than the command's worst case, lowers the command's
//     cap to what is free, and does not run the command at all when less
//     than minStartFree is left: it answers it with a done event whose reason
//     says "/io is full".
//   - The reserve (/io/out/.reserve, reserveBytes of incompressible data) is
//     released when a write fails with ENOSPC and nothing can be pruned, so
//     a done event (and the unhealthy status in /io/driver.json) can always
//     be written. It is re-created when there is room again.
const (
	// defaultOutBudget caps the automatic out budget, for /io directories
	// that are not a dedicated volume (statfs then describes a large shared
	// file system).
	defaultOutBudget = 1 << 30
	// minOutBudget is the smallest out budget the driver works with.
	minOutBudget = 4 << 20
	// reserveBytes is the size of the reserve file.
	reserveBytes = 1 << 20
	// tailAllowance bounds what a command writes past its caps: the
	// truncation notice, shortened errors and done.
	tailAllowance = 256 << 10
	// minStartFree is the least free space on /io with which a command runs.
	minStartFree = 1 << 20
	// minFraming is the least framing allowance of a command (the bytes of
	// event lines around the text, so that tiny writes cannot multiply the
	// cap by the size of a line's fields).
	minFraming = 1 << 20
	// maxDoneLine bounds the done event's line; a longer list of changed
	// files is shortened.
	maxDoneLine = 64 << 10
	// blockSize is the unit files take on disk, for the accounting.
	blockSize = 4096
)

// diskSize rounds a file's size up to whole blocks.
func diskSize(n int64) int64 {
	return (n + blockSize - 1) / blockSize * blockSize
}

// framingFor is the framing allowance that goes with an output cap.
func framingFor(limit int64) int64 {
	return max(minFraming, limit/4)
}

// worstCase is the most a command with output cap limit takes on disk.
func worstCase(limit int64) int64 {
	return limit + framingFor(limit) + tailAllowance + blockSize
}

// statfsFree returns the bytes that the driver's user may still write on
// the file system holding dir, and its total size.
func statfsFree(dir string) (free, total int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * st.Bsize, int64(st.Blocks) * st.Bsize, nil
}

// setupBudget fixes the out budget and the per-command output cap, once
// the files already in /io/out are known (recover).
func (d *Driver) setupBudget() {
	budget := d.cfg.OutBudget
	if budget <= 0 {
		budget = defaultOutBudget
		if _, total, err := d.statfs(d.outDir); err == nil && total > 0 {
			budget = min(budget, total/2)
		} else if err != nil {
			d.log.Warn("statfs /io failed; using the default out budget", "err", err, "budget", budget)
		}
	}
	budget = max(budget, minOutBudget)
	limit := d.cfg.MaxOutput
	room := budget - reserveBytes
	if limit <= 0 || worstCase(limit) > room {
		// The cap must leave room for one command next to the reserve;
		// worstCase(l) <= room when l <= (room - tail - framing) * 4/5.
		limit = max(64<<10, (room-tailAllowance-blockSize-minFraming)*4/5)
		if d.cfg.MaxOutput > 0 {
			d.log.Warn("output cap lowered to fit the /io budget", "max_output", d.cfg.MaxOutput, "cap", limit, "budget", budget)
		}
	}
	d.budget, d.maxOutput = budget, limit
	d.ensureReserve()
	d.updateStatus(func(s *ioproto.DriverStatus) {
		s.OutBudget, s.MaxOutput = budget, limit
		if s.Health == "" {
			s.Health = ioproto.HealthOK
		}
	})
}

// statfs is statfsFree, replaceable in tests.
func (d *Driver) statfs(dir string) (free, total int64, err error) {
	if d.statfsHook != nil {
		return d.statfsHook(dir)
	}
	return statfsFree(dir)
}

// limits are one command's caps: output (bytes as stored) and everything
// the command's files may take before done.
type limits struct {
	output, disk int64
}

// makeRoom runs before each command: it prunes old commands by count, age,
// out budget and free space, and returns the caps for the next command, or
// ok=false with the reason when /io has too little room to run one.
//
// Commands of different contexts run at once, so the room of each running
// command is held until it ends (releaseRoom): the budget and the free
// space a new command may count on are what is left after the worst cases
// of the commands running already. When they leave less than a full
// command's worst case, the new command runs with a lower cap.
func (d *Driver) makeRoom() (lim limits, ok bool, why string) {
	d.roomMu.Lock()
	defer d.roomMu.Unlock()
	defer func() {
		if ok {
			d.mu.Lock()
			d.reserved += roomOf(lim)
			d.mu.Unlock()
		}
	}()
	d.prune()
	lim = limits{output: d.maxOutput, disk: d.maxOutput + framingFor(d.maxOutput)}
	need := worstCase(d.maxOutput)
	held := d.reserveBytes()
	// The out budget: what is retained, the running commands' worst cases
	// and the next command's.
	d.mu.Lock()
	others := d.reserved
	doomed := d.selectLocked(func(used int64) bool { return used+held+others+need > d.budget })
	budgetRoom := d.budget - d.outUsed - held - others
	d.mu.Unlock()
	d.removeFiles(doomed)

	free, _, err := d.statfs(d.outDir)
	if err != nil {
		// Without statfs the budget alone bounds /io use; writes that
		// still fail are handled as they happen.
		return lowered(lim, need, budgetRoom, d.log), true, ""
	}
	if free-others < need {
		// Others use the volume too: make the command's worst case fit in
		// what is free, if pruning can.
		d.mu.Lock()
		freed := int64(0)
		doomed := d.selectLocked(func(int64) bool { return free-others+freed < need })
		for _, c := range doomed {
			freed += c.bytes
		}
		d.mu.Unlock()
		if len(doomed) > 0 {
			d.removeFiles(doomed)
			if f, _, err := d.statfs(d.outDir); err == nil {
				free = f
			}
		}
	}
	if held < reserveBytes && free-others >= need+reserveBytes {
		d.ensureReserve()
		if f, _, err := d.statfs(d.outDir); err == nil {
			free = f
		}
	}
	if free < minStartFree {
		why = fmt.Sprintf("%s free, a command needs at least %s", formatBytes(free), formatBytes(minStartFree))
		d.setHealth(ioproto.HealthIOFull, "/io is full: "+why)
		return lim, false, why
	}
	lim = lowered(lim, need, min(budgetRoom, free-others), d.log)
	if d.reserveBytes() >= reserveBytes || free >= need {
		d.setHealth(ioproto.HealthOK, "")
	}
	return lim, true, ""
}

// lowered returns lim, or lower caps when room is less than the worst
// case need: the command then runs with what there is (at least a small
// cap, when the room is held by commands running in other contexts).
func lowered(lim limits, need, room int64, log interface {
	Warn(string, ...any)
}) limits {
	if room >= need {
		return lim
	}
	room = max(room-tailAllowance-blockSize, minStartFree/4)
	lim = limits{output: max(4<<10, room*2/3), disk: room}
	log.Warn("little room on /io; this command's output cap is lowered", "room", room, "cap", lim.output)
	return lim
}

// roomOf is the most a command with caps lim takes on disk.
func roomOf(lim limits) int64 { return lim.disk + tailAllowance + blockSize }

// releaseRoom gives back the room makeRoom held for a command that ended
// (or did not run).
func (d *Driver) releaseRoom(lim limits) {
	d.mu.Lock()
	d.reserved = max(0, d.reserved-roomOf(lim))
	d.mu.Unlock()
}

// reserveBytes is what the reserve file holds now.
func (d *Driver) reserveBytes() int64 {
	d.resMu.Lock()
	defer d.resMu.Unlock()
	return d.reserveHeld
}

// ensureReserve (re)creates the reserve file up to reserveBytes. On a full
// volume it keeps what it could write.
func (d *Driver) ensureReserve() {
	d.resMu.Lock()
	defer d.resMu.Unlock()
	if d.reserveHeld >= reserveBytes {
		return
	}
	path := filepath.Join(d.outDir, ioproto.ReserveFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		d.log.Warn("cannot create the /io reserve", "err", err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return
	}
	size := st.Size()
	// Random data: a compressing or deduplicating file system must not
	// store the reserve in less than its size.
	buf := make([]byte, 64<<10)
	_, _ = rand.Read(buf)
	for size < reserveBytes {
		n, err := f.WriteAt(buf[:min(int64(len(buf)), reserveBytes-size)], size)
		size += int64(n)
		if err != nil {
			d.log.Warn("the /io reserve is incomplete", "bytes", size, "err", err)
			break
		}
	}
	if err := f.Sync(); err != nil && size >= reserveBytes {
		d.log.Debug("sync reserve", "err", err)
	}
	d.reserveHeld = diskSize(size)
}

// releaseReserve gives the reserve's space back to the file system, for a
// write that must not fail. It reports whether there was any.
func (d *Driver) releaseReserve() bool {
	d.resMu.Lock()
	defer d.resMu.Unlock()
	if d.reserveHeld == 0 {
		return false
	}
	err := os.Remove(filepath.Join(d.outDir, ioproto.ReserveFile))
	d.reserveHeld = 0
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		d.log.Error("cannot release the /io reserve", "err", err)
		return false
	}
	d.log.Warn("/io is full: released the reserve to finish a command")
	return true
}

// setHealth publishes the driver's health in /io/driver.json when it
// changes.
func (d *Driver) setHealth(health, reason string) {
	d.statusMu.Lock()
	same := d.status.Health == health && d.status.HealthReason == reason && !d.statusStale
	d.statusMu.Unlock()
	if same {
		return
	}
	if health != ioproto.HealthOK {
		d.log.Error("sandbox unhealthy", "health", health, "reason", reason)
	} else {
		d.log.Info("sandbox healthy again")
	}
	d.updateStatus(func(s *ioproto.DriverStatus) { s.Health, s.HealthReason = health, reason })
}

// isNoSpace reports whether err means the file system is full (of space or
// of inodes, or over a quota).
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// jsonLen returns the bytes s takes as a JSON string's content, as
// encoding/json writes it (HTML-safe), counting rare escapes at their
// longest: an upper bound that is exact for ordinary text.
func jsonLen(s string) int64 {
	n := int64(0)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			n += asciiJSONLen[c]
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 6
		case r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += int64(size)
		}
		i += size
	}
	return n
}

// jsonPrefix returns the longest prefix of s, cut at a character boundary,
// whose JSON-escaped length is at most budget.
func jsonPrefix(s string, budget int64) string {
	n := int64(0)
	for i := 0; i < len(s); {
		c := s[i]
		var w int64
		size := 1
		if c < utf8.RuneSelf {
			w = asciiJSONLen[c]
		} else {
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:])
			w = int64(size)
			if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
				w = 6
			}
		}
		if n+w > budget {
			return s[:i]
		}
		n += w
		i += size
	}
	return s
}

// asciiJSONLen is the escaped length of each ASCII byte.
var asciiJSONLen = func() (t [utf8.RuneSelf]int64) {
	for c := range t {
		switch {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			t[c] = 2
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			t[c] = 6
		default:
			t[c] = 1
		}
	}
	return t
}()
