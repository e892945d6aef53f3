package webhooks

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// receiver is a test endpoint on loopback: it verifies every request's
// signature with the Standard Webhooks library (as a user's receiver
// would) and records what it accepted, in order. Its mode says how it
// answers.
type receiver struct {
	t      *testing.T
	srv    *httptest.Server
	secret string
	wh     *standardwebhooks.Webhook

	mu       sync.Mutex
	mode     string // "ok", "fail", "hang"
	got      []received
	attempts int
	changed  chan struct{} // closed and replaced at each request
	release  chan struct{} // closed to let hung requests go
	holding  chan struct{} // gets a value when a request hangs
}

type received struct {
	ID   string
	Body payload
}

func newSecret(t *testing.T) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t, secret: newSecret(t), mode: "ok", changed: make(chan struct{}), release: make(chan struct{}), holding: make(chan struct{}, 100)}
	var err error
	if r.wh, err = standardwebhooks.NewWebhook(r.secret); err != nil {
		t.Fatal(err)
	}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() {
		r.setMode("ok")
		r.srv.Close()
	})
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	if err := r.wh.Verify(body, req.Header); err != nil {
		r.t.Errorf("request %s: signature: %v", req.Header.Get("webhook-id"), err)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var p payload
	if err := json.Unmarshal(body, &p); err != nil {
		r.t.Errorf("request body %q: %v", body, err)
	}
	if p.Data.EventID != req.Header.Get("webhook-id") {
		r.t.Errorf("webhook-id %q, data.event_id %q", req.Header.Get("webhook-id"), p.Data.EventID)
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/json" {
		r.t.Errorf("Content-Type %q", ct)
	}
	r.mu.Lock()
	r.attempts++
	mode, release := r.mode, r.release
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	switch mode {
	case "fail":
		http.Error(w, "down for maintenance", http.StatusInternalServerError)
		return
	case "hang":
		r.holding <- struct{}{}
		select {
		case <-release:
		case <-req.Context().Done():
		}
		http.Error(w, "hung", http.StatusServiceUnavailable)
		return
	}
	r.mu.Lock()
	r.got = append(r.got, received{ID: p.Data.EventID, Body: p})
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

func (r *receiver) setMode(m string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mode == "hang" && m != "hang" {
		close(r.release)
		r.release = make(chan struct{})
	}
	r.mode = m
}

// waitFor waits, bounded, until cond holds of what was received.
func (r *receiver) waitFor(what string, cond func(got []received, attempts int) bool) []received {
	r.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		r.mu.Lock()
		got, attempts, changed := slices.Clone(r.got), r.attempts, r.changed
		r.mu.Unlock()
		if cond(got, attempts) {
			return got
		}
		select {
		case <-changed:
		case <-deadline:
			r.t.Fatalf("receiver: %s: not within 20s (%d accepted, %d attempts)", what, len(got), attempts)
		}
	}
}

func (r *receiver) waitCount(n int) []received {
	r.t.Helper()
	return r.waitFor(fmt.Sprintf("%d events", n), func(got []received, _ int) bool { return len(got) >= n })
}

func (r *receiver) endpoint(name string) Endpoint {
	return Endpoint{Name: name, URL: r.srv.URL + "/hook", Secret: r.secret}
}

