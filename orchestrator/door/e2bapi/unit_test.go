package e2bapi

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/orchestrator/door/e2bapi/envdproto/process"
	"github.com/sandboxd/sandboxd/orchestrator/door/tokens"
)

// fakeManager serves Get, Acquire and Delete from a map; every other
// method panics (nil embedded interface), which the tests never reach.
type fakeManager struct {
	core.Manager
	sandboxes map[string]core.Sandbox
	acquired  []string // users
}

// GetTemplate: this fake has no templates.
func (f *fakeManager) GetTemplate(ctx context.Context, ref string) (core.Template, error) {
	return core.Template{}, core.TemplateNotFound(ref)
}

func (f *fakeManager) Get(ctx context.Context, id string) (core.Sandbox, error) {
	c, _ := core.CallerFrom(ctx)
	sb, ok := f.sandboxes[id]
	if !ok || (!c.Admin && sb.Tenant != c.Tenant) {
		return core.Sandbox{}, core.ErrNotFound
	}
	return sb, nil
}

func (f *fakeManager) Acquire(ctx context.Context, user string, opts core.Options) (core.AcquireResult, error) {
	c, _ := core.CallerFrom(ctx)
	if opts.FromSnapshot != "" {
		return core.AcquireResult{}, core.SnapshotNotFound(opts.FromSnapshot) // this fake has none
	}
	f.acquired = append(f.acquired, user)
	sb := core.Sandbox{ID: "sb-aaaaaaaaaaaaaaaaaaaa", Tenant: c.Tenant, UserID: user, State: core.StateRunning, Metadata: opts.Metadata}
	f.sandboxes[sb.ID] = sb
	return core.AcquireResult{Sandbox: sb, Created: true}, nil
}

func (f *fakeManager) Delete(ctx context.Context, id string) error {
	if _, err := f.Get(ctx, id); err != nil {
		return err
	}
	delete(f.sandboxes, id)
	return nil
}

const testKey = "e2b_0123456789abcdef0123"

