package e2bapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
	"github.com/sandboxd/sandboxd/orchestrator/door/tokens"
)

// TestLackedCapabilityIs501: the E2B door answers a call of a capability
// the backend lacks (completed by core.Complete) 501 with E2B's JSON error
// naming the backend and the feature, as the gRPC door answers it
// UNIMPLEMENTED (grpcapi's TestLackedCapabilityIsUnimplemented).
func TestLackedCapabilityIs501(t *testing.T) {
	toks, err := tokens.Parse(strings.NewReader(testKey + " acme user\n"))
	if err != nil {
		t.Fatal(err)
	}
	fake := &coretest.Manager{}
	s, err := New(core.Validating(coretest.Without(fake, "test-backend", core.CapVolumes), core.DefaultPolicy()),
		Config{Tokens: toks, Secret: []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	w := do(s, "POST", "/volumes", map[string]string{"X-API-KEY": testKey}, `{"name":"data"}`)
	var body struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("POST /volumes: %d %s: %v", w.Code, w.Body, err)
	}
	if w.Code != http.StatusNotImplemented || body.Code != http.StatusNotImplemented || !strings.Contains(body.Message, "test-backend") || !strings.Contains(body.Message, "volumes") {
		t.Errorf("POST /volumes: %d %s; want 501 naming the backend and volumes", w.Code, w.Body)
	}
	if calls := fake.Calls(); len(calls) != 0 {
		t.Errorf("calls reached the backend: %v", calls)
	}
}
