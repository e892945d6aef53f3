package docker

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

func TestAcquireMetadataAndList(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	md := map[string]string{"project": "alpha", "run": "1"}
	res, err := m.Acquire(t.Context(), "meta-a", core.Options{Metadata: md})
	if err != nil {
		t.Fatal(err)
	}
	md["project"] = "changed by the caller" // the sandbox keeps its own copy
	if got := res.Sandbox.Metadata; got["project"] != "alpha" || got["run"] != "1" || len(got) != 2 {
		t.Errorf("acquired sandbox metadata = %v", got)
	}
	other := acquire(t, m, "meta-b").Sandbox

	// An existing sandbox keeps its metadata: options apply at creation.
	again, err := m.Acquire(t.Context(), "meta-a", core.Options{Metadata: map[string]string{"project": "beta"}})
	if err != nil || again.Created || again.Sandbox.Metadata["project"] != "alpha" {
		t.Errorf("re-acquire = %+v, %v; want the same sandbox with project=alpha", again, err)
	}
	got, err := m.Get(t.Context(), res.Sandbox.ID)
	if err != nil || !maps.Equal(got.Metadata, map[string]string{"project": "alpha", "run": "1"}) {
		t.Errorf("Get = %v, %v", got.Metadata, err)
	}
	if len(other.Metadata) != 0 {
		t.Errorf("sandbox acquired without metadata has %v", other.Metadata)
	}

	ids := func(f core.ListFilter) []string {
		t.Helper()
		list, err := m.List(t.Context(), f)
		if err != nil {
			t.Fatalf("List(%+v): %v", f, err)
		}
		var out []string
		for _, s := range list {
			out = append(out, s.ID)
		}
		return out
	}
	if got := ids(core.ListFilter{Metadata: map[string]string{"project": "alpha"}}); len(got) != 1 || got[0] != res.Sandbox.ID {
		t.Errorf("filter project=alpha lists %v; want [%s]", got, res.Sandbox.ID)
	}
	if got := ids(core.ListFilter{Metadata: map[string]string{"project": "alpha", "run": "1"}}); len(got) != 1 {
		t.Errorf("filter with both pairs lists %v", got)
	}
	if got := ids(core.ListFilter{Metadata: map[string]string{"project": "alpha", "run": "2"}}); len(got) != 0 {
		t.Errorf("filter with a wrong value lists %v", got)
	}
	if got := ids(core.ListFilter{}); len(got) != 2 {
		t.Errorf("unfiltered List lists %v", got)
	}
	if _, err := m.List(t.Context(), core.ListFilter{Metadata: map[string]string{"bad key": "x"}}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("List with a malformed filter key: %v; want InvalidArgument", err)
	}
	if _, err := m.Acquire(t.Context(), "meta-c", core.Options{Metadata: map[string]string{"bad key": "x"}}); !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), "bad key") {
		t.Errorf("Acquire with a malformed key: %v; want InvalidArgument naming it", err)
	}
}

