package grpcapi

import (
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/ioproto"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// TestDoneOptionalFields: exit_code and execution_count are present when
// the driver gave them, zero included (a bash command that exited 0, a
// first cell), and absent when it did not.
func TestDoneOptionalFields(t *testing.T) {
	zero, three := 0, 3
	var one int64 = 1
	for _, tc := range []struct {
		name      string
		exit      *int
		count     *int64
		wantExit  *int32
		wantCount *int64
	}{
		{"bash exit 0", &zero, nil, ptr(int32(0)), nil},
		{"bash exit 3", &three, nil, ptr(int32(3)), nil},
		{"python cell 1", nil, &one, nil, ptr(int64(1))},
		{"neither", nil, nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, ok := eventToProto(core.Event{Seq: 1, Type: ioproto.EventDone, Status: ioproto.StatusOK, ExitCode: tc.exit, ExecutionCount: tc.count}, "c1")
			if !ok {
				t.Fatal("done event not converted")
			}
			d := ev.GetDone()
			if (d.ExitCode == nil) != (tc.wantExit == nil) || (d.ExitCode != nil && *d.ExitCode != *tc.wantExit) {
				t.Errorf("exit_code = %v, want %v", d.ExitCode, tc.wantExit)
			}
			if (d.ExecutionCount == nil) != (tc.wantCount == nil) || (d.ExecutionCount != nil && *d.ExecutionCount != *tc.wantCount) {
				t.Errorf("execution_count = %v, want %v", d.ExecutionCount, tc.wantCount)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestWakeToProto: a wake's report (names from the sandbox) reaches the
// proto as valid UTF-8, and hibernated maps both ways.
func TestWakeToProto(t *testing.T) {
	w := &core.WakeInfo{Level: "globals", Restored: []string{"x", "bad\xff"}, Lost: []ioproto.LostName{{Name: "f\xfe", Why: "open file"}}, Reason: "r\xff"}
	p := wakeToProto(w)
	if p.GetLevel() != "globals" || p.GetRestoredNames()[1] != "bad\uFFFD" || p.GetLost()[0].GetName() != "f\uFFFD" || p.GetReason() != "r\uFFFD" {
		t.Fatalf("wakeToProto = %v", p)
	}
	if wakeToProto(nil) != nil {
		t.Fatal("nil wake should stay nil")
	}
	if stateToProto(core.StateHibernated) != sandboxv1.SandboxState_SANDBOX_STATE_HIBERNATED {
		t.Fatal("hibernated state not mapped")
	}
	if st, err := stateFromProto(sandboxv1.SandboxState_SANDBOX_STATE_HIBERNATED); err != nil || st != core.StateHibernated {
		t.Fatalf("stateFromProto(HIBERNATED) = %q, %v", st, err)
	}
}
