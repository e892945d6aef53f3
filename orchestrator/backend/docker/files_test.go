package docker

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

func TestFiles(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.MaxUploadBytes = 1000
	m := newTestManager(t, cfg, fd)
	sb := acquire(t, m, "u").Sandbox
	ctx := t.Context()
	ws := filepath.Join(m.cfg.StateDir, "sandboxes", sb.ID, "workspace")

	// Upload creates parents owned by the sandbox user.
	fi, err := m.Upload(ctx, sb.ID, "/workspace/data/in/x.csv", strings.NewReader("a,b\n1,2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Path != "data/in/x.csv" || fi.Size != 8 || fi.IsDir {
		t.Errorf("Upload = %+v", fi)
	}
	for _, p := range []string{"data", "data/in", "data/in/x.csv"} {
		st, err := os.Lstat(filepath.Join(ws, p))
		if err != nil {
			t.Fatal(err)
		}
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 1000 || sys.Gid != 1000 {
			t.Errorf("%s owned by %d:%d", p, sys.Uid, sys.Gid)
		}
	}
	// Replacing works, and leaves no temporary file behind.
	if _, err := m.Upload(ctx, sb.ID, "data/in/x.csv", strings.NewReader("new")); err != nil {
		t.Fatal(err)
	}
	rc, fi, err := m.Download(ctx, sb.ID, "data/in/x.csv")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "new" || fi.Size != 3 {
		t.Errorf("Download = %q, %+v", b, fi)
	}
	entries, _ := os.ReadDir(filepath.Join(ws, "data/in"))
	if len(entries) != 1 {
		t.Errorf("data/in holds %v", entries)
	}

	// Too large: refused, and nothing appears.
	_, err = m.Upload(ctx, sb.ID, "big.bin", bytes.NewReader(make([]byte, 1001)))
	wantClass(t, err, core.ErrInvalidArgument, "upload limit of 1000 bytes")
	if entries, _ := os.ReadDir(ws); len(entries) != 1 {
		t.Errorf("workspace after a refused upload: %v", entries)
	}
	// A failing reader: its error comes back, nothing appears.
	boom := errors.New("stream broke")
	_, err = m.Upload(ctx, sb.ID, "partial.txt", io.MultiReader(strings.NewReader("half"), errReader{boom}))
	if !errors.Is(err, boom) {
		t.Errorf("Upload with a failing reader = %v", err)
	}
	if _, err := os.Lstat(filepath.Join(ws, "partial.txt")); !os.IsNotExist(err) {
		t.Errorf("partial upload visible: %v", err)
	}

	_, err = m.Upload(ctx, sb.ID, "", strings.NewReader("x"))
	wantClass(t, err, core.ErrInvalidArgument, "empty")
	_, err = m.Upload(ctx, sb.ID, "data", strings.NewReader("x"))
	wantClass(t, err, core.ErrInvalidArgument, "is a directory")
	_, err = m.Upload(ctx, sb.ID, "data/in/x.csv/y", strings.NewReader("x"))
	wantClass(t, err, core.ErrInvalidArgument, "not a directory")

	_, _, err = m.Download(ctx, sb.ID, "nope.txt")
	wantClass(t, err, core.ErrNotFound, "/workspace/nope.txt")
	_, _, err = m.Download(ctx, sb.ID, "data")
	wantClass(t, err, core.ErrInvalidArgument, "is a directory")
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = m.Download(ctx, sb.ID, "fifo") // must not block
	wantClass(t, err, core.ErrInvalidArgument, "not a regular file")

	list, err := m.ListFiles(ctx, sb.ID, "/workspace")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range list {
		names = append(names, f.Path)
	}
	if strings.Join(names, ",") != "data,fifo" || !list[0].IsDir {
		t.Errorf("ListFiles(/workspace) = %+v", list)
	}
	list, err = m.ListFiles(ctx, sb.ID, "data/in")
	if err != nil || len(list) != 1 || list[0].Path != "data/in/x.csv" || list[0].Size != 3 {
		t.Errorf("ListFiles(data/in) = %+v, %v", list, err)
	}
	list, err = m.ListFiles(ctx, sb.ID, "data/in/x.csv")
	if err != nil || len(list) != 1 || list[0].Path != "data/in/x.csv" {
		t.Errorf("ListFiles(file) = %+v, %v", list, err)
	}
	_, err = m.ListFiles(ctx, sb.ID, "missing")
	wantClass(t, err, core.ErrNotFound, "")
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestFilesSymlinks(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	sb := acquire(t, m, "u").Sandbox
	ctx := t.Context()
	ws := filepath.Join(m.cfg.StateDir, "sandboxes", sb.ID, "workspace")
	host := t.TempDir()
	os.WriteFile(filepath.Join(host, "secret"), []byte("host secret"), 0o644)

	// What sandboxed code can plant in /workspace.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("/etc", filepath.Join(ws, "etc")))                // absolute, out
	must(os.Symlink("/etc/passwd", filepath.Join(ws, "passwd")))      // absolute, out
	must(os.Symlink("../../../../../../..", filepath.Join(ws, "up"))) // relative, out
	must(os.Symlink(host, filepath.Join(ws, "hostdir")))              // absolute, out
	must(os.WriteFile(filepath.Join(ws, "real.txt"), []byte("inside"), 0o644))
	must(os.Mkdir(filepath.Join(ws, "sub"), 0o755))
	must(os.Symlink("real.txt", filepath.Join(ws, "link.txt")))  // relative, in
	must(os.Symlink("../sub", filepath.Join(ws, "sub", "self"))) // relative, in

	for _, p := range []string{"etc/passwd", "passwd", "up/etc/passwd", "hostdir/secret"} {
		_, _, err := m.Download(ctx, sb.ID, p)
		wantClass(t, err, core.ErrInvalidArgument, "path escapes /workspace")
		_, err = m.ListFiles(ctx, sb.ID, p)
		wantClass(t, err, core.ErrInvalidArgument, "path escapes /workspace")
	}
	for _, p := range []string{"etc/evil", "hostdir/secret", "up/tmp/x", "hostdir/new/file"} {
		_, err := m.Upload(ctx, sb.ID, p, strings.NewReader("pwned"))
		wantClass(t, err, core.ErrInvalidArgument, "path escapes /workspace")
	}
	if b, _ := os.ReadFile(filepath.Join(host, "secret")); string(b) != "host secret" {
		t.Fatalf("host file changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(host, "new")); !os.IsNotExist(err) {
		t.Fatal("directory created outside the workspace")
	}

	// Symlinks that stay inside work.
	rc, _, err := m.Download(ctx, sb.ID, "link.txt")
	must(err)
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "inside" {
		t.Errorf("Download(link.txt) = %q", b)
	}
	if _, err := m.Upload(ctx, sb.ID, "sub/self/new.txt", strings.NewReader("ok")); err != nil {
		t.Errorf("Upload through an inside symlink: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "sub", "new.txt")); string(b) != "ok" {
		t.Errorf("upload through inside symlink landed elsewhere: %q", b)
	}
	// Uploading onto a symlink replaces the link, never writes through it.
	if _, err := m.Upload(ctx, sb.ID, "passwd", strings.NewReader("mine")); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Lstat(filepath.Join(ws, "passwd")); st.Mode()&os.ModeSymlink != 0 {
		t.Error("symlink not replaced")
	}
	// ListFiles shows links as links.
	list, err := m.ListFiles(ctx, sb.ID, "")
	must(err)
	for _, f := range list {
		if f.Path == "etc" && f.IsDir {
			t.Error("symlink listed as a directory")
		}
	}
}
