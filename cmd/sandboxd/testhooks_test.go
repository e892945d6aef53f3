package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// crashHookVar is the variable the test build of sandboxd reads
// (testhooks.go); spelled here too, since that file is not in this build.
const crashHookVar = "SANDBOXD_TEST_CRASH_AT"

// TestDefaultBuildHasNoTestHooks: no source file compiled into the default
// build of sandboxd, this module's or a dependency's, mentions the crash
// hook's variable, and the test build's files do (so the check would see
// it). The default build is what make builds and ships.
func TestDefaultBuildHasNoTestHooks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list; skipped in -short mode")
	}
	if files := filesMentioning(t, crashHookVar); len(files) > 0 {
		t.Errorf("the default build of sandboxd compiles %v, which mention %s: test hooks must be in files with the build tag sandboxd_testhooks", files, crashHookVar)
	}
	if files := filesMentioning(t, crashHookVar, "-tags", "sandboxd_testhooks"); len(files) != 1 || filepath.Base(files[0]) != "testhooks.go" {
		t.Errorf("the test build of sandboxd: %v mention %s; want testhooks.go alone", files, crashHookVar)
	}
}

// filesMentioning lists the Go files (cgo ones included) of sandboxd and
// all its dependencies, in the build go list's flags select, that contain s.
func filesMentioning(t *testing.T, s string, flags ...string) []string {
	t.Helper()
	args := append(append([]string{"list", "-deps"}, flags...), "-f", `{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .CgoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}`, ".")
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go %v: %v", args, err)
	}
	var found []string
	n := 0
	for f := range strings.FieldsSeq(string(out)) {
		n++
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(s)) {
			found = append(found, f)
		}
	}
	if n < 100 {
		t.Fatalf("go list found only %d files", n)
	}
	return found
}
