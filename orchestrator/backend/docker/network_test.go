package docker

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

func TestAddrPool(t *testing.T) {
	p := newAddrPool(netip.MustParsePrefix("100.127.0.0/29")) // pairs 0 (the gateway's) to 3
	if g := p.gateway(); g != netip.MustParseAddr("100.127.0.1") {
		t.Errorf("gateway %s", g)
	}
	var got []netip.Addr
	for _, id := range []string{"a", "b", "c"} {
		s, err := p.alloc(id)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	want := []netip.Addr{netip.MustParseAddr("100.127.0.3"), netip.MustParseAddr("100.127.0.5"), netip.MustParseAddr("100.127.0.7")}
	for i := range want {
		if got[i] != want[i] || hostAddr(got[i]) != want[i].Prev() {
			t.Errorf("allocation %d: %s; want %s", i, got[i], want[i])
		}
	}
	if _, err := p.alloc("d"); !core.IsClassified(err) || !errors.Is(err, core.ErrResourceExhausted) {
		t.Errorf("a full pool: %v; want resource exhausted", err)
	}
	p.release("b", want[1])
	p.release("x", want[2]) // not x's: kept
	if s, err := p.alloc("d"); err != nil || s != want[1] {
		t.Errorf("after a release: %s, %v; want %s", s, err, want[1])
	}
	// reserve: sandbox addresses of the subnet only, each once.
	p2 := newAddrPool(netip.MustParsePrefix("100.127.0.0/16"))
	for _, c := range []struct {
		id, addr string
		ok       bool
	}{{"a", "100.127.0.3", true}, {"a", "100.127.0.3", true}, {"b", "100.127.0.3", false},
		{"c", "100.127.0.1", false}, {"c", "100.127.0.4", false}, {"c", "100.128.0.3", false}, {"c", "100.127.255.255", true}} {
		if ok := p2.reserve(c.id, netip.MustParseAddr(c.addr)); ok != c.ok {
			t.Errorf("reserve(%s, %s) = %v; want %v", c.id, c.addr, ok, c.ok)
		}
	}
	if s, _ := p2.alloc("z"); s != netip.MustParseAddr("100.127.0.5") {
		t.Errorf("next-fit after reservations: %s", s)
	}
}

func TestEgressSubnetChecks(t *testing.T) {
	for s, ok := range map[string]bool{"100.127.0.0/16": true, "10.99.0.0/28": true, "100.127.0.1/16": false,
		"100.127.0.0/30": false, "fd00::/64": false, "10.0.0.0/7": false} {
		cfg := Config{StateDir: t.TempDir(), EgressSubnet: netip.MustParsePrefix(s)}
		if err := cfg.applyDefaults(); (err == nil) != ok {
			t.Errorf("%s: %v", s, err)
		}
	}
}

func TestEgressInstanceNames(t *testing.T) {
	cfg := Config{StateDir: t.TempDir(), EgressInstance: "ab12"}
	if err := cfg.applyDefaults(); err != nil {
		t.Fatal(err)
	}
	if want := (netNames{table: "sandboxd-ab12", bridge: "sandboxd-ab12", prefix: "sxab12-"}); cfg.netNames != want {
		t.Errorf("names %+v; want %+v", cfg.netNames, want)
	}
	if l := cfg.netNames.link("sb-0123456789abcdef"); l != "sxab12-01234567" || len(l) > 15 {
		t.Errorf("link %q", l)
	}
	cfg = Config{StateDir: t.TempDir()}
	if err := cfg.applyDefaults(); err != nil || cfg.netNames != defaultNetNames {
		t.Errorf("default names %+v, %v", cfg.netNames, err)
	}
	for _, bad := range []string{"abcde", "AB", "a-b", "a b", "é"} {
		cfg := Config{StateDir: t.TempDir(), EgressInstance: bad}
		if err := cfg.applyDefaults(); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("instance %q: %v; want invalid", bad, err)
		}
	}
}

// TestNetworkLifecycleFake follows a networked sandbox with the fake
// engine and kernel: its holder and link, a restart of the Manager (the
// holder is no orphan, the address is kept) and deletion (both go, the
// address is free again). Hibernation needs a driver:
// TestIntegrationNetworkPlumbing.
func TestNetworkLifecycleFake(t *testing.T) {
	fd := newFakeDocker(testImage)
	k := newFakeKernel()
	cfg := testConfig(t)
	cfg.AllowNetwork, cfg.netKernel = true, k
	m := newTestManager(t, cfg, fd)
	res, err := m.Acquire(t.Context(), "n", core.Options{Network: true})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sandbox.ID
	s := m.Manager.addrOf(t, id)
	if fd.containerNamed(holderNamePrefix+id) == nil || k.linkCount() != 1 {
		t.Fatalf("holder %v, links %d", fd.containerNamed(holderNamePrefix+id), k.linkCount())
	}
	md, err := readMeta(sandboxDir(cfg.StateDir, id))
	if err != nil || md.Net == nil || md.Net.Addr != s || md.Net.Holder == "" {
		t.Fatalf("meta.json net %+v, %v", md.Net, err)
	}
	if err := m.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	m2 := newTestManager(t, cfg, fd)
	if fd.containerNamed(holderNamePrefix+id) == nil {
		t.Fatal("a restart removed the holder as an orphan")
	}
	if got := m2.Manager.addrOf(t, id); got != s {
		t.Errorf("after a restart: address %s; want %s", got, s)
	}
	other, err := m2.Acquire(t.Context(), "o", core.Options{Network: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := m2.Manager.addrOf(t, other.Sandbox.ID); got == s {
		t.Errorf("a new sandbox got the address %s of a kept one", got)
	}
	if err := m2.Delete(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if fd.containerNamed(holderNamePrefix+id) != nil || k.linkCount() != 1 {
		t.Errorf("deleted: holder %v, links %d", fd.containerNamed(holderNamePrefix+id), k.linkCount())
	}
	if !m2.net.pool.reserve("new", s) {
		t.Errorf("the deleted sandbox's address %s is still taken", s)
	}
}
