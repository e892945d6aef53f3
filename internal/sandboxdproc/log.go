package sandboxdproc

import (
	"strings"
	"sync"
)

// Log keeps the last lines of sandboxd's log, up to a number of bytes, so
// that a long run does not hold all of it. It is safe for concurrent use:
// the process's reader adds lines while the caller reads them.
type Log struct {
	mu    sync.Mutex
	max   int
	size  int
	lines []string
}

func (l *Log) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	l.size += len(line) + 1
	for l.size > l.max && len(l.lines) > 1 {
		l.size -= len(l.lines[0]) + 1
		l.lines = l.lines[1:]
	}
}

// String is the lines kept, each ended by a newline.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 0 {
		return ""
	}
	return strings.Join(l.lines, "\n") + "\n"
}
