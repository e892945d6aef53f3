package secretfile

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "secret")
	a, err := Load(path)
	if err != nil || len(a) != Size {
		t.Fatalf("Load: %d bytes, %v", len(a), err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the file: %v, %v; want mode 0600", st.Mode(), err)
	}
	b, err := Load(path)
	if err != nil || !bytes.Equal(a, b) {
		t.Errorf("a second Load gave another secret (%v)", err)
	}
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil {
		t.Error("a short secret was accepted")
	}
}
