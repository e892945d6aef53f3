package iosidecar

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wsarchive"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wspath"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

func mustWrite(t *testing.T, p string, data string, perm fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), perm); err != nil {
		t.Fatal(err)
	}
}

// saveGlobals puts a globals file in sc's io/hibernate, as a live snapshot
// record leaves it.
func (sc *sidecar) saveGlobals(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(sc.io, ioproto.HibernateDir, name)
	mustWrite(t, p, data, 0o600)
	return p
}

// treeOf lists a tree's paths with their type and content (a link's
// target), without following links.
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.IsDir():
			out[rel] = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "link " + target
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = "file " + string(b)
		default:
			out[rel] = d.Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestExportImport(t *testing.T) {
	ctx := ctxT(t)
	from := startSidecar(t)
	mustWrite(t, filepath.Join(from.workspace, "a", "b.txt"), "bee", 0o640)
	mustWrite(t, filepath.Join(from.workspace, "empty"), "", 0o644)
	mustWrite(t, filepath.Join(from.workspace, "big.bin"), strings.Repeat("0123456789", 300_000), 0o644) // 3 MB: several chunks
	if err := os.Symlink("/etc/passwd", filepath.Join(from.workspace, "passwd")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(from.workspace, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	globals := from.saveGlobals(t, "named-abc", "pickled")
	want := treeOf(t, from.workspace)
	delete(want, "fifo")

	var archive bytes.Buffer
	st, err := from.c.Export(ctx, "named-abc", 0, &archive)
	if err != nil {
		t.Fatal(err)
	}
	if st.Bytes != int64(len("bee")+3_000_000+len("pickled")) || st.SkippedCount != 1 || !slices.Equal(st.Skipped, []string{"fifo: a FIFO"}) {
		t.Errorf("Export stats %+v", st)
	}
	if _, err := os.Lstat(globals); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the exported globals file is still in /io (%v)", err)
	}

	to := startSidecar(t)
	ist, err := to.c.Import(ctx, "from-xyz", bytes.NewReader(archive.Bytes()), 0)
	if err != nil {
		t.Fatal(err)
	}
	if ist.Bytes != st.Bytes || ist.SkippedCount != 0 {
		t.Errorf("Import stats %+v; want %d bytes, none skipped", ist, st.Bytes)
	}
	got := treeOf(t, to.workspace)
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: %.40q after the import; want %.40q", p, got[p], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("imported tree has %d entries; want %d", len(got), len(want))
	}
	hib := filepath.Join(to.io, ioproto.HibernateDir)
	b, err := os.ReadFile(filepath.Join(hib, "from-xyz"))
	if err != nil || string(b) != "pickled" {
		t.Fatalf("imported globals %q, %v", b, err)
	}
	des, _ := os.ReadDir(hib)
	if len(des) != 1 {
		t.Errorf("io/hibernate holds %v; want only the globals", des)
	}
	for p, mode := range map[string]fs.FileMode{hib: fs.ModeDir | 0o700, filepath.Join(hib, "from-xyz"): 0o600} {
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != mode {
			t.Errorf("%s: mode %v; want %v", p, st.Mode(), mode)
		}
		if os.Geteuid() == 0 && ownerOf(t, st) != wspath.UID {
			t.Errorf("%s: owner %d; want the sandbox user", p, ownerOf(t, st))
		}
	}
	if os.Geteuid() == 0 {
		for _, p := range []string{"a", "a/b.txt", "passwd"} {
			st, err := os.Lstat(filepath.Join(to.workspace, p))
			if err != nil || ownerOf(t, st) != wspath.UID {
				t.Errorf("%s: not the sandbox user's (%v)", p, err)
			}
		}
	}
	if st, _ := os.Lstat(filepath.Join(to.workspace, "a", "b.txt")); st.Mode().Perm() != 0o640 {
		t.Errorf("a/b.txt: mode %v; want 0640", st.Mode())
	}

	// Without globals both ways.
	archive.Reset()
	if _, err := from.c.Export(ctx, "", 0, &archive); err != nil {
		t.Fatal(err)
	}
	third := startSidecar(t)
	if _, err := third.c.Import(ctx, "", bytes.NewReader(archive.Bytes()), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(third.io, ioproto.HibernateDir)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("io/hibernate made for an archive without globals (%v)", err)
	}
}

