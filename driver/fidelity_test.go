package driver_test

import (
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// fidelityVariants are the runtimes the fidelity suite runs under: runc and,
// where installed, gVisor (the wake mode is not what these tests are about).
func fidelityVariants(t *testing.T) map[string]boxOptions {
	v := map[string]boxOptions{"runc": {}}
	if hasRuntime("runsc") {
		v["runsc"] = boxOptions{runtime: "runsc"}
	} else {
		t.Log("gVisor (runsc) is not registered with Docker; its variant is not run")
	}
	return v
}

// TestDriverFidelity covers what users coming from Jupyter-style code
// interpreters rely on: exit codes, whole-line output, execution counts,
// structured results and !shell lines.
func TestDriverFidelity(t *testing.T) {
	requireDocker(t)
	for name, opts := range fidelityVariants(t) {
		t.Run(name, func(t *testing.T) {
			b := startBox(t, opts)

			t.Run("every bash command reports its exit code, 0 included", func(t *testing.T) {
				d := expectStatus(t, b.wait(b.submit("bash", "true", 0)), ioproto.StatusOK, false)
				if d.ExitCode == nil || *d.ExitCode != 0 {
					t.Fatalf("bash true: exit code = %v, want present and 0", d.ExitCode)
				}
				d = expectStatus(t, b.wait(b.submit("bash", "exit 3", 0)), ioproto.StatusError, false)
				if d.ExitCode == nil || *d.ExitCode != 3 {
					t.Fatalf("bash exit 3: exit code = %v", d.ExitCode)
				}
				if d := expectStatus(t, b.py("1"), ioproto.StatusOK, false); d.ExitCode != nil {
					t.Fatalf("python: exit code = %d, want absent", *d.ExitCode)
				}
				_ = time.Second
			})
		})
	}
}
