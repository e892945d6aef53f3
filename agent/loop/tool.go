package loop

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/agent/events"
	"github.com/sandboxd/sandboxd/agent/imagefit"
	"github.com/sandboxd/sandboxd/agent/llm"
	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/agent/tools"
	"github.com/sandboxd/sandboxd/client"
)

// runTool runs (or, after a crash, resumes) one recorded tool call and
// records its result. It returns an error only when the result could not be
// recorded, or when ctx ended (the call is then left for the caller).
func (a *Agent) runTool(ctx context.Context, t *activeTurn, conv *session.Conversation, turn int, r session.ToolRun) error {
	db := context.WithoutCancel(ctx)
	tool, ok := a.cfg.Tools.Get(r.Name)
	if !ok {
		var names []string
		for _, s := range a.cfg.Tools.Specs() {
			names = append(names, s.Name)
		}
		return a.finishRun(db, conv.ID, turn, r, errorResult(fmt.Sprintf("there is no tool %q; the tools are: %s", r.Name, strings.Join(names, ", "))))
	}
	inv := tools.Invocation{Arguments: r.Arguments, CommandID: r.CommandID}
	var notice string
	if tool.UsesSandbox {
		if r.State == session.RunRunning && r.SandboxID != "" {
			// An earlier process may have sent this command before it
			// crashed: pick it up by command ID in that same sandbox.
			inv.SandboxID, inv.Resume = r.SandboxID, true
		} else {
			sb, n, err := a.ensureSandbox(ctx, conv)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return a.finishRun(db, conv.ID, turn, r, errorResult(fmt.Sprintf("no sandbox is available to run the code: %v", err)))
			}
			inv.SandboxID, notice = sb, n
		}
	}
	if !inv.Resume {
		// Written before the command is sent: after a crash from here on,
		// the command is looked for in this sandbox by its ID.
		if err := a.cfg.Store.StartRun(db, conv.ID, r.CallID, inv.SandboxID); err != nil {
			return err
		}
	}
	r.State, r.SandboxID = session.RunRunning, inv.SandboxID
	if notice != "" {
		a.notice(db, conv.ID, turn, notice)
	}
	a.publish(conv.ID, events.Event{Kind: events.RunStarted, Run: &r})
	inv.Progress = func(c tools.Chunk) {
		a.publish(conv.ID, events.Event{Kind: events.RunOutput, CallID: r.CallID, Chunk: c})
	}
	if tool.UsesSandbox {
		a.setCommand(t, inv.SandboxID, inv.CommandID)
	}
	res, err := tool.Run(ctx, inv)
	a.setCommand(t, "", "")
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var msg string
		if errors.Is(err, client.ErrGone) {
			res.Status, res.StateLost = "lost", true
			res.Text = fmt.Sprintf("error: %v. The outcome of this call is unknown, and the variables and files of earlier calls are lost. The next call runs in a new sandbox: recreate what you need.", err)
			msg = fmt.Sprintf("The sandbox was lost while code was running (%v). Its Python variables and files are gone; the next call uses a new sandbox.", err)
			// Forget it, so the next call acquires a new one (and this loss
			// is reported once).
			if err := a.cfg.Store.SetSandbox(db, conv.ID, ""); err != nil {
				return err
			}
			conv.SandboxID = ""
		} else {
			res.Status = "error"
			res.Text = fmt.Sprintf("error: the tool could not run: %v", err)
		}
		res.IsError = true
		res.Console = append(res.Console, tools.Chunk{Kind: tools.ChunkError, Text: strings.TrimPrefix(res.Text, "error: ") + "\n"})
		if msg != "" {
			a.notice(db, conv.ID, turn, msg)
		}
	}
	if notice != "" {
		res.Text = "NOTE: " + notice + "\n\n" + res.Text
		res.StateLost = true
	}
	return a.finishRun(db, conv.ID, turn, r, res)
}

// ensureSandbox returns the sandbox for the conversation's next command.
// When the one it used is gone, it acquires a new one and returns a notice
// saying the earlier state is lost (for the model and the user).
func (a *Agent) ensureSandbox(ctx context.Context, conv *session.Conversation) (id, notice string, err error) {
	var lost error
	if conv.SandboxID != "" {
		err := a.cfg.Sandboxes.Check(ctx, conv.SandboxID)
		if err == nil {
			return conv.SandboxID, "", nil
		}
		if !errors.Is(err, client.ErrGone) {
			return "", "", err
		}
		lost = err
	}
	acq, err := a.cfg.Sandboxes.Acquire(ctx, conv.UserID)
	if err != nil {
		return "", "", err
	}
	if err := a.cfg.Store.SetSandbox(context.WithoutCancel(ctx), conv.ID, acq.ID); err != nil {
		return "", "", err
	}
	conv.SandboxID = acq.ID
	if lost != nil {
		a.log.Warn("sandbox lost; using a new one", "conversation", conv.ID, "err", lost, "sandbox", acq.ID)
		notice = fmt.Sprintf("The sandbox of this conversation is gone (%v). A new sandbox (%s) was started, so the variables, imports and files of earlier calls are lost and must be recreated.", lost, acq.ID)
	}
	return acq.ID, notice, nil
}

// finishRun records a call's result, with its images scaled down for the
// model, and publishes it.
func (a *Agent) finishRun(db context.Context, convID string, turn int, r session.ToolRun, res tools.Result) error {
	msg := llm.Message{Role: llm.RoleTool, ToolCallID: r.CallID, Content: res.Text}
	for _, img := range res.Images {
		if a.cfg.NoImageInput {
			break
		}
		data, mime, err := imagefit.Fit(img.Data, a.cfg.ImageLimits)
		if err != nil {
			a.log.Warn("image not sent to the model", "conversation", convID, "call", r.CallID, "err", err)
			continue
		}
		msg.Images = append(msg.Images, llm.Image{MIME: mime, Data: data})
	}
	e, err := a.cfg.Store.FinishRun(db, convID, turn, r.CallID, res, msg)
	if err != nil {
		return err
	}
	done, err := a.cfg.Store.Run(db, convID, r.CallID)
	if err != nil {
		return err
	}
	a.publish(convID, events.Event{Kind: events.RunFinished, Run: &done})
	a.publish(convID, events.Event{Kind: events.EntryAdded, Entry: &e})
	return nil
}

func errorResult(text string) tools.Result {
	return tools.Result{Text: "error: " + text, IsError: true, Status: "error", Console: []tools.Chunk{{Kind: tools.ChunkError, Text: text + "\n"}}}
}
