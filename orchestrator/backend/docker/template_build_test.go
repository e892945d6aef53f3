package docker

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

type entry struct {
	name, link string
	typ        byte
	mode       int64
	body       string
	xattr      bool
}

func makeTar(t *testing.T, gz bool, entries []entry) []byte {
	t.Helper()
	var b bytes.Buffer
	var w io.Writer = &b
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&b)
		w = zw
	}
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), Uid: 4242, Gid: 4242, Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if e.xattr {
			h.PAXRecords = map[string]string{"SCHILY.xattr.security.capability": "x"}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return b.Bytes()
}

type out struct {
	name, link string
	typ        byte
	mode       int64
	uid        int
	pax        int
}

func readOut(t *testing.T, b []byte) []out {
	t.Helper()
	var got []out
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out{h.Name, h.Linkname, h.Typeflag, h.Mode, h.Uid, len(h.PAXRecords)})
	}
}

// TestFilterArchive: an uploaded archive is hostile; only what the copy
// names reaches the image, renamed under its destination, owned as asked,
// without special bits, devices, links out or extended attributes.
func TestFilterArchive(t *testing.T) {
	hostile := []entry{
		{name: "conf/", typ: tar.TypeDir, mode: 0o755},
		{name: "conf/a.txt", typ: tar.TypeReg, mode: 0o4755, body: "a", xattr: true},
		{name: "./conf/sub/b.txt", typ: tar.TypeReg, mode: 0o644, body: "b"},
		{name: "conf/../../etc/passwd", typ: tar.TypeReg, mode: 0o644, body: "x"},
		{name: "/etc/shadow", typ: tar.TypeReg, mode: 0o644, body: "x"},
		{name: "conf/dev", typ: tar.TypeChar, mode: 0o666},
		{name: "conf/fifo", typ: tar.TypeFifo, mode: 0o666},
		{name: "conf/hard-out", typ: tar.TypeLink, link: "other.txt"},
		{name: "conf/hard-in", typ: tar.TypeLink, link: "conf/a.txt"},
		{name: "conf/sym", typ: tar.TypeSymlink, link: "/etc/passwd", mode: 0o777},
		{name: "other.txt", typ: tar.TypeReg, mode: 0o644, body: "o"},
	}
	for _, gz := range []bool{false, true} {
		var b bytes.Buffer
		n, err := filterArchive(bytes.NewReader(makeTar(t, gz, hostile)), &b, core.TemplateCopy{Archive: strings.Repeat("a", 64), Src: "conf", Dest: "/opt/t/", Owner: core.TemplateUserSandbox}, 1<<20)
		if err != nil {
			t.Fatalf("gzip %v: %v", gz, err)
		}
		got := readOut(t, b.Bytes())
		want := []out{
			{"opt/t/", "", tar.TypeDir, 0o755, 1000, 0},
			{"opt/t/a.txt", "", tar.TypeReg, 0o755, 1000, 0},
			{"opt/t/sub/b.txt", "", tar.TypeReg, 0o644, 1000, 0},
			{"opt/t/hard-in", "opt/t/a.txt", tar.TypeLink, 0, 1000, 0},
			{"opt/t/sym", "/etc/passwd", tar.TypeSymlink, 0o777, 1000, 0},
		}
		if n != len(want) || !slices.Equal(got, want) {
			t.Errorf("gzip %v: %d entries\n got %+v\nwant %+v", gz, n, got, want)
		}
	}

	// A file into a directory, a file renamed, everything with a mode.
	file := []entry{{name: "f.txt", typ: tar.TypeReg, mode: 0o600, body: "f"}}
	for _, c := range []struct {
		cp   core.TemplateCopy
		want string
		mode int64
	}{
		{core.TemplateCopy{Src: "f.txt", Dest: "/opt/d/"}, "opt/d/f.txt", 0o600},
		{core.TemplateCopy{Src: "f.txt", Dest: "/opt/renamed.txt", Mode: 0o640}, "opt/renamed.txt", 0o640},
		{core.TemplateCopy{Src: ".", Dest: "/opt/all"}, "opt/all/f.txt", 0o600},
	} {
		c.cp.Archive = strings.Repeat("a", 64)
		var b bytes.Buffer
		if _, err := filterArchive(bytes.NewReader(makeTar(t, false, file)), &b, c.cp, 1<<20); err != nil {
			t.Fatal(err)
		}
		if got := readOut(t, b.Bytes()); len(got) != 1 || got[0].name != c.want || got[0].mode != c.mode || got[0].uid != 0 {
			t.Errorf("copy %+v: %+v; want %s, mode %#o, root's", c.cp, got, c.want, c.mode)
		}
	}

	// Not an archive: a clear FAILED_PRECONDITION, not a crash.
	_, err := filterArchive(strings.NewReader(strings.Repeat("not a tar ", 100)), io.Discard, core.TemplateCopy{Archive: strings.Repeat("a", 64), Src: ".", Dest: "/opt"}, 1<<20)
	var ae *archiveError
	if !errors.As(err, &ae) || !errors.Is(ae.err, core.ErrFailedPrecondition) {
		t.Errorf("garbage: %v; want an archive error, FAILED_PRECONDITION", err)
	}
}

// TestFilterArchiveBomb: what an archive unpacks to is bounded while it
// is read, whatever its compressed size.
func TestFilterArchiveBomb(t *testing.T) {
	big := makeTar(t, true, []entry{{name: "zeros", typ: tar.TypeReg, mode: 0o644, body: strings.Repeat("\x00", 4<<20)}})
	if len(big) > 64<<10 {
		t.Fatalf("the test archive is %d bytes compressed", len(big))
	}
	_, err := filterArchive(bytes.NewReader(big), io.Discard, core.TemplateCopy{Archive: strings.Repeat("a", 64), Src: ".", Dest: "/opt"}, 1<<20)
	var ae *archiveError
	if !errors.As(err, &ae) || !errors.Is(ae.err, core.ErrResourceExhausted) {
		t.Errorf("4 MiB unpacked under a 1 MiB bound: %v; want RESOURCE_EXHAUSTED", err)
	}
}

func TestAptHosts(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "sources.list.d"), 0o755)
	os.WriteFile(filepath.Join(dir, "sources.list"), []byte("# deb http://commented.example/debian bookworm main\ndeb [arch=amd64] http://mirror.example:8080/debian bookworm main\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "sources.list.d", "a.sources"), []byte("Types: deb\nURIs: https://security.example/debian-security http://mirror.example/x\nSuites: bookworm\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "sources.list.d", "b.disabled"), []byte("deb http://ignored.example/ x main\n"), 0o644)
	if got, want := aptHosts(dir), []string{"mirror.example", "security.example"}; !slices.Equal(got, want) {
		t.Errorf("aptHosts = %v; want %v", got, want)
	}
}
