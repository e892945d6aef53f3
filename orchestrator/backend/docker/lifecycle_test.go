package docker

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// recordingSink keeps the events published to it, in order.
type recordingSink struct {
	mu     sync.Mutex
	events []core.LifecycleEvent
	added  chan struct{}
}

func newRecordingSink() *recordingSink { return &recordingSink{added: make(chan struct{}, 1000)} }

func (r *recordingSink) Publish(e core.LifecycleEvent) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	r.added <- struct{}{}
}

// of returns the kinds published for sandbox id, in order.
func (r *recordingSink) of(id string) []core.LifecycleKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []core.LifecycleKind
	for _, e := range r.events {
		if e.SandboxID == id {
			out = append(out, e.Kind)
		}
	}
	return out
}

// await waits, bounded, until sandbox id's events are want.
func (r *recordingSink) await(t *testing.T, id string, want ...core.LifecycleKind) []core.LifecycleEvent {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !slices.Equal(r.of(id), want) {
		select {
		case <-r.added:
		case <-deadline:
			t.Fatalf("events of %s = %v, want %v", id, r.of(id), want)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []core.LifecycleEvent
	for _, e := range r.events {
		if e.SandboxID == id {
			out = append(out, e)
		}
	}
	return out
}

// TestLifecycleEvents: the backend publishes each change of a sandbox's
// life once, after it happened, with the sandbox's tenant, user and
// metadata and the reason: created, died (learnt by Get), killed (Delete),
// expired (idle TTL). A sandbox that was replaced is not reported twice.
func TestLifecycleEvents(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	sink := newRecordingSink()
	cfg.Lifecycle = sink
	m := newTestManager(t, cfg, fd)

	res, err := m.Acquire(t.Context(), "alice", core.Options{Metadata: map[string]string{"team": "data"}})
	if err != nil {
		t.Fatal(err)
	}
	a := res.Sandbox
	created := sink.await(t, a.ID, core.LifecycleCreated)[0]
	if created.Tenant != a.Tenant || created.UserID != "alice" || created.Metadata["team"] != "data" || created.Time.IsZero() {
		t.Errorf("created = %+v", created)
	}
	acquire(t, m, "alice") // the same sandbox: nothing new
	if err := m.Delete(t.Context(), a.ID); err != nil {
		t.Fatal(err)
	}
	killed := sink.await(t, a.ID, core.LifecycleCreated, core.LifecycleKilled)[1]
	if killed.Reason != "deleted on request" {
		t.Errorf("killed = %+v", killed)
	}

	b := acquire(t, m, "bob").Sandbox
	fd.exit(b.ContainerID, 137, true)
	if _, err := m.Get(t.Context(), b.ID); err != nil {
		t.Fatal(err)
	}
	died := sink.await(t, b.ID, core.LifecycleCreated, core.LifecycleDied)[1]
	if !strings.Contains(died.Reason, "exited with code 137") {
		t.Errorf("died = %+v", died)
	}
	m.Get(t.Context(), b.ID) // a dead sandbox dies once
	if got := sink.of(b.ID); len(got) != 2 {
		t.Errorf("events of a dead sandbox read twice: %v", got)
	}

	c, err := m.Acquire(t.Context(), "carol", core.Options{IdleTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	expired := sink.await(t, c.Sandbox.ID, core.LifecycleCreated, core.LifecycleExpired)[1]
	if !strings.Contains(expired.Reason, fmt.Sprint("idle for ", time.Second)) {
		t.Errorf("expired = %+v", expired)
	}
}