func TestArchiveGlobalsErrors(t *testing.T) {
	ctx := ctxT(t)
	sc := startSidecar(t)
	for _, name := range []string{"..", ".", "a/b", "../x", "/etc/passwd", strings.Repeat("a", 129), "a\x00b", "é"} {
		if _, err := sc.c.Export(ctx, name, 0, io.Discard); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("Export(globals %q) = %v; want InvalidArgument", name, err)
		}
		if _, err := sc.c.Import(ctx, name, bytes.NewReader(nil), 0); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("Import(globals %q) = %v; want InvalidArgument", name, err)
		}
	}
	// No io/hibernate, then no such file in it.
	if _, err := sc.c.Export(ctx, "named-1", 0, io.Discard); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("Export without io/hibernate = %v; want NotFound", err)
	}
	sc.saveGlobals(t, "other", "x")
	var e *Error
	if _, err := sc.c.Export(ctx, "named-1", 0, io.Discard); !errors.Is(err, core.ErrNotFound) || !errors.As(err, &e) || e.Reason != "NOT_FOUND" {
		t.Errorf("Export of a missing globals file = %v; want NotFound", err)
	}
	// A globals "file" the sandbox made a symlink or a FIFO: never
	// followed or opened for reading.
	hib := filepath.Join(sc.io, ioproto.HibernateDir)
	if err := os.Symlink("/etc/passwd", filepath.Join(hib, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(hib, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"link", "fifo"} {
		var buf bytes.Buffer
		if _, err := sc.c.Export(ctx, name, 0, &buf); !errors.Is(err, core.ErrInvalidArgument) || buf.Len() > 0 {
			t.Errorf("Export of globals %s = %v, %d bytes; want InvalidArgument, nothing", name, err, buf.Len())
		}
	}
	// io/hibernate itself a symlink out of /io.
	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, "named-2"), "secret", 0o644)
	if err := os.RemoveAll(hib); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, hib); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.c.Export(ctx, "named-2", 0, io.Discard); err == nil {
		t.Error("Export of globals through a symlinked io/hibernate succeeded")
	}
	if _, err := os.Stat(filepath.Join(outside, "named-2")); err != nil {
		t.Errorf("the file outside /io was removed (%v)", err)
	}
}