func open(t *testing.T, dir string, eps ...Endpoint) *Dispatcher {
	t.Helper()
	d, err := Open(Config{StateDir: dir, Endpoints: eps, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func ev(kind core.LifecycleKind, tenant, sandbox string) core.LifecycleEvent {
	return core.LifecycleEvent{Kind: kind, Tenant: tenant, UserID: "u-" + sandbox, SandboxID: sandbox, Metadata: map[string]string{"team": "t1"}}
}

func kinds(got []received, sandbox string) []string {
	var out []string
	for _, g := range got {
		if g.Body.Data.SandboxID == sandbox {
			out = append(out, string(g.Body.Type))
		}
	}
	return out
}

// TestDeliversSignedInOrderByTenantAndKind: every request verifies with
// the Standard Webhooks library; each endpoint gets its tenants' events of
// its kinds, in the order they were published, with the event's fields;
// command.finished goes only to endpoints that ask for it.
func TestDeliversSignedInOrderByTenantAndKind(t *testing.T) {
	all, beta := newReceiver(t), newReceiver(t)
	epAll := all.endpoint("all")
	epAll.Events = core.LifecycleKinds
	epBeta := beta.endpoint("beta-only")
	epBeta.Tenants = []string{"beta"}
	d := open(t, t.TempDir(), epAll, epBeta)

	exit := 3
	seq := []core.LifecycleEvent{
		ev(core.LifecycleCreated, "acme", "a1"),
		ev(core.LifecycleCreated, "beta", "b1"),
		{Kind: core.LifecycleCommandFinished, ID: "cmd_b1_c1", Tenant: "beta", SandboxID: "b1", Command: &core.CommandEnd{CommandID: "c1", Status: "error", ExitCode: &exit}},
		ev(core.LifecycleHibernated, "acme", "a1"),
		ev(core.LifecycleWoken, "acme", "a1"),
		ev(core.LifecycleDied, "beta", "b1"),
		ev(core.LifecycleKilled, "acme", "a1"),
	}
	for _, e := range seq {
		d.Publish(e)
	}
	got := all.waitCount(len(seq))
	if k := kinds(got, "a1"); !slices.Equal(k, []string{"created", "hibernated", "woken", "killed"}) {
		t.Errorf("a1's events arrived as %v", k)
	}
	if k := kinds(got, "b1"); !slices.Equal(k, []string{"created", "command.finished", "died"}) {
		t.Errorf("b1's events arrived as %v", k)
	}
	first := got[0].Body
	if first.Data.Tenant != "acme" || first.Data.UserID != "u-a1" || first.Data.Metadata["team"] != "t1" || first.Timestamp.IsZero() ||
		!strings.HasPrefix(first.Data.EventID, "evt_") {
		t.Errorf("first event: %+v", first)
	}
	for _, g := range got {
		if g.Body.Type == core.LifecycleCommandFinished {
			if c := g.Body.Data.Command; g.ID != "cmd_b1_c1" || c == nil || c.CommandID != "c1" || c.Status != "error" || c.ExitCode == nil || *c.ExitCode != 3 {
				t.Errorf("command.finished: id %s, %+v", g.ID, c)
			}
		}
	}
	gotBeta := beta.waitCount(2)
	if k := kinds(gotBeta, "b1"); !slices.Equal(k, []string{"created", "died"}) || len(gotBeta) != 2 {
		t.Errorf("beta-only endpoint got %v (of %d events)", k, len(gotBeta))
	}
	ids := map[string]bool{}
	for _, g := range got {
		if ids[g.ID] {
			t.Errorf("event %s delivered twice to a receiver that took it", g.ID)
		}
		ids[g.ID] = true
	}
}

// TestRetriesUntilTheReceiverRecovers: a receiver that answers 500 gets
// every event again, with backoff, until it takes them, still in order.
func TestRetriesUntilTheReceiverRecovers(t *testing.T) {
	r := newReceiver(t)
	r.setMode("fail")
	d := open(t, t.TempDir(), r.endpoint("flaky"))
	for i := range 5 {
		d.Publish(ev(core.LifecycleCreated, "acme", fmt.Sprintf("s%d", i)))
	}
	waitStats(t, d, "three failed attempts", func(s core.WebhookStats) bool { return s.Failures >= 3 })
	if s := d.WebhookStats()[0]; s.Delivered != 0 || s.Queued != 5 || !strings.Contains(s.LastError, "500") {
		t.Errorf("while failing: %+v", s)
	}
	r.setMode("ok")
	got := r.waitCount(5)
	for i, g := range got {
		if want := fmt.Sprintf("s%d", i); g.Body.Data.SandboxID != want {
			t.Errorf("event %d is %s's, want %s's", i, g.Body.Data.SandboxID, want)
		}
	}
	waitStats(t, d, "the queue to empty", func(s core.WebhookStats) bool { return s.Queued == 0 && s.Delivered == 5 && s.LastError == "" })
}

// TestQueuedEventsSurviveARestart: events a receiver has not taken when
// the dispatcher closes are in the queue file, and are delivered, in
// order, by the next one on the same state directory.
func TestQueuedEventsSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	r := newReceiver(t)
	r.setMode("fail")
	d := open(t, dir, r.endpoint("later"))
	for i := range 20 {
		d.Publish(ev(core.LifecycleCreated, "acme", fmt.Sprintf("s%02d", i)))
	}
	r.waitFor("a failed attempt", func(_ []received, attempts int) bool { return attempts >= 1 })
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	r.setMode("ok")
	open(t, dir, r.endpoint("later"))
	got := r.waitCount(20)
	for i, g := range got {
		if want := fmt.Sprintf("s%02d", i); g.Body.Data.SandboxID != want {
			t.Fatalf("event %d is %s's, want %s's", i, g.Body.Data.SandboxID, want)
		}
	}
}

// TestHungReceiverDelaysNoPublish: while a receiver holds a request
// forever, Publish still returns for every event (it waits on the local
// queue only), and another endpoint still gets every event.
func TestHungReceiverDelaysNoPublish(t *testing.T) {
	hung, fine := newReceiver(t), newReceiver(t)
	hung.setMode("hang")
	d := open(t, t.TempDir(), hung.endpoint("hung"), fine.endpoint("fine"))
	d.Publish(ev(core.LifecycleCreated, "acme", "first"))
	select {
	case <-hung.holding:
	case <-time.After(20 * time.Second):
		t.Fatal("the hung receiver got no request")
	}
	var took []time.Duration
	for i := range 100 {
		start := time.Now()
		d.Publish(ev(core.LifecycleKilled, "acme", fmt.Sprintf("s%d", i)))
		took = append(took, time.Since(start))
	}
	fine.waitCount(101)
	select {
	case <-hung.release:
		t.Fatal("the hung request was released during the test")
	default:
	}
	slices.Sort(took)
	t.Logf("Publish with one endpoint hung: p50 %v, max %v (100 events)", took[50], took[99])
	if s := d.WebhookStats()[0]; s.Queued != 101 || s.Delivered != 0 {
		t.Errorf("hung endpoint: %+v", s)
	}
}

// TestQueueBoundDropsTheOldest: past max_queue, the oldest events are
// dropped and counted; the newest are delivered.
func TestQueueBoundDropsTheOldest(t *testing.T) {
	r := newReceiver(t)
	r.setMode("fail")
	ep := r.endpoint("small")
	ep.MaxQueue = 5
	d := open(t, t.TempDir(), ep)
	for i := range 12 {
		d.Publish(ev(core.LifecycleCreated, "acme", fmt.Sprintf("s%02d", i)))
	}
	if s := d.WebhookStats()[0]; s.Queued != 5 || s.DroppedFull != 7 {
		t.Errorf("after 12 events into a queue of 5: %+v", s)
	}
	r.setMode("ok")
	got := r.waitCount(5)
	var sbs []string
	for _, g := range got {
		sbs = append(sbs, g.Body.Data.SandboxID)
	}
	if !slices.Equal(sbs, []string{"s07", "s08", "s09", "s10", "s11"}) {
		t.Errorf("delivered %v, want the newest five", sbs)
	}
}

// TestTooOldIsDropped: an event older than MaxAge is dropped, counted,
// and never sent.
func TestTooOldIsDropped(t *testing.T) {
	r := newReceiver(t)
	d, err := Open(Config{StateDir: t.TempDir(), Endpoints: []Endpoint{r.endpoint("slow")}, MaxAge: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.Publish(ev(core.LifecycleCreated, "acme", "old"))
	waitStats(t, d, "the event to be dropped", func(s core.WebhookStats) bool { return s.DroppedExpired == 1 && s.Queued == 0 })
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.attempts != 0 {
		t.Errorf("a too old event was sent %d times", r.attempts)
	}
}

// TestSameIDQueuedOnce: a change reported twice with one ID (a command's
// end read by two followers) is one event.
func TestSameIDQueuedOnce(t *testing.T) {
	r := newReceiver(t)
	ep := r.endpoint("cmds")
	ep.Events = []core.LifecycleKind{core.LifecycleCommandFinished, core.LifecycleKilled}
	d := open(t, t.TempDir(), ep)
	e := core.LifecycleEvent{Kind: core.LifecycleCommandFinished, ID: "cmd_s_c", Tenant: "acme", SandboxID: "s", Command: &core.CommandEnd{CommandID: "c", Status: "ok"}}
	d.Publish(e)
	d.Publish(e)
	d.Publish(ev(core.LifecycleKilled, "acme", "s"))
	got := r.waitCount(2)
	if len(got) != 2 || got[0].ID != "cmd_s_c" || got[1].Body.Type != core.LifecycleKilled {
		t.Errorf("got %+v", got)
	}
}

// TestRemovedEndpointsQueueIsDropped: an endpoint taken out of the file
// loses its queue at the next start; the others keep theirs.
func TestRemovedEndpointsQueueIsDropped(t *testing.T) {
	dir := t.TempDir()
	a, b := newReceiver(t), newReceiver(t)
	a.setMode("fail")
	b.setMode("fail")
	d := open(t, dir, a.endpoint("a"), b.endpoint("b"))
	d.Publish(ev(core.LifecycleCreated, "acme", "s"))
	d.Close()
	a.setMode("ok")
	b.setMode("ok")
	d = open(t, dir, b.endpoint("b"))
	b.waitCount(1)
	if s := d.WebhookStats(); len(s) != 1 || s[0].Endpoint != "b" {
		t.Errorf("stats %+v", s)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.got) != 0 {
		t.Errorf("a removed endpoint got %d events", len(a.got))
	}
}

// TestRedirectIsAFailure: the operator's URL is the only one sent to.
func TestRedirectIsAFailure(t *testing.T) {
	r := newReceiver(t)
	redirect := httptest.NewServer(http.RedirectHandler(r.srv.URL+"/hook", http.StatusTemporaryRedirect))
	defer redirect.Close()
	ep := r.endpoint("moved")
	ep.URL = redirect.URL
	d := open(t, t.TempDir(), ep)
	d.Publish(ev(core.LifecycleCreated, "acme", "s"))
	waitStats(t, d, "a failure", func(s core.WebhookStats) bool { return s.Failures >= 1 && strings.Contains(s.LastError, "307") })
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.attempts != 0 {
		t.Errorf("the redirect was followed")
	}
}

func TestSecondDispatcherOnOneStateDirFails(t *testing.T) {
	dir := t.TempDir()
	r := newReceiver(t)
	open(t, dir, r.endpoint("a"))
	if _, err := Open(Config{StateDir: dir, Endpoints: []Endpoint{r.endpoint("a")}}); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Errorf("second Open = %v, want locked", err)
	}
}

func TestLoadFile(t *testing.T) {
	secret := newSecret(t)
	good := `{"endpoints":[{"name":"billing","url":"https://hooks.example.test/x","secret":"` + secret + `","tenants":["acme"],"events":["created","command.finished"]}]}`
	write := func(s string) string {
		p := filepath.Join(t.TempDir(), "webhooks.json")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	eps, err := LoadFile(write(good))
	if err != nil || len(eps) != 1 || eps[0].MaxQueue != DefaultMaxQueue || !eps[0].wants(core.LifecycleCommandFinished, "acme") ||
		eps[0].wants(core.LifecycleCreated, "beta") || eps[0].wants(core.LifecycleKilled, "acme") {
		t.Fatalf("LoadFile(good) = %+v, %v", eps, err)
	}
	dflt := Endpoint{Name: "x"}
	if !dflt.wants(core.LifecycleDied, "any") || dflt.wants(core.LifecycleCommandFinished, "any") {
		t.Errorf("default events: command.finished must be opt-in, the rest sent")
	}
	ep := func(fields string) string {
		return `{"endpoints":[{` + fields + `}]}`
	}
	base := `"name":"a","url":"http://127.0.0.1:1/","secret":"` + secret + `"`
	for name, tc := range map[string]struct{ file, want string }{
		"unknown field":  {ep(base + `,"tenant":["acme"]`), "unknown field"},
		"bad name":       {ep(`"name":"a b","url":"http://127.0.0.1:1/","secret":"` + secret + `"`), "name"},
		"not http":       {ep(`"name":"a","url":"ftp://x/","secret":"` + secret + `"`), "url"},
		"relative":       {ep(`"name":"a","url":"/hook","secret":"` + secret + `"`), "url"},
		"credentials":    {ep(`"name":"a","url":"http://u:p@127.0.0.1:1/","secret":"` + secret + `"`), "credentials"},
		"no prefix":      {ep(`"name":"a","url":"http://127.0.0.1:1/","secret":"abc"`), "whsec_"},
		"short secret":   {ep(`"name":"a","url":"http://127.0.0.1:1/","secret":"whsec_YWJj"`), "24 to 64"},
		"unknown event":  {ep(base + `,"events":["exploded"]`), "unknown event"},
		"bad tenant":     {ep(base + `,"tenants":["Not A Tenant!"]`), "tenants"},
		"negative queue": {ep(base + `,"max_queue":-1`), "max_queue"},
		"twice":          {`{"endpoints":[{` + base + `},{` + base + `}]}`, "twice"},
		"two values":     {good + good, "more than one"},
		"not json":       {"endpoints: []", "invalid"},
	} {
		if _, err := LoadFile(write(tc.file)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: LoadFile = %v, want an error saying %q", name, err, tc.want)
		}
	}
}

func waitStats(t *testing.T, d *Dispatcher, what string, cond func(core.WebhookStats) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond(d.WebhookStats()[0]) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s: %+v", what, d.WebhookStats()[0])
		}
		time.Sleep(5 * time.Millisecond) // polling a counter, bounded by the deadline
	}
}

// TestSignatureVector: the signature of a fixed request, as
// docs/observability.md's scheme and the Python client's verify (clients/python, the same vector
// in tests/test_unit_webhooks.py) compute it.
func TestSignatureVector(t *testing.T) {
	wh, err := standardwebhooks.NewWebhook("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	sig, err := wh.Sign("evt_1", time.Unix(1795720480, 0), []byte(`{"type":"killed"}`))
	if want := "v1,Ud47HdT45AgVxT6IWH+9sI6hjnJL9FrY6eMygOKQQyw="; err != nil || sig != want {
		t.Errorf("signature = %q, %v; want %q", sig, err, want)
	}
}
