package sandboxdproc

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
)

// Package is the import path of the sandboxd command.
const Package = "github.com/sandboxd/sandboxd/cmd/sandboxd"

// Build compiles the package pkg (an import path of this module, e.g.
// Package) into dir and returns the binary's path, named after the
// package's last element. It needs the Go tool and this module's source,
// i.e. running from the repository.
func Build(ctx context.Context, dir, pkg string) (string, error) {
	bin := filepath.Join(dir, filepath.Base(pkg))
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}
