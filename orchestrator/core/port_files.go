package core

import (
	"context"
	"io"
)

// Files is a sandbox's files API, under /workspace: every backend has it.
// Paths are relative to /workspace or absolute under it (ValidatePath);
// Validating hands backends the clean relative form.
type Files interface {
	Upload(ctx context.Context, sandboxID, path string, r io.Reader) (FileInfo, error)
	Download(ctx context.Context, sandboxID, path string) (io.ReadCloser, FileInfo, error)
	ListFiles(ctx context.Context, sandboxID, path string) ([]FileInfo, error)
	ListFilesDepth(ctx context.Context, sandboxID, path string, depth int) ([]FileInfo, error)
	MakeDirectory(ctx context.Context, sandboxID, path string, parents bool) (FileInfo, error)
	Remove(ctx context.Context, sandboxID, path string, recursive bool) error
	Rename(ctx context.Context, sandboxID, from, to string, overwrite bool) (FileInfo, error)

	// WatchDirectory calls fn once the watch is in place (an update with
	// no Event), then once per change, until ctx ends or fn fails.
	WatchDirectory(ctx context.Context, sandboxID, path string, recursive bool, fn func(WatchUpdate) error) error
}
