package docker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// portsFront is a ports front for tests, with the Host form under
// sandboxes.test.
func portsFront(t *testing.T) *core.PortsFront {
	t.Helper()
	f, err := core.NewPortsFront("https://front.test:8443", "sandboxes.test", []byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestGetHostAndPortTarget (fake engine): GetHost answers the front's URL
// and the sandbox's token (none when its policy allows public traffic);
// PortTarget gives the front the sandbox's address, its tenant, state and
// whether it is public, counts only an authorised request as a use, and
// reports hibernated and dead sandboxes instead of failing for them.
func TestGetHostAndPortTarget(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := netConfig(t)
	cfg.Ports = portsFront(t)
	m := newTestManager(t, cfg, fd)
	ctx := as(t, "acme", false)
	private, err := m.Acquire(ctx, "priv", core.Options{Network: true})
	if err != nil {
		t.Fatal(err)
	}
	public, err := m.Acquire(ctx, "pub", core.Options{NetworkPolicy: &core.NetworkPolicy{AllowPublicTraffic: true}})
	if err != nil {
		t.Fatal(err)
	}
	id := private.Sandbox.ID

	h, err := m.GetHost(ctx, id, 8080)
	if err != nil {
		t.Fatal(err)
	}
	want := core.HostInfo{URL: "https://8080-" + id + ".sandboxes.test:8443/", TokenRequired: true,
		Token: cfg.Ports.Token(id), TokenHeader: core.TrafficTokenHeader}
	if h != want {
		t.Errorf("GetHost = %+v; want %+v", h, want)
	}
	if h, err := m.GetHost(ctx, public.Sandbox.ID, 3000); err != nil || h.TokenRequired || h.Token != "" {
		t.Errorf("GetHost of a public sandbox = %+v, %v; want no token", h, err)
	}
	if _, err := m.GetHost(as(t, "other", false), id, 8080); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("another tenant's GetHost: %v; want NOT_FOUND", err)
	}

	// The front asks as an admin (the token is the authorisation).
	admin := as(t, "ports", true)
	sb := m.reg.get(id)
	s := m.addrOf(t, id)
	tg, err := m.PortTarget(admin, id, 8080, true)
	if err != nil || tg.Tenant != "acme" || tg.State != core.StateRunning || tg.Public || tg.Addr.Addr() != s || tg.Addr.Port() != 8080 {
		t.Fatalf("PortTarget = %+v, %v; want acme's running private sandbox at %s:8080", tg, err, s)
	}
	if tg, err := m.PortTarget(admin, public.Sandbox.ID, 3000, false); err != nil || !tg.Public {
		t.Errorf("PortTarget of the public sandbox = %+v, %v", tg, err)
	}

	// Uses: an unauthorised request changes nothing; an authorised one
	// restarts the idle TTL (at most once a second).
	lastActive := func() time.Time {
		sb.mu.Lock()
		defer sb.mu.Unlock()
		return sb.lastActive
	}
	sb.mu.Lock()
	old := time.Now().Add(-time.Hour)
	sb.lastActive = old
	sb.mu.Unlock()
	if _, err := m.PortTarget(admin, id, 8080, false); err != nil || !lastActive().Equal(old) {
		t.Errorf("a request without the token counted as a use (%v)", err)
	}
	if _, err := m.PortTarget(admin, id, 8080, true); err != nil || lastActive().Before(time.Now().Add(-time.Minute)) {
		t.Errorf("a request with the token did not count as a use (%v)", err)
	}

	// Hibernated (or on its way): reported, not woken, not failed.
	sb.mu.Lock()
	sb.hib.Phase = "hibernating"
	sb.mu.Unlock()
	if tg, err := m.PortTarget(admin, id, 8080, true); err != nil || tg.State != core.StateHibernated || tg.Addr.IsValid() {
		t.Errorf("PortTarget while hibernating = %+v, %v; want hibernated, no address", tg, err)
	}
	sb.mu.Lock()
	sb.hib.Phase = ""
	sb.mu.Unlock()

	fd.exit(private.Sandbox.ContainerID, 1, false)
	awaitDead(t, m, id)
	tg, err = m.PortTarget(admin, id, 8080, true)
	if err != nil || tg.State != core.StateDead || tg.StateReason == "" || tg.Addr.IsValid() {
		t.Errorf("PortTarget of a dead sandbox = %+v, %v; want dead with a reason", tg, err)
	}
	if _, err := m.GetHost(ctx, id, 8080); !errors.Is(err, core.ErrFailedPrecondition) || !strings.Contains(err.Error(), "dead") {
		t.Errorf("GetHost of a dead sandbox: %v", err)
	}
	if _, err := m.PortTarget(admin, "sb-aaaaaaaaaaaaaaaaaaaa", 8080, true); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("PortTarget of an unknown sandbox: %v; want NOT_FOUND", err)
	}
	if _, err := m.PortTarget(admin, id, 0, true); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("PortTarget of port 0: %v; want INVALID_ARGUMENT", err)
	}
}
