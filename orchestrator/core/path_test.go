package core

import (
	"errors"
	"strings"
	"testing"
)

func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{
		"": ".", "/workspace": ".", "/workspace/": ".", "x": "x", "./x": "x",
		"a//b/": "a/b", "/workspace//a": "a", "a/./b": "a/b", "..foo/bar..": "..foo/bar..",
		"a/b/c.txt": "a/b/c.txt", "/workspace/a/b": "a/b",
	} {
		if got, err := CleanPath(in); err != nil || got != want {
			t.Errorf("CleanPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, msg := range map[string]string{
		"..": "escapes /workspace", "../etc/passwd": "escapes /workspace", "a/../b": "escapes /workspace", "a/..": "escapes /workspace", "/x": "outside /workspace", "/workspace/../etc": "escapes /workspace",
		"/etc/passwd": "outside /workspace", "/workspacex/y": "outside /workspace",
		"a\x00b": "NUL", strings.Repeat("a", MaxPathLen+1): "limit",
	} {
		_, err := CleanPath(in)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), msg) || len(err.Error()) > 400 {
			t.Errorf("CleanPath(%.40q) = %v; want ErrInvalidArgument saying %q, bounded", in, err, msg)
		}
	}
}
