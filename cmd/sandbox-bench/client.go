package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// client is the benchmark's view of sandboxd: its public gRPC API, nothing
// else, so the figures are what any caller gets.
type client struct {
	conn   *grpc.ClientConn
	api    sandboxv1.SandboxServiceClient
	health healthpb.HealthClient
	// prefix and seq make command IDs unique across runs against one
	// long-lived sandboxd (--addr), where IDs must never repeat in a sandbox.
	prefix string
	seq    atomic.Int64
}

func dial(addr, runID string) (*client, error) {
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(sandboxv1.MaxMessageSize)))
	if err != nil {
		return nil, fmt.Errorf("connect to sandboxd at %s: %w", addr, err)
	}
	return &client{
		conn:   conn,
		api:    sandboxv1.NewSandboxServiceClient(conn),
		health: healthpb.NewHealthClient(conn),
		prefix: "bench-" + runID + "-",
	}, nil
}

func (c *client) close() error { return c.conn.Close() }

// acquire returns the user's sandbox ID, creating the sandbox if needed.
func (c *client) acquire(ctx context.Context, user string, env map[string]string) (string, error) {
	req := &sandboxv1.AcquireSandboxRequest{UserId: user}
	if len(env) > 0 {
		req.Options = &sandboxv1.SandboxOptions{Env: env}
	}
	resp, err := c.api.AcquireSandbox(ctx, req)
	if err != nil {
		return "", fmt.Errorf("acquire a sandbox for %s: %w", user, err)
	}
	return resp.GetSandbox().GetSandboxId(), nil
}

func (c *client) delete(ctx context.Context, sandboxID string) error {
	_, err := c.api.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sandboxID})
	return err
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

// execStream is exec that also reports each output chunk's size to onOutput.
func (c *client) execStream(ctx context.Context, sandboxID, language, code string, onOutput func(int)) (execResult, error) {
	var res execResult
	id := c.prefix + strconv.FormatInt(c.seq.Add(1), 10)
	stream, err := c.api.Execute(ctx, &sandboxv1.ExecuteRequest{SandboxId: sandboxID, CommandId: id, Language: language, Code: code})
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
		switch e := ev.GetEvent().(type) {
		case *sandboxv1.ExecuteEvent_Stdout:
			res.outputBytes += int64(len(e.Stdout.GetText()))
			if onOutput != nil {
				onOutput(len(e.Stdout.GetText()))
			}
		case *sandboxv1.ExecuteEvent_Stderr:
			res.outputBytes += int64(len(e.Stderr.GetText()))
		case *sandboxv1.ExecuteEvent_Result:
			res.result = e.Result.GetData()["text/plain"]
		case *sandboxv1.ExecuteEvent_Error:
			return res, fmt.Errorf("command %s raised %s: %s", id, e.Error.GetEname(), e.Error.GetEvalue())
		case *sandboxv1.ExecuteEvent_Done:
			if st := e.Done.GetStatus(); st != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
				return res, fmt.Errorf("command %s ended %v: %s", id, st, e.Done.GetReason())
			}
			return res, nil
		}
	}
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
	resp, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{})
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
}
