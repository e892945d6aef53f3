package core

import (
	"path"
	"strings"
)

// The one rule for every request field that names a path in a sandbox (the
// files API's paths, a context's working directory): paths are what the
// sandboxed code sees. A relative path is relative to /workspace, and an
// absolute path must be /workspace or lie under it ("/workspace/data/x.csv"
// and "data/x.csv" name the same file). Any other absolute path
// ("/etc/passwd", but also "/data/x.csv") is refused rather than
// reinterpreted, so a path means the same thing to the model writing code
// and to the API. Paths with a ".." element are refused even when they
// would stay inside, as are NUL bytes. Backends still open everything
// through an os.Root: the workspace is the sandbox's, and may hold symlinks
// planted to leave it.

// MaxPathLen bounds a path argument (Linux's PATH_MAX).
const MaxPathLen = 4096

// CleanPath turns a caller's path into a clean path relative to the
// workspace ("." for the workspace itself). A refused path is
// ErrInvalidArgument saying why (quoting at most 256 bytes of the path).
func CleanPath(p string) (string, error) {
	switch {
	case strings.ContainsRune(p, 0):
		return "", Invalidf("path %q contains a NUL byte", Truncate(p, 256))
	case len(p) > MaxPathLen:
		return "", Invalidf("path is %d bytes long; the limit is %d", len(p), MaxPathLen)
	}
	rel := p
	if strings.HasPrefix(p, "/") {
		after, ok := strings.CutPrefix(p, "/workspace")
		if !ok || (after != "" && !strings.HasPrefix(after, "/")) {
			return "", Invalidf("path %q is outside /workspace: give a path relative to /workspace or one starting with /workspace/", Truncate(p, 256))
		}
		rel = strings.TrimLeft(after, "/")
	}
	for _, elem := range strings.Split(rel, "/") {
		if elem == ".." {
			return "", Invalidf("path %q escapes /workspace: \"..\" is not allowed", Truncate(p, 256))
		}
	}
	return path.Clean("./" + rel), nil // "./" makes "" clean to "."
}

// DisplayPath shows a workspace-relative path as the sandbox sees it.
func DisplayPath(rel string) string {
	if rel == "." {
		return "/workspace"
	}
	return "/workspace/" + rel
}

// CleanVolumePath turns a caller's path on a volume into a clean path
// relative to the volume's root ("." for the root): "/a/b" and "a/b" name
// the same file. NUL bytes and ".." elements are refused, as in CleanPath;
// backends still open everything through an os.Root, since sandboxes
// write to volumes too.
func CleanVolumePath(p string) (string, error) {
	switch {
	case strings.ContainsRune(p, 0):
		return "", Invalidf("path %q contains a NUL byte", Truncate(p, 256))
	case len(p) > MaxPathLen:
		return "", Invalidf("path is %d bytes long; the limit is %d", len(p), MaxPathLen)
	}
	rel := strings.TrimLeft(p, "/")
	for _, elem := range strings.Split(rel, "/") {
		if elem == ".." {
			return "", Invalidf("path %q escapes the volume: \"..\" is not allowed", Truncate(p, 256))
		}
	}
	return path.Clean("./" + rel), nil
}

// VolumePathDisplay shows a volume-relative path as the API's callers
// give it.
func VolumePathDisplay(rel string) string {
	if rel == "." {
		return "/"
	}
	return "/" + rel
}
