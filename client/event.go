package client

import (
	"strings"
	"time"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Kind says what an Event carries.
type Kind string

// The event kinds, as in the sandbox API.
const (
	KindStarted Kind = "started"
	KindStdout  Kind = "stdout"
	KindStderr  Kind = "stderr"
	KindDisplay Kind = "display"
	KindResult  Kind = "result"
	KindError   Kind = "error"
	KindDone    Kind = "done"
)

// Status is how a command ended.
type Status string

// The command statuses. StatusUnknown stands for any status this client
// does not know, and counts as a failure.
const (
	StatusOK          Status = "ok"
	StatusError       Status = "error"
	StatusTimeout     Status = "timeout"
	StatusInterrupted Status = "interrupted"
	StatusKilled      Status = "killed"
	StatusUnknown     Status = "unknown"
)

// Event is one event of a command, decoded from the API's ExecuteEvent so
// that callers switch on Kind rather than on protobuf oneof wrappers.
type Event struct {
	// Seq numbers the command's events from 1, without gaps: resuming
	// after the last Seq received loses and repeats nothing.
	Seq int64
	// CommandID is the command the event belongs to (sandboxd's own when
	// the caller left Command.ID empty).
	CommandID string
	// Kind says which of the fields below is set.
	Kind Kind
	// Text is a stdout or stderr chunk.
	Text string
	// Data is a display or result MIME bundle (binary types in base64).
	Data map[string]string
	// Error is an exception.
	Error *ExecError
	// Done is how the command ended.
	Done *Done
}

// ExecError is an exception raised by the code.
type ExecError struct {
	// Name is the exception class ("NameError").
	Name string
	// Value is its message.
	Value string
	// Traceback is the formatted traceback.
	Traceback []string
}

// String is the traceback as Python prints it, or "Name: Value".
func (e *ExecError) String() string {
	if len(e.Traceback) > 0 {
		var b strings.Builder
		for _, l := range e.Traceback {
			b.WriteString(l)
			if !strings.HasSuffix(l, "\n") {
				b.WriteByte('\n')
			}
		}
		return b.String()
	}
	return e.Name + ": " + e.Value
}

// Done is how a command ended.
type Done struct {
	// Status is the outcome.
	Status Status
	// StateLost is true when the Python variables from earlier commands are
	// gone (the interpreter died or was replaced).
	StateLost bool
	// Reason explains a status other than OK, or the lost state.
	Reason string
	// ExitCode is bash's exit status, 0 included (nil for Python, and when
	// bash was killed by a signal).
	ExitCode *int32
	// ExecutionCount is the Python kernel's cell counter, as Jupyter's
	// execution_count: 1 for the first command after a kernel start (nil
	// for bash, and when the kernel died during the command).
	ExecutionCount *int64
	// Files were created or changed under /workspace by the command.
	Files []File
	// Duration is the command's wall time.
	Duration time.Duration
	// OutputTruncated is true when the output passed sandboxd's cap and
	// the rest was dropped (Reason says how much); the command ran to its
	// end.
	OutputTruncated bool
}

// File is a file under /workspace.
type File struct {
	// Path is relative to /workspace.
	Path string
	// Size is in bytes.
	Size int64
}

// Output is a display or result, in order of arrival.
type Output struct {
	// Result is true for the value of the final expression.
	Result bool
	// Data is the MIME bundle.
	Data map[string]string
}

// Outcome collects a command's events, for callers that want the result
// rather than the stream.
type Outcome struct {
	// Stdout and Stderr are the concatenated streams.
	Stdout, Stderr string
	// Outputs are the displays and the result.
	Outputs []Output
	// Errors are the exceptions.
	Errors []*ExecError
	// Done is how it ended; nil if the stream broke off before.
	Done *Done
}

func (o *Outcome) add(ev Event) {
	switch ev.Kind {
	case KindStdout:
		o.Stdout += ev.Text
	case KindStderr:
		o.Stderr += ev.Text
	case KindDisplay, KindResult:
		o.Outputs = append(o.Outputs, Output{Result: ev.Kind == KindResult, Data: ev.Data})
	case KindError:
		o.Errors = append(o.Errors, ev.Error)
	case KindDone:
		o.Done = ev.Done
	}
}

var statuses = map[sandboxv1.CommandStatus]Status{
	sandboxv1.CommandStatus_COMMAND_STATUS_OK:          StatusOK,
	sandboxv1.CommandStatus_COMMAND_STATUS_ERROR:       StatusError,
	sandboxv1.CommandStatus_COMMAND_STATUS_TIMEOUT:     StatusTimeout,
	sandboxv1.CommandStatus_COMMAND_STATUS_INTERRUPTED: StatusInterrupted,
	sandboxv1.CommandStatus_COMMAND_STATUS_KILLED:      StatusKilled,
}

// fromProto converts an API event; false for an event kind this client does
// not know (a newer server), which is skipped.
func fromProto(pe *sandboxv1.ExecuteEvent) (Event, bool) {
	ev := Event{Seq: pe.GetSeq(), CommandID: pe.GetCommandId()}
	switch e := pe.GetEvent().(type) {
	case *sandboxv1.ExecuteEvent_Started:
		ev.Kind = KindStarted
	case *sandboxv1.ExecuteEvent_Stdout:
		ev.Kind, ev.Text = KindStdout, e.Stdout.GetText()
	case *sandboxv1.ExecuteEvent_Stderr:
		ev.Kind, ev.Text = KindStderr, e.Stderr.GetText()
	case *sandboxv1.ExecuteEvent_Display:
		ev.Kind, ev.Data = KindDisplay, e.Display.GetData()
	case *sandboxv1.ExecuteEvent_Result:
		ev.Kind, ev.Data = KindResult, e.Result.GetData()
	case *sandboxv1.ExecuteEvent_Error:
		ev.Kind = KindError
		ev.Error = &ExecError{Name: e.Error.GetEname(), Value: e.Error.GetEvalue(), Traceback: e.Error.GetTraceback()}
	case *sandboxv1.ExecuteEvent_Done:
		st, ok := statuses[e.Done.GetStatus()]
		if !ok {
			st = StatusUnknown
		}
		d := &Done{Status: st, StateLost: e.Done.GetStateLost(), Reason: e.Done.GetReason(),
			Duration: e.Done.GetDuration().AsDuration(), OutputTruncated: e.Done.GetOutputTruncated()}
		if e.Done.ExitCode != nil {
			code := e.Done.GetExitCode()
			d.ExitCode = &code
		}
		if e.Done.ExecutionCount != nil {
			n := e.Done.GetExecutionCount()
			d.ExecutionCount = &n
		}
		for _, f := range e.Done.GetFiles() {
			d.Files = append(d.Files, File{Path: f.GetPath(), Size: f.GetSize()})
		}
		ev.Kind, ev.Done = KindDone, d
	default:
		return Event{}, false
	}
	return ev, true
}
