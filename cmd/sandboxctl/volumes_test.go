package main

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
)

const volA = "vol-aaaaaaaaaaaaaaaaaaaa"

func TestVolumeCommands(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, s)
	}
	files := map[string][]byte{}
	v := core.Volume{ID: volA, Name: "datasets", Tenant: "default", SizeBytes: 2 << 30, UsedBytes: 1 << 20, CreatedAt: t0, MountedBy: []string{sbA}}
	fake := &coretest.Manager{
		CreateVolumeFunc: func(_ context.Context, name string, size int64) (core.Volume, error) {
			note("create " + name + " " + sizeName(size))
			w := v
			w.Name, w.SizeBytes = name, size
			return w, nil
		},
		ListVolumesFunc: func(_ context.Context, tenant string) ([]core.Volume, error) {
			note("ls " + tenant)
			return []core.Volume{v}, nil
		},
		GetVolumeFunc: func(_ context.Context, ref string) (core.Volume, error) {
			if ref != "datasets" {
				return core.Volume{}, core.VolumeNotFound(ref)
			}
			return v, nil
		},
		DeleteVolumeFunc: func(_ context.Context, ref string, force bool) error {
			note("rm " + ref + map[bool]string{true: " --force"}[force])
			if !force {
				return core.VolumeInUse(ref, []string{sbA})
			}
			return nil
		},
		VolumeUploadFunc: func(_ context.Context, ref, p string, r io.Reader, overwrite bool) (core.FileInfo, error) {
			note("put " + ref + " " + p + map[bool]string{true: " --overwrite"}[overwrite])
			if _, ok := files[p]; ok && !overwrite {
				return core.FileInfo{}, coretest.Errorf(core.ErrAlreadyExists, "/%s exists on volume %s", p, ref)
			}
			b, err := io.ReadAll(r)
			files[p] = b
			return core.FileInfo{Path: p, Size: int64(len(b))}, err
		},
		VolumeDownloadFunc: func(_ context.Context, ref, p string) (io.ReadCloser, core.FileInfo, error) {
			b, ok := files[p]
			if !ok {
				return nil, core.FileInfo{}, coretest.Errorf(core.ErrNotFound, "/%s not found on volume %s", p, ref)
			}
			return io.NopCloser(bytes.NewReader(b)), core.FileInfo{Path: p, Size: int64(len(b))}, nil
		},
		VolumeListFilesFunc: func(_ context.Context, ref, p string, depth int) ([]core.FileInfo, error) {
			note("files " + p + " " + string(rune('0'+depth)))
			return []core.FileInfo{{Path: "raw", IsDir: true, Type: core.FileDirectory, Mode: fs.ModeDir | 0o755, UID: 1000, GID: 1000, ModTime: t0}}, nil
		},
		VolumeMakeDirectoryFunc: func(_ context.Context, ref, p string, parents bool) (core.FileInfo, error) {
			note("mkdir " + p + map[bool]string{true: " -p"}[parents])
			return core.FileInfo{Path: p, IsDir: true}, nil
		},
		VolumeRemoveFunc: func(_ context.Context, ref, p string, recursive bool) error {
			note("rmfile " + p + map[bool]string{true: " -r"}[recursive])
			if !recursive {
				return coretest.Errorf(core.ErrFailedPrecondition, "remove /%s: the directory is not empty", p)
			}
			return nil
		},
	}
	addr := startServer(t, fake)

	r := runCLI(t, nil, addr, "", "volume", "create", "datasets", "--size", "2GiB")
	if r.code != exitOK || r.stdout != volA+"\tdatasets\t2GiB\n" {
		t.Errorf("create: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, addr, "", "volume", "ls")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "VOLUME") || !strings.Contains(r.stdout, volA+"  datasets  default  2GiB  1MiB  "+sbA) {
		t.Errorf("ls: exit %d, stdout\n%s(stderr %q)", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, addr, "", "volume", "get", "datasets")
	if r.code != exitOK || !strings.Contains(r.stdout, `"id": "`+volA+`"`) || !strings.Contains(r.stdout, `"mounted_by"`) {
		t.Errorf("get: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, addr, "", "volume", "files", "datasets", "--depth", "2")
	if r.code != exitOK || r.stdout != "drwxr-xr-x  1000:1000  0  2026-11-21 07:30:00  raw\n" {
		t.Errorf("files: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	// cp both ways, through a local file and stdin/stdout.
	dir := t.TempDir()
	local := filepath.Join(dir, "train.csv")
	os.WriteFile(local, []byte("a,b\n1,2\n"), 0o644)
	r = runCLI(t, nil, addr, "", "volume", "cp", local, "datasets:raw/")
	if r.code != exitOK || !strings.Contains(r.stderr, "to datasets:raw/train.csv (8 bytes)") {
		t.Errorf("cp to the volume: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, nil, addr, "", "volume", "cp", local, "datasets:raw/train.csv")
	if r.code != 1 {
		t.Errorf("cp onto an existing file: exit %d, want 1", r.code)
	}
	oneLine(t, r.stderr, "sandboxctl: volume cp "+local+": ")
	r = runCLI(t, nil, addr, "x,y\n", "volume", "cp", "--overwrite", "-", "datasets:/raw/train.csv")
	if r.code != exitOK {
		t.Errorf("cp --overwrite from stdin: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, nil, addr, "", "volume", "cp", "datasets:raw/train.csv", "-")
	if r.code != exitOK || r.stdout != "x,y\n" {
		t.Errorf("cp to stdout: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, addr, "", "volume", "cp", "datasets:raw/train.csv", dir+"/")
	if b, _ := os.ReadFile(local); r.code != exitOK || string(b) != "x,y\n" {
		t.Errorf("cp to a directory: exit %d, stderr %q, file %q", r.code, r.stderr, b)
	}

	for _, args := range [][]string{
		{"volume", "mkdir", "-p", "datasets", "a/b"}, {"volume", "rmfile", "-r", "datasets", "raw"}, {"volume", "rm", "--force", "datasets"},
	} {
		if r := runCLI(t, nil, addr, "", args...); r.code != exitOK || r.stdout != "" || r.stderr != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"volume", "rm", "datasets"}, "sandboxctl: volume rm datasets: volume datasets is mounted by sandbox " + sbA},
		{[]string{"volume", "rmfile", "datasets", "raw"}, "sandboxctl: volume rmfile raw: remove /raw: the directory is not empty"},
		{[]string{"volume", "get", "nope"}, "sandboxctl: volume get nope: volume nope not found"},
		{[]string{"volume", "cp", "datasets:missing.csv", "-"}, "sandboxctl: volume cp datasets:/missing.csv: "},
	} {
		r := runCLI(t, nil, addr, "", tc.args...)
		if r.code != 1 {
			t.Errorf("%v: exit %d, want 1", tc.args, r.code)
		}
		oneLine(t, r.stderr, tc.msg)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"create datasets 2G", "ls ", "files . 2", "put datasets raw/train.csv", "put datasets raw/train.csv",
		"put datasets raw/train.csv --overwrite", "mkdir a/b -p", "rmfile raw -r", "rm datasets --force", "rm datasets", "rmfile raw"}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("calls\n%q\nwant\n%q", calls, want)
	}
}

func sizeName(n int64) string {
	return map[int64]string{2 << 30: "2G"}[n]
}

func TestVolumeCommandsUsage(t *testing.T) {
	fake := &coretest.Manager{}
	addr := startServer(t, fake)
	for _, args := range [][]string{
		{"volume"}, {"volume", "frobnicate"}, {"volume", "create"}, {"volume", "create", "a", "--size", "lots"},
		{"volume", "ls", "x"}, {"volume", "get"}, {"volume", "rm"}, {"volume", "cp", "a"},
		{"volume", "cp", "a:x", "b:y"}, {"volume", "cp", "a", "b"}, {"volume", "cp", "--overwrite", "a:x", "-"},
		{"volume", "cp", "-", "a:"}, {"volume", "files"}, {"volume", "mkdir", "a"}, {"volume", "rmfile", "a"},
		{"exec", "--sandbox", sbA, "--volume", "a:/mnt/a", "1"},
		{"exec", "--user", "alice", "--volume", "a", "1"},
		{"exec", "--user", "alice", "--volume", "a:/mnt/a:rx", "1"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runCLI(t, nil, addr, "", args...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d (stderr %q)", r.code, exitUsage, r.stderr)
			}
			oneLine(t, r.stderr, "sandboxctl "+args[0])
		})
	}
	if calls := fake.Calls(); len(calls) != 0 {
		t.Errorf("usage errors reached the server: %v", calls)
	}
}

func TestExecVolumeOptions(t *testing.T) {
	var got []core.Options
	created := true
	fake := &coretest.Manager{
		AcquireFunc: func(_ context.Context, user string, opts core.Options) (core.AcquireResult, error) {
			got = append(got, opts)
			return core.AcquireResult{Sandbox: core.Sandbox{ID: sbA, UserID: user, State: core.StateRunning}, Created: created}, nil
		},
		SubmitFunc: func(_ context.Context, req core.ExecRequest) (string, error) { return req.CommandID, nil },
		FollowFunc: func(_ context.Context, _, cid string, _ int64, fn func(core.Event) error) error {
			return fn(core.Event{Seq: 1, Type: ioproto.EventDone, Status: ioproto.StatusOK})
		},
	}
	addr := startServer(t, fake)
	r := runCLI(t, nil, addr, "", "exec", "--user", "alice", "--volume", "datasets:/mnt/datasets:ro", "--volume", volA+":/data/scratch", "1")
	want := []core.VolumeMount{{Volume: "datasets", Path: "/mnt/datasets", ReadOnly: true}, {Volume: volA, Path: "/data/scratch"}}
	if r.code != exitOK || len(got) != 1 || !reflect.DeepEqual(got[0].Volumes, want) {
		t.Fatalf("exec --volume: exit %d (%q), acquired with %+v", r.code, r.stderr, got)
	}
	// The server refuses a path outside /mnt and /data.
	r = runCLI(t, nil, addr, "", "exec", "--user", "alice", "--volume", "datasets:/etc", "1")
	if r.code != 1 || !strings.Contains(r.stderr, "under /mnt or /data") {
		t.Errorf("exec --volume outside /mnt: exit %d, stderr %q", r.code, r.stderr)
	}
	created = false
	r = runCLI(t, nil, addr, "", "exec", "--user", "alice", "--volume", "datasets:/mnt/d", "1")
	if r.code != exitOK || !strings.Contains(r.stderr, "exists already and keeps the volumes it was created with") {
		t.Errorf("exec --volume for an existing sandbox: exit %d, stderr %q", r.code, r.stderr)
	}
}
