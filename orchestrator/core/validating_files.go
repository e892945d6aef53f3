package core

import (
	"context"
	"io"
	"strings"
)

// validatingFiles is Validating's wrapper of a Files port.
type validatingFiles struct {
	*validator
	m Files
}

func (v validatingFiles) Upload(ctx context.Context, sandboxID, p string, r io.Reader) (FileInfo, error) {
	rel, err := sandboxPath(sandboxID, p)
	if err != nil {
		return FileInfo{}, err
	}
	if rel == "." {
		return FileInfo{}, Invalidf("upload path is empty: name a file under /workspace")
	}
	release, err := v.stream(ctx, sandboxID)
	if err != nil {
		return FileInfo{}, err
	}
	defer release()
	return v.m.Upload(ctx, sandboxID, rel, &uploadLimit{r: r, max: v.p.MaxUploadBytes, left: v.p.MaxUploadBytes, path: rel})
}

func (v validatingFiles) Download(ctx context.Context, sandboxID, p string) (io.ReadCloser, FileInfo, error) {
	rel, err := sandboxPath(sandboxID, p)
	if err != nil {
		return nil, FileInfo{}, err
	}
	release, err := v.stream(ctx, sandboxID)
	if err != nil {
		return nil, FileInfo{}, err
	}
	rc, fi, err := v.m.Download(ctx, sandboxID, rel)
	if err != nil {
		release()
		return nil, FileInfo{}, err
	}
	return &releasingReader{ReadCloser: rc, release: release}, fi, nil
}

func (v validatingFiles) ListFiles(ctx context.Context, sandboxID, p string) ([]FileInfo, error) {
	rel, err := sandboxPath(sandboxID, p)
	if err != nil {
		return nil, err
	}
	return v.m.ListFiles(ctx, sandboxID, rel)
}

func (v validatingFiles) ListFilesDepth(ctx context.Context, sandboxID, p string, depth int) ([]FileInfo, error) {
	rel, err := sandboxPath(sandboxID, p)
	if err != nil {
		return nil, err
	}
	if depth < 0 || depth > MaxListDepth {
		return nil, Invalidf("list depth %d is out of range: give 0 to %d", depth, MaxListDepth)
	}
	return v.m.ListFilesDepth(ctx, sandboxID, rel, depth)
}

func (v validatingFiles) MakeDirectory(ctx context.Context, sandboxID, p string, parents bool) (FileInfo, error) {
	rel, err := sandboxPath(sandboxID, p)
	if err != nil {
		return FileInfo{}, err
	}
	return v.m.MakeDirectory(ctx, sandboxID, rel, parents)
}

func (v validatingFiles) Remove(ctx context.Context, sandboxID, p string, recursive bool) error {
	rel, err := sandboxPath(sandboxID, p)
	if err != nil {
		return err
	}
	if rel == "." {
		return Invalidf("remove %s: the workspace itself cannot be removed; remove what is in it", DisplayPath(rel))
	}
	return v.m.Remove(ctx, sandboxID, rel, recursive)
}

func (v validatingFiles) Rename(ctx context.Context, sandboxID, from, to string, overwrite bool) (FileInfo, error) {
	relFrom, err := sandboxPath(sandboxID, from)
	if err != nil {
		return FileInfo{}, err
	}
	relTo, err := CleanPath(to)
	if err != nil {
		return FileInfo{}, err
	}
	showFrom, showTo := DisplayPath(relFrom), DisplayPath(relTo)
	switch {
	case relFrom == ".":
		return FileInfo{}, Invalidf("rename %s: the workspace itself cannot be moved", showFrom)
	case relTo == ".":
		return FileInfo{}, Invalidf("rename %s to %s: the destination is the workspace itself", showFrom, showTo)
	case relTo == relFrom:
		return FileInfo{}, Invalidf("rename %s: source and destination are the same path", showFrom)
	case strings.HasPrefix(relTo, relFrom+"/"):
		return FileInfo{}, Invalidf("rename %s to %s: cannot move a directory into itself", showFrom, showTo)
	}
	return v.m.Rename(ctx, sandboxID, relFrom, relTo, overwrite)
}

func (v validatingFiles) WatchDirectory(ctx context.Context, sandboxID, p string, recursive bool, fn func(WatchUpdate) error) error {
	rel, err := sandboxPath(sandboxID, p)
	if err != nil {
		return err
	}
	return v.m.WatchDirectory(ctx, sandboxID, rel, recursive, fn)
}
