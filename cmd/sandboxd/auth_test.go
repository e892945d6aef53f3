package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runArgs runs sandboxd with args on a fresh state directory and returns
// its error; the cases below all fail before the manager starts, so no
// Docker is needed.
func runArgs(t *testing.T, args ...string) error {
	t.Helper()
	args = append([]string{"--state-dir", t.TempDir(), "--disk-volumes=false"}, args...)
	return run(t.Context(), func() {}, args, env("HOME", "/root"), io.Discard)
}

func TestRefusesOpenListenerWithoutAuth(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		err := runArgs(t, "--listen", addr)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "refusing to serve on") || !strings.Contains(err.Error(), "--auth-tokens") {
			t.Errorf("--listen %s without auth: %v; want a usage error naming --auth-tokens", addr, err)
		}
	}
}

func TestTokenFileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "tokens")
	if err := os.WriteFile(bad, []byte("# ops\nshort-token acme user\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, want string }{
		{filepath.Join(dir, "missing"), "no such file"},
		{bad, "line 2: the token is 11 characters long"},
	} {
		err := runArgs(t, "--auth-tokens", tc.file)
		if err == nil || !strings.HasPrefix(err.Error(), "--auth-tokens: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--auth-tokens %s: %v; want an error containing %q", tc.file, err, tc.want)
		}
	}
}

func TestTLSFileErrors(t *testing.T) {
	err := runArgs(t, "--tls-cert", "/nonexistent/cert.pem", "--tls-key", "/nonexistent/key.pem")
	if err == nil || !strings.Contains(err.Error(), "--tls-cert/--tls-key") {
		t.Errorf("missing TLS files: %v", err)
	}
}
