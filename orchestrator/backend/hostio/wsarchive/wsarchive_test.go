package wsarchive

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func openRoot(t *testing.T, dir string) *os.Root {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root
}

func mkdir(t *testing.T, p string, perm fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, p string, data []byte, perm fs.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// node is what a tree holds at a path, as compared after a round trip.
type node struct {
	typ   fs.FileMode
	perm  fs.FileMode
	data  string // a file's content, a link's target
	mtime time.Time
	uid   uint32
	nlink uint64
}

// snapshot describes the tree at dir, without following symlinks.
func snapshot(t *testing.T, dir string) map[string]node {
	t.Helper()
	out := map[string]node{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		sys := st.Sys().(*syscall.Stat_t)
		n := node{typ: st.Mode().Type(), perm: st.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky), mtime: st.ModTime(), uid: sys.Uid, nlink: uint64(sys.Nlink)}
		switch {
		case st.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			n.data = string(b)
		case st.Mode().Type() == fs.ModeSymlink:
			n.data, err = os.Readlink(p)
			if err != nil {
				return err
			}
			n.mtime = time.Time{} // not kept
		}
		out[rel] = n
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// entries lists an archive's entries: name, type and link target.
func entries(t *testing.T, archive []byte) []tar.Header {
	t.Helper()
	var out []tar.Header
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, *hdr)
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown to another user)")
	}
}

