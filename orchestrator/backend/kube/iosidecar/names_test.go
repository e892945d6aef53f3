package iosidecar

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A file whose name is not UTF-8 is listed (its name made valid, as
// sandboxd's gRPC door makes it), not an error for the whole listing. (e2e
// HostileIO/non-utf8 on Kubernetes: the listing failed to encode.)
func TestListFilesNonUTF8Name(t *testing.T) {
	sc := startSidecar(t)
	if err := os.Mkdir(filepath.Join(sc.workspace, "u8"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bad-\xff\xfe.txt", "good.txt"} {
		if err := os.WriteFile(filepath.Join(sc.workspace, "u8", name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := sc.c.ListFiles(ctxT(t), "u8", 0)
	if err != nil || len(got) != 2 {
		t.Fatalf("ListFiles(u8) = %v, %v; want both files", got, err)
	}
	var names []string
	for _, fi := range got {
		names = append(names, fi.Path)
	}
	if !slices.Contains(names, "u8/bad-\uFFFD.txt") || !slices.Contains(names, "u8/good.txt") {
		t.Errorf("ListFiles(u8) names %q; want u8/bad-\uFFFD.txt and u8/good.txt", names)
	}
}
