//go:build !sandboxd_testhooks

package main

import "log/slog"

// installTestHooks installs nothing: test hooks exist only in the test
// build of sandboxd (testhooks.go, tag sandboxd_testhooks).
func installTestHooks(*config, func(string) string, *slog.Logger) {}
