package driver

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Each kernel writes a sync marker to its stdout and stderr pipes before each
// control message, after all the output written before it, so the driver
// can emit output and rich results in the order the user's code produced
// them even though they travel through different pipes.
// The marker is NUL, RS, a tag, the kernel's nonce, the number, RS, NUL:
//
//	\x00\x1eSBX-SYNC:<nonce>:<n>\x1e\x00
//
// The nonce is 128 random bits, new for every kernel, which the driver gives
// the kernel over its control pipe (never in the environment, which
// subprocesses inherit and /proc shows). Output is user data and may hold
// any bytes, marker-like ones included; without the nonce they are not a
// marker and pass through as text, so they can neither swallow output nor
// reorder it. (Code running inside the kernel process can read the nonce
// from its memory; it can then only disorder its own command's output.)
var (
	syncPrefix = []byte("\x00\x1eSBX-SYNC:")
	syncSuffix = []byte("\x1e\x00")
)

// newNonce returns a fresh marker nonce: 32 hex digits.
func newNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// outputItem is what an output pipe yields: a text chunk, or a sync marker.
type outputItem struct {
	stream string // ioproto.EventStdout or ioproto.EventStderr
	text   string
	sync   int64 // > 0 for a marker
	eof    bool
}

// outputReader turns one pipe's bytes into valid UTF-8 chunks of at most
// ioproto.MaxChunk bytes and sync markers. It holds back only the bytes that
// might be the start of a marker or of a multi-byte character.
type outputReader struct {
	stream  string
	markers bool // recognise sync markers (kernels), not for bash
	// nonce is the kernel's marker nonce; empty (unit tests only) means
	// markers without one.
	nonce  string
	prefix []byte // the marker up to the number, from nonce
	out    chan<- outputItem
	stop   <-chan struct{}
	carry  []byte
	// lineWait replaces defaultLineWait when set (tests on a loaded
	// machine, where a goroutine can be descheduled for milliseconds).
	lineWait time.Duration
}

// send delivers an item unless the consumer has gone away.
func (o *outputReader) send(it outputItem) {
	select {
	case o.out <- it:
	case <-o.stop:
	}
}

// defaultLineWait bounds how long the reader waits for the rest of a line after a
// read that ended mid-line. Python's print() writes its text and its newline
// with two write calls; without the wait a pipe read often falls between them
// and one print becomes two events, "text" and "\n". A line that stays
// partial (a prompt, a progress bar) is emitted once the bound passes.
const defaultLineWait = 5 * time.Millisecond

// deadlineReader is a pipe whose reads can time out (an *os.File from
// os.Pipe). Readers without deadlines (unit tests' fakes) are not waited on.
type deadlineReader interface {
	io.Reader
	SetReadDeadline(time.Time) error
}

// pump reads r until EOF and sends items to out. It returns after sending the
// final item with eof set, or when stop is closed (nobody listens any more).
func (o *outputReader) pump(r io.Reader) {
	buf := make([]byte, ioproto.MaxChunk)
	dr, _ := r.(deadlineReader)
	filled := 0
	for {
		n, err := r.Read(buf[filled:])
		filled += n
		if n > 0 && err == nil && dr != nil {
			filled, err = o.completeLine(dr, buf, filled)
		}
		if filled > 0 {
			o.feed(buf[:filled])
			filled = 0
		}
		if err != nil {
			if len(o.carry) > 0 {
				o.emitText(o.carry, true)
				o.carry = nil
			}
			o.send(outputItem{stream: o.stream, eof: true})
			return
		}
	}
}

// completeLine is called when buf[:filled] was just read. If it ends
// mid-line, it reads on for up to the line wait so that a line written in pieces
// within a few milliseconds is emitted whole. If the line is still partial
// then, the complete lines before it are fed at once and its tail gets one
// more wait to end. It returns what of buf is left to feed; a read error
// (EOF) ends the wait and is returned.
func (o *outputReader) completeLine(r deadlineReader, buf []byte, filled int) (int, error) {
	defer r.SetReadDeadline(time.Time{})
	wait := cmp.Or(o.lineWait, defaultLineWait)
	for round := 0; round < 2; round++ {
		if err := r.SetReadDeadline(time.Now().Add(wait)); err != nil {
			return filled, nil
		}
		for filled < len(buf) && !o.lineEnded(buf[:filled]) {
			n, err := r.Read(buf[filled:])
			filled += n
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				return filled, err
			}
		}
		if filled == len(buf) || o.lineEnded(buf[:filled]) {
			return filled, nil
		}
		nl := bytes.LastIndexByte(buf[:filled], '\n')
		if nl < 0 || round == 1 {
			return filled, nil
		}
		// Emit the whole lines now; the partial tail waits once more.
		o.feed(buf[:nl+1])
		filled = copy(buf, buf[nl+1:filled])
	}
	return filled, nil
}

