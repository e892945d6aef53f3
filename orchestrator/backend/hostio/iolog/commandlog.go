package iolog

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"

	"github.com/sandboxd/sandboxd/ioproto"
)

// ErrUnknownCommand: the command is not in the sandbox's command log.
var ErrUnknownCommand = errors.New("command not in the command log")

// ErrConflict: an exec record's command ID is already in the log for a
// different command (other language or code). Replaying the
// logged command's output as the answer to the new one would be wrong.
var ErrConflict = errors.New("command ID already used for a different command")

// ErrLogFull: the command log reached MaxLogRecords or MaxLogBytes; the
// sandbox takes no more commands.
var ErrLogFull = errors.New("command log is full")

// ErrHibernating: the log is sealed by a snapshot record and takes no new
// command until its restore record (Dir.SealWhileHibernating).
var ErrHibernating = errors.New("the sandbox is hibernating")

// Bounds on the command log. sandboxd is its only legitimate writer and
// refuses to append past them, so a log beyond either bound was forged by
// the sandbox (a sparse 16 TiB file, millions of tiny records) and is
// refused without being read further.
const (
	// MaxLogBytes: 1 GiB, the default /io volume (a dense log cannot be
	// larger than the volume holding it), read in a second or two.
	MaxLogBytes = 1 << 30
	// MaxLogRecords bounds the commands of one sandbox's life, and so the
	// index sandboxd keeps in memory per sandbox (about 150 bytes per
	// command: ~20 MiB at the bound). A command a second for a day and a
	// half fits.
	MaxLogRecords = 1 << 17
	// loadCheckEvery, checkEveryBytes: a load looks at its context and at
	// Close every so many records or bytes (records are up to 8 MiB), so a
	// cancelled caller or a Delete stops it promptly.
	loadCheckEvery  = 256
	checkEveryBytes = 4 << 20
)

// logEntry is what the index keeps of one command in the log.
type logEntry struct {
	end    int64    // offset just past the command's record
	digest [32]byte // recordDigest of the record
	// What ListCommands and the stdin calls need of the record, without
	// reading the log again: its language (one of ioproto's constants, or
	// empty for a malformed record) and whether it asked for stdin or a
	// terminal.
	lang       string
	stdin, pty bool
	// context is the record's context_id (empty: the default context).
	context string
}

// entryOf is the index entry of a valid exec record ending at end.
func entryOf(rec ioproto.Record, end int64) logEntry {
	e := logEntry{end: end, digest: recordDigest(rec), stdin: rec.Stdin || rec.HasPty(), pty: rec.HasPty()}
	e.lang = rec.Language
	e.context = rec.ContextID
	if e.lang == "" {
		e.lang = ioproto.LanguagePython
	}
	return e
}

