package grpcapi

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// This file holds every conversion between domain and proto types, so the
// mapping of the public contract is reviewed in one place.

// timestampToProto leaves unset times (zero) unset on the wire instead of
// sending 0001-01-01, which clients would show as a real date.
func timestampToProto(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func limitsToProto(l orchestrator.Limits) *sandboxv1.ResourceLimits {
	return &sandboxv1.ResourceLimits{
		MemoryBytes: l.MemoryBytes,
		NanoCpus:    l.NanoCPUs,
		PidsLimit:   l.PidsLimit,
		DiskBytes:   l.DiskBytes,
	}
}

// limitsFromProto treats an absent message as all zeros: the server defaults.
func limitsFromProto(l *sandboxv1.ResourceLimits) orchestrator.Limits {
	return orchestrator.Limits{
		MemoryBytes: l.GetMemoryBytes(),
		NanoCPUs:    l.GetNanoCpus(),
		PidsLimit:   l.GetPidsLimit(),
		DiskBytes:   l.GetDiskBytes(),
	}
}

func stateToProto(s orchestrator.State) sandboxv1.SandboxState {
	switch s {
	case orchestrator.StateRunning:
		return sandboxv1.SandboxState_SANDBOX_STATE_RUNNING
	case orchestrator.StateDead:
		return sandboxv1.SandboxState_SANDBOX_STATE_DEAD
	}
	return sandboxv1.SandboxState_SANDBOX_STATE_UNSPECIFIED
}

// stateFromProto maps a filter state; UNSPECIFIED is "any" (empty). Values
// this server does not know are an error rather than "any", so a newer
// client's filter is never silently widened.
func stateFromProto(s sandboxv1.SandboxState) (orchestrator.State, error) {
	switch s {
	case sandboxv1.SandboxState_SANDBOX_STATE_UNSPECIFIED:
		return "", nil
	case sandboxv1.SandboxState_SANDBOX_STATE_RUNNING:
		return orchestrator.StateRunning, nil
	case sandboxv1.SandboxState_SANDBOX_STATE_DEAD:
		return orchestrator.StateDead, nil
	}
	return "", fmt.Errorf("unknown sandbox state %d", int32(s))
}

func sandboxToProto(s orchestrator.Sandbox) *sandboxv1.Sandbox {
	return &sandboxv1.Sandbox{
		SandboxId:    s.ID,
		UserId:       s.UserID,
		State:        stateToProto(s.State),
		StateReason:  s.StateReason,
		CreatedAt:    timestampToProto(s.CreatedAt),
		LastActiveAt: timestampToProto(s.LastActiveAt),
		ExpiresAt:    timestampToProto(s.ExpiresAt),
		Image:        s.Image,
		Limits:       limitsToProto(s.Limits),
		Tenant:       s.Tenant,
		Network:      s.Network,
	}
}

func acquireResultToProto(r orchestrator.AcquireResult) *sandboxv1.AcquireSandboxResponse {
	return &sandboxv1.AcquireSandboxResponse{
		Sandbox:           sandboxToProto(r.Sandbox),
		Created:           r.Created,
		ReplacedSandboxId: r.ReplacedID,
		// The domain replaces a user's sandbox only when it died, and a dead
		// sandbox's interpreter state is gone by definition.
		StateLost:      r.ReplacedID != "",
		ReplacedReason: r.ReplacedReason,
	}
}

func optionsFromProto(o *sandboxv1.SandboxOptions) orchestrator.Options {
	return orchestrator.Options{Limits: limitsFromProto(o.GetLimits()), Env: o.GetEnv(), Network: o.GetNetwork()}
}

func fileInfoToProto(f orchestrator.FileInfo) *sandboxv1.FileInfo {
	return &sandboxv1.FileInfo{
		Path:    f.Path,
		Size:    f.Size,
		IsDir:   f.IsDir,
		ModTime: timestampToProto(f.ModTime),
	}
}

func commandStatusToProto(s string) sandboxv1.CommandStatus {
	switch s {
	case ioproto.StatusOK:
		return sandboxv1.CommandStatus_COMMAND_STATUS_OK
	case ioproto.StatusError:
		return sandboxv1.CommandStatus_COMMAND_STATUS_ERROR
	case ioproto.StatusTimeout:
		return sandboxv1.CommandStatus_COMMAND_STATUS_TIMEOUT
	case ioproto.StatusInterrupted:
		return sandboxv1.CommandStatus_COMMAND_STATUS_INTERRUPTED
	case ioproto.StatusKilled:
		return sandboxv1.CommandStatus_COMMAND_STATUS_KILLED
	}
	// Clients treat UNSPECIFIED as a failure, the safe reading of a status
	// this server does not know.
	return sandboxv1.CommandStatus_COMMAND_STATUS_UNSPECIFIED
}

// eventToProto converts one command event. commandID is set on every event
// because the /io protocol carries it only on "started". ok is false for an
// event type this server does not know (a newer driver); the caller skips it
// rather than failing the whole stream.
func eventToProto(e orchestrator.Event, commandID string) (ev *sandboxv1.ExecuteEvent, ok bool) {
	ev = &sandboxv1.ExecuteEvent{Seq: e.Seq, CommandId: commandID}
	switch e.Type {
	case ioproto.EventStarted:
		ev.Event = &sandboxv1.ExecuteEvent_Started{Started: &sandboxv1.Started{
			Language: e.Language,
			Time:     timestampToProto(e.Time),
		}}
	case ioproto.EventStdout:
		ev.Event = &sandboxv1.ExecuteEvent_Stdout{Stdout: &sandboxv1.OutputChunk{Text: e.Text}}
	case ioproto.EventStderr:
		ev.Event = &sandboxv1.ExecuteEvent_Stderr{Stderr: &sandboxv1.OutputChunk{Text: e.Text}}
	case ioproto.EventDisplay:
		ev.Event = &sandboxv1.ExecuteEvent_Display{Display: &sandboxv1.Display{Data: e.Data}}
	case ioproto.EventResult:
		ev.Event = &sandboxv1.ExecuteEvent_Result{Result: &sandboxv1.Result{Data: e.Data}}
	case ioproto.EventError:
		ev.Event = &sandboxv1.ExecuteEvent_Error{Error: &sandboxv1.Error{
			Ename:     e.EName,
			Evalue:    e.EValue,
			Traceback: e.Traceback,
		}}
	case ioproto.EventDone:
		d := &sandboxv1.Done{
			Status:          commandStatusToProto(e.Status),
			Duration:        durationpb.New(time.Duration(e.DurationMS) * time.Millisecond),
			StateLost:       e.StateLost,
			OutputTruncated: e.OutputTruncated,
			Reason:          e.Reason,
			Time:            timestampToProto(e.Time),
		}
		if e.ExitCode != nil {
			code := int32(*e.ExitCode)
			d.ExitCode = &code
		}
		for _, f := range e.Files {
			d.Files = append(d.Files, &sandboxv1.FileRef{Path: f.Path, Size: f.Size})
		}
		ev.Event = &sandboxv1.ExecuteEvent_Done{Done: d}
	default:
		return nil, false
	}
	return ev, true
}