// lineEnded reports whether p ends at a line's end, or with a sync marker
// (after which the kernel waits for the driver: waiting longer is useless).
func (o *outputReader) lineEnded(p []byte) bool {
	return len(p) > 0 && p[len(p)-1] == '\n' || o.markers && bytes.HasSuffix(p, syncSuffix)
}

// feed processes newly read bytes.
func (o *outputReader) feed(p []byte) {
	if o.prefix == nil {
		o.prefix = syncPrefix
		if o.nonce != "" {
			o.prefix = append(append(append([]byte(nil), syncPrefix...), o.nonce...), ':')
		}
	}
	// A marker's length: prefix, up to 20 digits, suffix.
	maxSyncMarker := len(o.prefix) + 20 + len(syncSuffix)
	// p is the pump's buffer, reused by the next read: everything kept past
	// this call is copied (carry, text), so p itself needs no copy.
	data := p
	if len(o.carry) > 0 {
		data = append(o.carry, p...)
	}
	o.carry = nil
	for o.markers {
		i := bytes.Index(data, o.prefix)
		if i < 0 {
			break
		}
		o.emitText(data[:i], true)
		rest := data[i+len(o.prefix):]
		j := bytes.Index(rest, syncSuffix)
		if j < 0 {
			if len(data)-i < maxSyncMarker {
				// The marker is still arriving.
				o.carry = append([]byte(nil), data[i:]...)
				return
			}
			// Not a marker after all: pass the bytes through.
			o.emitText(data[i:i+len(o.prefix)], true)
			data = rest
			continue
		}
		n, err := strconv.ParseInt(string(rest[:j]), 10, 64)
		if err != nil || n <= 0 {
			o.emitText(data[i:i+len(o.prefix)], true)
			data = rest
			continue
		}
		o.send(outputItem{stream: o.stream, sync: n})
		data = rest[j+len(syncSuffix):]
	}
	// Hold back a tail that could begin a marker.
	keep := 0
	if o.markers {
		keep = partialSuffixLen(data, o.prefix)
	}
	o.carry = append(o.carry, o.emitText(data[:len(data)-keep], false)...)
	o.carry = append(o.carry, data[len(data)-keep:]...)
}

// emitText sends p as chunks of valid UTF-8. Unless final, an incomplete
// multi-byte character at the end is returned instead of sent, to be
// completed by the next read.
func (o *outputReader) emitText(p []byte, final bool) []byte {
	var rest []byte
	if !final {
		cut := incompleteUTF8Tail(p)
		p, rest = p[:len(p)-cut], append([]byte(nil), p[len(p)-cut:]...)
	}
	for len(p) > 0 {
		n := min(len(p), ioproto.MaxChunk)
		// Do not split a character between chunks.
		for n < len(p) && n > 0 && !utf8.RuneStart(p[n]) {
			n--
		}
		if n == 0 {
			n = min(len(p), ioproto.MaxChunk)
		}
		o.send(outputItem{stream: o.stream, text: validText(p[:n])})
		p = p[n:]
	}
	return rest
}

// validText returns p as a string, with each run of invalid UTF-8 replaced
// by U+FFFD. Output is nearly always valid, and utf8.Valid checks it eight
// ASCII bytes at a time, about three times as fast as ToValidUTF8's rune by
// rune scan, which only the rare invalid chunk pays for.
func validText(p []byte) string {
	if utf8.Valid(p) {
		return string(p)
	}
	return strings.ToValidUTF8(string(p), "\uFFFD")
}

// incompleteUTF8Tail returns how many bytes at the end of p are the start of
// a multi-byte character whose remaining bytes have not arrived yet.
func incompleteUTF8Tail(p []byte) int {
	for i := 1; i <= 3 && i <= len(p); i++ {
		c := p[len(p)-i]
		if !utf8.RuneStart(c) {
			continue
		}
		if c < utf8.RuneSelf {
			return 0
		}
		need := 0
		switch {
		case c&0xE0 == 0xC0:
			need = 2
		case c&0xF0 == 0xE0:
			need = 3
		case c&0xF8 == 0xF0:
			need = 4
		default:
			return 0
		}
		if i < need {
			return i
		}
		return 0
	}
	return 0
}

// partialSuffixLen returns the length of the longest proper prefix of marker
// that p ends with.
func partialSuffixLen(p, marker []byte) int {
	for k := min(len(marker)-1, len(p)); k > 0; k-- {
		if bytes.HasSuffix(p, marker[:k]) {
			return k
		}
	}
	return 0
}
