package client

import (
	"context"
	"errors"
	"net"
	"reflect"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// netFake records the network calls and answers as sandboxd would.
type netFake struct {
	sandboxv1.UnimplementedSandboxServiceServer
	requests []proto.Message
}

func (f *netFake) AcquireSandbox(_ context.Context, req *sandboxv1.AcquireSandboxRequest) (*sandboxv1.AcquireSandboxResponse, error) {
	f.requests = append(f.requests, req)
	return &sandboxv1.AcquireSandboxResponse{Sandbox: &sandboxv1.Sandbox{SandboxId: "sb-1", Network: true, NetworkPolicy: req.GetOptions().GetNetworkPolicy()}, Created: true}, nil
}

func (f *netFake) UpdateNetworkPolicy(_ context.Context, req *sandboxv1.UpdateNetworkPolicyRequest) (*sandboxv1.UpdateNetworkPolicyResponse, error) {
	f.requests = append(f.requests, req)
	if req.GetSandboxId() == "sb-sealed" {
		return nil, status.Error(codes.FailedPrecondition, "sandbox sb-sealed has no network")
	}
	return &sandboxv1.UpdateNetworkPolicyResponse{Sandbox: &sandboxv1.Sandbox{SandboxId: req.GetSandboxId(), NetworkPolicy: req.GetPolicy()}}, nil
}

func (f *netFake) GetNetworkStatus(_ context.Context, req *sandboxv1.GetNetworkStatusRequest) (*sandboxv1.GetNetworkStatusResponse, error) {
	f.requests = append(f.requests, req)
	return &sandboxv1.GetNetworkStatusResponse{Counters: &sandboxv1.NetworkCounters{BytesOut: 7}}, nil
}

func (f *netFake) GetHost(_ context.Context, req *sandboxv1.GetHostRequest) (*sandboxv1.GetHostResponse, error) {
	f.requests = append(f.requests, req)
	return &sandboxv1.GetHostResponse{Url: "https://8080-sb-1.example.test/"}, nil
}

func TestNetworkCalls(t *testing.T) {
	f := &netFake{}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	sandboxv1.RegisterSandboxServiceServer(srv, f)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	c, err := Dial("passthrough:///bufnet", WithDialOptions(grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()

	p := NetworkPolicy{AllowOut: []string{"pypi.org"}, DenyOut: []string{"0.0.0.0/0"},
		Rules: map[string]map[string]string{"api.example.com": {"Authorization": "Bearer k"}}, AllowPublicTraffic: true}
	acq, err := c.Acquire(ctx, "alice", WithNetworkPolicy(p))
	if err != nil {
		t.Fatal(err)
	}
	p.Rules["api.example.com"]["Authorization"] = "changed after the option was made"
	sent := f.requests[0].(*sandboxv1.AcquireSandboxRequest).GetOptions().GetNetworkPolicy()
	if sent.GetRules()["api.example.com"].GetHeaders()["Authorization"] != "Bearer k" || !sent.GetAllowPublicTraffic() {
		t.Errorf("sent %v", sent)
	}
	if got := PolicyFromProto(acq.Sandbox.GetNetworkPolicy()); !reflect.DeepEqual(got.AllowOut, []string{"pypi.org"}) || got.Rules["api.example.com"] == nil {
		t.Errorf("PolicyFromProto = %+v", got)
	}

	sb, err := c.UpdateNetworkPolicy(ctx, "sb-1", NetworkPolicy{})
	if err != nil || sb.GetSandboxId() != "sb-1" {
		t.Errorf("UpdateNetworkPolicy = %v, %v", sb, err)
	}
	if req := f.requests[1].(*sandboxv1.UpdateNetworkPolicyRequest); req.GetPolicy() == nil {
		t.Error("the zero policy was sent unset (sandboxd requires one)")
	}
	if _, err := c.UpdateNetworkPolicy(ctx, "sb-sealed", NetworkPolicy{}); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("a sealed sandbox: %v", err)
	}
	st, err := c.NetworkStatus(ctx, "sb-1")
	if err != nil || st.GetCounters().GetBytesOut() != 7 {
		t.Errorf("NetworkStatus = %v, %v", st, err)
	}
	h, err := c.GetHost(ctx, "sb-1", 8080)
	if err != nil || h.GetUrl() == "" || f.requests[len(f.requests)-1].(*sandboxv1.GetHostRequest).GetPort() != 8080 {
		t.Errorf("GetHost = %v, %v", h, err)
	}
	n := len(f.requests)
	for _, port := range []int{0, 65536, 1<<32 + 80} {
		if _, err := c.GetHost(ctx, "sb-1", port); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("GetHost(port %d) = %v", port, err)
		}
	}
	if len(f.requests) != n {
		t.Error("a port outside 1-65535 was sent")
	}
	if got := PolicyFromProto(nil); !reflect.DeepEqual(got, NetworkPolicy{}) {
		t.Errorf("PolicyFromProto(nil) = %+v", got)
	}
}
