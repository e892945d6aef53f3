package e2bapi

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/door/e2bapi/envdproto/process"
	"github.com/sandboxd/sandboxd/orchestrator/door/e2bapi/envdproto/process/processconnect"
)

// A process of envd is a sandboxd bash command whose command ID carries its
// pid: "e2b-p<pid>". The pid is all the SDK keeps, so Connect, SendInput
// and SendSignal find the command from it alone, also after sandboxd
// restarted.
const pidPrefix = "e2b-p"

// nextPID hands out pids from a random start, so that pids of commands run
// before a restart are not handed out again.
var nextPID atomic.Uint32

func init() {
	var b [4]byte
	_, _ = rand.Read(b[:])
	nextPID.Store(1000 + binary.LittleEndian.Uint32(b[:])%(1<<30))
}

func commandIDOf(pid uint32) string { return pidPrefix + strconv.FormatUint(uint64(pid), 10) }

func pidOf(commandID string) (uint32, bool) {
	n, err := strconv.ParseUint(strings.TrimPrefix(commandID, pidPrefix), 10, 32)
	return uint32(n), err == nil && strings.HasPrefix(commandID, pidPrefix)
}

// processService implements envd's process.Process.
type processService struct {
	processconnect.UnimplementedProcessHandler
	s *Server
}

func newProcessHandler(s *Server, opts ...connect.HandlerOption) (string, http.Handler) {
	return processconnect.NewProcessHandler(&processService{s: s}, opts...)
}

// shellQuote quotes one word for bash.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// scriptOf turns envd's process config into a bash script: the SDK runs
// "/bin/bash -l -c CMD", whose CMD is the script; any other argv is
// quoted. cwd becomes a cd first.
func scriptOf(cfg *process.ProcessConfig) (string, error) {
	var script string
	args := cfg.GetArgs()
	switch {
	case cfg.GetCmd() == "":
		return "", badRequest("process.cmd is empty")
	case (cfg.GetCmd() == "/bin/bash" || cfg.GetCmd() == "bash" || cfg.GetCmd() == "/bin/sh" || cfg.GetCmd() == "sh") &&
		len(args) >= 2 && args[len(args)-2] == "-c":
		script = args[len(args)-1]
	default:
		words := []string{shellQuote(cfg.GetCmd())}
		for _, a := range args {
			words = append(words, shellQuote(a))
		}
		script = "exec " + strings.Join(words, " ")
	}
	if cfg.Cwd != nil && cfg.GetCwd() != "" {
		script = "cd -- " + shellQuote(absDir(cfg.GetCwd())) + " || exit 1\n" + script
	}
	return script, nil
}

func (p *processService) selectPID(ctx context.Context, sel *process.ProcessSelector) (uint32, error) {
	switch v := sel.GetSelector().(type) {
	case *process.ProcessSelector_Pid:
		return v.Pid, nil
	case *process.ProcessSelector_Tag:
		if pid, ok := p.s.procs.byTag(sandboxFrom(ctx), v.Tag); ok {
			return pid, nil
		}
		return 0, connect.NewError(connect.CodeNotFound, fmt.Errorf("no process with tag %q", v.Tag))
	}
	return 0, badRequest("process selector (pid or tag) is missing")
}

// Start runs a command and streams its events: start (with its pid), data,
// end. The command goes on if the client goes away (Connect reattaches).
func (p *processService) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	cfg := req.Msg.GetProcess()
	script, err := scriptOf(cfg)
	if err != nil {
		return p.s.connectError(ctx, "Start", err)
	}
	pid := nextPID.Add(1)
	id := sandboxFrom(ctx)
	exec := core.ExecRequest{SandboxID: id, CommandID: commandIDOf(pid), Language: ioproto.LanguageBash,
		Code: script, Env: cfg.GetEnvs(), Stdin: req.Msg.GetStdin(), Timeout: p.s.cmdTimeout}
	pty := req.Msg.GetPty()
	if pty != nil {
		exec.Pty = core.PtySize{Rows: pty.GetSize().GetRows(), Cols: pty.GetSize().GetCols()}
		exec.Stdin = true
	}
	// Each process gets a bash context of its own, so that processes run
	// side by side and beside runCode, as envd's do; the context goes when
	// the process ends. Past the sandbox's context cap the process runs in
	// the default context, queued behind its commands.
	cx, err := p.s.m.CreateContext(ctx, id, ioproto.LanguageBash, "")
	switch {
	case err == nil:
		exec.ContextID = cx.ID
	case core.ClassOf(err) == core.ErrResourceExhausted:
		p.s.log.Warn("no context left for an envd process; it queues in the default context", "sandbox_id", id, "error", err)
	default:
		return p.s.connectError(ctx, "Start", err)
	}
	// Submitted and followed in one call (one round trip to a Kubernetes
	// sandbox's io sidecar); the process is known once it is in the log.
	submitted := false
	run := func(fn func(core.Event) error) error {
		return p.s.m.Execute(ctx, exec, func(string) {
			submitted = true
			p.s.procs.put(id, pid, procEntry{cmd: cfg.GetCmd(), args: cfg.GetArgs(), envs: cfg.GetEnvs(), cwd: cfg.GetCwd(), tag: req.Msg.GetTag()})
			if cx.ID != "" {
				go p.reap(context.WithoutCancel(ctx), id, exec.CommandID, cx.ID)
			}
		}, fn)
	}
	ls := &lockedSender[process.StartResponse]{stream: stream}
	err = p.follow(ctx, pid, pty != nil, run, func(ev *process.ProcessEvent) error {
		return ls.send(&process.StartResponse{Event: ev})
	}, req.Header())
	if !submitted {
		if cx.ID != "" {
			_ = p.s.m.DeleteContext(context.WithoutCancel(ctx), id, cx.ID)
		}
		return p.s.connectError(ctx, "Start", err)
	}
	return p.followError(ctx, err)
}

