package iolog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// ReadContexts reads the driver's io/contexts.json through openBounded (no
// symlink, FIFO, sparse or oversized file: the sandbox can write io/) and
// sanitises it: entries with an invalid ID, language or cwd, duplicates,
// and entries past MaxContexts+1 are dropped, so what the host acts on is
// bounded and well-formed. The default context is always in the result,
// first. A missing file (a driver not started yet) yields just the default
// context.
func (d *Dir) ReadContexts() ([]ioproto.ContextInfo, error) {
	def := ioproto.ContextInfo{ID: ioproto.DefaultContext, Language: ioproto.LanguagePython, Cwd: "."}
	root, err := os.OpenRoot(d.path)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, _, r, err := openBounded(root, ioproto.ContextsFile, ioproto.MaxContextsFileBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return []ioproto.ContextInfo{def}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var list ioproto.Contexts
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("decode %s: %w", ioproto.ContextsFile, err)
	}
	out := []ioproto.ContextInfo{def}
	seen := map[string]bool{}
	for _, c := range list.Contexts {
		if c.ID == ioproto.DefaultContext {
			out[0].CreatedAt = saneTime(c.CreatedAt)
			continue
		}
		probe := ioproto.Record{Type: ioproto.KindContext, CommandID: "check", Op: ioproto.ContextCreate,
			ContextID: c.ID, Language: c.Language, Cwd: c.Cwd}
		if seen[c.ID] || probe.Validate() != nil || len(out) > ioproto.MaxContexts {
			continue
		}
		seen[c.ID] = true
		out = append(out, ioproto.ContextInfo{ID: c.ID, Language: c.Language, Cwd: probe.Cwd,
			CreatedAt: saneTime(c.CreatedAt), CreatedBy: validOrEmpty(c.CreatedBy)})
	}
	return out, nil
}

// saneTime drops times no driver writes (the sandbox can forge the file).
func saneTime(t time.Time) time.Time {
	if t.Year() < 2000 || t.Year() > 9999 {
		return time.Time{}
	}
	return t.UTC()
}

func validOrEmpty(id string) string {
	if ioproto.ValidateCommandID(id) != nil {
		return ""
	}
	return id
}
