package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestE2BOnKubernetes: --e2b-listen is accepted with --backend kubernetes,
// and the access-token secret is the same for every replica holding the
// io sidecars' token, whatever its state directory, and another for
// another token; the Docker backend keeps its file in the state dir.
func TestE2BOnKubernetes(t *testing.T) {
	dir := t.TempDir()
	tok1, tok2 := filepath.Join(dir, "t1"), filepath.Join(dir, "t2")
	os.WriteFile(tok1, []byte("io-token-one-0123456789\n"), 0o600)
	os.WriteFile(tok2, []byte("io-token-two-0123456789\n"), 0o600)
	kubeSecret := func(token, state string) []byte {
		t.Helper()
		c, err := parseConfig([]string{"--backend", "kubernetes", "--kube-io-token-file", token, "--e2b-listen", "127.0.0.1:0",
			"--state-dir", state}, env("HOME", "/root"), io.Discard)
		if err != nil {
			t.Fatalf("parseConfig: %v", err)
		}
		s, err := e2bSecret(c)
		if err != nil {
			t.Fatalf("e2bSecret: %v", err)
		}
		return s
	}
	a, b := kubeSecret(tok1, filepath.Join(dir, "replica-a")), kubeSecret(tok1, filepath.Join(dir, "replica-b"))
	if len(a) < 16 || !bytes.Equal(a, b) {
		t.Errorf("two replicas with one io token: secrets %x and %x, want one", a, b)
	}
	if c := kubeSecret(tok2, filepath.Join(dir, "replica-a")); bytes.Equal(a, c) {
		t.Error("another io token gave the same secret")
	}
	state := filepath.Join(dir, "docker")
	c, err := parseConfig([]string{"--e2b-listen", "127.0.0.1:0", "--state-dir", state}, env("HOME", "/root"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s, err := e2bSecret(c)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(state, "e2b-secret")); len(s) < 16 || len(again) == 0 {
		t.Errorf("docker: secret %x, file %q", s, again)
	}
}
