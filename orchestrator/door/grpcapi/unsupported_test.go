package grpcapi

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// TestLackedCapabilityIsUnimplemented: on a backend that lacks a capability
// (completed by core.Complete, as sandboxd serves one), its calls answer
// UNIMPLEMENTED naming the backend and the feature, and never reach the
// backend; a malformed request is still INVALID_ARGUMENT. The E2B door
// answers the same calls 501 (e2bapi's TestLackedCapabilityIs501).
func TestLackedCapabilityIsUnimplemented(t *testing.T) {
	fake := &fakeManager{}
	m := &coretest.ValidatedManager{Manager: core.Validating(coretest.Without(fake, "test-backend", core.CapVolumes, core.CapTemplates), core.DefaultPolicy()), Fake: fake}
	env := newTestEnvWith(t, fake, m)
	ctx := t.Context()
	_, err := env.client.CreateVolume(ctx, &sandboxv1.CreateVolumeRequest{Name: "data"})
	if st := status.Convert(err); st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), "test-backend") || !strings.Contains(st.Message(), "volumes") {
		t.Errorf("CreateVolume: %v; want UNIMPLEMENTED naming the backend and volumes", err)
	}
	_, err = env.client.ListTemplates(ctx, &sandboxv1.ListTemplatesRequest{})
	if st := status.Convert(err); st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), "templates") {
		t.Errorf("ListTemplates: %v; want UNIMPLEMENTED naming templates", err)
	}
	_, err = env.client.CreateVolume(ctx, &sandboxv1.CreateVolumeRequest{Name: "../x"})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument {
		t.Errorf("CreateVolume with a bad name: %v; want INVALID_ARGUMENT, as on any backend", err)
	}
	if calls := fake.Calls(); len(calls) != 0 {
		t.Errorf("calls reached the backend: %v", calls)
	}
}
