package e2bapi

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/door/tokens"
)

// netManager is the fake domain with network: it keeps each sandbox's
// policy in full, as a backend does, and returns it redacted.
type netManager struct {
	fakeManager
	opts     []core.Options
	policies map[string]core.NetworkPolicy
}

func (f *netManager) Acquire(ctx context.Context, user string, opts core.Options) (core.AcquireResult, error) {
	f.opts = append(f.opts, opts)
	res, err := f.fakeManager.Acquire(ctx, user, opts)
	if opts.Network {
		sb := res.Sandbox
		f.policies[sb.ID] = *opts.NetworkPolicy
		r := opts.NetworkPolicy.Redacted()
		sb.Network, sb.NetworkPolicy = true, &r
		f.sandboxes[sb.ID], res.Sandbox = sb, sb
	}
	return res, err
}

func (f *netManager) UpdateNetworkPolicy(ctx context.Context, id string, p core.NetworkPolicy) (core.Sandbox, error) {
	sb, err := f.Get(ctx, id)
	if err != nil {
		return sb, err
	}
	if !sb.Network {
		return sb, core.NoNetwork(id)
	}
	f.policies[id] = p
	r := p.Redacted()
	sb.NetworkPolicy = &r
	f.sandboxes[id] = sb
	return sb, nil
}

