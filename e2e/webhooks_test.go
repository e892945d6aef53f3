package e2e

// Lifecycle webhooks end to end: the real sandboxd (--webhooks FILE) posts
// its sandboxes' events to receivers the tests run on 127.0.0.1, which
// verify every request's Standard Webhooks signature and record what
// arrives, in order.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// TestE2EWebhooks runs sandboxd with tokens of two tenants and two
// endpoints: "all" (every tenant, every event, command.finished included)
// and "beta-only" (tenant beta, the default events). Every request
// verifies under its endpoint's secret; each sandbox's events arrive in
// the order they happened (created, command.finished, hibernated, woken
// by WakeSandbox, hibernated, woken by Execute, command.finished, killed
// "deleted on request"; created, expired for a short idle timeout;
// created, died for a container removed behind sandboxd's back), each
// event ID exactly once, with the sandbox's tenant, user and the metadata
// given at acquire; "beta-only" sees beta's created and killed and nothing
// else, not even beta's command.finished.
func TestE2EWebhooks(t *testing.T) {
	env := needE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(e2eAcme+" acme user\n"+e2eBeta+" beta user\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	all, betaOnly := newHookReceiver(t, "all"), newHookReceiver(t, "beta-only")
	hooks := writeHooksFile(t, all.endpoint(nil, hookAllEvents), betaOnly.endpoint([]string{"beta"}, nil))
	d := env.start(t, "--auth-tokens", tokens, "--webhooks", hooks)
	c, _ := d.client(t)
	acme, beta := bearer(ctx, e2eAcme), bearer(ctx, e2eBeta)

	// erin's sandbox goes when idle for 3s; acquired first, it expires
	// while alice's calls run.
	er, err := c.AcquireSandbox(acme, &sandboxv1.AcquireSandboxRequest{UserId: "erin", Options: &sandboxv1.SandboxOptions{
		IdleTimeout: durationpb.New(3 * time.Second), OnIdle: sandboxv1.IdleAction_IDLE_ACTION_DELETE}})
	if err != nil {
		t.Fatalf("AcquireSandbox(erin, idle 3s, delete): %v", err)
	}
	erin := er.GetSandbox().GetSandboxId()

	// alice's sandbox goes through every change a caller makes.
	aliceMD := map[string]string{"project": "hooks", "session": "s-7"}
	al, err := c.AcquireSandbox(acme, &sandboxv1.AcquireSandboxRequest{UserId: "alice", Options: &sandboxv1.SandboxOptions{Metadata: aliceMD}})
	if err != nil || !al.GetCreated() {
		t.Fatalf("AcquireSandbox(alice) = %v, %v; want a new sandbox", al, err)
	}
	alice := al.GetSandbox().GetSandboxId()
	mustOK(t, execute(t, acme, c, &sandboxv1.ExecuteRequest{SandboxId: alice, CommandId: "hook-cmd-1", Language: "bash", Code: "echo one"}), "alice's first command")
	if _, err := c.HibernateSandbox(acme, &sandboxv1.HibernateSandboxRequest{SandboxId: alice}); err != nil {
		t.Fatalf("HibernateSandbox(alice): %v", err)
	}
	if _, err := c.WakeSandbox(acme, &sandboxv1.WakeSandboxRequest{SandboxId: alice}); err != nil {
		t.Fatalf("WakeSandbox(alice): %v", err)
	}
	if _, err := c.HibernateSandbox(acme, &sandboxv1.HibernateSandboxRequest{SandboxId: alice}); err != nil {
		t.Fatalf("second HibernateSandbox(alice): %v", err)
	}
	// This command wakes the sandbox.
	mustOK(t, execute(t, acme, c, &sandboxv1.ExecuteRequest{SandboxId: alice, CommandId: "hook-cmd-2", Language: "bash", Code: "echo two"}), "alice's command on the hibernated sandbox")
	if _, err := c.DeleteSandbox(acme, &sandboxv1.DeleteSandboxRequest{SandboxId: alice}); err != nil {
		t.Fatalf("DeleteSandbox(alice): %v", err)
	}

	expired := all.waitDelivered(t, erin, "expired", 90*time.Second)
	t.Logf("erin's sandbox expired: %q", expired.reason)

	// carol's container is removed behind sandboxd's back; GetSandbox
	// notices.
	carol := acquire(t, acme, c, "carol").GetSandbox().GetSandboxId()
	ctr := runningContainer(t, ctx, carol)
	if out, err := exec.CommandContext(ctx, "docker", "rm", "-f", ctr.id).CombinedOutput(); err != nil {
		t.Fatalf("docker rm -f %s: %v: %s", ctr.id, err, out)
	}
	if g, err := c.GetSandbox(acme, &sandboxv1.GetSandboxRequest{SandboxId: carol}); err != nil || g.GetSandbox().GetState() != sandboxv1.SandboxState_SANDBOX_STATE_DEAD {
		t.Fatalf("GetSandbox(carol) after its container was removed: %v, %v; want DEAD", g, err)
	}
	died := all.waitDelivered(t, carol, "died", time.Minute)
	t.Logf("carol's sandbox died: %q", died.reason)

	// beta's, last: each endpoint delivers in order, so once bob's killed
	// has arrived, everything published before it has too.
	bob := acquire(t, beta, c, "bob").GetSandbox().GetSandboxId()
	mustOK(t, execute(t, beta, c, &sandboxv1.ExecuteRequest{SandboxId: bob, CommandId: "hook-cmd-b", Language: "bash", Code: "echo bob"}), "bob's command")
	if _, err := c.DeleteSandbox(beta, &sandboxv1.DeleteSandboxRequest{SandboxId: bob}); err != nil {
		t.Fatalf("DeleteSandbox(bob): %v", err)
	}
	betaOnly.waitDelivered(t, bob, "killed", 30*time.Second)
	all.waitDelivered(t, bob, "killed", 30*time.Second)

	allEvs, _ := all.delivered()
	betaEvs, _ := betaOnly.delivered()
	checkSequences(t, "all", allEvs, map[string][]string{
		alice: {"created", "command.finished", "hibernated", "woken", "hibernated", "woken", "command.finished", "killed"},
		erin:  {"created", "expired"},
		carol: {"created", "died"},
		bob:   {"created", "command.finished", "killed"},
	})
	checkSequences(t, "beta-only", betaEvs, map[string][]string{bob: {"created", "killed"}})

	// Every receiver answered 200 at once: no event needed a second try.
	for _, r := range []*hookReceiver{all, betaOnly} {
		count := map[string]int{}
		for _, ev := range r.events() {
			if count[ev.id]++; count[ev.id] == 2 {
				t.Errorf("endpoint %s got event %s (%s of %s) more than once, though it took it at once", r.name, ev.id, ev.typ, ev.sandboxID)
			}
		}
	}

	type owner struct {
		tenant, user string
		metadata     map[string]string
		commands     []string
	}
	owners := map[string]owner{
		alice: {"acme", "alice", aliceMD, []string{"hook-cmd-1", "hook-cmd-2"}},
		erin:  {"acme", "erin", nil, nil},
		carol: {"acme", "carol", nil, nil},
		bob:   {"beta", "bob", nil, []string{"hook-cmd-b"}},
	}
	for name, evs := range map[string][]hookEvent{"all": allEvs, "beta-only": betaEvs} {
		commands := map[string][]string{}
		for _, ev := range evs {
			o, ok := owners[ev.sandboxID]
			if !ok {
				continue // checkSequences reported it
			}
			what := fmt.Sprintf("endpoint %s, %s of %s (%s)", name, ev.typ, ev.sandboxID, ev.id)
			if ev.tenant != o.tenant || ev.userID != o.user || !maps.Equal(ev.metadata, o.metadata) {
				t.Errorf("%s: tenant %q, user_id %q, metadata %v; want %q, %q, %v", what, ev.tenant, ev.userID, ev.metadata, o.tenant, o.user, o.metadata)
			}
			if ev.timestamp.Before(start.Add(-time.Minute)) || ev.timestamp.After(time.Now().Add(time.Minute)) {
				t.Errorf("%s: timestamp %v is not within the test's run (from %v)", what, ev.timestamp, start)
			}
			switch ev.typ {
			case "killed":
				if ev.reason != "deleted on request" {
					t.Errorf("%s: reason %q; want %q", what, ev.reason, "deleted on request")
				}
			case "died":
				if ev.reason == "" {
					t.Errorf("%s: no reason", what)
				}
			case "command.finished":
				cmd := ev.command
				if cmd == nil || cmd.Status != "ok" || cmd.ExitCode == nil || *cmd.ExitCode != 0 {
					t.Errorf("%s: command %s; want status ok, exit_code 0", what, ev.body)
					continue
				}
				commands[ev.sandboxID] = append(commands[ev.sandboxID], cmd.CommandID)
			}
		}
		for sb, o := range owners {
			if want := o.commands; name == "all" && !slices.Equal(commands[sb], want) {
				t.Errorf("endpoint all: command.finished of %s for commands %v; want %v", sb, commands[sb], want)
			}
		}
	}
}

// TestE2EWebhooksSurviveKill: while the receiver fails (500), sandboxd
// keeps trying the oldest event, and queues the rest behind it; a SIGKILL
// of sandboxd loses none of them: restarted on the same state directory,
// it delivers every event the calls before the kill made, those it had
// already tried included, each sandbox's in order (after dropping
// repeated IDs, which at-least-once delivery allows).
func TestE2EWebhooksSurviveKill(t *testing.T) {
	env := needE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	hook := newHookReceiver(t, "ops")
	hook.setMode(hookFail)
	flags := []string{"--webhooks", writeHooksFile(t, hook.endpoint(nil, nil))}
	d := env.start(t, flags...)
	c, _ := d.client(t)

	var ids []string
	for _, user := range []string{"kill-a", "kill-b", "kill-c"} {
		ids = append(ids, acquire(t, ctx, c, user).GetSandbox().GetSandboxId())
	}
	if _, err := c.HibernateSandbox(ctx, &sandboxv1.HibernateSandboxRequest{SandboxId: ids[1]}); err != nil {
		t.Fatalf("HibernateSandbox: %v", err)
	}
	for _, id := range ids {
		if _, err := c.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: id}); err != nil {
			t.Fatalf("DeleteSandbox(%s): %v", id, err)
		}
	}
	want := map[string][]string{
		ids[0]: {"created", "killed"},
		ids[1]: {"created", "hibernated", "killed"},
		ids[2]: {"created", "killed"},
	}

	// Refused, the first event is tried again before any other.
	hook.waitFor(t, "second attempt at the refused event", 30*time.Second, func() bool { return len(hook.events()) >= 2 })
	if evs := hook.events(); evs[1].id != evs[0].id {
		t.Errorf("after event %s (%s) was refused, sandboxd sent %s (%s) before trying it again", evs[0].id, evs[0].typ, evs[1].id, evs[1].typ)
	} else {
		t.Logf("first retry of a refused event %v after the attempt", evs[1].arrived.Sub(evs[0].arrived).Round(time.Millisecond))
	}

	d.kill9(t)
	before := hook.events()
	hook.setMode(hookOK)
	d = env.start(t, flags...)
	hook.waitFor(t, "delivery of every event queued before the kill", 2*time.Minute, func() bool {
		got, _ := hook.delivered()
		bySandbox := typesBySandbox(got)
		for sb, w := range want {
			if len(bySandbox[sb]) < len(w) {
				return false
			}
		}
		return true
	})

	got, dups := hook.delivered()
	checkSequences(t, "ops", got, want)
	delivered := map[string]bool{}
	for _, ev := range got {
		delivered[ev.id] = true
	}
	for _, ev := range before {
		if !delivered[ev.id] {
			t.Errorf("event %s (%s of %s), tried before the kill, was not delivered after the restart", ev.id, ev.typ, ev.sandboxID)
		}
	}
	t.Logf("%d attempts refused before the kill; after the restart %d events delivered, %d deliveries repeating an event ID",
		len(before), len(got), dups)
}

