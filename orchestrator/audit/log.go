package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"
)

// FileName is the log's current file in its directory. Rotated files are
// named by lumberjack: audit-<rotation time>.jsonl, which sorts by age.
const FileName = "audit.jsonl"

// Defaults of Config.
const (
	DefaultMaxFileBytes = 100 << 20
	DefaultMaxFiles     = 10
	DefaultQueueLen     = 4096
)

// Config says where the log lives and how large it may grow.
type Config struct {
	// Dir is the log's directory (sandboxd: STATE_DIR/audit), created
	// mode 0700: the records name tenants, users and paths.
	Dir string
	// MaxFileBytes is the size at which the current file is rotated,
	// rounded up to whole MiB (lumberjack's unit); 0: DefaultMaxFileBytes.
	MaxFileBytes int64
	// MaxFiles is the most files kept, the current one included (at least
	// 2); the oldest rotated file is deleted past it. 0: DefaultMaxFiles.
	// The log thus takes at most about MaxFiles × MaxFileBytes.
	MaxFiles int
	// QueueLen is the most records waiting for the writer; 0:
	// DefaultQueueLen.
	QueueLen int
	// Logger receives the drop warnings and write failures; nil: discarded.
	Logger *slog.Logger
}

// Log is the audit trail on disk: a JSON-lines file rotated by size, with
// a bounded number of files kept.
//
// Record never blocks: it queues the record for the one writer goroutine.
// When the queue is full (the disk slower than the calls, for long) the
// record is dropped and counted, rather than making sandbox operations
// wait on the audit. The writer, once it catches up, writes a "dropped"
// record with the count since the last one and logs a warning with it, so
// a gap in the trail is itself on the trail; Dropped gives the total.
//
// Records are written one write(2) each, without fsync: a sandboxd crash
// loses only the queued records, a host crash what the kernel had not yet
// flushed (seconds). Syncing each record would put a disk flush on every
// sandbox operation's path for a log whose loss the drop records already
// admit.
type Log struct {
	cfg     Config
	w       *lumberjack.Logger
	q       chan item
	pending atomic.Int64 // dropped since the last dropped record
	total   atomic.Int64 // dropped since Open
	done    chan struct{}
	close   sync.Once
	// hold, when set (tests), keeps the writer from starting until closed.
	hold chan struct{}
	// mu serialises closing q with Record's sends.
	mu     sync.RWMutex
	closed bool
}

// Open opens (creating if needed) the log in cfg.Dir and starts its writer.
func Open(cfg Config) (*Log, error) { return open(cfg, nil) }

func open(cfg Config, hold chan struct{}) (*Log, error) {
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = DefaultMaxFileBytes
	}
	if cfg.MaxFiles <= 0 {
		cfg.MaxFiles = DefaultMaxFiles
	}
	if cfg.MaxFiles < 2 {
		return nil, fmt.Errorf("audit: MaxFiles %d: keep at least 2 files (the current one and one rotated)", cfg.MaxFiles)
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = DefaultQueueLen
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	l := &Log{
		cfg: cfg,
		w: &lumberjack.Logger{
			Filename:   filepath.Join(cfg.Dir, FileName),
			MaxSize:    int((cfg.MaxFileBytes + 1<<20 - 1) >> 20),
			MaxBackups: cfg.MaxFiles - 1,
		},
		q:    make(chan item, cfg.QueueLen),
		done: make(chan struct{}),
		hold: hold,
	}
	go l.run()
	return l, nil
}

// Record queues e for writing, or drops it when the queue is full (see Log).
func (l *Log) Record(e Event) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		l.drop()
		return
	}
	select {
	case l.q <- item{e: e}:
	default:
		l.drop()
	}
}

// item is what the queue holds: a record, or a flush marker whose channel
// the writer closes once everything queued before it is written.
type item struct {
	e       Event
	flushed chan struct{}
}

// flush waits until every record queued before it is written (or the log
// is closed), so a query sees the calls that ended before it began. It
// may wait for the queue to have room, bounded by ctx: only the query
// waits, never a sandbox operation.
func (l *Log) flush(ctx context.Context) error {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return nil // Close wrote everything
	}
	done := make(chan struct{})
	select {
	case l.q <- item{flushed: done}:
		l.mu.RUnlock()
	case <-ctx.Done():
		l.mu.RUnlock()
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Log) drop() {
	l.pending.Add(1)
	l.total.Add(1)
}

// Dropped returns the number of records dropped since Open.
func (l *Log) Dropped() int64 { return l.total.Load() }

// run is the writer: it writes the queued records until Close, and a
// dropped record before the first record written after drops.
func (l *Log) run() {
	defer close(l.done)
	if l.hold != nil {
		<-l.hold
	}
	for it := range l.q {
		l.reportDrops()
		if it.flushed != nil {
			close(it.flushed)
			continue
		}
		l.write(it.e)
	}
	l.reportDrops()
}

// reportDrops writes a dropped record for the drops since the last one.
func (l *Log) reportDrops() {
	n := l.pending.Swap(0)
	if n == 0 {
		return
	}
	l.cfg.Logger.Warn("audit records dropped: the queue was full", "dropped", n, "dropped_total", l.total.Load(), "queue", l.cfg.QueueLen)
	l.write(Event{Time: time.Now(), Action: ActionDropped, Outcome: OutcomeOK, Dropped: n})
}

func (l *Log) write(e Event) {
	b, err := json.Marshal(e)
	if err != nil { // an Event always marshals; kept for the log's sake
		l.cfg.Logger.Error("audit record", "error", err)
		return
	}
	if _, err := l.w.Write(append(b, '\n')); err != nil {
		l.cfg.Logger.Error("writing the audit log", "error", err)
	}
}

// Close writes the queued records and closes the file. Records after Close
// are dropped.
func (l *Log) Close() error {
	l.close.Do(func() {
		l.mu.Lock()
		l.closed = true
		close(l.q)
		l.mu.Unlock()
	})
	<-l.done
	return l.w.Close()
}