// TestRoundTrip archives a tree and extracts it elsewhere: the same tree
// comes back, symlinks as links (never followed), modes without setuid,
// mtimes, everything owned by the Owner.
func TestRoundTrip(t *testing.T) {
	requireRoot(t)
	src := t.TempDir()
	big := make([]byte, 3<<20)
	rand.Read(big)
	mkdir(t, filepath.Join(src, "a", "b"), 0o750)
	mkdir(t, filepath.Join(src, "ro"), 0o755)
	writeFile(t, filepath.Join(src, "empty"), nil, 0o644)
	writeFile(t, filepath.Join(src, "a", "small.txt"), []byte("hello\n"), 0o640)
	writeFile(t, filepath.Join(src, "a", "b", "big.bin"), big, 0o600)
	writeFile(t, filepath.Join(src, "setuid"), []byte("#!/bin/sh\n"), 0o4755|fs.ModeSetuid)
	if err := os.Chmod(filepath.Join(src, "setuid"), 0o755|fs.ModeSetuid|fs.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(src, "ro", "inside"), []byte("x"), 0o444)
	if err := os.Chmod(filepath.Join(src, "ro"), 0o555); err != nil { // its file must still be extracted
		t.Fatal(err)
	}
	// Names that must round-trip: not UTF-8, with a newline, longer than
	// ustar's 100 bytes.
	odd := "bad\xff\xfename\nnewline"
	writeFile(t, filepath.Join(src, odd), []byte("odd"), 0o644)
	long := strings.Repeat("l", 200)
	mkdir(t, filepath.Join(src, long), 0o755)
	writeFile(t, filepath.Join(src, long, strings.Repeat("m", 150)), []byte("long"), 0o644)
	symlink(t, "/etc/passwd", filepath.Join(src, "passwd"))
	symlink(t, "../../x", filepath.Join(src, "a", "up"))
	symlink(t, "a/b", filepath.Join(src, "inner"))
	// A hard link: archived as a second regular file.
	if err := os.Link(filepath.Join(src, "a", "small.txt"), filepath.Join(src, "hard")); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2021, 3, 4, 5, 6, 7, 123456789, time.UTC)
	i := 0
	filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if d.Type()&fs.ModeSymlink == 0 {
			i++
			if err := os.Chtimes(p, time.Time{}, base.Add(time.Duration(i)*time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	})
	before := snapshot(t, src)

	var buf bytes.Buffer
	st, err := Write(context.Background(), &buf, openRoot(t, src), nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if st.SkippedCount != 0 {
		t.Errorf("Write skipped %v", st.Skipped)
	}
	wantBytes := int64(len(big) + len("hello\n")*2 + len("#!/bin/sh\n") + 1 + 3 + 4)
	if st.Bytes != wantBytes || st.Entries != len(before) {
		t.Errorf("Write stats: %d entries, %d bytes; want %d, %d", st.Entries, st.Bytes, len(before), wantBytes)
	}
	// The symlink to /etc/passwd is a link entry, not passwd's content.
	for _, hdr := range entries(t, buf.Bytes()) {
		if hdr.Name == "workspace/passwd" && (hdr.Typeflag != tar.TypeSymlink || hdr.Linkname != "/etc/passwd" || hdr.Size != 0) {
			t.Errorf("passwd archived as type %q -> %q, %d bytes; want a symlink", hdr.Typeflag, hdr.Linkname, hdr.Size)
		}
		if hdr.Uid != 0 || hdr.Uname != "" {
			t.Errorf("%s carries owner %d %q; the archive keeps no owner", hdr.Name, hdr.Uid, hdr.Uname)
		}
	}

	dst := t.TempDir()
	xst, err := Extract(context.Background(), bytes.NewReader(buf.Bytes()), openRoot(t, dst), nil, Owner{1000, 1000}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if xst.Bytes != wantBytes || xst.Entries != st.Entries || xst.SkippedCount != 0 {
		t.Errorf("Extract stats %+v; want %d entries, %d bytes, none skipped", xst, st.Entries, wantBytes)
	}
	after := snapshot(t, dst)
	for rel, want := range before {
		got, ok := after[rel]
		if !ok {
			t.Errorf("%q missing after the round trip", rel)
			continue
		}
		want.perm &^= fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky
		if got.typ != want.typ || got.perm != want.perm || got.data != want.data {
			t.Errorf("%q: type %v perm %v data %.20q; want %v %v %.20q", rel, got.typ, got.perm, got.data, want.typ, want.perm, want.data)
		}
		if !got.mtime.Equal(want.mtime) {
			t.Errorf("%q: mtime %v; want %v", rel, got.mtime, want.mtime)
		}
		if got.uid != 1000 {
			t.Errorf("%q: owner %d; want 1000", rel, got.uid)
		}
		if got.typ.IsRegular() && got.nlink != 1 {
			t.Errorf("%q: %d links; hard links come back as separate files", rel, got.nlink)
		}
	}
	for rel := range after {
		if _, ok := before[rel]; !ok {
			t.Errorf("%q appeared after the round trip", rel)
		}
	}
	if after["setuid"].perm != 0o755 {
		t.Errorf("setuid file's mode %v; want 0755 (setuid and setgid dropped)", after["setuid"].perm)
	}
}

// TestWriteSkipsSpecialFiles: FIFOs and sockets are skipped with a reason,
// and Write does not block on a FIFO nobody writes to.
func TestWriteSkipsSpecialFiles(t *testing.T) {
	src := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(src, "sock")
	if len(sock) < 100 {
		lis, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
	}
	writeFile(t, filepath.Join(src, "kept"), []byte("k"), 0o644)
	st, archive := writeWithin(t, src, nil, Limits{})
	if !slices.Contains(st.Skipped, "fifo: a FIFO") {
		t.Errorf("Skipped = %q; want fifo: a FIFO", st.Skipped)
	}
	if len(sock) < 100 && !slices.Contains(st.Skipped, "sock: a socket") {
		t.Errorf("Skipped = %q; want sock: a socket", st.Skipped)
	}
	if st.SkippedCount != len(st.Skipped) {
		t.Errorf("SkippedCount %d, listed %d", st.SkippedCount, len(st.Skipped))
	}
	var names []string
	for _, hdr := range entries(t, archive) {
		names = append(names, hdr.Name)
	}
	if !slices.Equal(names, []string{"workspace/", "workspace/kept"}) {
		t.Errorf("archive holds %q", names)
	}
}

// writeWithin is Write bounded in time: a Write that blocks fails the test.
func writeWithin(t *testing.T, src string, globals *os.File, lim Limits) (Stats, []byte) {
	t.Helper()
	type result struct {
		st  Stats
		buf []byte
		err error
	}
	done := make(chan result, 1)
	root := openRoot(t, src)
	go func() {
		var buf bytes.Buffer
		st, err := Write(context.Background(), &buf, root, globals, lim)
		done <- result{st, buf.Bytes(), err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.st, r.buf
	case <-time.After(10 * time.Second):
		t.Fatal("Write blocked")
	}
	return Stats{}, nil
}

// TestFileSwappedForFIFO: a regular file the sandbox replaced with a FIFO
// after the listing is skipped when opened, without blocking.
func TestFileSwappedForFIFO(t *testing.T) {
	src := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(src, "f"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := &archiver{ctx: context.Background(), ws: openRoot(t, src), tw: tar.NewWriter(io.Discard), b: budget{lim: Limits{}.withDefaults()}}
	done := make(chan error, 1)
	go func() { done <- a.file("f") }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("archiving a FIFO opened as a file blocked")
	}
	if a.st.Entries != 0 || len(a.st.Skipped) != 1 || !strings.HasPrefix(a.st.Skipped[0], "f: a FIFO") {
		t.Errorf("stats %+v; want f skipped as a FIFO", a.st)
	}
}

// TestContentSizeChanged: a file that shrank after its Stat is padded with
// zeros to the declared size, one that grew is cut there.
func TestContentSizeChanged(t *testing.T) {
	for name, tc := range map[string]struct {
		data string
		size int64
		want string
	}{
		"shrank": {"abc", 6, "abc\x00\x00\x00"},
		"grew":   {"abcdefgh", 3, "abc"},
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			a := &archiver{ctx: context.Background(), tw: tar.NewWriter(&buf)}
			if err := a.tw.WriteHeader(&tar.Header{Name: "f", Typeflag: tar.TypeReg, Size: tc.size, Mode: 0o644}); err != nil {
				t.Fatal(err)
			}
			if err := a.content(strings.NewReader(tc.data), tc.size, "f"); err != nil {
				t.Fatal(err)
			}
			if err := a.tw.Close(); err != nil {
				t.Fatal(err)
			}
			tr := tar.NewReader(&buf)
			if _, err := tr.Next(); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(tr)
			if err != nil || string(got) != tc.want {
				t.Errorf("content %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestWriteLimits(t *testing.T) {
	src := t.TempDir()
	for i := range 5 {
		writeFile(t, filepath.Join(src, string(rune('a'+i))), make([]byte, 100), 0o644)
	}
	for name, lim := range map[string]Limits{
		"bytes":   {MaxBytes: 300},
		"entries": {MaxEntries: 4},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Write(context.Background(), io.Discard, openRoot(t, src), nil, lim)
			if !errors.Is(err, ErrTooLarge) {
				t.Errorf("Write = %v; want ErrTooLarge", err)
			}
		})
	}
	if _, err := Write(context.Background(), io.Discard, openRoot(t, src), nil, Limits{MaxBytes: 1000, MaxEntries: 6}); err != nil {
		t.Errorf("Write within the limits: %v", err)
	}
}

func TestWriteCanceled(t *testing.T) {
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "f"), []byte("x"), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Write(ctx, io.Discard, openRoot(t, src), nil, Limits{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Write = %v; want context.Canceled", err)
	}
}

func TestWriteDepthBound(t *testing.T) {
	src := t.TempDir()
	deep := filepath.Join(src, strings.Repeat("d/", MaxDepth+2))
	mkdir(t, deep, 0o755)
	st, archive := writeWithin(t, src, nil, Limits{})
	want := strings.TrimSuffix(strings.Repeat("d/", MaxDepth+1), "/") + ": a directory deeper than 256 levels"
	if st.SkippedCount != 1 || st.Skipped[0] != want {
		t.Errorf("Skipped = %.80q; want the directory %d levels down", st.Skipped, MaxDepth+1)
	}
	if n := len(entries(t, archive)); n != MaxDepth+1 {
		t.Errorf("%d entries; want %d", n, MaxDepth+1)
	}
}

// TestFramingBound: an archive within Limits never exceeds
// MaxArchiveBytes, even with entries whose framing is the largest (long
// non-ASCII names and link targets, nanosecond mtimes, empty files).
func TestFramingBound(t *testing.T) {
	src := t.TempDir()
	name := strings.Repeat("é", 120) // 240 bytes: a component's limit is 255
	dir := filepath.Join(src, name, name, name)
	mkdir(t, dir, 0o755)
	for i := range 50 {
		p := filepath.Join(dir, name[:236]+string(rune('A'+i)))
		if i%2 == 0 {
			writeFile(t, p, []byte{1}, 0o644)
		} else {
			symlink(t, strings.Repeat("/é", 1300), p)
		}
		os.Chtimes(p, time.Time{}, time.Unix(1e9, 999999999))
	}
	_, archive := writeWithin(t, src, nil, Limits{})
	var carried int64
	hdrs := entries(t, archive)
	for _, hdr := range hdrs {
		carried += int64(len(hdr.Name)+len(hdr.Linkname)) + hdr.Size
	}
	lim := Limits{MaxBytes: carried, MaxEntries: len(hdrs)}
	if int64(len(archive)) > lim.MaxArchiveBytes() {
		t.Errorf("archive of %d bytes > MaxArchiveBytes %d", len(archive), lim.MaxArchiveBytes())
	}
	if _, err := Write(context.Background(), io.Discard, openRoot(t, src), nil, lim); err != nil {
		t.Errorf("Write at exactly its limits: %v", err)
	}
}

// globalsSink collects the globals Extract writes.
type globalsSink struct {
	bytes.Buffer
	opened, closed int
	closeErr       error
}

func (g *globalsSink) open() (io.WriteCloser, error) {
	g.opened++
	return g, nil
}

func (g *globalsSink) Close() error {
	g.closed++
	return g.closeErr
}

func TestGlobalsRoundTrip(t *testing.T) {
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "f"), []byte("file"), 0o644)
	gpath := filepath.Join(t.TempDir(), "g")
	writeFile(t, gpath, []byte("pickled globals"), 0o600)
	g, err := os.Open(gpath)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	io.ReadAll(g) // Write reads the file from its start whatever its offset
	st, archive := writeWithin(t, src, g, Limits{})
	if st.Bytes != int64(len("file")+len("pickled globals")) {
		t.Errorf("Bytes = %d", st.Bytes)
	}
	if hdrs := entries(t, archive); hdrs[0].Name != GlobalsName || hdrs[0].Size != int64(len("pickled globals")) {
		t.Errorf("first entry %q of %d bytes; want the globals", hdrs[0].Name, hdrs[0].Size)
	}

	var sink globalsSink
	xst, err := Extract(context.Background(), bytes.NewReader(archive), openRoot(t, t.TempDir()), sink.open, Owner{os.Geteuid(), os.Getegid()}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if sink.String() != "pickled globals" || sink.opened != 1 || sink.closed != 1 || xst.Entries != st.Entries {
		t.Errorf("globals %q opened %d closed %d, %d entries", sink.String(), sink.opened, sink.closed, xst.Entries)
	}

	// The globals writer's Close error is reported.
	bad := globalsSink{closeErr: errors.New("disk gone")}
	if _, err := Extract(context.Background(), bytes.NewReader(archive), openRoot(t, t.TempDir()), bad.open, Owner{os.Geteuid(), os.Getegid()}, Limits{}); err == nil || !strings.Contains(err.Error(), "disk gone") {
		t.Errorf("Extract with a failing globals Close = %v", err)
	}
	// No globals wanted: the entry is refused, not dropped.
	if _, err := Extract(context.Background(), bytes.NewReader(archive), openRoot(t, t.TempDir()), nil, Owner{os.Geteuid(), os.Getegid()}, Limits{}); !errors.Is(err, ErrBadArchive) {
		t.Errorf("Extract of globals without openGlobals = %v; want ErrBadArchive", err)
	}
}

// entry is one entry of a hand-made archive.
type entry struct {
	hdr  tar.Header
	data string
}

func reg(name, data string) entry {
	return entry{tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}, data}
}

func dirEntry(name string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755}}
}