// TestE2EWebhooksHungReceiver: a receiver that never answers delays no
// call. With the receiver holding a request (the oldest queued event),
// AcquireSandbox, Execute and DeleteSandbox all return while it still
// holds it; once it answers again, the events queued meanwhile arrive.
// The calls' times with a hanging and an answering receiver are logged,
// not judged.
func TestE2EWebhooksHungReceiver(t *testing.T) {
	env := needE2E(t)
	ctx := e2eCtx(t)
	hook := newHookReceiver(t, "hanging")
	// One attempt outlasts the calls below, so that the request held
	// before them is still the same one, held, when they return.
	flags := []string{"--webhooks", writeHooksFile(t, hook.endpoint(nil, hookAllEvents)), "--webhook-timeout", "10m"}
	d := env.start(t, flags...)
	c, _ := d.client(t)

	// pinned's command, later, makes the event the receiver holds.
	pinned := acquire(t, ctx, c, "hung-pinned").GetSandbox().GetSandboxId()
	okID, okTimes, err := hookRound(ctx, c, "round-ok")
	if err != nil {
		t.Fatalf("with the receiver answering: %v", err)
	}
	hook.waitDelivered(t, okID, "killed", 30*time.Second)

	hook.setMode(hookHang)
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: pinned, CommandId: "hold-me", Language: "bash", Code: "true"}), "pinned's command")
	var held int
	hook.waitFor(t, "request held", 30*time.Second, func() bool {
		i, ok := hook.heldNow()
		held = i
		return ok
	})
	heldEv := hook.events()[held]

	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	hungID, hungTimes, err := hookRound(rctx, c, "round-hung")
	cancel()
	if err != nil {
		t.Fatalf("with the receiver holding %s (%s of %s): %v", heldEv.id, heldEv.typ, heldEv.sandboxID, err)
	}
	stillHeld := hook.isHeld(held)
	t.Logf("receiver answering 200: %v", okTimes)
	t.Logf("receiver hanging:       %v", hungTimes)
	if !stillHeld {
		t.Fatalf("the request held since before the calls (%s, %s) was no longer held when they returned (sandboxd gave up the attempt?): they did not run against a hanging receiver", heldEv.id, heldEv.typ)
	}
	t.Logf("the calls returned while the receiver had held %s for %v", heldEv.typ, time.Since(heldEv.arrived).Round(time.Millisecond))

	hook.setMode(hookOK)
	hook.waitDelivered(t, hungID, "killed", time.Minute)
	got, dups := hook.delivered()
	round := []string{"created", "command.finished", "killed"}
	checkSequences(t, "hanging", got, map[string][]string{pinned: {"created", "command.finished"}, okID: round, hungID: round})
	t.Logf("%d events delivered, %d deliveries repeating an event ID", len(got), dups)
}

