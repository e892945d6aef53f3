package main

import (
	"context"
	"io/fs"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
)

func TestFileCommands(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, s)
	}
	fake := &coretest.Manager{
		ListFilesFunc: func(_ context.Context, id, p string) ([]core.FileInfo, error) {
			note("ls " + p)
			return []core.FileInfo{
				{Path: "data", IsDir: true, Type: core.FileDirectory, Mode: fs.ModeDir | 0o755, UID: 1000, GID: 1000, ModTime: t0},
				{Path: "x.csv", Size: 12, Type: core.FileRegular, Mode: 0o644, UID: 1000, GID: 1000, ModTime: t0},
			}, nil
		},
		ListFilesDepthFunc: func(_ context.Context, id, p string, depth int) ([]core.FileInfo, error) {
			if depth > 10 {
				return nil, coretest.Errorf(core.ErrInvalidArgument, "list depth %d is out of range: give 0 to 10", depth)
			}
			note("ls " + p + " depth " + string(rune('0'+depth)))
			return []core.FileInfo{{Path: "data/in", Type: core.FileSymlink, Mode: fs.ModeSymlink | 0o777}}, nil
		},
		MakeDirectoryFunc: func(_ context.Context, id, p string, parents bool) (core.FileInfo, error) {
			note("mkdir " + p + map[bool]string{true: " -p"}[parents])
			if !parents && p == "a/b" {
				return core.FileInfo{}, coretest.Errorf(core.ErrNotFound, "make directory /workspace/a/b: parent directory /workspace/a does not exist")
			}
			return core.FileInfo{Path: p, IsDir: true}, nil
		},
		RemoveFunc: func(_ context.Context, id, p string, recursive bool) error {
			note("rm " + p + map[bool]string{true: " -r"}[recursive])
			if !recursive && p == "data" {
				return coretest.Errorf(core.ErrFailedPrecondition, "remove /workspace/data: the directory is not empty")
			}
			return nil
		},
		RenameFunc: func(_ context.Context, id, from, to string, overwrite bool) (core.FileInfo, error) {
			note("mv " + from + " " + to + map[bool]string{true: " -f"}[overwrite])
			if !overwrite && to == "taken" {
				return core.FileInfo{}, coretest.Errorf(core.ErrAlreadyExists, "rename /workspace/%s to /workspace/taken: the destination exists", from)
			}
			return core.FileInfo{Path: to}, nil
		},
	}
	addr := startServer(t, fake)

	r := runCLI(t, nil, addr, "", "ls", sbA)
	want := "drwxr-xr-x  1000:1000  0   2026-11-21 07:30:00  data\n-rw-r--r--  1000:1000  12  2026-11-21 07:30:00  x.csv\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("ls: exit %d, stdout\n%s\nwant\n%s(stderr %q)", r.code, r.stdout, want, r.stderr)
	}
	r = runCLI(t, nil, addr, "", "ls", sbA, "data", "--depth", "3")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Lrwxrwxrwx  0:0") || !strings.HasSuffix(r.stdout, " data/in\n") {
		t.Errorf("ls --depth: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{
		{"mkdir", "-p", sbA, "a/b"}, {"rm", "-r", sbA, "data"}, {"mv", sbA, "x.csv", "y.csv"}, {"mv", "-f", sbA, "x.csv", "taken"},
	} {
		if r := runCLI(t, nil, addr, "", args...); r.code != 0 || r.stdout != "" || r.stderr != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	for args, msg := range map[*[]string]string{
		{"mkdir", sbA, "a/b"}:             "sandboxctl: mkdir a/b: make directory /workspace/a/b: parent directory /workspace/a does not exist",
		{"rm", sbA, "data"}:               "sandboxctl: rm data: remove /workspace/data: the directory is not empty",
		{"mv", sbA, "x.csv", "taken"}:     "sandboxctl: mv x.csv: rename /workspace/x.csv to /workspace/taken: the destination exists",
		{"ls", sbA, "data", "--depth=11"}: "sandboxctl: ls data: ",
	} {
		r := runCLI(t, nil, addr, "", (*args)...)
		if r.code != 1 {
			t.Errorf("%v: exit %d, want 1", *args, r.code)
		}
		oneLine(t, r.stderr, msg)
	}
	mu.Lock()
	defer mu.Unlock()
	// The domain gets clean paths (core.CleanPath): "" is ".".
	wantCalls := []string{"ls .", "ls data depth 3", "mkdir a/b -p", "rm data -r", "mv x.csv y.csv", "mv x.csv taken -f"}
	if len(calls) < len(wantCalls) || strings.Join(calls[:len(wantCalls)], "|") != strings.Join(wantCalls, "|") {
		t.Errorf("calls %q, want them to start with %q", calls, wantCalls)
	}
}

func TestFileCommandsUsage(t *testing.T) {
	fake := &coretest.Manager{}
	addr := startServer(t, fake)
	for _, args := range [][]string{
		{"ls"}, {"ls", sbA, "a", "b"}, {"ls", sbA, "--depth", "x"},
		{"mkdir", sbA}, {"mkdir", "-q", sbA, "a"},
		{"rm", sbA}, {"rm", sbA, "a", "b"},
		{"mv", sbA, "a"}, {"mv", sbA, "a", "b", "c"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runCLI(t, nil, addr, "", args...)
			if r.code != 2 {
				t.Errorf("exit %d, want 2 (stderr %q)", r.code, r.stderr)
			}
			oneLine(t, r.stderr, "sandboxctl "+args[0]+": ")
		})
	}
	if r := runCLI(t, nil, addr, "", "help"); !strings.Contains(r.stdout, "mv [-f] SANDBOX_ID FROM TO") {
		t.Errorf("help does not list mv: %q", r.stdout)
	}
	if calls := fake.Calls(); len(calls) != 0 {
		t.Errorf("usage errors reached the server: %v", calls)
	}
}
