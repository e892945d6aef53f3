package cmdlog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// fakeLog is a command log whose driver answers every context record with
// events.
type fakeLog struct {
	list     []core.ContextInfo
	langs    []string
	events   []core.Event
	appended []ioproto.Record
}

func (f *fakeLog) SandboxID() string { return "sb-aaaaaaaaaaaaaaaaaaaa" }
func (f *fakeLog) Contexts(context.Context) ([]core.ContextInfo, error) {
	return f.list, nil
}
func (f *fakeLog) DriverStatus(context.Context) (ioproto.DriverStatus, error) {
	return ioproto.DriverStatus{Languages: f.langs}, nil
}
func (f *fakeLog) Append(_ context.Context, rec ioproto.Record) error {
	f.appended = append(f.appended, rec)
	return nil
}
func (f *fakeLog) Follow(_ context.Context, _ string, fn func(core.Event) error) error {
	for _, e := range f.events {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// The driver's answer to a context record becomes the error of its class,
// worded with the sandbox's ID and its (bounded) reason; the bound on
// contexts and an unknown context are refused before anything is
// appended; a language the image lacks is FAILED_PRECONDITION naming
// what it has (only languages the protocol knows).
func TestContextOps(t *testing.T) {
	ctx := t.Context()
	def := core.ContextInfo{ID: core.DefaultContextID, Language: "python", Cwd: "."}
	done := func(status, ename, reason string) []core.Event {
		return []core.Event{{Seq: 1, Type: ioproto.EventError, EName: ename}, {Seq: 2, Type: ioproto.EventDone, Status: status, Reason: reason}}
	}
	for name, tc := range map[string]struct {
		events []core.Event
		class  error
	}{
		"ok":               {done(ioproto.StatusOK, "", ""), nil},
		"unknown":          {done(ioproto.StatusError, ioproto.ContextErrUnknown, "no such context"), core.ErrNotFound},
		"exists":           {done(ioproto.StatusError, ioproto.ContextErrExists, "exists"), core.ErrAlreadyExists},
		"too many":         {done(ioproto.StatusError, ioproto.ContextErrTooMany, "too many"), core.ErrResourceExhausted},
		"a bad directory":  {done(ioproto.StatusError, ioproto.ContextErrCwd, strings.Repeat("x", 4096)), core.ErrFailedPrecondition},
		"no answer at all": {nil, core.ErrUnavailable},
	} {
		l := &fakeLog{list: []core.ContextInfo{def, {ID: "ctx-a", Language: "python", Cwd: "."}}, events: tc.events}
		err := ChangeContext(ctx, l, "ctx-a", ioproto.ContextRestart)
		if tc.class == nil && err != nil || tc.class != nil && !errors.Is(err, tc.class) {
			t.Errorf("%s: %v; want %v", name, err, tc.class)
		}
		if err != nil && (!strings.Contains(err.Error(), l.SandboxID()) || len(err.Error()) > 1024) {
			t.Errorf("%s: %q; want the sandbox named, the reason bounded", name, core.Truncate(err.Error(), 100))
		}
		if len(l.appended) != 1 || l.appended[0].Op != ioproto.ContextRestart || !strings.HasPrefix(l.appended[0].CommandID, "ctxop-") {
			t.Errorf("%s: appended %+v; want one restart record", name, l.appended)
		}
	}

	l := &fakeLog{list: []core.ContextInfo{def}}
	if err := ChangeContext(ctx, l, "ctx-nope", ioproto.ContextDelete); !errors.Is(err, core.ErrNotFound) || len(l.appended) != 0 {
		t.Errorf("delete of an unknown context: %v, %d appended; want NOT_FOUND, nothing appended", err, len(l.appended))
	}
	if err := CheckContextChange(core.DefaultContextID, ioproto.ContextDelete); !errors.Is(err, core.ErrFailedPrecondition) {
		t.Errorf("delete of the default context: %v; want FAILED_PRECONDITION", err)
	}
	for i := range ioproto.MaxContexts {
		l.list = append(l.list, core.ContextInfo{ID: fmt.Sprint("ctx-", i), Language: "bash", Cwd: "."})
	}
	if _, err := CreateContext(ctx, l, "bash", "."); !errors.Is(err, core.ErrResourceExhausted) || len(l.appended) != 0 {
		t.Errorf("a context past the bound: %v, %d appended; want RESOURCE_EXHAUSTED, nothing appended", err, len(l.appended))
	}
	l = &fakeLog{list: []core.ContextInfo{def}, langs: []string{"python", "bash", "<script>"}}
	_, err := CreateContext(ctx, l, "r", ".")
	if !errors.Is(err, core.ErrFailedPrecondition) || !strings.Contains(err.Error(), "supports python, bash)") || len(l.appended) != 0 {
		t.Errorf("a context in a language the image lacks: %v; want FAILED_PRECONDITION listing python, bash", err)
	}
	l.events = done(ioproto.StatusOK, "", "")
	if c, err := CreateContext(ctx, l, "python", "proj"); err != nil || c.Language != "python" || c.Cwd != "proj" || !strings.HasPrefix(c.ID, "ctx-") {
		t.Errorf("CreateContext = %+v, %v", c, err)
	}
}