func newTestServer(t *testing.T) (*Server, *fakeManager) {
	t.Helper()
	toks, err := tokens.Parse(strings.NewReader(testKey + " acme user\n"))
	if err != nil {
		t.Fatal(err)
	}
	fm := &fakeManager{sandboxes: map[string]core.Sandbox{}}
	s, err := New(fm, Config{Tokens: toks, Secret: []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	return s, fm
}

// do sends one request to s, served on loopback (bodies are read under a
// deadline, which needs a connection), and returns the response recorded.
func do(s *Server, method, path string, hdr map[string]string, body string) *httptest.ResponseRecorder {
	srv := httptest.NewServer(s)
	defer srv.Close()
	r, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			r.Host = v
		}
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	resp, err := srv.Client().Do(r)
	if err != nil {
		w.WriteHeader(599)
		w.WriteString(err.Error())
		return w
	}
	defer resp.Body.Close()
	maps.Copy(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
	return w
}

func TestCreateAuthenticatesAndMakesANewUser(t *testing.T) {
	s, fm := newTestServer(t)
	if w := do(s, "POST", "/v2/sandboxes", nil, `{}`); w.Code != http.StatusUnauthorized {
		t.Fatalf("no key: %d %s", w.Code, w.Body)
	}
	if w := do(s, "POST", "/v2/sandboxes", map[string]string{"X-API-KEY": "e2b_wrong_wrong_wrong_wrong"}, `{}`); w.Code != http.StatusUnauthorized {
		t.Fatalf("wrong key: %d %s", w.Code, w.Body)
	}
	w := do(s, "POST", "/v2/sandboxes", map[string]string{"X-API-KEY": testKey}, `{"templateID":"base","metadata":{"a":"b"}}`)
	if w.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	var got sandboxCreated
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.SandboxID == "" || got.EnvdAccessToken != s.accessToken(got.SandboxID) || got.EnvdVersion != EnvdVersion || got.TemplateID != "base" {
		t.Errorf("create answered %+v", got)
	}
	if len(fm.acquired) != 1 || !strings.HasPrefix(fm.acquired[0], userPrefix) {
		t.Errorf("acquired users %v, want one new e2b- user", fm.acquired)
	}
	if sb := fm.sandboxes[got.SandboxID]; sb.Tenant != "acme" || sb.Metadata[templateKey] != "base" {
		t.Errorf("sandbox %+v: want tenant acme and the template kept", sb)
	}
	if w := do(s, "POST", "/v2/sandboxes", map[string]string{"X-API-KEY": testKey}, `{"templateID":"nope"}`); w.Code != http.StatusBadRequest {
		t.Errorf("unknown template: %d %s", w.Code, w.Body)
	}
}

func TestKillUnknownIs404WithJSONBody(t *testing.T) {
	s, _ := newTestServer(t)
	w := do(s, "DELETE", "/sandboxes/sb-bbbbbbbbbbbbbbbbbbbb", map[string]string{"X-API-KEY": testKey}, "")
	var body struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if w.Code != http.StatusNotFound || json.Unmarshal(w.Body.Bytes(), &body) != nil || body.Code != 404 || body.Message == "" {
		t.Fatalf("got %d %s, want 404 with {code,message}", w.Code, w.Body)
	}
}

func TestSandboxRequestsNeedTheSandboxsToken(t *testing.T) {
	s, fm := newTestServer(t)
	id := "sb-cccccccccccccccccccc"
	fm.sandboxes[id] = core.Sandbox{ID: id, Tenant: "acme", State: core.StateRunning}
	hdr := map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": EnvdPort}
	if w := do(s, "GET", "/health", hdr, ""); w.Code != http.StatusUnauthorized {
		t.Errorf("no token: %d", w.Code)
	}
	hdr["X-Access-Token"] = s.accessToken("sb-dddddddddddddddddddd")
	if w := do(s, "GET", "/health", hdr, ""); w.Code != http.StatusUnauthorized {
		t.Errorf("another sandbox's token: %d", w.Code)
	}
	hdr["X-Access-Token"] = s.accessToken(id)
	if w := do(s, "GET", "/health", hdr, ""); w.Code != http.StatusNoContent {
		t.Errorf("envd health: %d, want 204", w.Code)
	}
	// The same path without the port header is the control plane's.
	if w := do(s, "GET", "/health", nil, ""); w.Code != http.StatusOK {
		t.Errorf("control health: %d, want 200", w.Code)
	}
	delete(fm.sandboxes, id)
	if w := do(s, "GET", "/health", hdr, ""); w.Code != http.StatusBadGateway {
		t.Errorf("health of a gone sandbox: %d, want 502", w.Code)
	}
	hdr["E2b-Sandbox-Port"] = "8080"
	if w := do(s, "GET", "/", hdr, ""); w.Code != http.StatusBadGateway {
		t.Errorf("other port: %d, want 502", w.Code)
	}
}

func TestPaths(t *testing.T) {
	for in, want := range map[string]string{
		"a.txt": "a.txt", "/home/user": "", "/home/user/x/y": "x/y", "/workspace/z": "z", "/workspace": "", "/etc/passwd": "/etc/passwd",
	} {
		if got := toWorkspace(in); got != want {
			t.Errorf("toWorkspace(%q) = %q, want %q", in, got, want)
		}
	}
	if got := fromWorkspace("x/y"); got != "/workspace/x/y" {
		t.Errorf("fromWorkspace = %q", got)
	}
	if got := absDir("/home/user/p"); got != "/workspace/p" {
		t.Errorf("absDir = %q", got)
	}
}

func TestResultOf(t *testing.T) {
	r := resultOf(map[string]string{"text/plain": "'hi'", "image/png": "AAA", "application/json": `{"k":1}`, "application/x-custom": "c"}, true)
	if r["text"] != "hi" || r["png"] != "AAA" || r["is_main_result"] != true || r["application/x-custom"] != "c" {
		t.Errorf("resultOf = %v", r)
	}
	if j, ok := r["json"].(map[string]any); !ok || j["k"] != float64(1) {
		t.Errorf("json = %#v, want the parsed object", r["json"])
	}
	if got := unquoteRepr("'it''s'"); got != "'it''s'" {
		t.Errorf("unquoteRepr kept quotes inside: %q", got)
	}
}

func TestScriptOf(t *testing.T) {
	cwd := "/home/user/d"
	s, err := scriptOf(&process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "echo hi"}, Cwd: &cwd})
	if err != nil || s != "cd -- '/workspace/d' || exit 1\necho hi" {
		t.Errorf("scriptOf = %q, %v", s, err)
	}
	s, _ = scriptOf(&process.ProcessConfig{Cmd: "ls", Args: []string{"it's"}})
	if s != `exec 'ls' 'it'\''s'` {
		t.Errorf("scriptOf quoted = %q", s)
	}
}