// recordDigest identifies "the same command" for idempotency: what runs,
// the language, the code and the command's env. The timeout is a limit on it, not its
// identity: a retry whose timeout changed (the server's default changed
// across a restart) is still a retry. A malformed record gets the zero
// digest, which no valid record has and which matches any command: what
// it was cannot be known, so a re-use of its ID replays its answer, as
// before digests (only the sandbox can forge one, and it can forge its
// answers anyway).
func recordDigest(rec ioproto.Record) [32]byte {
	lang := rec.Language
	if lang == "" {
		lang = ioproto.LanguagePython
	}
	h := sha256.New()
	if rec.Type == ioproto.KindContext {
		// A context operation is identified by what it does; the prefix
		// keeps it apart from every exec digest.
		fmt.Fprintf(h, "context\x00%s\x00%s\x00%s\x00%s", rec.Op, rec.ContextID, rec.Language, rec.Cwd)
	} else if rec.Type == ioproto.KindSnapshot || rec.Type == ioproto.KindRestore {
		// Hibernation records likewise (sandboxd's own, never the user's).
		fmt.Fprintf(h, "hibernation\x00%s\x00%s\x00%s\x00%t", rec.Type, rec.Snapshot, rec.Level, rec.Live)
	} else {
		fmt.Fprintf(h, "%s\x00", lang)
		if rec.ContextID != "" && rec.ContextID != ioproto.DefaultContext {
			// The same code in another context is another command.
			fmt.Fprintf(h, "\x01context\x00%s\x00", rec.ContextID)
		}
	}
	io.WriteString(h, rec.Code)
	if len(rec.Env) > 0 {
		// The env changes what runs; without one the digest is as before.
		keys := slices.Sorted(maps.Keys(rec.Env))
		for _, k := range keys {
			fmt.Fprintf(h, "\x00env\x00%d:%s%d:%s", len(k), k, len(rec.Env[k]), rec.Env[k])
		}
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// Append appends rec to the command log (io/stdin), once: an exec record
// whose command ID is already in the log is not appended again, and Append
// reports appended=false (the caller's retried submission must not run a
// command twice); if the logged record runs something else, Append fails
// with ErrConflict. An interrupt record must name a command in the log, or
// Append fails with ErrUnknownCommand. (Env records: AppendEnv.)
//
// ready, if not nil, is called with appends held (see HoldAppends) just
// before the write; its error cancels the append and is returned as is.
// The orchestrator refuses appends to a dead or deleted sandbox there.
func (d *Dir) Append(rec ioproto.Record, ready func() error) (appended bool, err error) {
	return d.AppendContext(context.Background(), rec, ready)
}

// AppendContext is Append, giving up when ctx ends while the log is being
// loaded.
func (d *Dir) AppendContext(ctx context.Context, rec ioproto.Record, ready func() error) (appended bool, err error) {
	line, err := ioproto.EncodeRecord(rec)
	if err != nil {
		return false, err
	}
	if err := d.ensureLoaded(ctx); err != nil {
		return false, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed() {
		return false, ErrClosed
	}
	if d.loadErr != nil {
		return false, d.loadErr
	}
	known, ok := d.ids[rec.CommandID]
	switch {
	case isCommand(rec.Type) && ok:
		if known.digest != ([32]byte{}) && known.digest != recordDigest(rec) {
			return false, ErrConflict
		}
		return false, nil
	case refersToCommand(rec.Type) && !ok:
		return false, ErrUnknownCommand
	case d.size+int64(len(line))+1 > MaxLogBytes:
		return false, fmt.Errorf("%w: it holds %d bytes; the limit is %d", ErrLogFull, d.size, MaxLogBytes)
	case isCommand(rec.Type) && len(d.ids) >= MaxLogRecords:
		return false, fmt.Errorf("%w: it holds %d commands; the limit is %d", ErrLogFull, len(d.ids), MaxLogRecords)
	case d.seal && d.pendingSnap != "" && (rec.Type == ioproto.KindExec || rec.Type == ioproto.KindContext || rec.Type == ioproto.KindSnapshot):
		return false, fmt.Errorf("%w: its state is being saved (snapshot %s); it takes commands again once woken", ErrHibernating, d.pendingSnap)
	}
	if ready != nil {
		if err := ready(); err != nil {
			return false, err
		}
	}
	if err := d.appendLocked(line); err != nil {
		return false, err
	}
	switch {
	case rec.Type == ioproto.KindSnapshot && !rec.Live:
		d.pendingSnap = rec.CommandID
	case rec.Type == ioproto.KindRestore:
		d.pendingSnap = ""
	}
	if isCommand(rec.Type) {
		d.ids[rec.CommandID] = entryOf(rec, d.size)
		if rec.Type == ioproto.KindExec {
			// Context operations are commands of the log, not the user's:
			// ListCommands leaves them out.
			d.order = append(d.order, rec.CommandID)
		}
	}
	return true, nil
}

// refersToCommand reports whether records of kind act on a command of the
// log (interrupt, stdin, ...), which must be there. Env and mounts records
// are neither commands nor about one.
func refersToCommand(kind string) bool {
	return !ioproto.NamesCommand(kind) && kind != ioproto.KindEnv && kind != ioproto.KindMounts
}

// AppendEnv appends an env record giving the sandbox the variables env for
// every command appended after it, in every context and language, as if
// it had been created with them (PROTOCOL.md, *Sandbox environment*): how
// a claimed warm-pool sandbox is shaped after its claim instead of
// requiring a new container. The record's command ID is new
// (ioproto.EnvRecordIDPrefix and a random suffix); AppendEnv returns it
// for the caller's log. An env breaking ioproto.ValidateEnv, or naming a
// driver-internal variable (ioproto.IsDriverEnv), is refused with
// ioproto.ErrMalformed and nothing is appended: such a sandbox must be
// created with its env. ready is as for Append.
func (d *Dir) AppendEnv(ctx context.Context, env map[string]string, ready func() error) (id string, err error) {
	return d.appendState(ctx, ioproto.EnvRecordIDPrefix, func(id string) ioproto.Record { return ioproto.EnvRecord(id, env) }, ready)
}

// AppendMounts appends a mounts record naming paths, mount points added to
// the sandbox's running container (PROTOCOL.md, *Mounts after start*): the
// driver runs no later command until they are all mounted, also after a
// restart of the container, until the host has mounted them again. The
// record's command ID is new (ioproto.MountsRecordIDPrefix and a random
// suffix), and returned. ready is as for Append.
func (d *Dir) AppendMounts(ctx context.Context, paths []string, ready func() error) (id string, err error) {
	return d.appendState(ctx, ioproto.MountsRecordIDPrefix, func(id string) ioproto.Record { return ioproto.MountsRecord(id, paths) }, ready)
}

// appendState appends the state record rec makes with a new command ID of
// prefix and a random suffix, and returns the ID.
func (d *Dir) appendState(ctx context.Context, prefix string, rec func(id string) ioproto.Record, ready func() error) (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := prefix + hex.EncodeToString(b[:])
	if _, err := d.AppendContext(ctx, rec(id), ready); err != nil {
		return "", err
	}
	return id, nil
}

// isCommand reports whether records of kind get their own events file
// (exec, context operations, hibernation records), so their IDs are indexed and appended once.
func isCommand(kind string) bool {
	return kind == ioproto.KindExec || kind == ioproto.KindContext || kind == ioproto.KindSnapshot || kind == ioproto.KindRestore
}

// lookup reports whether command id is in the log and, if so, where its
// record ends.
func (d *Dir) lookup(ctx context.Context, id string) (end int64, ok bool, err error) {
	if err := d.ensureLoaded(ctx); err != nil {
		return 0, false, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.ids[id]
	return e.end, ok, nil
}

// Load reads the command log into the index if it is not loaded yet (see
// ensureLoaded). Append and Events load it when needed; Load lets a caller
// do it first, with its own context.
func (d *Dir) Load(ctx context.Context) error { return d.ensureLoaded(ctx) }

// ensureLoaded builds the index by reading the whole log once, without
// holding mu: the log is sandbox-controlled data, and mu is what a Delete
// takes (HoldAppends). One load runs at a time; other callers wait for it
// or for their ctx. A log refused as tampered stays refused (loadErr); a
// load cut short by its caller's ctx is retried by the next caller.
func (d *Dir) ensureLoaded(ctx context.Context) error {
	for {
		d.mu.Lock()
		if d.ids != nil || d.loadErr != nil {
			err := d.loadErr
			d.mu.Unlock()
			return err
		}
		if d.loading != nil {
			ch := d.loading
			d.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return ctx.Err()
			case <-d.done:
				return ErrClosed
			}
		}
		if err := d.addReaderLocked(); err != nil {
			d.mu.Unlock()
			return err
		}
		ch := make(chan struct{})
		d.loading = ch
		d.mu.Unlock()

		ids, order, size, partial, pending, err := d.scanLog(ctx)

		d.mu.Lock()
		d.loading = nil
		close(ch)
		switch {
		case err == nil:
			d.ids, d.order, d.size, d.partial, d.pendingSnap = ids, order, size, partial, pending
		case errors.Is(err, ErrTampered):
			d.loadErr = err
		}
		d.mu.Unlock()
		d.doneReader()
		return err
	}
}

// scanLog reads the log for ensureLoaded: bounded by MaxLogBytes (checked
// on the opened file, sparse files refused, see openBounded) and
// MaxLogRecords, and stopped by ctx or Close every loadCheckEvery records.
// The file must be sandboxd's own (a file the sandbox made and renamed
// onto io/stdin is refused before it is read).
// pending is the ID of the last snapshot record not followed by a restore
// record.
func (d *Dir) scanLog(ctx context.Context) (ids map[string]logEntry, order []string, size int64, partial bool, pending string, err error) {
	root, err := os.OpenRoot(d.path)
	if err != nil {
		return nil, nil, 0, false, "", err
	}
	defer root.Close()
	f, st, _, err := openBounded(root, ioproto.StdinFile, MaxLogBytes)
	if err != nil {
		return nil, nil, 0, false, "", fmt.Errorf("command log: %w", err)
	}
	defer f.Close()
	if err := checkOwnedByUs(st, "/io/"+ioproto.StdinFile); err != nil {
		return nil, nil, 0, false, "", err
	}
	size = st.Size()
	ids = make(map[string]logEntry)
	lr := ioproto.NewLineReader(f, 0, ioproto.MaxRecordLen)
	var checked int64
	for n := 0; ; n++ {
		if n%loadCheckEvery == 0 || lr.Offset()-checked >= checkEveryBytes {
			checked = lr.Offset()
			if err := ctx.Err(); err != nil {
				return nil, nil, 0, false, "", err
			}
			if d.closed() {
				return nil, nil, 0, false, "", ErrClosed
			}
		}
		line, ok, err := lr.Next()
		if err != nil {
			return nil, nil, 0, false, "", fmt.Errorf("read command log: %w", err)
		}
		// Lines appended after the size check are not sandboxd's (it is
		// the only writer, and it is not appending: the log is not loaded).
		if !ok || line.Start >= size {
			break
		}
		// Count every ID the driver would count as a command: valid exec
		// records, and malformed ones it answers under their ID. Interrupts
		// and stdin records only refer to commands.
		rec, id, perr := ioproto.ParseRecord(line.Data)
		if id == "" || (perr == nil && !ioproto.NamesCommand(rec.Type)) {
			continue
		}
		if perr == nil && line.Err == nil {
			switch {
			case rec.Type == ioproto.KindSnapshot && !rec.Live:
				pending = id
			case rec.Type == ioproto.KindRestore:
				pending = ""
			}
		}
		if _, seen := ids[id]; seen {
			continue
		}
		if len(ids) >= MaxLogRecords {
			return nil, nil, 0, false, "", fmt.Errorf("command log holds more than %d commands, more than sandboxd ever appends: %w", MaxLogRecords, ErrTampered)
		}
		e := logEntry{end: line.End}
		if perr == nil && line.Err == nil {
			e = entryOf(rec, line.End)
		}
		ids[id] = e
		if perr != nil || rec.Type == ioproto.KindExec {
			// Context and hibernation records are not the user's commands.
			order = append(order, id)
		}
	}
	return ids, order, size, size > lr.Offset(), pending, nil
}

// openLog opens the command log through an os.Root confined to io/ (the
// file stays open when the root is closed).
func (d *Dir) openLog(flag int) (*os.File, fs.FileInfo, error) {
	root, err := os.OpenRoot(d.path)
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	return openRegular(root, ioproto.StdinFile, flag)
}

// appendLocked appends one encoded record (a complete line) with
// ioproto.AppendLineTo: a single write(2) on an O_APPEND descriptor. It does
// not use ioproto.AppendLine because that opens a path: io/ belongs to the
// sandbox user, so sandboxed code could replace stdin with a symlink to a
// host file, and sandboxd (root) would append to it. Opening through os.Root
// confines the open to io/, and the owner check refuses a file the sandbox
// made itself. Call with mu held.
func (d *Dir) appendLocked(line []byte) error {
	f, st, err := d.openLog(os.O_WRONLY | os.O_APPEND)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := checkOwnedByUs(st, "/io/"+ioproto.StdinFile); err != nil {
		return err
	}
	if err := checkBounds(st, "/io/"+ioproto.StdinFile, MaxLogBytes); err != nil {
		return err
	}
	if d.partial {
		line = append([]byte{'\n'}, line...)
	}
	if err := ioproto.AppendLineTo(f, line); err != nil {
		n := len(line)
		if ae := (*ioproto.AppendError)(nil); errors.As(err, &ae) {
			n = ae.Written
		}
		d.size += int64(n)
		// Whatever part of the line was written is debris now.
		d.partial = n > 0 && line[n-1] != '\n'
		return fmt.Errorf("append to command log: %w", err)
	}
	d.size += int64(len(line))
	d.partial = false
	return nil
}
