package driver

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// collect runs an outputReader over the given reads and returns its items.
func collect(t *testing.T, markers bool, reads ...string) []outputItem {
	t.Helper()
	out := make(chan outputItem, 1024)
	o := &outputReader{stream: "stdout", markers: markers, out: out, stop: make(chan struct{})}
	o.pump(&chunkReader{chunks: reads})
	close(out)
	var items []outputItem
	for it := range out {
		items = append(items, it)
	}
	return items
}

// chunkReader returns one chunk per Read, to model how pipe reads split data.
type chunkReader struct{ chunks []string }

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	if c.chunks[0] == "" {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}

// render writes text items and markers as "<n>" for comparison.
func render(items []outputItem) string {
	var b strings.Builder
	for _, it := range items {
		switch {
		case it.eof:
			b.WriteString("<eof>")
		case it.sync > 0:
			b.WriteString("<" + string(rune('0'+it.sync)) + ">")
		default:
			b.WriteString(it.text)
		}
	}
	return b.String()
}

func marker(n int) string { return "\x00\x1eSBX-SYNC:" + string(rune('0'+n)) + "\x1e\x00" }

func TestOutputReaderMarkers(t *testing.T) {
	m1, m2 := marker(1), marker(2)
	tests := []struct {
		name  string
		reads []string
		want  string
	}{
		{"plain", []string{"hello\n"}, "hello\n<eof>"},
		{"marker between text", []string{"a" + m1 + "b"}, "a<1>b<eof>"},
		{"marker split across reads", []string{"a" + m1[:3], m1[3:9], m1[9:] + "b" + m2}, "a<1>b<2><eof>"},
		{"prefix-like bytes that are no marker", []string{"x\x00\x1eSBX", "-nope\n"}, "x\x00\x1eSBX-nope\n<eof>"},
		{"bad number passes through", []string{"\x00\x1eSBX-SYNC:zz\x1e\x00"}, "\x00\x1eSBX-SYNC:zz\x1e\x00<eof>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := render(collect(t, true, tt.reads...)); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
	// Without marker recognition (bash), marker bytes are ordinary output.
	if got := render(collect(t, false, "a"+m1)); !strings.HasPrefix(got, "a\x00\x1eSBX-SYNC:1") {
		t.Fatalf("bash output altered: %q", got)
	}
}

func TestOutputReaderUTF8(t *testing.T) {
	euro := "€" // three bytes
	items := collect(t, true, "price: "+euro[:1], euro[1:]+"\n")
	if got := render(items); got != "price: €\n<eof>" {
		t.Fatalf("a character split across reads was mangled: %q", got)
	}
	items = collect(t, true, "bad \xff byte\n")
	if got := render(items); got != "bad \uFFFD byte\n<eof>" {
		t.Fatalf("invalid UTF-8 not replaced: %q", got)
	}
	for _, it := range items {
		if !utf8.ValidString(it.text) {
			t.Fatalf("invalid UTF-8 in a chunk: %q", it.text)
		}
	}
}

func TestOutputReaderChunkLimit(t *testing.T) {
	big := strings.Repeat("é", 100_000) // 200 kB
	items := collect(t, false, big)
	var joined bytes.Buffer
	for _, it := range items {
		if len(it.text) > 64<<10 {
			t.Fatalf("chunk of %d bytes exceeds the limit", len(it.text))
		}
		if !utf8.ValidString(it.text) {
			t.Fatal("a chunk boundary split a character")
		}
		joined.WriteString(it.text)
	}
	if joined.String() != big {
		t.Fatal("chunks do not add up to the output")
	}
}

// TestOutputReaderWholeLines: on a real pipe, a line written in pieces within
// the line wait is one chunk, and a line that stays partial is still
// emitted without waiting for its end. The wait is widened from its 5 ms
// so that a writer descheduled on a loaded machine does not split a line:
// the test is of the mechanism, not of the machine's scheduling.
func TestOutputReaderWholeLines(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out := make(chan outputItem, 64)
	stop := make(chan struct{})
	defer close(stop)
	go (&outputReader{stream: "stdout", markers: true, out: out, stop: stop, lineWait: time.Second}).pump(r)
	next := func(what string) outputItem {
		t.Helper()
		select {
		case it := <-out:
			return it
		case <-time.After(10 * time.Second):
			t.Fatalf("no item for %s", what)
		}
		return outputItem{}
	}
	for i := range 50 {
		w.WriteString("x")
		time.Sleep(500 * time.Microsecond)
		w.WriteString("\n")
		if it := next("a print"); it.text != "x\n" {
			t.Fatalf("print %d: chunk %q, want \"x\\n\"", i, it.text)
		}
	}
	// Whole lines go at once; a partial tail follows on its own.
	w.WriteString("a\nb\npart")
	var got string
	for !strings.HasSuffix(got, "part") {
		got += next("lines and a partial tail").text
	}
	if got != "a\nb\npart" {
		t.Fatalf("got %q", got)
	}
	// A partial line is emitted while the writer is still silent.
	w.WriteString("prompt> ")
	if it := next("a partial line"); it.text != "prompt> " {
		t.Fatalf("partial line: %q", it.text)
	}
	w.WriteString("y\n" + marker(1))
	if it := next("text before a marker"); it.text != "y\n" {
		t.Fatalf("before the marker: %q", it.text)
	}
	if it := next("the marker"); it.sync != 1 {
		t.Fatalf("want marker 1, got %+v", it)
	}
	w.Close()
	if it := next("eof"); !it.eof {
		t.Fatalf("want eof, got %+v", it)
	}
}
