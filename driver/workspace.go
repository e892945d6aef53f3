package driver

import (
	"io/fs"
	"path/filepath"
	"sort"
	"time"

	"github.com/sandboxd/sandboxd/driver/ioproto"
)

// maxScan bounds the entries visited when looking for changed files, so a
// workspace with millions of files cannot make every command slow.
const maxScan = 20000

// changedFiles lists regular files under root modified at or after since,
// newest first, at most limit of them. Modification times are what every
// runtime's file system keeps; an inotify watch would miss writes under
// runtimes that do not forward them.
func changedFiles(root string, since time.Time, limit int) []ioproto.File {
	var files []ioproto.File
	var mtimes []time.Time
	visited := 0
	// Allow for file systems that store coarse timestamps.
	since = since.Add(-10 * time.Millisecond)
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
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
		if err != nil || info.ModTime().Before(since) {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return nil
		}
		files = append(files, ioproto.File{Path: filepath.ToSlash(rel), Size: info.Size()})
		mtimes = append(mtimes, info.ModTime())
		return nil
	})
	idx := make([]int, len(files))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return mtimes[idx[a]].After(mtimes[idx[b]]) })
	out := make([]ioproto.File, 0, min(len(files), limit))
	for _, i := range idx {
		if len(out) == limit {
			break
		}
		out = append(out, files[i])
	}
	return out
}