// --- the receiver -------------------------------------------------------

// hookAllEvents is every event type; command.finished is sent only to the
// endpoints that name it.
var hookAllEvents = []string{"created", "hibernated", "woken", "killed", "expired", "died", "command.finished"}

// hookMode is how a hookReceiver answers.
type hookMode int

const (
	hookOK   hookMode = iota // 200: delivered
	hookFail                 // 500: to be tried again
	hookHang                 // no answer until the mode changes or the test ends
)

// hookEvent is one request a hookReceiver got, its signature verified.
type hookEvent struct {
	arrived                           time.Time
	id                                string // webhook-id, equal to data.event_id
	typ                               string
	timestamp                         time.Time
	tenant, sandboxID, userID, reason string
	metadata                          map[string]string
	command                           *hookCommand
	body                              []byte
	// answer is the status the receiver answered: 0 while it holds the
	// request, or when sandboxd gave up waiting for it.
	answer int
}

type hookCommand struct {
	CommandID string `json:"command_id"`
	Status    string `json:"status"`
	ExitCode  *int   `json:"exit_code"`
}

// hookBody is a request's body.
type hookBody struct {
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"`
	Data      struct {
		EventID   string            `json:"event_id"`
		Tenant    string            `json:"tenant"`
		SandboxID string            `json:"sandbox_id"`
		UserID    string            `json:"user_id"`
		Metadata  map[string]string `json:"metadata"`
		Reason    string            `json:"reason"`
		Command   *hookCommand      `json:"command"`
	} `json:"data"`
}