// reap deletes a process's context once the process has ended, whether or
// not a client still follows it. ctx carries the caller, not the request's
// end.
func (p *processService) reap(ctx context.Context, sandboxID, commandID, contextID string) {
	err := p.s.m.Follow(ctx, sandboxID, commandID, 0, func(core.Event) error { return nil })
	if pid, ok := pidOf(commandID); ok {
		p.s.procs.drop(sandboxID, pid)
	}
	if err != nil && core.ClassOf(err) == core.ErrNotFound {
		return // the sandbox went, and its contexts with it
	}
	if err := p.s.m.DeleteContext(ctx, sandboxID, contextID); err != nil && core.ClassOf(err) != core.ErrNotFound {
		p.s.log.Warn("deleting an envd process's context", "sandbox_id", sandboxID, "context_id", contextID, "error", err)
	}
}

// Connect streams a running command's events, from its start: sandboxd
// keeps every command's output, so a reattached client misses nothing.
func (p *processService) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	pid, err := p.selectPID(ctx, req.Msg.GetProcess())
	if err != nil {
		return p.s.connectError(ctx, "Connect", err)
	}
	ls := &lockedSender[process.ConnectResponse]{stream: stream}
	id := sandboxFrom(ctx)
	run := func(fn func(core.Event) error) error { return p.s.m.Follow(ctx, id, commandIDOf(pid), 0, fn) }
	return p.followError(ctx, p.follow(ctx, pid, false, run, func(ev *process.ProcessEvent) error {
		return ls.send(&process.ConnectResponse{Event: ev})
	}, req.Header()))
}

// follow sends the start event, then the command's output and end, with
// keepalives in between, from the events run gives (a Follow, or an
// Execute); it returns run's error. send must be safe for concurrent use.
func (p *processService) follow(ctx context.Context, pid uint32, pty bool, run func(func(core.Event) error) error, send func(*process.ProcessEvent) error, h http.Header) error {
	started := false
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	return run(func(ev core.Event) error {
		if !started {
			started = true
			if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: pid}}}); err != nil {
				return err
			}
			go keepalive(kctx, p.s.rpcKeepalive(h), func() error {
				return send(&process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}})
			})
		}
		var data *process.ProcessEvent_DataEvent
		switch ev.Type {
		case ioproto.EventStdout:
			if pty {
				data = &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Pty{Pty: []byte(ev.Text)}}
			} else {
				data = &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stdout{Stdout: []byte(ev.Text)}}
			}
		case ioproto.EventStderr:
			data = &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stderr{Stderr: []byte(ev.Text)}}
		case ioproto.EventDone:
			return send(&process.ProcessEvent{Event: &process.ProcessEvent_End{End: endOf(ev)}})
		default:
			return nil
		}
		if len(ev.Text) == 0 {
			return nil
		}
		return send(&process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: data}})
	})
}

// followError is what a process stream that followed its command ends
// with, given follow's error.
func (p *processService) followError(ctx context.Context, err error) error {
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// The client's timeoutMs (Connect-Timeout-Ms) passed; the
			// command goes on, and Connect reattaches to it.
			return connect.NewError(connect.CodeDeadlineExceeded, errors.New("the stream's deadline passed; the command goes on"))
		}
		if ctx.Err() != nil {
			return nil
		}
		return p.s.connectError(ctx, "Follow", err)
	}
	return nil
}

