package iosidecar

import (
	"context"
	"errors"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/cmdlog"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// run calls c.Run and returns what it delivered: whether submitted was
// called (and with what), before which event, and the events.
type runResult struct {
	submitted, appended bool
	submittedAt         int // events delivered when submitted was called
	events              []ioproto.Event
	err                 error
}

func run(t *testing.T, c *Client, rec ioproto.Record) runResult {
	t.Helper()
	var r runResult
	r.err = c.Run(ctxT(t), rec, func(appended bool) {
		if r.submitted {
			t.Error("submitted called twice")
		}
		r.submitted, r.appended, r.submittedAt = true, appended, len(r.events)
	}, func(ev ioproto.Event) error { r.events = append(r.events, ev); return nil })
	return r
}

// TestRun: a command appended once and its events streamed in one call;
// the same command again is not appended and streams from the first
// event; another command under its ID, and a record that is not a
// command, are refused before anything is submitted.
func TestRun(t *testing.T) {
	sc := startSidecar(t)
	sc.writeEvents(t, "c1", threeEvents("c1")...) // the driver's, as soon as it sees the command
	r := run(t, sc.c, execRec("c1", "print('hello')"))
	if r.err != nil || !r.submitted || !r.appended || r.submittedAt != 0 || !slices.Equal(seqs(r.events), []int64{1, 2, 3}) {
		t.Fatalf("Run = %+v; want submitted (appended) before the 3 events", r)
	}
	r = run(t, sc.c, execRec("c1", "print('hello')"))
	if r.err != nil || !r.submitted || r.appended || !slices.Equal(seqs(r.events), []int64{1, 2, 3}) {
		t.Fatalf("Run again = %+v; want submitted (not appended), the 3 events again", r)
	}
	r = run(t, sc.c, execRec("c1", "print('other')"))
	if !errors.Is(r.err, iolog.ErrConflict) || r.submitted {
		t.Fatalf("Run of another command under c1 = %+v; want iolog.ErrConflict, nothing submitted", r)
	}
	r = run(t, sc.c, ioproto.Record{Type: ioproto.KindExec, CommandID: "c2", Language: ioproto.LanguagePython, Code: "1", ContextID: "ctx-nope"})
	if !errors.Is(r.err, cmdlog.ErrUnknownContext) || r.submitted {
		t.Fatalf("Run in a context the sandbox lacks = %+v; want cmdlog.ErrUnknownContext, nothing submitted", r)
	}
	for _, raw := range []string{`{"type":"interrupt","command_id":"c1"}`, `{"type":"stdin","command_id":"c1","data":"eA=="}`, `not json`} {
		s, err := sc.c.rpc.Run(ctxT(t), &sandboxiov1.RunRequest{Record: []byte(raw)})
		if err == nil {
			_, err = s.Recv()
		}
		if err := errorOf(t.Context(), callAppend, err); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("Run(%s) = %v; want core.ErrInvalidArgument", raw, err)
		}
	}
}

// oldSidecar is a sidecar from before Run: it appends and follows in two
// calls, and answers Run Unimplemented.
type oldSidecar struct {
	hostileSidecar
	appends int
}

func (o *oldSidecar) Append(context.Context, *sandboxiov1.AppendRequest) (*sandboxiov1.AppendResponse, error) {
	o.appends++
	return &sandboxiov1.AppendResponse{Appended: true}, nil
}

// TestRunOnOlderSidecar: Run against a sidecar without it appends and
// follows in two calls, and does not ask that sidecar again.
func TestRunOnOlderSidecar(t *testing.T) {
	old := &oldSidecar{hostileSidecar: hostileSidecar{follow: sendEvents(
		`{"seq":1,"type":"started","command_id":"c1","language":"python"}`, `{"seq":2,"type":"done","status":"ok"}`)}}
	c := startHostileServer(t, old)
	for i := range 2 {
		r := run(t, c, execRec("c1", "1"))
		if r.err != nil || !r.submitted || !r.appended || !slices.Equal(seqs(r.events), []int64{1, 2}) {
			t.Fatalf("Run %d on an older sidecar = %+v; want it appended and followed", i, r)
		}
		if !c.noRun.Load() {
			t.Fatalf("Run %d: the client will ask Run again of a sidecar that lacks it", i)
		}
	}
	if old.appends != 2 {
		t.Errorf("the older sidecar got %d Appends; want 2", old.appends)
	}
}

// lyingRun is a sidecar whose Run sends what run says.
type lyingRun struct {
	hostileSidecar
	run func(grpc.ServerStreamingServer[sandboxiov1.RunResponse]) error
}

func (l *lyingRun) Run(_ *sandboxiov1.RunRequest, s grpc.ServerStreamingServer[sandboxiov1.RunResponse]) error {
	return l.run(s)
}