// hookEndpoint is one entry of sandboxd's --webhooks file.
type hookEndpoint struct {
	Name    string   `json:"name"`
	URL     string   `json:"url"`
	Secret  string   `json:"secret"`
	Tenants []string `json:"tenants,omitempty"`
	Events  []string `json:"events,omitempty"`
}

// hookReceiver is one endpoint: an HTTP server on 127.0.0.1 with a secret
// of its own, which verifies every request's signature and records the
// events in arrival order. A request that does not verify or is not a
// well-formed event fails the test (at its end at the latest).
type hookReceiver struct {
	name, secret, url string
	wh                *standardwebhooks.Webhook

	mu       sync.Mutex
	mode     hookMode
	release  chan struct{} // closed to let the held requests go
	got      []hookEvent
	holding  map[int]bool // indexes in got of the requests held now
	problems []string
}

func newHookReceiver(t *testing.T, name string) *hookReceiver {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	r := &hookReceiver{name: name, secret: "whsec_" + base64.StdEncoding.EncodeToString(key), release: make(chan struct{}), holding: map[int]bool{}}
	wh, err := standardwebhooks.NewWebhook(r.secret)
	if err != nil {
		t.Fatal(err)
	}
	r.wh = wh
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	r.url = srv.URL + "/hook"
	// Registered before sandboxd starts, this runs after it is killed.
	t.Cleanup(func() {
		r.mu.Lock()
		r.letGoLocked()
		r.mu.Unlock()
		srv.Close()
		for _, p := range r.problemList() {
			t.Errorf("endpoint %s: %s", name, p)
		}
	})
	return r
}

