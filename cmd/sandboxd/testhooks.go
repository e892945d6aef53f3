//go:build sandboxd_testhooks

package main

import (
	"log/slog"
	"os"
	"syscall"
)

// This file is compiled only into the test build of sandboxd, `go build
// -tags sandboxd_testhooks`, which the e2e tests make through
// internal/sandboxdproc (Build with TestHooksTag). The sandboxd make builds
// and ships has testhooks_off.go instead: it reads no test variable.

// crashAtVar names the step of a hibernation, a wake or a snapshot
// (docker.HibernateSteps, WakeSteps, SnapshotSteps) at which the test build kills
// itself.
const crashAtVar = "SANDBOXD_TEST_CRASH_AT"

// installTestHooks sets the Docker backend's step hook to SIGKILL sandboxd
// at the step crashAtVar names: nothing is cleaned up, as in a real crash.
func installTestHooks(c *config, getenv func(string) string, log *slog.Logger) {
	at := getenv(crashAtVar)
	if at == "" {
		return
	}
	log.Warn("test build: sandboxd kills itself at a step of hibernation or wake", "step", at)
	c.docker.AtStep = func(step string) {
		if step == at {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
}