// endOf converts a done event: bash's exit code, or -1 with the reason when
// the command did not exit by itself (killed, timed out, lost).
func endOf(ev core.Event) *process.ProcessEvent_EndEvent {
	end := &process.ProcessEvent_EndEvent{ExitCode: -1, Exited: false, Status: ev.Status}
	if ev.ExitCode != nil && ev.Status != ioproto.StatusKilled && ev.Status != ioproto.StatusInterrupted {
		end.ExitCode = int32(*ev.ExitCode)
		end.Exited = true
		end.Status = "exit status " + strconv.Itoa(*ev.ExitCode)
	}
	if !end.Exited || ev.Reason != "" {
		msg := ev.Status
		if ev.Reason != "" {
			msg += ": " + ev.Reason
		}
		if ev.Status == ioproto.StatusKilled || ev.Status == ioproto.StatusInterrupted {
			end.Status = "signal: killed"
		}
		end.Error = &msg
	}
	return end
}

// List lists the running commands this door started.
func (p *processService) List(ctx context.Context, _ *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	id := sandboxFrom(ctx)
	page, err := p.s.m.ListCommands(ctx, id, core.MaxCommandPage, "")
	if err != nil {
		return nil, p.s.connectError(ctx, "List", err)
	}
	out := &process.ListResponse{}
	for _, c := range page.Commands {
		pid, ok := pidOf(c.ID)
		if !ok || (c.Phase != core.CommandRunning && c.Phase != core.CommandQueued) {
			continue
		}
		info := &process.ProcessInfo{Pid: pid, Config: &process.ProcessConfig{Cmd: "/bin/bash"}}
		if e, ok := p.s.procs.get(id, pid); ok {
			info.Config = &process.ProcessConfig{Cmd: e.cmd, Args: e.args, Envs: e.envs}
			if e.cwd != "" {
				info.Config.Cwd = &e.cwd
			}
			if e.tag != "" {
				info.Tag = &e.tag
			}
		}
		out.Processes = append(out.Processes, info)
	}
	return connect.NewResponse(out), nil
}

func (p *processService) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	pid, err := p.selectPID(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, p.s.connectError(ctx, "SendInput", err)
	}
	var data []byte
	switch in := req.Msg.GetInput().GetInput().(type) {
	case *process.ProcessInput_Stdin:
		data = in.Stdin
	case *process.ProcessInput_Pty:
		data = in.Pty
	}
	for len(data) > 0 {
		n := min(len(data), core.MaxStdinChunk)
		if err := p.s.m.SendStdin(ctx, sandboxFrom(ctx), commandIDOf(pid), data[:n]); err != nil {
			return nil, p.s.connectError(ctx, "SendInput", err)
		}
		data = data[n:]
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

func (p *processService) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	pid, err := p.selectPID(ctx, req.Msg.GetProcess())
	if err == nil {
		err = p.s.m.CloseStdin(ctx, sandboxFrom(ctx), commandIDOf(pid))
	}
	if err != nil {
		return nil, p.s.connectError(ctx, "CloseStdin", err)
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

// SendSignal stops the command (SIGTERM and SIGKILL alike): sandboxd sends
// SIGINT, then SIGKILL after a 2 s grace. A finished command is NotFound,
// as a process that is gone is for envd.
func (p *processService) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	pid, err := p.selectPID(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, p.s.connectError(ctx, "SendSignal", err)
	}
	id := sandboxFrom(ctx)
	if !p.running(ctx, id, commandIDOf(pid)) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process %d not found", pid))
	}
	if err := p.s.m.Interrupt(ctx, id, commandIDOf(pid)); err != nil {
		return nil, p.s.connectError(ctx, "SendSignal", err)
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

// running reports whether the command is queued or running, from the
// newest page of the command list.
func (p *processService) running(ctx context.Context, sandboxID, commandID string) bool {
	page, err := p.s.m.ListCommands(ctx, sandboxID, core.MaxCommandPage, "")
	if err != nil {
		return false
	}
	for _, c := range page.Commands {
		if c.ID == commandID {
			return c.Phase == core.CommandRunning || c.Phase == core.CommandQueued
		}
	}
	return false
}

// Update resizes a command's terminal.
func (p *processService) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	pid, err := p.selectPID(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, p.s.connectError(ctx, "Update", err)
	}
	if sz := req.Msg.GetPty().GetSize(); sz != nil {
		if err := p.s.m.ResizePty(ctx, sandboxFrom(ctx), commandIDOf(pid), core.PtySize{Rows: sz.GetRows(), Cols: sz.GetCols()}); err != nil {
			return nil, p.s.connectError(ctx, "Update", err)
		}
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}