// endpoint is r's entry in the --webhooks file.
func (r *hookReceiver) endpoint(tenants, events []string) hookEndpoint {
	return hookEndpoint{Name: r.name, URL: r.url, Secret: r.secret, Tenants: tenants, Events: events}
}

func writeHooksFile(t *testing.T, eps ...hookEndpoint) string {
	t.Helper()
	b, err := json.Marshal(map[string][]hookEndpoint{"endpoints": eps})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "webhooks.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (r *hookReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	ev, problem := r.parse(req, body, err)
	if problem != "" {
		r.mu.Lock()
		r.problems = append(r.problems, problem)
		r.mu.Unlock()
		http.Error(w, problem, http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	i := len(r.got)
	r.got = append(r.got, ev)
	mode, release := r.mode, r.release
	if mode == hookHang {
		r.holding[i] = true
	}
	r.mu.Unlock()
	if mode == hookHang {
		select {
		case <-release:
		case <-req.Context().Done():
		}
		r.mu.Lock()
		delete(r.holding, i)
		mode = r.mode
		r.mu.Unlock()
		if req.Context().Err() != nil {
			return // sandboxd gave up waiting
		}
	}
	code := map[hookMode]int{hookOK: http.StatusOK, hookFail: http.StatusInternalServerError, hookHang: http.StatusServiceUnavailable}[mode]
	r.mu.Lock()
	r.got[i].answer = code
	r.mu.Unlock()
	w.WriteHeader(code)
}

// parse checks a request as a receiver must (method, path, signature,
// content type, body) and returns its event, or else what is wrong.
func (r *hookReceiver) parse(req *http.Request, body []byte, readErr error) (hookEvent, string) {
	id := req.Header.Get("webhook-id")
	bad := func(format string, args ...any) (hookEvent, string) {
		return hookEvent{}, fmt.Sprintf("request with webhook-id %q: ", id) + fmt.Sprintf(format, args...)
	}
	if readErr != nil {
		return bad("reading the body: %v", readErr)
	}
	if req.Method != http.MethodPost || req.URL.Path != "/hook" {
		return bad("%s %s; want POST /hook", req.Method, req.URL.Path)
	}
	if err := r.wh.Verify(body, req.Header); err != nil {
		return bad("the signature does not verify: %v", err)
	}
	if mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return bad("Content-Type %q; want application/json", req.Header.Get("Content-Type"))
	}
	var b hookBody
	if err := json.Unmarshal(body, &b); err != nil {
		return bad("the body is not an event: %v: %s", err, body)
	}
	ts, err := time.Parse(time.RFC3339Nano, b.Timestamp)
	if err != nil {
		return bad("timestamp %q: %v", b.Timestamp, err)
	}
	if b.Data.EventID != id {
		return bad("data.event_id %q differs from the webhook-id header", b.Data.EventID)
	}
	if b.Type == "" || b.Data.SandboxID == "" {
		return bad("no type or no sandbox_id: %s", body)
	}
	return hookEvent{
		arrived: time.Now(), id: id, typ: b.Type, timestamp: ts,
		tenant: b.Data.Tenant, sandboxID: b.Data.SandboxID, userID: b.Data.UserID, reason: b.Data.Reason,
		metadata: b.Data.Metadata, command: b.Data.Command, body: body,
	}, ""
}

// setMode sets how r answers from now on; leaving hookHang lets the held
// requests go, answered as m says.
func (r *hookReceiver) setMode(m hookMode) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mode == hookHang && m != hookHang {
		r.letGoLocked()
	}
	r.mode = m
}

// letGoLocked lets the held requests go; r.mu is held.
func (r *hookReceiver) letGoLocked() {
	close(r.release)
	r.release = make(chan struct{})
}

// events is every request that verified, in arrival order, whatever it
// was answered.
func (r *hookReceiver) events() []hookEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func (r *hookReceiver) problemList() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.problems)
}

// delivered is the events r answered 2xx, each ID once (its first
// delivery), in arrival order, and how many deliveries repeated an ID.
func (r *hookReceiver) delivered() (evs []hookEvent, dups int) {
	seen := map[string]bool{}
	for _, ev := range r.events() {
		switch {
		case ev.answer < 200 || ev.answer > 299:
		case seen[ev.id]:
			dups++
		default:
			seen[ev.id] = true
			evs = append(evs, ev)
		}
	}
	return evs, dups
}

