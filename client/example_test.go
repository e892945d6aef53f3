package client_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sandboxd/sandboxd/client"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Run a command in a user's sandbox. A real program dials sandboxd's
// address (client.Dial("127.0.0.1:50051", client.WithToken(token))); this
// example dials a tiny in-process stand-in so that it runs anywhere.
func Example() {
	addr, dialer := fakeSandboxd()
	c, err := client.Dial(addr, client.WithDialOptions(grpc.WithContextDialer(dialer)))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	sb, err := c.Acquire(ctx, "alice")
	if err != nil {
		log.Fatal(err)
	}
	// Store the command ID before sending it: after a crash, Run with
	// resume=true and the same ID picks the command up without running it
	// again.
	cmd := client.Command{SandboxID: sb.ID, ID: "cmd-1", Code: "print('hello')"}
	out, err := c.Run(ctx, cmd, false, func(ev client.Event) {
		if ev.Kind == client.KindStdout {
			fmt.Print("live: ", ev.Text)
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("status:", out.Done.Status)
	// Output:
	// live: hello
	// status: ok
}

// fakeSandboxd serves a stand-in for sandboxd in memory: one sandbox, and
// every command prints "hello".
func fakeSandboxd() (string, func(context.Context, string) (net.Conn, error)) {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	sandboxv1.RegisterSandboxServiceServer(srv, stand{})
	go srv.Serve(lis)
	return "passthrough:///sandboxd", func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }
}

type stand struct {
	sandboxv1.UnimplementedSandboxServiceServer
}

func (stand) AcquireSandbox(_ context.Context, req *sandboxv1.AcquireSandboxRequest) (*sandboxv1.AcquireSandboxResponse, error) {
	return &sandboxv1.AcquireSandboxResponse{Sandbox: &sandboxv1.Sandbox{SandboxId: "sb-1", UserId: req.GetUserId()}, Created: true}, nil
}

func (stand) Execute(req *sandboxv1.ExecuteRequest, s grpc.ServerStreamingServer[sandboxv1.ExecuteEvent]) error {
	for _, ev := range []*sandboxv1.ExecuteEvent{
		{Seq: 1, Event: &sandboxv1.ExecuteEvent_Started{Started: &sandboxv1.Started{Language: "python"}}},
		{Seq: 2, Event: &sandboxv1.ExecuteEvent_Stdout{Stdout: &sandboxv1.OutputChunk{Text: "hello\n"}}},
		{Seq: 3, Event: &sandboxv1.ExecuteEvent_Done{Done: &sandboxv1.Done{Status: sandboxv1.CommandStatus_COMMAND_STATUS_OK}}},
	} {
		ev.CommandId = req.GetCommandId()
		if err := s.Send(ev); err != nil {
			return err
		}
	}
	return nil
}