func TestExportLimit(t *testing.T) {
	ctx := ctxT(t)
	sc := startSidecar(t)
	mustWrite(t, filepath.Join(sc.workspace, "big"), strings.Repeat("x", 10_000), 0o644)
	sc.saveGlobals(t, "g", "globals")
	var e *Error
	if _, err := sc.c.Export(ctx, "g", 5_000, io.Discard); !errors.Is(err, core.ErrResourceExhausted) || !errors.As(err, &e) || e.Reason != "RESOURCE_EXHAUSTED" {
		t.Errorf("Export past max_bytes = %v; want ResourceExhausted", err)
	}
	// Saved for that export only: a failed one must not leave it in /io.
	if _, err := os.Stat(filepath.Join(sc.io, ioproto.HibernateDir, "g")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed export left the globals file in /io (%v)", err)
	}
	sc.saveGlobals(t, "g", "globals")
	if _, err := sc.c.Export(ctx, "g", 20_000, io.Discard); err != nil {
		t.Errorf("Export within max_bytes: %v", err)
	}
	if _, err := sc.c.Export(ctx, "", -1, io.Discard); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("Export with a negative max = %v", err)
	}
	// The server's default applies when the request leaves it.
	small, err := New(Config{IODir: t.TempDir(), Workspace: sc.workspace, Token: testToken, MaxArchiveBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if lim, _ := small.archiveLimits(0); lim.MaxBytes != 1000 {
		t.Errorf("default limit %d; want the Config's 1000", lim.MaxBytes)
	}
	small.Stop(0)
}

// archiveOf builds an archive by hand.
func archiveOf(t *testing.T, hdrs ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, hdr := range hdrs {
		data := strings.Repeat("x", int(hdr.Size))
		if err := tw.WriteHeader(&hdr); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, data)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestImportHostile(t *testing.T) {
	ctx := ctxT(t)
	for name, tc := range map[string]struct {
		archive func(outside string) []byte
		globals string
		max     int64
		want    *core.Class
	}{
		"parent in a name": {archive: func(string) []byte {
			return archiveOf(t, tar.Header{Name: "workspace/../x", Typeflag: tar.TypeReg, Size: 5, Mode: 0o644})
		}, want: core.ErrInvalidArgument},
		"file through a link out": {archive: func(outside string) []byte {
			return archiveOf(t, tar.Header{Name: "workspace/l", Typeflag: tar.TypeSymlink, Linkname: outside},
				tar.Header{Name: "workspace/l/pwned", Typeflag: tar.TypeReg, Size: 5, Mode: 0o644})
		}, want: core.ErrInvalidArgument},
		"not a tar": {archive: func(string) []byte { return bytes.Repeat([]byte("garbage!"), 200) }, want: core.ErrInvalidArgument},
		"truncated": {archive: func(string) []byte {
			return archiveOf(t, tar.Header{Name: "workspace/f", Typeflag: tar.TypeReg, Size: 5000, Mode: 0o644})[:2048]
		}, want: core.ErrInvalidArgument},
		"globals not asked for": {archive: func(string) []byte {
			return archiveOf(t, tar.Header{Name: "globals", Typeflag: tar.TypeReg, Size: 5, Mode: 0o600})
		}, want: core.ErrInvalidArgument},
		"globals asked for, none there": {archive: func(string) []byte {
			return archiveOf(t, tar.Header{Name: "workspace/", Typeflag: tar.TypeDir, Mode: 0o755})
		}, globals: "from-1", want: core.ErrInvalidArgument},
		"two globals": {archive: func(string) []byte {
			return archiveOf(t, tar.Header{Name: "globals", Typeflag: tar.TypeReg, Size: 5, Mode: 0o600},
				tar.Header{Name: "globals", Typeflag: tar.TypeReg, Size: 5, Mode: 0o600})
		}, globals: "from-1", want: core.ErrInvalidArgument},
		"past max_bytes": {archive: func(string) []byte {
			return archiveOf(t, tar.Header{Name: "workspace/big", Typeflag: tar.TypeReg, Size: 100_000, Mode: 0o644})
		}, max: 50_000, want: core.ErrResourceExhausted},
	} {
		t.Run(name, func(t *testing.T) {
			sc := startSidecar(t)
			outside := t.TempDir()
			_, err := sc.c.Import(ctx, tc.globals, bytes.NewReader(tc.archive(outside)), tc.max)
			if !errors.Is(err, tc.want) {
				t.Errorf("Import = %v; want %v", err, tc.want)
			}
			if des, _ := os.ReadDir(outside); len(des) != 0 {
				t.Errorf("written outside the workspace: %v", des)
			}
			des, _ := os.ReadDir(filepath.Dir(sc.workspace))
			for _, de := range des {
				if de.Name() != "io" && de.Name() != "workspace" {
					t.Errorf("%s written beside the workspace", de.Name())
				}
			}
			if _, err := os.Lstat(filepath.Join(sc.workspace, "big")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the file past the limit was created (%v)", err)
			}
			if hib, err := os.ReadDir(filepath.Join(sc.io, ioproto.HibernateDir)); len(hib) != 0 {
				t.Errorf("io/hibernate holds %v (%v) after a failed import", hib, err)
			}
		})
	}
}

// TestImportPlantedHibernate: an io/hibernate the sandbox made a symlink
// out of /io is replaced, not written through.
func TestImportPlantedHibernate(t *testing.T) {
	ctx := ctxT(t)
	sc := startSidecar(t)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(sc.io, ioproto.HibernateDir)); err != nil {
		t.Fatal(err)
	}
	archive := archiveOf(t, tar.Header{Name: "globals", Typeflag: tar.TypeReg, Size: 7, Mode: 0o600},
		tar.Header{Name: "workspace/", Typeflag: tar.TypeDir, Mode: 0o755})
	if _, err := sc.c.Import(ctx, "from-1", bytes.NewReader(archive), 0); err != nil {
		t.Fatal(err)
	}
	if des, _ := os.ReadDir(outside); len(des) != 0 {
		t.Errorf("globals written through the planted link: %v", des)
	}
	st, err := os.Lstat(filepath.Join(sc.io, ioproto.HibernateDir, "from-1"))
	if err != nil || !st.Mode().IsRegular() {
		t.Errorf("globals not in a real io/hibernate (%v)", err)
	}
}

// hostileExporter is an IOService whose Export answers what it is told.
type hostileExporter struct {
	sandboxiov1.UnimplementedIOServiceServer
	export func(grpc.ServerStreamingServer[sandboxiov1.ExportResponse]) error
	imp    *sandboxiov1.ImportResponse
}

func (h *hostileExporter) Export(_ *sandboxiov1.ExportRequest, s grpc.ServerStreamingServer[sandboxiov1.ExportResponse]) error {
	return h.export(s)
}

func (h *hostileExporter) Import(s grpc.ClientStreamingServer[sandboxiov1.ImportRequest, sandboxiov1.ImportResponse]) error {
	for {
		if _, err := s.Recv(); err == io.EOF {
			return s.SendAndClose(h.imp)
		} else if err != nil {
			return err
		}
	}
}

func sendExport(msgs ...*sandboxiov1.ExportResponse) func(grpc.ServerStreamingServer[sandboxiov1.ExportResponse]) error {
	return func(s grpc.ServerStreamingServer[sandboxiov1.ExportResponse]) error {
		for _, m := range msgs {
			if err := s.Send(m); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestHostileExport(t *testing.T) {
	const maxBytes = 1 << 20
	bound := wsarchive.Limits{MaxBytes: maxBytes}.MaxArchiveBytes()
	chunk := make([]byte, 4<<20)
	endless := func(s grpc.ServerStreamingServer[sandboxiov1.ExportResponse]) error {
		for {
			if err := s.Send(&sandboxiov1.ExportResponse{Chunk: chunk}); err != nil {
				return err
			}
		}
	}
	for name, tc := range map[string]struct {
		export func(grpc.ServerStreamingServer[sandboxiov1.ExportResponse]) error
		kind   error
	}{
		"endless archive":    {endless, core.ErrResourceExhausted},
		"no done":            {sendExport(&sandboxiov1.ExportResponse{Chunk: []byte("abc")}), ErrBadResponse},
		"stats before done":  {sendExport(&sandboxiov1.ExportResponse{Chunk: []byte("abc"), Bytes: 3}), ErrBadResponse},
		"message after done": {sendExport(&sandboxiov1.ExportResponse{Done: true}, &sandboxiov1.ExportResponse{Chunk: []byte("x")}), ErrBadResponse},
		"negative stats":     {sendExport(&sandboxiov1.ExportResponse{Done: true, SkippedCount: -1}), ErrBadResponse},
		"more content than archive": {sendExport(&sandboxiov1.ExportResponse{Chunk: []byte("abc"), Done: true, Bytes: 4}),
			ErrBadResponse},
	} {
		t.Run(name, func(t *testing.T) {
			c := startHostileServer(t, &hostileExporter{export: tc.export})
			var n countingWriter
			_, err := c.Export(ctxT(t), "", maxBytes, &n)
			wantBounded(t, "Export", err, tc.kind)
			if int64(n) > bound {
				t.Errorf("accepted %d bytes; the bound is %d", n, bound)
			}
		})
	}

	// Skipped entries are bounded, cut at a rune boundary. (Invalid UTF-8
	// does not pass gRPC's decoding of a string field.)
	long := []string{}
	for i := range 100 {
		long = append(long, "x"+strings.Repeat("é", 2000)+string(rune('a'+i%26)))
	}
	for name, call := range map[string]func(c *Client) (ArchiveStats, error){
		"export": func(c *Client) (ArchiveStats, error) { return c.Export(ctxT(t), "", 0, io.Discard) },
		"import": func(c *Client) (ArchiveStats, error) { return c.Import(ctxT(t), "", strings.NewReader("x"), 0) },
	} {
		c := startHostileServer(t, &hostileExporter{
			export: sendExport(&sandboxiov1.ExportResponse{Done: true, Skipped: long, SkippedCount: 3}),
			imp:    &sandboxiov1.ImportResponse{Skipped: long, SkippedCount: 3},
		})
		st, err := call(c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(st.Skipped) != 20 || st.SkippedCount != 100 {
			t.Errorf("%s: %d skipped listed, count %d; want 20, 100", name, len(st.Skipped), st.SkippedCount)
		}
		for _, s := range st.Skipped {
			if len(s) > 256 || !utf8.ValidString(s) {
				t.Errorf("%s: skipped entry of %d bytes (valid UTF-8: %v)", name, len(s), utf8.ValidString(s))
				break
			}
		}
	}
}

type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}