func TestSetTimeoutBoundsAndTenancy(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.MaxIdleTTL = 2 * time.Hour
	m := newTestManager(t, cfg, fd)
	sb, err := m.Acquire(as(t, "acme", false), "tim", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Sandbox.IdleTimeout != core.DefaultIdleTTL {
		t.Errorf("IdleTimeout of a new sandbox = %v; want the server's %v", sb.Sandbox.IdleTimeout, core.DefaultIdleTTL)
	}
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "below the minimum of 1s"},
		{-time.Minute, "below the minimum"},
		{999 * time.Millisecond, "below the minimum"},
		{2*time.Hour + time.Second, "exceeds the server's maximum of 2h0m0s"},
	} {
		if _, err := m.SetTimeout(as(t, "acme", false), sb.Sandbox.ID, c.d); !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SetTimeout(%v): %v; want InvalidArgument with %q", c.d, err, c.want)
		}
	}
	if _, err := m.SetTimeout(t.Context(), "not-an-id", time.Minute); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("SetTimeout with a malformed ID: %v", err)
	}
	if _, err := m.SetTimeout(t.Context(), core.NewSandboxID(), time.Minute); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("SetTimeout of an unknown sandbox: %v", err)
	}
	before := m.snapshot(m.reg.get(sb.Sandbox.ID))
	if _, err := m.SetTimeout(as(t, "beta", false), sb.Sandbox.ID, time.Minute); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("SetTimeout of another tenant's sandbox: %v; want NotFound", err)
	}
	if after := m.snapshot(m.reg.get(sb.Sandbox.ID)); after.IdleTimeout != before.IdleTimeout || !after.ExpiresAt.Equal(before.ExpiresAt) {
		t.Errorf("another tenant's SetTimeout changed the sandbox: %+v", after)
	}

	start := time.Now()
	got, err := m.SetTimeout(as(t, "acme", false), sb.Sandbox.ID, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got.IdleTimeout != 2*time.Hour || got.ExpiresAt.Before(start.Add(2*time.Hour)) || got.ExpiresAt.After(time.Now().Add(2*time.Hour)) {
		t.Errorf("after SetTimeout(2h): idle %v, expires %v (now %v)", got.IdleTimeout, got.ExpiresAt, start)
	}
	if item := m.reg.cache.Get(sb.Sandbox.ID); item == nil || item.ExpiresAt().Sub(got.ExpiresAt).Abs() > 5*time.Millisecond {
		t.Errorf("cache expiry disagrees with the sandbox's %v", got.ExpiresAt)
	}
	// Acquiring the sandbox again keeps its timeout (never resets it to the
	// server's default).
	again, err := m.Acquire(as(t, "acme", false), "tim", core.Options{})
	if err != nil || again.Created || again.Sandbox.IdleTimeout != 2*time.Hour || again.Sandbox.ExpiresAt.Before(start.Add(2*time.Hour)) {
		t.Errorf("re-acquire = %+v, %v; want idle timeout 2h kept", again.Sandbox, err)
	}

	// The maximum lifetime still caps the expiry.
	cfg2 := testConfig(t)
	cfg2.MaxLifetime = time.Hour
	m2 := newTestManager(t, cfg2, newFakeDocker(testImage))
	sb2 := acquire(t, m2, "capped").Sandbox
	got2, err := m2.SetTimeout(t.Context(), sb2.ID, 10*time.Hour)
	if err != nil || got2.ExpiresAt.After(sb2.CreatedAt.Add(time.Hour)) {
		t.Errorf("SetTimeout past the lifetime: expires %v, %v; want at most created+1h", got2.ExpiresAt, err)
	}
}

func TestAcquireIdleTimeoutOption(t *testing.T) {
	m := newTestManager(t, testConfig(t), newFakeDocker(testImage))
	res, err := m.Acquire(t.Context(), "opt", core.Options{IdleTimeout: 3 * time.Hour})
	if err != nil || res.Sandbox.IdleTimeout != 3*time.Hour || res.Sandbox.ExpiresAt.Sub(res.Sandbox.LastActiveAt) != 3*time.Hour {
		t.Errorf("Acquire with IdleTimeout 3h = %+v, %v", res.Sandbox, err)
	}
	if _, err := m.Acquire(t.Context(), "opt2", core.Options{IdleTimeout: 25 * time.Hour}); !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), "maximum of 24h0m0s") {
		t.Errorf("Acquire with IdleTimeout above the maximum: %v", err)
	}
}