func link(name, target string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}}
}

// build makes an archive of es; without end, it stops before the
// end-of-archive marker.
func build(t *testing.T, end bool, es ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		hdr := e.hdr
		if hdr.Format == tar.FormatUnknown {
			hdr.Format = tar.FormatPAX
		}
		if err := tw.WriteHeader(&hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.data); err != nil {
			t.Fatal(err)
		}
	}
	if end {
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
	} else if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestExtractHostile extracts archives an attacker made into a workspace
// beside a directory it wants to reach: each is refused or kept inside,
// and the outside is never touched.
func TestExtractHostile(t *testing.T) {
	mib := strings.Repeat("\x00", 1<<20)
	for name, tc := range map[string]struct {
		archive func(outside string) []entry
		lim     Limits
		want    error    // nil: extracted
		skipped []string // with want nil
		absent  []string // paths under the workspace that must not exist
	}{
		"parent name":           {archive: one(reg("../x", "pwned")), want: ErrBadArchive},
		"absolute name":         {archive: one(reg("/abs", "pwned")), want: ErrBadArchive},
		"workspace then parent": {archive: one(reg("workspace/../../x", "pwned")), want: ErrBadArchive},
		"parent inside":         {archive: one(reg("workspace/a/../../x", "pwned")), want: ErrBadArchive},
		"double slash absolute": {archive: one(reg("workspace//etc/x", "pwned")), want: ErrBadArchive},
		"dot component":         {archive: one(reg("workspace/./x", "pwned")), want: ErrBadArchive},
		"not under workspace":   {archive: one(reg("etc/passwd", "pwned")), want: ErrBadArchive},
		"prefix without slash":  {archive: one(reg("workspacex/f", "pwned")), want: ErrBadArchive},
		"file as the workspace": {archive: one(reg("workspace", "pwned")), want: ErrBadArchive},
		"link as the workspace": {archive: one(link("workspace/", "/")), want: ErrBadArchive},
		"globals as a link":     {archive: one(link("globals", "/etc/passwd")), want: ErrBadArchive},
		"two globals entries":   {archive: one(reg("globals", "a"), reg("globals", "b")), want: ErrBadArchive},
		"link without a target": {archive: one(link("workspace/l", "")), want: ErrBadArchive},
		"link target too long":  {archive: one(link("workspace/l", strings.Repeat("a", MaxNameLen+1))), want: ErrBadArchive},
		"GNU sparse entry":      {archive: one(entry{hdr: tar.Header{Name: "workspace/s", Typeflag: tar.TypeGNUSparse, Format: tar.FormatGNU}}), want: ErrBadArchive},
		"file through a link out": {archive: func(outside string) []entry {
			return []entry{link("workspace/l", outside), reg("workspace/l/pwned", "pwned")}
		}, want: errEscape},
		"dir through a link out": {archive: func(outside string) []entry {
			return []entry{link("workspace/l", outside), dirEntry("workspace/l/sub/")}
		}, want: errEscape},
		"file through a relative link out": {archive: func(string) []entry {
			return []entry{link("workspace/l", "../outside"), reg("workspace/l/pwned", "pwned")}
		}, want: errEscape},
		"link through a link out": {archive: func(outside string) []entry {
			return []entry{link("workspace/l", outside), link("workspace/l/evil", "/etc/shadow")}
		}, want: errEscape},
		"file through a link inside": {archive: func(string) []entry {
			return []entry{dirEntry("workspace/sub/"), link("workspace/l", "sub"), reg("workspace/l/f", "in")}
		}},
		"hard link": {archive: one(reg("workspace/f", "x"), entry{hdr: tar.Header{Name: "workspace/h", Typeflag: tar.TypeLink, Linkname: "workspace/f"}}),
			skipped: []string{"h: a hard link"}, absent: []string{"h"}},
		"hard link out": {archive: one(entry{hdr: tar.Header{Name: "workspace/h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}}),
			skipped: []string{"h: a hard link"}, absent: []string{"h"}},
		"devices and fifos": {archive: one(
			entry{hdr: tar.Header{Name: "workspace/null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666}},
			entry{hdr: tar.Header{Name: "workspace/sda", Typeflag: tar.TypeBlock, Devmajor: 8, Mode: 0o666}},
			entry{hdr: tar.Header{Name: "workspace/p", Typeflag: tar.TypeFifo, Mode: 0o666}}),
			skipped: []string{"null: a character device", "sda: a block device", "p: a FIFO"}, absent: []string{"null", "sda", "p"}},
		"entry larger than the budget": {archive: one(reg("workspace/big", mib)), lim: Limits{MaxBytes: 1000},
			want: ErrTooLarge, absent: []string{"big"}},
		"globals larger than the budget": {archive: one(reg("globals", mib)), lim: Limits{MaxBytes: 1000}, want: ErrTooLarge},
		"unknown entry past the budget": {archive: one(entry{tar.Header{Name: "workspace/z", Typeflag: 'Z', Size: 1 << 20}, mib}),
			lim: Limits{MaxBytes: 1000}, want: ErrTooLarge},
		"too many entries": {archive: one(reg("workspace/a", ""), reg("workspace/b", ""), reg("workspace/c", ""), reg("workspace/d", "")),
			lim: Limits{MaxEntries: 3}, want: ErrTooLarge},
	} {
		t.Run(name, func(t *testing.T) {
			top := t.TempDir()
			outside := filepath.Join(top, "outside")
			ws := filepath.Join(top, "ws")
			mkdir(t, outside, 0o755)
			mkdir(t, ws, 0o755)
			archive := build(t, true, tc.archive(outside)...)
			var sink globalsSink
			st, err := Extract(context.Background(), bytes.NewReader(archive), openRoot(t, ws), sink.open, Owner{os.Geteuid(), os.Getegid()}, tc.lim)
			switch {
			case tc.want == errEscape:
				if err == nil || errors.Is(err, ErrBadArchive) || errors.Is(err, ErrTooLarge) {
					t.Errorf("Extract = %v; want the root's refusal", err)
				}
			case !errors.Is(err, tc.want):
				t.Errorf("Extract = %v; want %v", err, tc.want)
			}
			if tc.want == nil && !slices.Equal(st.Skipped, tc.skipped) {
				t.Errorf("Skipped = %q; want %q", st.Skipped, tc.skipped)
			}
			if tc.want == ErrTooLarge && sink.Len() > 0 {
				t.Errorf("%d bytes of globals written before ErrTooLarge", sink.Len())
			}
			for _, p := range tc.absent {
				if _, err := os.Lstat(filepath.Join(ws, p)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s exists (%v)", p, err)
				}
			}
			checkUntouched(t, top, outside)
		})
	}
}

// errEscape: the archive is well-formed, but os.Root refuses to leave
// the workspace.
var errEscape = errors.New("escape")

func one(es ...entry) func(string) []entry { return func(string) []entry { return es } }

// checkUntouched fails unless outside is empty and top holds only
// outside and ws.
func checkUntouched(t *testing.T, top, outside string) {
	t.Helper()
	if des, err := os.ReadDir(outside); err != nil || len(des) != 0 {
		t.Errorf("outside dir holds %v (%v)", des, err)
	}
	des, err := os.ReadDir(top)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if de.Name() != "outside" && de.Name() != "ws" {
			t.Errorf("%s was created beside the workspace", de.Name())
		}
	}
}

// TestExtractOverPlanted: what the sandbox planted in the workspace before
// the extraction (a symlink out, a hard link to a file outside, a
// directory where a file goes) is replaced, never written through.
func TestExtractOverPlanted(t *testing.T) {
	top := t.TempDir()
	outside := filepath.Join(top, "outside")
	ws := filepath.Join(top, "ws")
	mkdir(t, outside, 0o755)
	mkdir(t, ws, 0o755)
	secret := filepath.Join(top, "secret")
	writeFile(t, secret, []byte("secret"), 0o644)
	symlink(t, outside, filepath.Join(ws, "l"))
	symlink(t, secret, filepath.Join(ws, "s"))
	if err := os.Link(secret, filepath.Join(ws, "h")); err != nil {
		t.Fatal(err)
	}
	mkdir(t, filepath.Join(ws, "d", "deep"), 0o755)
	writeFile(t, filepath.Join(ws, "file"), []byte("old"), 0o644)
	archive := build(t, true, reg("workspace/l", "new l"), reg("workspace/s", "new s"), reg("workspace/h", "new h"),
		reg("workspace/d", "new d"), link("workspace/file", "/etc/passwd"))
	if _, err := Extract(context.Background(), bytes.NewReader(archive), openRoot(t, ws), nil, Owner{os.Geteuid(), os.Getegid()}, Limits{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"l", "s", "h", "d"} {
		b, err := os.ReadFile(filepath.Join(ws, name))
		st, _ := os.Lstat(filepath.Join(ws, name))
		if err != nil || string(b) != "new "+name || !st.Mode().IsRegular() {
			t.Errorf("%s: %q, %v; want a regular file with the archive's content", name, b, err)
		}
	}
	if target, err := os.Readlink(filepath.Join(ws, "file")); err != nil || target != "/etc/passwd" {
		t.Errorf("file: link to %q, %v", target, err)
	}
	if b, _ := os.ReadFile(secret); string(b) != "secret" {
		t.Errorf("the file outside became %q", b)
	}
	if b, _ := os.ReadFile("/etc/passwd"); strings.Contains(string(b), "new") && len(b) < 20 {
		t.Errorf("/etc/passwd was written")
	}
	des, _ := os.ReadDir(outside)
	if len(des) != 0 {
		t.Errorf("outside holds %v", des)
	}
}

// TestExtractPAXSparse: a PAX sparse file (whose size on the wire is not
// its size) is refused.
func TestExtractPAXSparse(t *testing.T) {
	archive := build(t, true, entry{hdr: tar.Header{Name: "workspace/s", Typeflag: tar.TypeReg, PAXRecords: map[string]string{"comment": "0123456789"}}})
	archive = bytes.Replace(archive, []byte("comment=0123456789"), []byte("GNU.sparse.major=1"), 1)
	if !bytes.Contains(archive, []byte("GNU.sparse.major=1")) {
		t.Fatal("no PAX record to replace")
	}
	_, err := Extract(context.Background(), bytes.NewReader(archive), openRoot(t, t.TempDir()), nil, Owner{os.Geteuid(), os.Getegid()}, Limits{})
	if !errors.Is(err, ErrBadArchive) {
		t.Errorf("Extract = %v; want ErrBadArchive", err)
	}
}

// TestExtractTruncated: an archive cut short (at an entry's boundary, in
// its content, in the end marker) or followed by data is refused, not
// taken for a smaller archive.
func TestExtractTruncated(t *testing.T) {
	full := build(t, true, reg("workspace/a", "aaaa"), reg("workspace/b", strings.Repeat("b", 600)))
	atBoundary := build(t, false, reg("workspace/a", "aaaa"))
	for name, archive := range map[string][]byte{
		"empty":               nil,
		"at an entry's end":   atBoundary,
		"in an entry":         full[:len(atBoundary)+700],
		"half the end marker": full[:len(full)-512],
		"data after the end":  append(slices.Clone(full), "junk"...),
		"a header, no more":   full[:512],
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Extract(context.Background(), bytes.NewReader(archive), openRoot(t, t.TempDir()), nil, Owner{os.Geteuid(), os.Getegid()}, Limits{})
			if !errors.Is(err, ErrBadArchive) {
				t.Errorf("Extract = %v; want ErrBadArchive", err)
			}
		})
	}
	padded := append(slices.Clone(full), make([]byte, 8192)...) // a writer's record padding
	if _, err := Extract(context.Background(), bytes.NewReader(padded), openRoot(t, t.TempDir()), nil, Owner{os.Geteuid(), os.Getegid()}, Limits{}); err != nil {
		t.Errorf("Extract of a zero-padded archive: %v", err)
	}
}

// TestExtractReaderErrors: r's own failure is returned as it is, not as
// the archive's fault; the input is bounded by MaxArchiveBytes.
func TestExtractReaderErrors(t *testing.T) {
	full := build(t, true, reg("workspace/a", strings.Repeat("a", 4096)))
	boom := errors.New("stream broke")
	r := io.MultiReader(bytes.NewReader(full[:1024]), &failing{boom})
	if _, err := Extract(context.Background(), r, openRoot(t, t.TempDir()), nil, Owner{os.Geteuid(), os.Getegid()}, Limits{}); !errors.Is(err, boom) || errors.Is(err, ErrBadArchive) {
		t.Errorf("Extract = %v; want the reader's error", err)
	}
	// Zeros forever after the end: bounded, not read to exhaustion.
	endless := io.MultiReader(bytes.NewReader(full), zeros{})
	if _, err := Extract(context.Background(), endless, openRoot(t, t.TempDir()), nil, Owner{os.Geteuid(), os.Getegid()}, Limits{MaxBytes: 1 << 20, MaxEntries: 10}); !errors.Is(err, ErrBadArchive) {
		t.Errorf("Extract of endless zeros = %v; want ErrBadArchive", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Extract(ctx, bytes.NewReader(full), openRoot(t, t.TempDir()), nil, Owner{os.Geteuid(), os.Getegid()}, Limits{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Extract canceled = %v", err)
	}
}

type failing struct{ err error }

func (f *failing) Read([]byte) (int, error) { return 0, f.err }

// TestCountReaderBound: input past MaxArchiveBytes is ErrTooLarge.
func TestCountReaderBound(t *testing.T) {
	cr := &countReader{r: zeros{}, max: 10000}
	_, err := io.Copy(io.Discard, cr)
	if !errors.Is(err, ErrTooLarge) || cr.n > 10001 {
		t.Errorf("read %d bytes, %v; want ErrTooLarge at 10000", cr.n, err)
	}
}

// TestExtractOwner: everything created, parents included, belongs to the
// Owner.
func TestExtractOwner(t *testing.T) {
	requireRoot(t)
	ws := t.TempDir()
	archive := build(t, true, reg("workspace/p/q/f", "x"), link("workspace/p/l", "/nowhere"), dirEntry("workspace/d/"))
	if _, err := Extract(context.Background(), bytes.NewReader(archive), openRoot(t, ws), nil, Owner{1234, 5678}, Limits{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"p", "p/q", "p/q/f", "p/l", "d"} {
		st, err := os.Lstat(filepath.Join(ws, p))
		if err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if sys.Uid != 1234 || sys.Gid != 5678 {
			t.Errorf("%s owned by %d:%d; want 1234:5678", p, sys.Uid, sys.Gid)
		}
	}
}

// TestExtractDropsSetuid: an archive's setuid, setgid and sticky bits are
// not applied, to files or directories.
func TestExtractDropsSetuid(t *testing.T) {
	ws := t.TempDir()
	suid := reg("workspace/suid", "x")
	suid.hdr.Mode = 0o6755 // c_ISUID|c_ISGID
	sticky := dirEntry("workspace/tmp/")
	sticky.hdr.Mode = 0o1777
	if _, err := Extract(context.Background(), bytes.NewReader(build(t, true, suid, sticky)), openRoot(t, ws), nil, Owner{os.Geteuid(), os.Getegid()}, Limits{}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]fs.FileMode{"suid": 0o755, "tmp": fs.ModeDir | 0o777} {
		st, err := os.Lstat(filepath.Join(ws, p))
		if err != nil || st.Mode() != want {
			t.Errorf("%s: mode %v, %v; want %v", p, st.Mode(), err, want)
		}
	}
}
