package core

import (
	"context"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// PtySize is a terminal's size in character cells.
type PtySize struct {
	Rows, Cols uint32
}

// MaxStdinChunk bounds SendStdin's data per call.
const MaxStdinChunk = ioproto.MaxStdinChunk

// ListCommands' page sizes.
const (
	DefaultCommandPage = 50
	MaxCommandPage     = 200
)

// validateInput checks an ExecRequest's stdin and pty (part of Validate).
func (r ExecRequest) validateInput() error {
	if !r.Stdin && r.Pty == (PtySize{}) {
		return nil
	}
	if r.Language != ioproto.LanguageBash {
		lang := r.Language
		if lang == "" {
			lang = ioproto.LanguagePython
		}
		return Invalidf("stdin and pty are for bash commands only; language is %q", lang)
	}
	if r.Pty != (PtySize{}) {
		return validatePtySize(r.Pty)
	}
	return nil
}

func validatePtySize(sz PtySize) error {
	if sz.Rows < 1 || sz.Rows > ioproto.MaxPtyDim || sz.Cols < 1 || sz.Cols > ioproto.MaxPtyDim {
		return Invalidf("terminal size %dx%d (rows x cols) is outside 1-%d", sz.Rows, sz.Cols, ioproto.MaxPtyDim)
	}
	return nil
}

// CommandPhase is where a command is in its life.
type CommandPhase int

const (
	// CommandUnknown: the command's files cannot be read.
	CommandUnknown CommandPhase = iota
	CommandQueued
	CommandRunning
	CommandFinished
)

// CommandInfo describes one command for ListCommands.
type CommandInfo struct {
	ID       string
	Language string
	Phase    CommandPhase
	// Status is a finished command's ioproto status ("ok", ...); empty
	// otherwise, and when its output was pruned.
	Status     string
	StartedAt  time.Time
	FinishedAt time.Time
	Duration   time.Duration
	ExitCode   *int
	// OutputAvailable: the command's events can still be streamed.
	OutputAvailable bool
	Stdin, Pty      bool
	// ContextID is the context the command runs in (ioproto.DefaultContext
	// for the default one).
	ContextID string
}

// CommandPage is one page of ListCommands.
type CommandPage struct {
	Commands []CommandInfo
	// NextPageToken continues the listing; empty on the last page.
	NextPageToken string
	// Total is the number of commands in the sandbox's log.
	Total int
}

// Submitter is what SubmitThenFollow needs of a backend.
type Submitter interface {
	Submit(ctx context.Context, req ExecRequest) (commandID string, err error)
	Follow(ctx context.Context, sandboxID, commandID string, afterSeq int64, fn func(Event) error) error
}

// SubmitThenFollow is Manager.Execute in two calls, Submit then Follow from
// the first event: the Execute of a backend whose log is at hand.
func SubmitThenFollow(ctx context.Context, m Submitter, req ExecRequest, submitted func(commandID string), fn func(Event) error) error {
	id, err := m.Submit(ctx, req)
	if err != nil {
		return err
	}
	submitted(id)
	return m.Follow(ctx, req.SandboxID, id, 0, fn)
}
