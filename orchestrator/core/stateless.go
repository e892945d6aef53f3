package core

import (
	"context"
	"strings"
	"time"
)

// StatelessUserPrefix starts the user ID of a stateless run's sandbox:
// the run has no user of its own, and its sandbox one nobody else has.
const StatelessUserPrefix = "run-"

// statelessDeleteTimeout bounds the deletion of a stateless run's sandbox
// after the call's own context has ended.
const statelessDeleteTimeout = 2 * time.Minute

// RunStateless runs req once in a new sandbox made with opts, for a user
// of its own (StatelessUserPrefix and random) of the caller's tenant,
// calls submitted and fn as Execute does (submitted with the sandbox's ID
// too), and deletes the
// sandbox when the command is done or the call ends first, whatever
// happened: no user and no state are involved. It is the domain's one
// composition of the ports for stateless runs, so every door runs them
// alike; m is a Manager behind Validating, which checks opts and req.
//
// The sandbox is new: the backend takes it from its warm pool and shapes
// it to opts where it can, as for any new sandbox (Acquire). Unless opts
// say otherwise it is deleted at its idle timeout, not hibernated, so a
// sandbox that could not be deleted at once (the backend unreachable, the
// server killed mid-run) goes then; the error of the run is returned, not the deletion's, which is
// reported through deleted.
func RunStateless(ctx context.Context, m interface {
	Sandboxes
	Commands
}, opts Options, req ExecRequest, submitted func(sandboxID, commandID string), fn func(Event) error, deleted func(sandboxID string, err error)) error {
	// The command's form first, so a malformed one makes no sandbox (its
	// bounds in the server's policy are Validating's, at Execute).
	req.SandboxID, req.CommandID = NewSandboxID(), "" // the sandbox's only command: any ID will do
	if err := req.Validate(); err != nil {
		return err
	}
	user := StatelessUserPrefix + strings.TrimPrefix(NewSandboxID(), sandboxIDPrefix)
	if opts.OnIdle == "" {
		// Should the deletion below never come (the server is killed
		// mid-run), the sandbox goes at its idle timeout rather than
		// hibernating and being kept: nobody will come back for it.
		opts.OnIdle = OnIdleDelete
	}
	res, err := m.Acquire(ctx, user, opts)
	if err != nil {
		return err
	}
	id := res.Sandbox.ID
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statelessDeleteTimeout)
		defer cancel()
		err := m.Delete(dctx, id)
		if deleted != nil {
			deleted(id, err)
		}
	}()
	req.SandboxID = id
	return m.Execute(ctx, req, func(cmd string) {
		if submitted != nil {
			submitted(id, cmd)
		}
	}, fn)
}
