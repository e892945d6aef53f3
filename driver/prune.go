package driver

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/driver/ioproto"
)

// prune deletes the files of old finished commands from /io/out so it does
// not grow forever: the newest KeepMin commands always stay, commands beyond
// the newest KeepMax go, and those in between go once older than MaxAge.
// Their IDs stay in the log, so they still never run again.
func (d *Driver) prune() {
	entries, err := os.ReadDir(d.outDir)
	if err != nil {
		d.log.Error("prune: list output directory", "err", err)
		return
	}
	type cmd struct {
		id    string
		mtime time.Time
	}
	var cmds []cmd
	for _, e := range entries {
		id, ok := ioproto.CommandIDFromEventsFile(e.Name())
		if !ok {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		cmds = append(cmds, cmd{id, info.ModTime()})
	}
	if len(cmds) <= d.cfg.KeepMin {
		return
	}
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].mtime.After(cmds[j].mtime) })
	d.mu.Lock()
	runningID := ""
	if d.running != nil {
		runningID = d.running.id
	}
	d.mu.Unlock()
	cutoff := time.Now().Add(-d.cfg.MaxAge)
	doomed := map[string]bool{}
	for i, c := range cmds[d.cfg.KeepMin:] {
		if c.id == runningID {
			continue
		}
		if d.cfg.KeepMin+i >= d.cfg.KeepMax || c.mtime.Before(cutoff) {
			doomed[c.id] = true
		}
	}
	if len(doomed) == 0 {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if id, ok := ioproto.CommandIDFromEventsFile(name); ok && doomed[id] {
			os.Remove(filepath.Join(d.outDir, name))
			continue
		}
		// Artifacts are named <command_id>.<seq>.<n>.
		if base, ok := artifactOwner(name); ok && doomed[base] {
			os.Remove(filepath.Join(d.outDir, name))
		}
	}
	d.log.Info("pruned old commands", "count", len(doomed))
}

// artifactOwner returns the command ID of an artifact file name.
func artifactOwner(name string) (string, bool) {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 || !allDigits(name[i+1:]) {
		return "", false
	}
	j := strings.LastIndexByte(name[:i], '.')
	if j <= 0 || !allDigits(name[j+1:i]) {
		return "", false
	}
	return name[:j], true
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
