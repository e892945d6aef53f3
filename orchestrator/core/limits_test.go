package core

import (
	"errors"
	"strings"
	"testing"
)

func TestResolveDiskLimit(t *testing.T) {
	def, max := Limits{MemoryBytes: 1 << 30, NanoCPUs: 1e9, PidsLimit: 256, DiskBytes: 1 << 30}, Limits{DiskBytes: 2 << 30}
	_, err := resolveLimits(Limits{DiskBytes: 3 << 30}, def, max)
	wantInvalid(t, err, "limit disk_bytes is 3221225472; the server maximum is 2147483648")
	_, err = resolveLimits(Limits{DiskBytes: 1 << 20}, def, max)
	wantInvalid(t, err, "limit disk_bytes is 1048576; the minimum is 16777216")
	if l, err := resolveLimits(Limits{}, def, max); err != nil || l.DiskBytes != 1<<30 {
		t.Errorf("default disk = %+v, %v", l, err)
	}
}

// wantInvalid fails t unless err is ErrInvalidArgument containing msg.
func wantInvalid(t *testing.T, err error, msg string) {
	t.Helper()
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), msg) {
		t.Errorf("err = %v; want InvalidArgument containing %q", err, msg)
	}
}
