package driver

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Standard input of bash commands (PROTOCOL.md, "Standard input and
// terminals"). A command started with stdin (or a pty) gets a feed when its
// exec record is read; stdin records add to the feed at once, ahead of the
// running command, and a writer goroutine of the command's own copies the
// feed into the command's pipe or terminal once it runs. The log reader
// only ever appends to a feed in memory: a command that never reads its
// input cannot block the driver.
const (
	// maxStdinPending bounds the bytes one command's feed holds that the
	// command has not read yet (beyond the pipe's own 64 KiB).
	maxStdinPending = 4 << 20
	// maxStdinPendingTotal bounds them over all commands (queued ones
	// included): the driver's memory is the sandbox's.
	maxStdinPendingTotal = 16 << 20
	// eotChar is what closing a terminal's input writes: the EOF character
	// (Ctrl-D), which a read at the start of a line sees as end of input.
	eotChar = 0x04
)

// stdinState is the driver's table of feeds; its fields are guarded by
// Driver.mu, apart from pending (atomic: writers decrement it).
type stdinState struct {
	feeds   map[string]*stdinFeed
	pending atomic.Int64
}

// stdinFeed is the input of one command with stdin.
type stdinFeed struct {
	id    string
	pty   bool
	total *atomic.Int64
	wake  chan struct{}

	mu      sync.Mutex
	chunks  [][]byte
	bytes   int
	closed  bool // stdin_close read: EOF after the chunks
	dropped int64
	ended   bool
	size    ioproto.PtySize
	w       *os.File // the pipe's write end or the pty's master; nil while queued
}

// noteStdinLocked gives an exec record that asks for stdin or a pty its
// feed. d.mu is held.
func (d *Driver) noteStdinLocked(rec ioproto.Record) {
	if !rec.Stdin && !rec.HasPty() {
		return
	}
	if d.stdin.feeds == nil {
		d.stdin.feeds = map[string]*stdinFeed{}
	}
	f := &stdinFeed{id: rec.CommandID, pty: rec.HasPty(), total: &d.stdin.pending, wake: make(chan struct{}, 1), size: rec.Pty}
	d.stdin.feeds[rec.CommandID] = f
}

// forgetStdinLocked ends a finished command's feed, whether it ran or was
// answered without running. d.mu is held.
func (d *Driver) forgetStdinLocked(id string) {
	if f := d.stdin.feeds[id]; f != nil {
		delete(d.stdin.feeds, id)
		f.end()
	}
}

// stdinFeedOf returns command id's feed, nil when it has none.
func (d *Driver) stdinFeedOf(id string) *stdinFeed {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stdin.feeds[id]
}

// stdinRecord acts on a stdin, stdin_close or resize record: at once, for a
// queued command as for a running one. A record for a command without a
// feed (finished, unknown, started without stdin) is logged and ignored.
func (d *Driver) stdinRecord(rec ioproto.Record) {
	f := d.stdinFeedOf(rec.CommandID)
	if f == nil {
		d.log.Info("stdin record for a command that is not queued or running with stdin; ignored", "type", rec.Type, "command_id", rec.CommandID)
		return
	}
	switch rec.Type {
	case ioproto.KindStdin:
		data, err := rec.StdinData()
		if err == nil {
			err = f.add(data)
		}
		if err != nil {
			d.log.Warn("stdin data discarded", "command_id", rec.CommandID, "err", err)
		}
	case ioproto.KindStdinClose:
		f.close()
	case ioproto.KindResize:
		if err := f.resize(rec.Pty); err != nil {
			d.log.Info("resize ignored", "command_id", rec.CommandID, "err", err)
		}
	}
}

func (f *stdinFeed) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// add queues data for the command. Past the bounds the feed overflows: this
// and all later data is discarded, and the command's input is closed after
// what was accepted, so it sees end of input rather than a silent gap.
func (f *stdinFeed) add(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.ended:
		return nil
	case f.closed:
		// Logged once per command: the caller may keep sending.
		first := f.dropped == 0
		f.dropped += int64(len(data))
		if !first {
			return nil
		}
		return fmt.Errorf("%d bytes after the command's input was closed (further ones are counted in done)", len(data))
	case f.bytes+len(data) > maxStdinPending || f.total.Load()+int64(len(data)) > maxStdinPendingTotal:
		f.dropped += int64(len(data))
		f.closed = true
		f.signal()
		return fmt.Errorf("%d bytes past the pending-input bound (%d bytes per command, %d in all); the command's input is closed after what was accepted", len(data), maxStdinPending, maxStdinPendingTotal)
	}
	f.chunks = append(f.chunks, data)
	f.bytes += len(data)
	f.total.Add(int64(len(data)))
	f.signal()
	return nil
}