// newNetServer is the door over netManager behind the validating layer
// with policy p.
func newNetServer(t *testing.T, p core.Policy) (*Server, *netManager) {
	t.Helper()
	toks, err := tokens.Parse(strings.NewReader(testKey + " acme user\n"))
	if err != nil {
		t.Fatal(err)
	}
	fm := &netManager{fakeManager: fakeManager{sandboxes: map[string]core.Sandbox{}}, policies: map[string]core.NetworkPolicy{}}
	s, err := New(core.Validating(fm, p), Config{Tokens: toks, Secret: []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	return s, fm
}

func networkAllowed() core.Policy {
	p := core.Policy{AllowNetwork: true}
	if err := p.ApplyDefaults(); err != nil {
		panic(err)
	}
	return p
}

var keyHdr = map[string]string{"X-API-KEY": testKey}

const e2bSecret = "Bearer sk-e2b-secret-value"

// TestCreateWithNetwork: the body the pinned SDK sends for
// Sandbox.create({network, allowInternetAccess}) becomes the domain's
// policy; info shows it without the secrets.
func TestCreateWithNetwork(t *testing.T) {
	s, fm := newNetServer(t, networkAllowed())
	body := `{"templateID":"code-interpreter-v1","allow_internet_access":false,"network":{
		"allowOut":["api.example.com","pypi.org"],"denyOut":["0.0.0.0/0"],
		"rules":{"API.example.com":[{"transform":{"headers":{"Authorization":"Bearer first","X-Org":"o"}}},{},{"transform":{"headers":{"authorization":"` + e2bSecret + `"}}}]},
		"allowPublicTraffic":true,"httpsPorts":[],"maskRequestHost":null}}`
	w := do(s, "POST", "/v2/sandboxes", keyHdr, body)
	if w.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	var created sandboxCreated
	json.Unmarshal(w.Body.Bytes(), &created)
	want := core.NetworkPolicy{AllowOut: []string{"api.example.com", "pypi.org"}, DenyOut: []string{"0.0.0.0/0"}, AllowPublicTraffic: true,
		Rules: map[string]core.NetworkRule{"api.example.com": {Headers: map[string]string{"authorization": e2bSecret, "X-Org": "o"}}}}
	if got := fm.policies[created.SandboxID]; !reflect.DeepEqual(got, want) {
		t.Errorf("the domain got %+v\nwant %+v (rules merged in order, the key in lower case, 0.0.0.0/0 once)", got, want)
	}

	w = do(s, "GET", "/sandboxes/"+created.SandboxID, keyHdr, "")
	if w.Code != http.StatusOK || strings.Contains(w.Body.String(), "sk-e2b") || strings.Contains(w.Body.String(), "Bearer") {
		t.Fatalf("info: %d %s", w.Code, w.Body)
	}
	var info struct {
		AllowInternetAccess bool            `json:"allowInternetAccess"`
		Network             json.RawMessage `json:"network"`
	}
	json.Unmarshal(w.Body.Bytes(), &info)
	wantNet := `{"allowOut":["api.example.com","pypi.org"],"denyOut":["0.0.0.0/0"],"rules":{"api.example.com":[{"transform":{"headers":{"X-Org":"","authorization":""}}}]},"allowPublicTraffic":true}`
	if !info.AllowInternetAccess || string(info.Network) != wantNet {
		t.Errorf("info: allowInternetAccess %v, network %s\nwant %s", info.AllowInternetAccess, info.Network, wantNet)
	}
}

// TestCreateNetworkDefaults: without `network`, allow_internet_access
// true is network under the server's default; anything else is sealed.
func TestCreateNetworkDefaults(t *testing.T) {
	s, fm := newNetServer(t, networkAllowed())
	for _, c := range []struct {
		body    string
		network bool
	}{
		{`{}`, false},
		{`{"allow_internet_access":false}`, false},
		{`{"allow_internet_access":true}`, true},
		{`{"network":{}}`, true},
		{`{"network":null}`, false},
	} {
		fm.opts = nil
		w := do(s, "POST", "/v2/sandboxes", keyHdr, c.body)
		if w.Code != http.StatusCreated || len(fm.opts) != 1 || fm.opts[0].Network != c.network ||
			(c.network && (fm.opts[0].NetworkPolicy == nil || !reflect.DeepEqual(*fm.opts[0].NetworkPolicy, core.NetworkPolicy{}))) {
			t.Errorf("create %s: %d %s, the domain got %+v; want network %v", c.body, w.Code, w.Body, fm.opts, c.network)
		}
		var created sandboxCreated
		json.Unmarshal(w.Body.Bytes(), &created)
		info := do(s, "GET", "/sandboxes/"+created.SandboxID, keyHdr, "")
		if got := strings.Contains(info.Body.String(), `"allowInternetAccess":true`); got != c.network || strings.Contains(info.Body.String(), `"network"`) != c.network {
			t.Errorf("info after %s: %s", c.body, info.Body)
		}
	}
}

// TestNetworkRefusals: what sandboxd does not offer is refused, never
// ignored; bad entries are named; a server without networking says so.
func TestNetworkRefusals(t *testing.T) {
	s, _ := newNetServer(t, networkAllowed())
	many := `"a.com"` + strings.Repeat(`,"a.com"`, core.MaxEgressEntries)
	for _, c := range []struct {
		body, want string
	}{
		{`{"network":{"egressProxy":{"address":"proxy.example.com:1080"}}}`, "network.egressProxy is not supported by sandboxd"},
		{`{"network":{"maskRequestHost":"${PORT}-x.example.com"}}`, "network.maskRequestHost is not supported"},
		{`{"network":{"httpsPorts":[3000]}}`, "network.httpsPorts is not supported"},
		{`{"network":{"allowOut":["ok.com","bad_name.com"]}}`, `"bad_name.com"`},
		{`{"network":{"allowOut":"pypi.org"}}`, "network.allowOut must be an array of strings"},
		{`{"network":{"allowOut":[1]}}`, "network.allowOut[0] must be a string"},
		{`{"network":{"denyOut":[` + many + `]}}`, "network.denyOut has more than 256 entries"},
		{`{"network":{"rules":{"api.com":{"transform":{}}}}}`, `network.rules["api.com"] must be an array`},
		{`{"network":{"rules":{"api.com":[{"transform":{"headers":{"Host":"evil.com"}}}]}}}`, `header name "Host"`},
		{`{"network":{"rules":{"api.com":[{"transform":{"headers":{"X-A":"1","x-a":"2"}}}]}}}`, "are the same header"},
		{`{"network":{"rules":{"1.2.3.4":[]}}}`, "keyed by domain"},
		{`{"network":{"allowOut":["10.0.0.0/8"]}}`, "--egress-allow-private"},
	} {
		w := do(s, "POST", "/v2/sandboxes", keyHdr, c.body)
		if w.Code != http.StatusBadRequest || !strings.Contains(message(w.Body.Bytes()), c.want) {
			t.Errorf("create %.80s: %d %s; want 400 with %s", c.body, w.Code, w.Body, c.want)
		}
	}
	sealed, _ := newNetServer(t, core.DefaultPolicy())
	for _, body := range []string{`{"network":{}}`, `{"allow_internet_access":true}`} {
		if w := do(sealed, "POST", "/v2/sandboxes", keyHdr, body); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "--allow-network") {
			t.Errorf("create %s on a server without networking: %d %s", body, w.Code, w.Body)
		}
	}
}

// TestUpdateNetwork: PUT /sandboxes/{id}/network as the SDK's
// updateNetwork sends it: the egress rules replaced whole, the sandbox's
// allowPublicTraffic kept.
func TestUpdateNetwork(t *testing.T) {
	s, fm := newNetServer(t, networkAllowed())
	w := do(s, "POST", "/v2/sandboxes", keyHdr, `{"network":{"allowOut":["a.com"],"allowPublicTraffic":true,"rules":{"a.com":[{"transform":{"headers":{"X-K":"1"}}}]}}}`)
	var created sandboxCreated
	json.Unmarshal(w.Body.Bytes(), &created)
	id := created.SandboxID

	w = do(s, "PUT", "/sandboxes/"+id+"/network", keyHdr, `{"allowOut":["pypi.org"],"allow_internet_access":false,
		"rules":{"api.example.com":[{"transform":{"headers":{"Authorization":"`+e2bSecret+`"}}}]}}`)
	if w.Code != http.StatusNoContent {
		t.Fatalf("update: %d %s", w.Code, w.Body)
	}
	want := core.NetworkPolicy{AllowOut: []string{"pypi.org"}, DenyOut: []string{"0.0.0.0/0"}, AllowPublicTraffic: true,
		Rules: map[string]core.NetworkRule{"api.example.com": {Headers: map[string]string{"Authorization": e2bSecret}}}}
	if got := fm.policies[id]; !reflect.DeepEqual(got, want) {
		t.Errorf("after the update the domain has %+v\nwant %+v", got, want)
	}
	// Omitting a field clears it.
	if w := do(s, "PUT", "/sandboxes/"+id+"/network", keyHdr, `{}`); w.Code != http.StatusNoContent {
		t.Fatalf("empty update: %d %s", w.Code, w.Body)
	}
	if got := fm.policies[id]; !reflect.DeepEqual(got, core.NetworkPolicy{AllowPublicTraffic: true}) {
		t.Errorf("after an empty update: %+v", got)
	}
	info := do(s, "GET", "/sandboxes/"+id, keyHdr, "")
	if !strings.Contains(info.Body.String(), `"network":{"allowPublicTraffic":true}`) {
		t.Errorf("info after the empty update: %s", info.Body)
	}

	w = do(s, "POST", "/v2/sandboxes", keyHdr, `{}`)
	json.Unmarshal(w.Body.Bytes(), &created)
	for _, c := range []struct {
		id, body string
		code     int
		want     string
	}{
		{created.SandboxID, `{"allowOut":["a.com"]}`, http.StatusConflict, "has no network"},
		{"sb-zzzzzzzzzzzzzzzzzzzz", `{}`, http.StatusNotFound, ""},
		{id, `{"allowOut":["*"]}`, http.StatusBadRequest, `"*"`},
		{id, `{"egressProxy":{"address":"p:1080"}}`, http.StatusBadRequest, "egressProxy is not supported"},
		{id, `{"allowOut":`, http.StatusBadRequest, "not valid JSON"},
	} {
		w := do(s, "PUT", "/sandboxes/"+c.id+"/network", keyHdr, c.body)
		if w.Code != c.code || !strings.Contains(message(w.Body.Bytes()), c.want) {
			t.Errorf("update %s %s: %d %s; want %d with %s", c.id, c.body, w.Code, w.Body, c.code, c.want)
		}
	}
	if w := do(s, "PUT", "/sandboxes/"+id+"/network", nil, `{}`); w.Code != http.StatusUnauthorized {
		t.Errorf("update without a key: %d", w.Code)
	}
}

// message is an E2B error body's message.
func message(body []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	json.Unmarshal(body, &e)
	return e.Message
}

func TestMergeHeaders(t *testing.T) {
	got := mergeHeaders([]map[string]string{{"A": "1", "B": "1"}, nil, {"a": "2"}, {"C": "3", "b": "3"}})
	if want := map[string]string{"a": "2", "C": "3", "b": "3"}; !reflect.DeepEqual(got, want) {
		t.Errorf("mergeHeaders = %v, want %v", got, want)
	}
	if mergeHeaders([]map[string]string{{}, nil}) != nil {
		t.Error("no headers merge to something")
	}
}
