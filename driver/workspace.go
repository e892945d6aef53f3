package driver

import (
	"io/fs"
	"path/filepath"
	"sort"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

const (
	// maxScan bounds the entries visited when looking for changed files, so
	// a workspace with millions of files cannot make every command slow.
	maxScan = 20000
	// mtimeSlack allows for file systems that stamp files from a coarse
	// clock (Linux uses the timer tick), which can date a write made just
	// after the command started a few milliseconds before it.
	mtimeSlack = 20 * time.Millisecond
)

// stamp identifies a version of a file.
type stamp struct {
	mtime time.Time
	size  int64
}

// workspaceWatch finds the files a command created or changed. Modification
// times are what every runtime's file system keeps (an inotify watch would
// miss writes under some runtimes); the snapshot of files modified just
// before the start tells them apart from the command's own writes despite
// the clock slack.
type workspaceWatch struct {
	root   string
	since  time.Time
	before map[string]stamp
}

func watchWorkspace(root string, start time.Time) *workspaceWatch {
	w := &workspaceWatch{root: root, since: start.Add(-mtimeSlack), before: map[string]stamp{}}
	w.walk(func(rel string, s stamp) { w.before[rel] = s })
	return w
}

// changed lists files created or changed since the watch began, newest
// first, at most limit of them.
func (w *workspaceWatch) changed(limit int) []ioproto.File {
	type entry struct {
		file  ioproto.File
		mtime time.Time
	}
	var found []entry
	w.walk(func(rel string, s stamp) {
		if old, ok := w.before[rel]; ok && old == s {
			return
		}
		found = append(found, entry{ioproto.File{Path: rel, Size: s.size}, s.mtime})
	})
	sort.SliceStable(found, func(a, b int) bool { return found[a].mtime.After(found[b].mtime) })
	out := make([]ioproto.File, 0, min(len(found), limit))
	for _, e := range found[:min(len(found), limit)] {
		out = append(out, e.file)
	}
	return out
}

// walk calls fn for regular files modified since the watch's start.
func (w *workspaceWatch) walk(fn func(rel string, s stamp)) {
	visited := 0
	_ = filepath.WalkDir(w.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		visited++
		if visited > maxScan {
			return filepath.SkipAll
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil || info.ModTime().Before(w.since) {
			return nil
		}
		if rel, err := filepath.Rel(w.root, path); err == nil {
			fn(filepath.ToSlash(rel), stamp{info.ModTime(), info.Size()})
		}
		return nil
	})
}
