package core_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
)

// lastOpts are the options of the last Acquire statelessFake saw.
var lastOpts atomic.Pointer[core.Options]

// statelessFake is a fake backend whose Execute calls run.
func statelessFake(run func(ctx context.Context, fn func(core.Event) error) error) (*coretest.Manager, *[]string, *sync.Mutex) {
	var mu sync.Mutex
	var deleted []string
	fake := &coretest.Manager{
		AcquireFunc: func(_ context.Context, user string, opts core.Options) (core.AcquireResult, error) {
			lastOpts.Store(&opts)
			return core.AcquireResult{Sandbox: core.Sandbox{ID: core.NewSandboxID(), UserID: user}, Created: true}, nil
		},
		ExecuteFunc: func(ctx context.Context, req core.ExecRequest, submitted func(string), fn func(core.Event) error) error {
			submitted("c1")
			return run(ctx, fn)
		},
		DeleteFunc: func(_ context.Context, id string) error {
			mu.Lock()
			defer mu.Unlock()
			deleted = append(deleted, id)
			return nil
		},
	}
	return fake, &deleted, &mu
}

// TestRunStateless: a run acquires a sandbox for a user of its own,
// streams the command's events and deletes the sandbox, also when the
// command failed or the caller gave up; a bad request never creates one.
func TestRunStateless(t *testing.T) {
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	for _, tc := range []struct {
		name    string
		run     func(ctx context.Context, fn func(core.Event) error) error
		wantErr bool
	}{
		{"ok", func(_ context.Context, fn func(core.Event) error) error {
			for _, e := range []core.Event{{Type: ioproto.EventStdout, Text: "hi\n"}, {Type: ioproto.EventDone, Status: ioproto.StatusOK}} {
				if err := fn(e); err != nil {
					return err
				}
			}
			return nil
		}, false},
		{"execute fails", func(context.Context, func(core.Event) error) error { return core.Unavailablef("gone") }, true},
		{"caller gives up", func(ctx context.Context, _ func(core.Event) error) error { <-ctx.Done(); return ctx.Err() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake, deleted, mu := statelessFake(tc.run)
			m := core.Validating(fake, core.DefaultPolicy())
			cctx, cancel := context.WithCancel(ctx)
			if tc.name == "caller gives up" {
				cancel()
			} else {
				defer cancel()
			}
			var got []core.Event
			var gone string
			err := core.RunStateless(cctx, m, core.Options{}, core.ExecRequest{Code: "print('hi')"}, nil, func(e core.Event) error {
				got = append(got, e)
				return nil
			}, func(id string, err error) { gone = id })
			if (err != nil) != tc.wantErr {
				t.Fatalf("RunStateless: %v", err)
			}
			if !tc.wantErr && (len(got) != 2 || got[0].Text != "hi\n") {
				t.Errorf("events: %+v", got)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(*deleted) != 1 || (*deleted)[0] != gone {
				t.Errorf("deleted %v (reported %q); want the run's sandbox deleted once", *deleted, gone)
			}
			if got := lastOpts.Load(); got == nil || got.OnIdle != core.OnIdleDelete {
				t.Errorf("acquired with %+v; want on_idle delete, so a run whose deletion never came is not kept", got)
			}
			var user string
			for _, c := range fake.Calls() {
				if c == "Acquire" {
					user = "seen"
				}
			}
			if user == "" {
				t.Errorf("no Acquire reached the backend: %v", fake.Calls())
			}
		})
	}

	// A bad request is refused before any sandbox is made.
	fake, deleted, _ := statelessFake(func(context.Context, func(core.Event) error) error { return nil })
	m := core.Validating(fake, core.DefaultPolicy())
	err := core.RunStateless(ctx, m, core.Options{Env: map[string]string{"A=B": "x"}}, core.ExecRequest{Code: "1"}, nil, func(core.Event) error { return nil }, nil)
	if !errors.Is(err, core.ErrInvalidArgument) || len(*deleted) != 0 || len(fake.Calls()) != 0 {
		t.Errorf("bad env: %v, calls %v; want INVALID_ARGUMENT and nothing made", err, fake.Calls())
	}
	err = core.RunStateless(ctx, m, core.Options{}, core.ExecRequest{Language: "cobol"}, nil, func(core.Event) error { return nil }, nil)
	if !errors.Is(err, core.ErrInvalidArgument) || len(fake.Calls()) != 0 {
		t.Errorf("unknown language: %v, calls %v; want INVALID_ARGUMENT and nothing made", err, fake.Calls())
	}
	// A command past the server's bounds is refused at Execute: the
	// sandbox made for it is deleted.
	err = core.RunStateless(ctx, m, core.Options{}, core.ExecRequest{Code: strings.Repeat("x", core.MaxCodeBytes+1)}, nil, func(core.Event) error { return nil }, nil)
	if calls := strings.Join(fake.Calls(), ","); !errors.Is(err, core.ErrInvalidArgument) || strings.Count(calls, "Delete") != strings.Count(calls, "Acquire") {
		t.Errorf("code past the bound: %v, calls %v; want INVALID_ARGUMENT and the sandbox deleted", err, calls)
	}
}
