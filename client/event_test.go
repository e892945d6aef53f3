package client

import (
	"testing"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// TestDoneOptionalFields: exit_code 0 is present and 0, not absent, and
// execution_count is passed on when set.
func TestDoneOptionalFields(t *testing.T) {
	zero, four := int32(0), int64(4)
	ev, ok := fromProto(&sandboxv1.ExecuteEvent{Seq: 3, Event: &sandboxv1.ExecuteEvent_Done{Done: &sandboxv1.Done{
		Status: sandboxv1.CommandStatus_COMMAND_STATUS_OK, ExitCode: &zero}}})
	if !ok || ev.Done == nil || ev.Done.ExitCode == nil || *ev.Done.ExitCode != 0 || ev.Done.ExecutionCount != nil {
		t.Fatalf("bash done with exit code 0: %+v", ev.Done)
	}
	ev, ok = fromProto(&sandboxv1.ExecuteEvent{Seq: 3, Event: &sandboxv1.ExecuteEvent_Done{Done: &sandboxv1.Done{
		Status: sandboxv1.CommandStatus_COMMAND_STATUS_OK, ExecutionCount: &four}}})
	if !ok || ev.Done == nil || ev.Done.ExitCode != nil || ev.Done.ExecutionCount == nil || *ev.Done.ExecutionCount != 4 {
		t.Fatalf("python done with execution count 4: %+v", ev.Done)
	}
}
