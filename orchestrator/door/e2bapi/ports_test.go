package e2bapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/door/tokens"
)

// contextsManager is the fake with a code interpreter's contexts.
type contextsManager struct{ *fakeManager }

func (contextsManager) ListContexts(context.Context, string) ([]core.ContextInfo, error) {
	return []core.ContextInfo{{ID: core.DefaultContextID, Language: "python"}}, nil
}

// TestPortsThroughTheE2BDoor: with the ports front, a request whose Host
// is getHost's (and which is not envd's or the interpreter's) goes to the
// front; create answers the front's domain and the sandbox's traffic
// token, which opens the interpreter's contexts (as the SDK calls them)
// but never /execute or envd.
func TestPortsThroughTheE2BDoor(t *testing.T) {
	toks, err := tokens.Parse(strings.NewReader(testKey + " acme user\n"))
	if err != nil {
		t.Fatal(err)
	}
	front, err := core.NewPortsFront("http://127.0.0.1:1", "sandboxes.test", []byte("another secret of 32 bytes, too."))
	if err != nil {
		t.Fatal(err)
	}
	var toPorts []string
	ports := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		toPorts = append(toPorts, r.Host)
		w.WriteHeader(299)
	})
	fm := contextsManager{&fakeManager{sandboxes: map[string]core.Sandbox{}}}
	s, err := New(fm, Config{Tokens: toks, Secret: []byte("0123456789abcdef0123456789abcdef"), Ports: ports, Front: front})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(fm, Config{Tokens: toks, Secret: []byte("0123456789abcdef0123456789abcdef"), Ports: ports}); err == nil {
		t.Error("Ports without Front was accepted")
	}

	w := do(s, "POST", "/v2/sandboxes", map[string]string{"X-API-KEY": testKey}, `{}`)
	var got sandboxCreated
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	id := got.SandboxID
	if got.TrafficAccessToken != front.Token(id) || got.TrafficAccessToken == got.EnvdAccessToken || got.Domain == nil || *got.Domain != "sandboxes.test" {
		t.Errorf("create answered traffic token %q, domain %v; want the front's", got.TrafficAccessToken, got.Domain)
	}

	w = do(s, "GET", "/", map[string]string{"Host": "3000-" + id + ".sandboxes.test"}, "")
	if w.Code != 299 || len(toPorts) != 1 {
		t.Errorf("getHost's URL: %d, ports saw %v", w.Code, toPorts)
	}
	w = do(s, "GET", "/health", map[string]string{"Host": "49983-" + id + ".sandboxes.test", "E2b-Sandbox-Port": EnvdPort, "E2b-Sandbox-Id": id,
		"X-Access-Token": got.EnvdAccessToken}, "")
	if w.Code == 299 || len(toPorts) != 1 {
		t.Errorf("envd by its header went to the ports front: %d", w.Code)
	}

	interp := func(method, path, tokHeader, tok string) int {
		return do(s, method, path, map[string]string{"E2b-Sandbox-Port": InterpreterPort, "E2b-Sandbox-Id": id, tokHeader: tok}, "").Code
	}
	if c := interp("GET", "/contexts", core.E2BTrafficTokenHeader, got.TrafficAccessToken); c != http.StatusOK {
		t.Errorf("contexts with the traffic token: %d", c)
	}
	if c := interp("GET", "/contexts", core.E2BTrafficTokenHeader, got.EnvdAccessToken); c != http.StatusOK {
		t.Errorf("contexts with the access token in the traffic header: %d", c)
	}
	if c := interp("POST", "/execute", core.E2BTrafficTokenHeader, got.TrafficAccessToken); c != http.StatusUnauthorized {
		t.Errorf("/execute with the traffic token alone: %d; want 401", c)
	}
	if c := interp("GET", "/contexts", "X-Access-Token", got.TrafficAccessToken); c != http.StatusUnauthorized {
		t.Errorf("the traffic token as X-Access-Token: %d; want 401", c)
	}
	if c := do(s, "GET", "/health", map[string]string{"E2b-Sandbox-Port": EnvdPort, "E2b-Sandbox-Id": id,
		core.E2BTrafficTokenHeader: got.TrafficAccessToken}, "").Code; c != http.StatusUnauthorized {
		t.Errorf("envd with the traffic token: %d; want 401", c)
	}
}