func sendRun(msgs ...*sandboxiov1.RunResponse) func(grpc.ServerStreamingServer[sandboxiov1.RunResponse]) error {
	return func(s grpc.ServerStreamingServer[sandboxiov1.RunResponse]) error {
		for _, m := range msgs {
			if err := s.Send(m); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestHostileRun: a sidecar that lies in Run is refused with a bounded
// error, and a reason is believed only in the phase that may answer it
// (Append's before the command is in the log, Follow's after).
func TestHostileRun(t *testing.T) {
	queued := &sandboxiov1.RunResponse{Appended: true}
	ev := func(s string) *sandboxiov1.RunResponse { return &sandboxiov1.RunResponse{Event: []byte(s)} }
	for name, tc := range map[string]struct {
		run       func(grpc.ServerStreamingServer[sandboxiov1.RunResponse]) error
		kind      error
		submitted bool
	}{
		"an event before the command is in the log": {sendRun(ev(`{"seq":1,"type":"started"}`)), ErrBadResponse, false},
		"the stream ends before anything":           {sendRun(), ErrBadResponse, false},
		"seq backwards":                             {sendRun(queued, ev(`{"seq":2,"type":"stdout"}`), ev(`{"seq":1,"type":"stdout"}`)), ErrBadResponse, true},
		"unresolved artifact":                       {sendRun(queued, ev(`{"seq":1,"type":"display","refs":{"text/plain":"/etc/passwd"}}`)), ErrBadResponse, true},
		"an Append reason before": {func(grpc.ServerStreamingServer[sandboxiov1.RunResponse]) error {
			return withReason(codes.AlreadyExists, "COMMAND_CONFLICT", "taken")
		}, iolog.ErrConflict, false},
		"a Follow reason before, not believed": {func(grpc.ServerStreamingServer[sandboxiov1.RunResponse]) error {
			return withReason(codes.NotFound, "OUTPUT_PRUNED", "gone")
		}, ErrInternal, false},
		"a Follow reason after": {func(s grpc.ServerStreamingServer[sandboxiov1.RunResponse]) error {
			s.Send(queued)
			return withReason(codes.NotFound, "OUTPUT_PRUNED", "gone")
		}, iolog.ErrPruned, true},
		"an Append reason after, not believed": {func(s grpc.ServerStreamingServer[sandboxiov1.RunResponse]) error {
			s.Send(queued)
			return withReason(codes.AlreadyExists, "COMMAND_CONFLICT", "taken")
		}, ErrInternal, true},
		"Unimplemented with a reason is not an older sidecar": {func(grpc.ServerStreamingServer[sandboxiov1.RunResponse]) error {
			return withReason(codes.Unimplemented, "NOPE", "lies")
		}, ErrInternal, false},
	} {
		t.Run(name, func(t *testing.T) {
			c := startHostileServer(t, &lyingRun{run: tc.run})
			r := run(t, c, execRec("c1", "1"))
			wantBounded(t, "Run", r.err, tc.kind)
			if r.submitted != tc.submitted {
				t.Errorf("submitted called: %v; want %v", r.submitted, tc.submitted)
			}
			if c.noRun.Load() {
				t.Error("the client fell back to two calls")
			}
		})
	}
}

// TestRunHibernation: a snapshot record is run in one call like a command,
// and from it until the restore record the log takes no new command: the
// client reads the refusal as iolog.ErrHibernating (the kube backend then
// waits for the wake); the same snapshot sent again is followed, not
// appended; after the restore, commands are taken again.
func TestRunHibernation(t *testing.T) {
	sc := startSidecar(t)
	snap := ioproto.Record{Type: ioproto.KindSnapshot, CommandID: "sbx-snapshot-u1", Snapshot: "snap-u1", TimeoutMS: 1000}
	sc.writeEvents(t, snap.CommandID, threeEvents(snap.CommandID)...)
	if r := run(t, sc.c, snap); r.err != nil || !r.appended || len(r.events) != 3 {
		t.Fatalf("Run(snapshot) = %+v; want it appended and its 3 events", r)
	}
	if r := run(t, sc.c, snap); r.err != nil || r.appended || len(r.events) != 3 {
		t.Fatalf("Run(the same snapshot) = %+v; want it followed, not appended", r)
	}
	if r := run(t, sc.c, execRec("c1", "1")); !errors.Is(r.err, iolog.ErrHibernating) || r.submitted {
		t.Fatalf("Run of a command while hibernating = %+v; want iolog.ErrHibernating, nothing submitted", r)
	}
	if _, err := sc.c.Append(ctxT(t), execRec("c1", "1")); !errors.Is(err, iolog.ErrHibernating) {
		t.Fatalf("Append of a command while hibernating = %v; want iolog.ErrHibernating", err)
	}
	restore := ioproto.Record{Type: ioproto.KindRestore, CommandID: "sbx-restore-u2", Snapshot: "snap-u1", Level: ioproto.LevelGlobals}
	sc.writeEvents(t, restore.CommandID, threeEvents(restore.CommandID)...)
	if r := run(t, sc.c, restore); r.err != nil || !r.appended {
		t.Fatalf("Run(restore) = %+v; want it appended", r)
	}
	sc.writeEvents(t, "c1", threeEvents("c1")...)
	if r := run(t, sc.c, execRec("c1", "1")); r.err != nil || !r.appended {
		t.Fatalf("Run of a command after the restore = %+v; want it appended", r)
	}
}
