package iolog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/ioproto"
)

// TestAppendEnv: AppendEnv appends one env record under a new sbx-env- ID,
// which is no command of the log; an env the driver would refuse is not
// appended; ready can refuse the append.
func TestAppendEnv(t *testing.T) {
	d := newDir(t)
	ctx := context.Background()
	if _, err := d.Append(exec("c1"), nil); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"A": "1", "B": "two"}
	id, err := d.AppendEnv(ctx, env, nil)
	if err != nil || !strings.HasPrefix(id, ioproto.EnvRecordIDPrefix) || ioproto.ValidateCommandID(id) != nil {
		t.Fatalf("AppendEnv = %q, %v", id, err)
	}
	id2, err := d.AppendEnv(ctx, map[string]string{"A": "2"}, nil)
	if err != nil || id2 == id {
		t.Fatalf("second AppendEnv = %q, %v (first %q): want a new ID", id2, err, id)
	}
	if _, err := d.AppendEnv(ctx, map[string]string{ioproto.EnvPoolDriver: "1"}, nil); !errors.Is(err, ioproto.ErrMalformed) {
		t.Errorf("AppendEnv of %s = %v, want ErrMalformed", ioproto.EnvPoolDriver, err)
	}
	if _, err := d.AppendEnv(ctx, map[string]string{"A=B": "1"}, nil); !errors.Is(err, ioproto.ErrMalformed) {
		t.Errorf("AppendEnv of a bad name = %v, want ErrMalformed", err)
	}
	refused := errors.New("sandbox is dead")
	if _, err := d.AppendEnv(ctx, env, func() error { return refused }); err != refused {
		t.Errorf("AppendEnv with a refusing ready = %v, want its error", err)
	}

	b, err := os.ReadFile(filepath.Join(d.Path(), ioproto.StdinFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("log has %d lines, want 3 (c1, two env records):\n%s", len(lines), b)
	}
	rec, _, err := ioproto.ParseRecord([]byte(lines[1]))
	if err != nil || rec.Type != ioproto.KindEnv || rec.CommandID != id || !reflect.DeepEqual(rec.Env, env) {
		t.Fatalf("env record %q: %+v, %v", lines[1], rec, err)
	}
	// No command: not listed, for this Dir nor for one reading the log.
	for _, dd := range []*Dir{d, New(d.Path())} {
		list, total, err := dd.Commands(ctx, 0, 10)
		if err != nil || total != 1 || len(list) != 1 || list[0].ID != "c1" {
			t.Errorf("Commands = %+v, %d, %v; want c1 only", list, total, err)
		}
		if _, ok, err := dd.Command(ctx, id); ok || err != nil {
			t.Errorf("Command(%s) = %v, %v; the env record is no command", id, ok, err)
		}
	}
}
