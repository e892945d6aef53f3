package core

import (
	"errors"
	"strings"
	"testing"
)

// TestUsage: a take is refused at the narrowest cap it would pass,
// reserves nothing then, and a release gives back what was taken.
func TestUsage(t *testing.T) {
	var u Usage
	caps := Caps{PerSandbox: 2, PerTenant: 3, Server: 4}
	take := func(sb, tenant string, n int, want Scope) {
		t.Helper()
		scope, ok := u.Take(caps, sb, tenant, n)
		if ok != (want == 0) || scope != want {
			t.Fatalf("Take(%s, %s, %d) = %v, %v; want refused at %v", sb, tenant, n, scope, ok, want)
		}
	}
	take("a1", "acme", 2, 0)
	take("a1", "acme", 1, ScopeSandbox)
	take("a2", "acme", 1, 0)
	take("a2", "acme", 1, ScopeTenant)
	take("b1", "beta", 1, 0)
	take("c1", "gamma", 1, ScopeServer)
	take("a1", "acme", 3, ScopeSandbox) // the narrowest first, though all three would pass
	if s, tn, all := u.InUse("a1", "acme"); s != 2 || tn != 3 || all != 4 {
		t.Errorf("in use: %d, %d, %d; want 2, 3, 4", s, tn, all)
	}
	u.Release("a1", "acme", 2)
	take("c1", "gamma", 1, 0)
	if s, tn, all := u.InUse("a1", "acme"); s != 0 || tn != 1 || all != 3 {
		t.Errorf("after release: %d, %d, %d; want 0, 1, 3", s, tn, all)
	}
	if _, ok := u.bySandbox["a1"]; ok || len(u.bySandbox) != 3 || len(u.byTenant) != 3 {
		t.Errorf("entries kept for nothing in use: %v, %v", u.bySandbox, u.byTenant)
	}
	var none Usage // no caps: never refused
	if _, ok := none.Take(Caps{}, "x", "y", 1<<30); !ok {
		t.Error("refused without caps")
	}
}

// TestWatchCapDefaults: a tenant's default share is a quarter of the
// server's caps, narrower defaults fit the wider caps given, and caps out
// of order or negative are refused, naming the fields.
func TestWatchCapDefaults(t *testing.T) {
	p := DefaultPolicy()
	calls, dirs := p.WatchCaps()
	if calls != (Caps{PerSandbox: 8, PerTenant: 16, Server: 64}) || dirs != (Caps{PerSandbox: 4000, PerTenant: 8000, Server: 32000}) || p.MaxWatchDirsPerCall != 1000 {
		t.Errorf("defaults: calls %+v, dirs %+v, per call %d", calls, dirs, p.MaxWatchDirsPerCall)
	}
	p = Policy{MaxWatches: 8, MaxWatchDirs: 2000}
	if err := p.ApplyDefaults(); err != nil {
		t.Fatal(err)
	}
	calls, dirs = p.WatchCaps()
	if calls != (Caps{PerSandbox: 2, PerTenant: 2, Server: 8}) || dirs != (Caps{PerSandbox: 500, PerTenant: 500, Server: 2000}) || p.MaxWatchDirsPerCall != 500 {
		t.Errorf("derived from the server's caps: calls %+v, dirs %+v, per call %d", calls, dirs, p.MaxWatchDirsPerCall)
	}
	for _, c := range []struct {
		p    Policy
		want string
	}{
		{Policy{MaxWatchesPerTenant: 65}, "MaxWatchesPerTenant 65 exceeds MaxWatches 64"},
		{Policy{MaxWatchesPerSandbox: 20}, "MaxWatchesPerSandbox 20 exceeds MaxWatchesPerTenant 16"},
		{Policy{MaxWatchDirsPerCall: 5000}, "MaxWatchDirsPerCall 5000 exceeds MaxWatchDirsPerSandbox 4000"},
		{Policy{MaxWatchDirsPerTenant: 40000}, "MaxWatchDirsPerTenant 40000 exceeds MaxWatchDirs 32000"},
		{Policy{MaxWatches: -1}, "MaxWatches -1 is negative"},
	} {
		err := c.p.ApplyDefaults()
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want %q", c.p, err, c.want)
		}
	}
}
