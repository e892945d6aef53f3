package ioproto

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// FuzzLineReader: both /io files (the command log and the events files) are
// appended to while they are read, in pieces of any size. Whatever the
// content and however it arrives, the reader returns exactly the complete
// lines, in order, with their offsets, cuts lines longer than its limit to
// the limit (once, flagged), and never returns a line before its newline
// has arrived, except as a cut over-long line.
func FuzzLineReader(f *testing.F) {
	f.Add([]byte("{\"a\":1}\n{\"b\":2}\n{\"c\":"), uint8(3), uint8(10))
	f.Add([]byte("\n\n\nx\n"), uint8(1), uint8(1))
	f.Add([]byte("0123456789abcdef\nshort\n0123456789abcdef"), uint8(5), uint8(8))
	f.Add([]byte("no newline at all"), uint8(2), uint8(200))
	dir := f.TempDir() // one for all inputs: a directory per input costs more than the input
	f.Fuzz(func(t *testing.T, data []byte, pieces, maxLine uint8) {
		limit := int(maxLine) + 1
		w, err := os.CreateTemp(dir, "log")
		if err != nil {
			t.Fatal(err)
		}
		defer os.Remove(w.Name())
		defer w.Close()
		rf, err := os.Open(w.Name())
		if err != nil {
			t.Fatal(err)
		}
		defer rf.Close()
		r := NewLineReader(rf, 0, limit)

		var got []Line
		readAll := func() {
			for {
				l, ok, err := r.Next()
				if err != nil {
					t.Fatalf("Next: %v", err)
				}
				if !ok {
					return
				}
				l.Data = bytes.Clone(l.Data)
				got = append(got, l)
			}
		}
		n := int(pieces%8) + 1
		size := (len(data) + n - 1) / n
		for off := 0; off < len(data); off += max(size, 1) {
			if _, err := w.Write(data[off:min(off+max(size, 1), len(data))]); err != nil {
				t.Fatal(err)
			}
			readAll()
		}
		readAll()

		// The model: every complete line, cut when over-long; an incomplete
		// last line only when already over-long.
		var want []Line
		start := 0
		for start < len(data) {
			i := bytes.IndexByte(data[start:], '\n')
			if i < 0 {
				if rest := data[start:]; len(rest) > limit {
					want = append(want, Line{Data: rest[:limit], Start: int64(start), Err: ErrLineTooLong})
				}
				break
			}
			line := data[start : start+i]
			if len(line) > limit {
				want = append(want, Line{Data: line[:limit], Start: int64(start), Err: ErrLineTooLong})
			} else {
				want = append(want, Line{Data: line, Start: int64(start), End: int64(start + i + 1)})
			}
			start += i + 1
		}

		if len(got) != len(want) {
			t.Fatalf("%d lines read in %d pieces with limit %d, want %d:\ngot  %q\nwant %q", len(got), n, limit, len(want), lineData(got), lineData(want))
		}
		for i := range want {
			g, w := got[i], want[i]
			if !bytes.Equal(g.Data, w.Data) || g.Start != w.Start || !errors.Is(g.Err, w.Err) || (w.Err == nil && g.End != w.End) {
				t.Fatalf("line %d = %q [%d,%d) %v; want %q [%d,%d) %v", i, g.Data, g.Start, g.End, g.Err, w.Data, w.Start, w.End, w.Err)
			}
		}
		if last := int64(bytes.LastIndexByte(data, '\n') + 1); r.Offset() < last || r.Offset() > int64(len(data)) {
			t.Fatalf("offset %d after reading everything; want between the last newline's end %d and the size %d", r.Offset(), last, len(data))
		}
	})
}

func lineData(ls []Line) []string {
	var s []string
	for _, l := range ls {
		s = append(s, string(l.Data))
	}
	return s
}