// close ends the command's input after the data already given.
func (f *stdinFeed) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.signal()
}

// resize sets the terminal's size: now if the command runs, at its start
// if it is queued.
func (f *stdinFeed) resize(sz ioproto.PtySize) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.pty {
		return fmt.Errorf("command %s has no terminal", f.id)
	}
	f.size = sz
	if f.w == nil || f.ended {
		return nil
	}
	return setWinsize(f.w, sz)
}

// currentSize is the terminal size the command starts with.
func (f *stdinFeed) currentSize() ioproto.PtySize {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.size
}

// start hands the feed the command's input file and starts its writer.
// The caller closes w once the command has ended (after end), which also
// frees a writer blocked on a command that does not read.
func (f *stdinFeed) start(w *os.File) {
	f.mu.Lock()
	f.w = w
	f.mu.Unlock()
	go f.writeLoop(w)
}

// end stops the writer and releases what is still pending. It returns a
// note for the command's done reason when input was discarded.
func (f *stdinFeed) end() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.ended {
		f.ended = true
		f.total.Add(-int64(f.bytes))
		f.chunks, f.bytes = nil, 0
		f.signal()
	}
	if f.dropped > 0 {
		return fmt.Sprintf("%d bytes of standard input were discarded (sent past the %d-byte bound of unread input, or after it was closed)", f.dropped, maxStdinPending)
	}
	return ""
}

// writeLoop copies the feed into w in order until the feed ends or its
// input is closed (pipe: closed, so the command reads EOF; terminal: the
// EOF character). A failed write (the command closed its input, or ended)
// discards the rest.
func (f *stdinFeed) writeLoop(w *os.File) {
	for {
		f.mu.Lock()
		for len(f.chunks) == 0 && !f.closed && !f.ended {
			f.mu.Unlock()
			<-f.wake
			f.mu.Lock()
		}
		if f.ended {
			f.mu.Unlock()
			return
		}
		if len(f.chunks) == 0 { // closed, everything written
			f.mu.Unlock()
			if f.pty {
				_, _ = w.Write([]byte{eotChar})
			} else {
				_ = w.Close()
			}
			return
		}
		chunk := f.chunks[0]
		f.chunks[0] = nil
		f.chunks = f.chunks[1:]
		f.bytes -= len(chunk)
		f.total.Add(-int64(len(chunk)))
		f.mu.Unlock()
		if _, err := w.Write(chunk); err != nil {
			f.mu.Lock()
			f.total.Add(-int64(f.bytes))
			f.chunks, f.bytes, f.ended = nil, 0, true
			f.mu.Unlock()
			return
		}
	}
}

// openPty opens a pseudo-terminal of size sz. The master is returned
// non-blocking, in Go's poller, so that reads take deadlines (outputReader)
// and closing it frees a blocked read or write.
func openPty(sz ioproto.PtySize) (master, slave *os.File, err error) {
	m, s, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	fd, err := syscall.Dup(int(m.Fd()))
	m.Close()
	if err != nil {
		s.Close()
		return nil, nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		s.Close()
		return nil, nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := setWinsize(master, sz); err != nil {
		master.Close()
		s.Close()
		return nil, nil, err
	}
	return master, s, nil
}

// setWinsize sets a terminal's size (TIOCSWINSZ; the kernel sends the
// terminal's foreground process group SIGWINCH) without taking f out of
// non-blocking mode, as f.Fd() would.
func setWinsize(f *os.File, sz ioproto.PtySize) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	err = rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(sz.Rows), Col: uint16(sz.Cols)})
	})
	if err == nil {
		err = ierr
	}
	if err != nil {
		return fmt.Errorf("set the terminal's size: %w", err)
	}
	return nil
}
