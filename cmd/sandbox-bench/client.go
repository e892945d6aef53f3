package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	sandboxclient "github.com/sandboxd/sandboxd/client"
)

// client is the benchmark's view of sandboxd: the module's client of its
// public gRPC API, nothing else, so the figures are what any caller gets.
type client struct {
	sb *sandboxclient.Client
	// prefix and seq make command IDs unique across runs against one
	// long-lived sandboxd (--addr), where IDs must never repeat in a sandbox.
	prefix string
	seq    atomic.Int64
}

func dial(addr, runID string) (*client, error) {
	sb, err := sandboxclient.Dial(addr)
	if err != nil {
		return nil, fmt.Errorf("connect to sandboxd at %s: %w", addr, err)
	}
	return &client{sb: sb, prefix: "bench-" + runID + "-"}, nil
}

func (c *client) close() error { return c.sb.Close() }

// acquire returns the user's sandbox ID, creating the sandbox if needed.
func (c *client) acquire(ctx context.Context, user string, env map[string]string) (string, error) {
	var opts []sandboxclient.AcquireOption
	if len(env) > 0 {
		opts = append(opts, sandboxclient.WithEnv(env))
	}
	acq, err := c.sb.Acquire(ctx, user, opts...)
	if err != nil {
		return "", err
	}
	return acq.ID, nil
}

func (c *client) delete(ctx context.Context, sandboxID string) error {
	return c.sb.Delete(ctx, sandboxID)
}

// execResult is what one command produced, as far as the benchmark cares.
type execResult struct {
	result      string // the final expression's text/plain
	outputBytes int64  // stdout and stderr text received
	events      int
}

// exec runs code and consumes its events up to done. A command that does not
// end OK is an error: a benchmark of failing commands measures nothing.
func (c *client) exec(ctx context.Context, sandboxID, language, code string) (execResult, error) {
	return c.execStream(ctx, sandboxID, language, code, nil)
}

// execStream is exec that also hands each stdout chunk to onOutput.
// It reads one Execute stream (no resume, which would hide a broken stream
// in the figures, and no RPC besides Execute).
func (c *client) execStream(ctx context.Context, sandboxID, language, code string, onOutput func(string)) (execResult, error) {
	var res execResult
	id := c.prefix + strconv.FormatInt(c.seq.Add(1), 10)
	stream, err := c.sb.Execute(ctx, sandboxclient.Command{SandboxID: sandboxID, ID: id, Language: language, Code: code})
	if err != nil {
		return res, err
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return res, fmt.Errorf("command %s: stream ended without a done event", id)
		}
		if err != nil {
			return res, fmt.Errorf("command %s: %w", id, err)
		}
		res.events++
		switch ev.Kind {
		case sandboxclient.KindStdout:
			res.outputBytes += int64(len(ev.Text))
			if onOutput != nil {
				onOutput(ev.Text)
			}
		case sandboxclient.KindStderr:
			res.outputBytes += int64(len(ev.Text))
		case sandboxclient.KindResult:
			res.result = ev.Data["text/plain"]
		case sandboxclient.KindError:
			return res, fmt.Errorf("command %s raised %s: %s", id, ev.Error.Name, ev.Error.Value)
		case sandboxclient.KindDone:
			if st := ev.Done.Status; st != sandboxclient.StatusOK {
				return res, fmt.Errorf("command %s ended %v: %s", id, st, ev.Done.Reason)
			}
			return res, nil
		}
	}
}

// execStdout runs code and returns its stdout: for scripts that print
// their own figures (small output; the streaming figure never keeps its).
func (c *client) execStdout(ctx context.Context, sandboxID, language, code string) (string, error) {
	var out strings.Builder
	_, err := c.execStream(ctx, sandboxID, language, code, func(text string) { out.WriteString(text) })
	return out.String(), err
}

// expect runs code and checks that its result is want.
func (c *client) expect(ctx context.Context, sandboxID, code, want string) (time.Duration, error) {
	start := time.Now()
	res, err := c.exec(ctx, sandboxID, "python", code)
	d := time.Since(start)
	if err != nil {
		return d, err
	}
	if res.result != want {
		return d, fmt.Errorf("%q gave %q, want %q", code, res.result, want)
	}
	return d, nil
}

// serving reports whether sandboxd's health service says SERVING.
func (c *client) serving(ctx context.Context) bool {
	return c.sb.Ready(ctx) == nil
}