// heldNow is the index (in events) of the longest-held request r holds
// now.
func (r *hookReceiver) heldNow() (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.holding) == 0 {
		return 0, false
	}
	return slices.Min(slices.Collect(maps.Keys(r.holding))), true
}

func (r *hookReceiver) isHeld(i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.holding[i]
}

// waitFor waits, up to timeout, until cond holds, and fails the test with
// what r got otherwise.
func (r *hookReceiver) waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	if !pollUntil(timeout, cond) {
		t.Fatalf("endpoint %s: no %s within %v; it got:\n%s", r.name, what, timeout, r.describe())
	}
}

// waitDelivered waits until r has taken (2xx) the event typ of sandbox
// sbID, and returns it.
func (r *hookReceiver) waitDelivered(t *testing.T, sbID, typ string, timeout time.Duration) hookEvent {
	t.Helper()
	var found hookEvent
	r.waitFor(t, typ+" of "+sbID, timeout, func() bool {
		evs, _ := r.delivered()
		i := slices.IndexFunc(evs, func(ev hookEvent) bool { return ev.sandboxID == sbID && ev.typ == typ })
		if i >= 0 {
			found = evs[i]
		}
		return i >= 0
	})
	return found
}

// describe lists what r got, one request a line.
func (r *hookReceiver) describe() string {
	var b strings.Builder
	for i, ev := range r.events() {
		fmt.Fprintf(&b, "  %d. %s %s sandbox %s answered %d\n", i, ev.id, ev.typ, ev.sandboxID, ev.answer)
	}
	for _, p := range r.problemList() {
		fmt.Fprintf(&b, "  refused: %s\n", p)
	}
	if b.Len() == 0 {
		return "  nothing"
	}
	return b.String()
}

// typesBySandbox is the events' types by sandbox, in order.
func typesBySandbox(evs []hookEvent) map[string][]string {
	m := map[string][]string{}
	for _, ev := range evs {
		m[ev.sandboxID] = append(m[ev.sandboxID], ev.typ)
	}
	return m
}

// checkSequences fails unless endpoint name got, of each sandbox in want,
// exactly its types in that order, and nothing of any other sandbox.
func checkSequences(t *testing.T, name string, evs []hookEvent, want map[string][]string) {
	t.Helper()
	got := typesBySandbox(evs)
	for sb, w := range want {
		if !slices.Equal(got[sb], w) {
			t.Errorf("endpoint %s, sandbox %s: events %v; want %v, in that order", name, sb, got[sb], w)
		}
	}
	for sb, g := range got {
		if _, ok := want[sb]; !ok {
			t.Errorf("endpoint %s got events %v of sandbox %s, which it should not", name, g, sb)
		}
	}
}

// roundTimes is how long each call of a hookRound took.
type roundTimes struct{ acquire, execute, delete time.Duration }

func (r roundTimes) String() string {
	return fmt.Sprintf("AcquireSandbox %v, Execute %v, DeleteSandbox %v",
		r.acquire.Round(time.Millisecond), r.execute.Round(time.Millisecond), r.delete.Round(time.Millisecond))
}

// hookRound acquires a new sandbox for user, runs a command in it and
// deletes it, timing each call; it returns the sandbox's ID.
func hookRound(ctx context.Context, c sandboxv1.SandboxServiceClient, user string) (string, roundTimes, error) {
	var rt roundTimes
	t0 := time.Now()
	acq, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: user})
	if err != nil {
		return "", rt, fmt.Errorf("AcquireSandbox(%s): %w", user, err)
	}
	rt.acquire = time.Since(t0)
	id := acq.GetSandbox().GetSandboxId()
	t0 = time.Now()
	o, err := tryExecute(ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Language: "bash", Code: "echo round"})
	if err != nil {
		return id, rt, fmt.Errorf("Execute in %s: %w", id, err)
	}
	if o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
		return id, rt, fmt.Errorf("Execute in %s: done %v", id, o.done)
	}
	rt.execute = time.Since(t0)
	t0 = time.Now()
	if _, err := c.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: id}); err != nil {
		return id, rt, fmt.Errorf("DeleteSandbox(%s): %w", id, err)
	}
	rt.delete = time.Since(t0)
	return id, rt, nil
}