// A shortened timeout expires the sandbox; an extended one keeps it past the
// server's default, which expires a sandbox acquired alongside.
func TestSetTimeoutExpiry(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.IdleTTL = 1500 * time.Millisecond
	m := newTestManager(t, cfg, fd)
	short := acquire(t, m, "short").Sandbox
	long := acquire(t, m, "long").Sandbox
	if _, err := m.SetTimeout(t.Context(), long.ID, time.Hour); err != nil {
		t.Fatal(err)
	}
	dflt := acquire(t, m, "default").Sandbox
	// Shortening from an hour to a second: gone within a second or so, long
	// before an hour.
	if _, err := m.SetTimeout(t.Context(), short.ID, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := m.SetTimeout(t.Context(), short.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	awaitRemoval(t, fd, short.ContainerID, 10*time.Second)
	awaitRemoval(t, fd, dflt.ContainerID, 10*time.Second)
	if _, err := m.Get(t.Context(), long.ID); err != nil {
		t.Errorf("the sandbox with a 1h timeout is gone once the default 1.5s expired: %v", err)
	}
	if fd.container(long.ContainerID) == nil {
		t.Error("the extended sandbox's container was removed")
	}
}

func TestLifetimeSurvivesRestart(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	m1, err := newValidated(t.Context(), cfg, fd)
	if err != nil {
		t.Fatal(err)
	}
	res, err := m1.Acquire(t.Context(), "persist", core.Options{Metadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	set, err := m1.SetTimeout(t.Context(), res.Sandbox.ID, 5*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	m2 := newTestManager(t, cfg, fd)
	got, err := m2.Get(t.Context(), res.Sandbox.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.IdleTimeout != 5*time.Hour || !got.ExpiresAt.Equal(set.ExpiresAt) || got.Metadata["k"] != "v" {
		t.Errorf("after restart: idle %v expires %v metadata %v; want 5h, %v, k=v", got.IdleTimeout, got.ExpiresAt, got.Metadata, set.ExpiresAt)
	}
}

func TestWarmPoolClaimGetsMetadata(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.WarmPool = 1
	m1, err := newValidated(t.Context(), cfg, fd)
	if err != nil {
		t.Fatal(err)
	}
	awaitPool(t, m1, 1)
	pooled := poolIDs(m1)[0]
	res, err := m1.Acquire(t.Context(), "pool-user", core.Options{Metadata: map[string]string{"from": "pool"}, IdleTimeout: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.ID != pooled || res.Sandbox.Metadata["from"] != "pool" || res.Sandbox.IdleTimeout != 2*time.Hour {
		t.Fatalf("claimed %s (pool had %s) with metadata %v, idle %v", res.Sandbox.ID, pooled, res.Sandbox.Metadata, res.Sandbox.IdleTimeout)
	}
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	m2 := newTestManager(t, cfg, fd)
	got, err := m2.Get(t.Context(), pooled)
	if err != nil || got.Metadata["from"] != "pool" || got.IdleTimeout != 2*time.Hour {
		t.Errorf("claimed pool sandbox after restart = %+v, %v", got, err)
	}
}

func TestMaxIdleTTLDefault(t *testing.T) {
	for _, c := range []struct {
		idle, max, want time.Duration
		err             bool
	}{
		{0, 0, core.DefaultMaxIdleTTL, false},
		{48 * time.Hour, 0, 48 * time.Hour, false},
		{time.Minute, time.Hour, time.Hour, false},
		{2 * time.Hour, time.Hour, 0, true},
	} {
		cfg := Config{Policy: core.Policy{IdleTTL: c.idle, MaxIdleTTL: c.max}, StateDir: t.TempDir()}
		err := cfg.applyDefaults()
		if c.err {
			if !errors.Is(err, core.ErrInvalidArgument) {
				t.Errorf("IdleTTL %v, MaxIdleTTL %v: %v; want InvalidArgument", c.idle, c.max, err)
			}
			continue
		}
		if err != nil || cfg.MaxIdleTTL != c.want {
			t.Errorf("IdleTTL %v, MaxIdleTTL %v: got %v, %v; want %v", c.idle, c.max, cfg.MaxIdleTTL, err, c.want)
		}
	}
}

// A sandbox's own on-idle action is validated, reported, kept in
// meta.json across a restart, and defaults to the server's.
func TestAcquireOnIdleOption(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.OnIdle = core.OnIdleDelete
	m1, err := newValidated(t.Context(), cfg, fd)
	if err != nil {
		t.Fatal(err)
	}
	own, err := m1.Acquire(t.Context(), "hib", core.Options{OnIdle: core.OnIdleHibernate})
	if err != nil || own.Sandbox.OnIdle != core.OnIdleHibernate {
		t.Fatalf("Acquire with OnIdle hibernate = %q, %v", own.Sandbox.OnIdle, err)
	}
	if dflt := acquire(t, m1, "dflt").Sandbox; dflt.OnIdle != core.OnIdleDelete {
		t.Errorf("Acquire without OnIdle on a server with %q: %q", core.OnIdleDelete, dflt.OnIdle)
	}
	if _, err := m1.Acquire(t.Context(), "bad", core.Options{OnIdle: "pause"}); !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), `"pause"`) {
		t.Errorf("Acquire with OnIdle pause: %v; want ErrInvalidArgument naming it", err)
	}
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	m2 := newTestManager(t, cfg, fd)
	if got, err := m2.Get(t.Context(), own.Sandbox.ID); err != nil || got.OnIdle != core.OnIdleHibernate {
		t.Errorf("after restart: OnIdle %q, %v; want %q", got.OnIdle, err, core.OnIdleHibernate)
	}
}

// A container start slower than the idle TTL (a loaded machine) still
// hands the sandbox to its caller: the idle TTL counts from then, not from
// when the creation began.
func TestAcquireSlowerThanIdleTTL(t *testing.T) {
	fd := newFakeDocker(testImage)
	fd.startDelay = 1500 * time.Millisecond
	cfg := testConfig(t)
	cfg.IdleTTL = time.Second
	m := newTestManager(t, cfg, fd)
	res, err := m.Acquire(t.Context(), "slow", core.Options{})
	if err != nil {
		t.Fatalf("Acquire with a start slower than the idle TTL: %v", err)
	}
	if !res.Sandbox.ExpiresAt.After(time.Now()) {
		t.Errorf("the new sandbox expires at %v, before it could be used", res.Sandbox.ExpiresAt)
	}
}
