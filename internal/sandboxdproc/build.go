package sandboxdproc

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// Package is the import path of the sandboxd command.
const Package = "github.com/sandboxd/sandboxd/cmd/sandboxd"

// TestHooksTag is the build tag of sandboxd's test hooks
// (cmd/sandboxd/testhooks.go): a sandboxd built with it kills itself
// (SIGKILL) at the step of a hibernation or a wake that the variable
// SANDBOXD_TEST_CRASH_AT names. The sandboxd make builds has no such tag,
// and no code that reads the variable.
const TestHooksTag = "sandboxd_testhooks"

// Build compiles the package pkg (an import path of this module, e.g.
// Package) with the build tags given, if any (e.g. TestHooksTag), into dir
// and returns the binary's path, named after the package's last element.
// It needs the Go tool and this module's source, i.e. running from the
// repository.
func Build(ctx context.Context, dir, pkg string, tags ...string) (string, error) {
	bin := filepath.Join(dir, filepath.Base(pkg))
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	out, err := exec.CommandContext(ctx, "go", append(args, pkg)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}
