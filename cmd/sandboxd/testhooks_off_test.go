//go:build !sandboxd_testhooks

package main

import (
	"io"
	"testing"
)

// TestInstallTestHooksOff: in the default build SANDBOXD_TEST_CRASH_AT
// does nothing.
func TestInstallTestHooksOff(t *testing.T) {
	c, err := parseConfig(nil, env("HOME", "/root"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	installTestHooks(&c, env(crashHookVar, "hibernate:begun"), nil)
	if c.docker.AtStep != nil {
		t.Error("the default build installed a step hook")
	}
}