// A unary RPC's message is decoded once read whole: its place is kept
// until the request ends; a streaming RPC's and JSON bodies' only while
// read; uploads need none.
func TestAdmissionOf(t *testing.T) {
	for _, c := range []struct {
		port, path string
		want       admission
	}{
		{InterpreterPort, "/execute", decodedAsRead},
		{EnvdPort, "/process.Process/Start", decodedAsRead},
		{EnvdPort, "/filesystem.Filesystem/WatchDir", decodedAsRead},
		{EnvdPort, "/process.Process/SendInput", decodedWhole},
		{EnvdPort, "/filesystem.Filesystem/ListDir", decodedWhole},
		{EnvdPort, "/files", streamed},
	} {
		if got := admissionOf(c.port, httptest.NewRequest("POST", c.path, nil)); got != c.want {
			t.Errorf("%s %s: %d, want %d", c.port, c.path, got, c.want)
		}
	}
}

// TestProcTableBounded: what the door remembers of a sandbox's processes
// is bounded in bytes as well as entries (one process's arguments may take
// most of an 8 MiB message: 1000 of them were ~8 GiB), oldest forgotten
// first; an entry larger than the whole bound is not kept.
func TestProcTableBounded(t *testing.T) {
	var pt procTable
	pt.init()
	big := strings.Repeat("a", maxProcBytes/4)
	for pid := uint32(1); pid <= 10; pid++ {
		pt.put("sb", pid, procEntry{cmd: "x", args: []string{big}})
	}
	ps := pt.procs["sb"]
	if ps.bytes > maxProcBytes || len(ps.byPID) != 3 {
		t.Fatalf("kept %d entries, %d bytes; want the 3 newest within %d", len(ps.byPID), ps.bytes, maxProcBytes)
	}
	if _, ok := pt.get("sb", 10); !ok {
		t.Error("the newest entry was forgotten")
	}
	if _, ok := pt.get("sb", 1); ok {
		t.Error("the oldest entry was kept")
	}
	pt.put("sb", 11, procEntry{cmd: strings.Repeat("b", maxProcBytes+1)})
	if _, ok := pt.get("sb", 11); ok || len(pt.procs["sb"].byPID) != 3 {
		t.Error("an entry larger than the bound was kept, or evicted others")
	}
	for pid := uint32(100); pid < 100+maxProcEntries+5; pid++ {
		pt.put("sb2", pid, procEntry{cmd: "x"})
	}
	if n := len(pt.procs["sb2"].byPID); n != maxProcEntries {
		t.Errorf("kept %d small entries; want %d", n, maxProcEntries)
	}
	pt.drop("sb2", 100+maxProcEntries+4)
	pt.forget("sb")
	if _, ok := pt.procs["sb"]; ok {
		t.Error("forget kept the sandbox's entries")
	}
}
