package driver

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// finishedCmd is a finished command whose files are in /io/out.
type finishedCmd struct {
	id        string
	at        time.Time
	artifacts []string
	// bytes is what its files take on disk (whole blocks).
	bytes int64
}

// finishedFrom lists the commands found in /io/out at start-up (all of them
// finished by then), oldest first, with their artifacts.
func finishedFrom(entries []os.DirEntry) []finishedCmd {
	var out []finishedCmd
	for _, e := range entries {
		id, ok := ioproto.CommandIDFromEventsFile(e.Name())
		if !ok {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, finishedCmd{id: id, at: info.ModTime(), bytes: diskSize(info.Size())})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	byID := make(map[string]*finishedCmd, len(out))
	for i := range out {
		byID[out[i].id] = &out[i]
	}
	for _, e := range entries {
		if base, ok := artifactOwner(e.Name()); ok && byID[base] != nil {
			byID[base].artifacts = append(byID[base].artifacts, e.Name())
			if info, err := e.Info(); err == nil {
				byID[base].bytes += diskSize(info.Size())
			}
		}
	}
	return out
}

// noteFinished records that ev's command is done, for pruning.
func (d *Driver) noteFinished(ev *eventsFile) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.noteFinishedLocked(ev)
}

func (d *Driver) noteFinishedLocked(ev *eventsFile) {
	c := finishedCmd{id: ev.id, at: time.Now(), artifacts: ev.artifacts, bytes: ev.diskBytes()}
	d.finished = append(d.finished, c)
	d.outUsed += c.bytes
	d.forgetStdinLocked(ev.id)
}

// prune deletes the files of old finished commands from /io/out so it does
// not grow forever: the newest KeepMin commands always stay, commands beyond
// the newest KeepMax go, and those in between go once older than MaxAge.
// (makeRoom also prunes by bytes, which may take commands among the newest
// KeepMin.) Their IDs stay in the log, so they still never run again. The
// driver keeps the list of finished commands itself, so pruning costs only
// the deletions, not a listing of /io/out.
func (d *Driver) prune() {
	cutoff := time.Now().Add(-d.cfg.MaxAge)
	d.mu.Lock()
	doomed := d.selectLocked(func(int64) bool {
		return len(d.finished) > d.cfg.KeepMin && (len(d.finished) > d.cfg.KeepMax || d.finished[0].at.Before(cutoff))
	})
	d.mu.Unlock()
	d.removeFiles(doomed)
}

// selectLocked takes the oldest finished commands off the list while more
// is true of the bytes the list holds, and returns them for removeFiles.
func (d *Driver) selectLocked(more func(used int64) bool) []finishedCmd {
	var doomed []finishedCmd
	for len(d.finished) > 0 && more(d.outUsed) {
		doomed = append(doomed, d.finished[0])
		d.outUsed -= d.finished[0].bytes
		d.finished = d.finished[1:]
	}
	return doomed
}

// removeFiles deletes the files of pruned commands.
func (d *Driver) removeFiles(doomed []finishedCmd) {
	for _, c := range doomed {
		os.Remove(filepath.Join(d.outDir, ioproto.EventsFileName(c.id)))
		for _, a := range c.artifacts {
			os.Remove(filepath.Join(d.outDir, a))
		}
	}
	if len(doomed) > 0 && d.log != nil {
		d.log.Debug("pruned old commands", "count", len(doomed))
	}
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
