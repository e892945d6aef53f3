package iosidecar

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// freePort returns a port free for TCP and UDP on 127.0.0.1 (both are
// bound, then released: the egress gateway's DNS listens on one port for
// both).
func freePort(t *testing.T) string {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		pc, err := net.ListenPacket("udp", addr)
		l.Close()
		if err != nil {
			continue
		}
		pc.Close()
		return addr
	}
	t.Fatal("no port free for TCP and UDP alike")
	return ""
}

// startEgressSidecar is a sidecar with an egress gateway whose probe
// target is its probe listener itself (probeOK), as the node's redirect
// makes it, or an address nothing listens on (no redirect).
func startEgressSidecar(t *testing.T, probeOK bool) (*Client, EgressConfig) {
	t.Helper()
	target := ""
	if !probeOK {
		target = freePort(t) // nothing listens: no redirect
	}
	return startEgressSidecarAt(t, target)
}

// startEgressSidecarAt is startEgressSidecar with the probe's target at
// target ("": the probe listener itself).
func startEgressSidecarAt(t *testing.T, target string) (*Client, EgressConfig) {
	t.Helper()
	ec := EgressConfig{TCP: freePort(t), DNS: freePort(t), Probe: freePort(t), Source: netip.MustParseAddr("198.18.250.9")}
	ec.ProbeTarget = ec.Probe
	if target != "" {
		ec.ProbeTarget = target
	}
	c, stop := serveEgress(t, t.TempDir(), ec)
	t.Cleanup(stop)
	return c, ec
}

// serveEgress starts a sidecar with ec over the Pod directories in dir
// (made if missing); stop stops it, its listeners closed.
func serveEgress(t *testing.T, dir string, ec EgressConfig) (c *Client, stop func()) {
	t.Helper()
	for _, d := range []string{"io", "workspace"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := New(Config{IODir: filepath.Join(dir, "io"), Workspace: filepath.Join(dir, "workspace"), Token: testToken, Egress: &ec})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.GRPC().Serve(lis)
	if c, err = Dial(lis.Addr().String(), testToken); err != nil {
		t.Fatal(err)
	}
	return c, func() {
		c.Close()
		srv.Stop(time.Second)
	}
}

// query asks the gateway's DNS at addr for name's A record, from
// 127.0.0.1 (a sandbox whose Pod has no nameserver asks there).
func query(t *testing.T, addr, name string) int {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	c := &dns.Client{Timeout: 5 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("DNS query for %s at %s: %v", name, addr, err)
	}
	return r.Rcode
}

// TestEgressGateway: a sidecar runs the egress gateway only when asked,
// opens it only once its probe proves the redirect, keeps the newest
// generation of a policy, refuses malformed ones, and judges the
// sandbox's DNS (from the attached sources) under the policy in force,
// which EgressStatus reports.
func TestEgressGateway(t *testing.T) {
	ctx := t.Context()
	pol := EgressPolicy{SandboxID: "sb-aaaaaaaaaaaaaaaaaaaa", Generation: 1, AllowOut: []string{"allowed.test"}, DenyOut: []string{"0.0.0.0/0"},
		Hosts: map[string][]netip.Addr{"allowed.test": {netip.MustParseAddr("198.18.250.1")}, "denied.test": {netip.MustParseAddr("198.18.250.2")}}}

	t.Run("off", func(t *testing.T) {
		sc := startSidecar(t)
		if _, err := sc.c.SetEgress(ctx, pol); !errors.Is(err, ErrEgressOff) {
			t.Errorf("SetEgress on a sidecar without --egress: %v; want ErrEgressOff", err)
		}
		if _, _, _, err := sc.c.EgressStatus(ctx); !errors.Is(err, ErrEgressOff) {
			t.Errorf("EgressStatus on a sidecar without --egress: %v; want ErrEgressOff", err)
		}
	})

	t.Run("no redirect", func(t *testing.T) {
		c, ec := startEgressSidecar(t, false)
		_, err := c.SetEgress(ctx, pol)
		if !errors.Is(err, ErrEgressUnavailable) || !strings.Contains(err.Error(), "CNI") {
			t.Fatalf("SetEgress without the redirect: %v; want ErrEgressUnavailable naming the CNI plugin", err)
		}
		// Nothing listens where the redirect would lead.
		if conn, err := net.DialTimeout("tcp", ec.TCP, time.Second); err == nil {
			conn.Close()
			t.Errorf("the gateway listens at %s although its probe failed", ec.TCP)
		}
	})

	t.Run("a listener at the probe's target", func(t *testing.T) {
		// Where Pods may bind low ports, the sandbox could listen where
		// the probe connects: connecting is not proof, arriving is.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		c, _ := startEgressSidecarAt(t, l.Addr().String())
		if _, err := c.SetEgress(ctx, pol); !errors.Is(err, ErrEgressUnavailable) {
			t.Fatalf("SetEgress with another listener at the probe's target: %v; want ErrEgressUnavailable", err)
		}
	})

	t.Run("policy", func(t *testing.T) {
		c, ec := startEgressSidecar(t, true)
		if _, _, gen, err := c.EgressStatus(ctx); err != nil || gen != 0 {
			t.Fatalf("EgressStatus before a policy: generation %d, %v; want 0", gen, err)
		}
		if applied, err := c.SetEgress(ctx, pol); err != nil || !applied {
			t.Fatalf("SetEgress: %v, %v", applied, err)
		}
		if rc := query(t, ec.DNS, "allowed.test"); rc != dns.RcodeSuccess {
			t.Errorf("allowed.test: rcode %s; want an answer", dns.RcodeToString[rc])
		}
		if rc := query(t, ec.DNS, "denied.test"); rc != dns.RcodeNameError {
			t.Errorf("denied.test: rcode %s; want NXDOMAIN", dns.RcodeToString[rc])
		}
		counters, denials, gen, err := c.EgressStatus(ctx)
		if err != nil || gen != 1 || counters.DNSAllowed != 1 || counters.DNSDenied != 1 || len(denials) != 1 ||
			denials[0].Kind != "dns" || denials[0].Name != "denied.test" || denials[0].Reason == "" {
			t.Errorf("EgressStatus: %+v %+v generation %d, %v; want one allowed and one denied query (denied.test), generation 1", counters, denials, gen, err)
		}

		// The same bounds again, their hosts in another order (another
		// replica's): the gateway and its counters are kept.
		req := &sandboxiov1.SetEgressRequest{SandboxId: pol.SandboxID, Generation: 1, AllowOut: pol.AllowOut, DenyOut: pol.DenyOut, Hosts: []*sandboxiov1.EgressHost{
			{Name: "denied.test", Addresses: []string{"198.18.250.2"}}, {Name: "allowed.test", Addresses: []string{"198.18.250.1"}}}}
		if _, err := c.rpc.SetEgress(ctx, req); err != nil {
			t.Fatal(err)
		}
		if counters, _, _, err := c.EgressStatus(ctx); err != nil || counters.DNSAllowed != 1 {
			t.Errorf("after the same bounds again: %+v, %v; want the counters kept", counters, err)
		}

		// A newer policy replaces it; an older one changes nothing.
		open := pol
		open.Generation, open.AllowOut, open.DenyOut = 3, nil, nil
		if applied, err := c.SetEgress(ctx, open); err != nil || !applied {
			t.Fatalf("SetEgress of generation 3: %v, %v", applied, err)
		}
		stale := pol
		stale.Generation = 2
		if applied, err := c.SetEgress(ctx, stale); err != nil || applied {
			t.Errorf("SetEgress of generation 2 after 3: applied %v, %v; want not applied", applied, err)
		}
		if rc := query(t, ec.DNS, "denied.test"); rc != dns.RcodeSuccess {
			t.Errorf("denied.test under the open policy: rcode %s; want an answer", dns.RcodeToString[rc])
		}

		// Malformed requests, and another sandbox's.
		for name, p := range map[string]EgressPolicy{
			"bad destination": {SandboxID: pol.SandboxID, Generation: 4, AllowOut: []string{"not a destination!"}},
			"bad ceiling":     {SandboxID: pol.SandboxID, Generation: 4, Ceiling: []string{"??"}},
			"bad sandbox ID":  {SandboxID: "../x", Generation: 4},
			"other sandbox":   {SandboxID: "sb-bbbbbbbbbbbbbbbbbbbb", Generation: 4},
		} {
			if _, err := c.SetEgress(ctx, p); !errors.Is(err, core.ErrInvalidArgument) {
				t.Errorf("SetEgress, %s: %v; want INVALID_ARGUMENT", name, err)
			}
		}
		if _, _, gen, _ := c.EgressStatus(ctx); gen != 3 {
			t.Errorf("generation %d after refused requests; want 3", gen)
		}
	})
}

// TestEgressRestart: a sidecar with a state file keeps the policy in force
// there (0600), and a sidecar started again over it (its container
// restarted) has that policy in force before anyone gives it one; a state
// file it cannot read, or none, leaves it waiting for SetEgress.
func TestEgressRestart(t *testing.T) {
	ctx := t.Context()
	pol := EgressPolicy{SandboxID: "sb-aaaaaaaaaaaaaaaaaaaa", Generation: 3, AllowOut: []string{"allowed.test"}, DenyOut: []string{"0.0.0.0/0"},
		Hosts: map[string][]netip.Addr{"allowed.test": {netip.MustParseAddr("198.18.250.1")}, "denied.test": {netip.MustParseAddr("198.18.250.2")}}}
	dir := t.TempDir()
	ec := EgressConfig{TCP: freePort(t), DNS: freePort(t), Probe: freePort(t), Source: netip.MustParseAddr("198.18.250.9"),
		StateFile: filepath.Join(dir, "policy.pb")}
	ec.ProbeTarget = ec.Probe

	c, stop := serveEgress(t, dir, ec)
	if _, err := c.SetEgress(ctx, pol); err != nil {
		t.Fatalf("SetEgress: %v", err)
	}
	stop()
	if st, err := os.Stat(ec.StateFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the state file: %v, %v; want it, 0600", st, err)
	}

	c, stop = serveEgress(t, dir, ec)
	if _, _, gen, err := c.EgressStatus(ctx); err != nil || gen != 3 {
		t.Errorf("after a restart, before any SetEgress: generation %d, %v; want 3", gen, err)
	}
	if rc := query(t, ec.DNS, "allowed.test"); rc != dns.RcodeSuccess {
		t.Errorf("after a restart, allowed.test: rcode %s; want an answer", dns.RcodeToString[rc])
	}
	if rc := query(t, ec.DNS, "denied.test"); rc != dns.RcodeNameError {
		t.Errorf("after a restart, denied.test: rcode %s; want NXDOMAIN", dns.RcodeToString[rc])
	}
	// A newer policy replaces the restored one, and is what is kept.
	open := pol
	open.Generation, open.AllowOut, open.DenyOut = 4, nil, nil
	if applied, err := c.SetEgress(ctx, open); err != nil || !applied {
		t.Fatalf("SetEgress of generation 4 after the restore: %v, %v", applied, err)
	}
	stop()
	if req, err := readEgressState(ec.StateFile); err != nil || req.GetGeneration() != 4 {
		t.Errorf("the state file after generation 4: %v, %v", req, err)
	}

	// Unreadable: the sidecar starts, with no policy.
	if err := os.WriteFile(ec.StateFile, []byte("\xff\xff not a policy"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, stop = serveEgress(t, dir, ec)
	defer stop()
	if _, _, gen, err := c.EgressStatus(ctx); err != nil || gen != 0 {
		t.Errorf("over an unreadable state file: generation %d, %v; want 0 (no policy)", gen, err)
	}
	if conn, err := net.DialTimeout("tcp", ec.TCP, time.Second); err == nil {
		conn.Close()
		t.Errorf("over an unreadable state file the gateway listens at %s", ec.TCP)
	}
}

// hostileEgress answers EgressStatus with whatever it holds.
type hostileEgress struct {
	sandboxiov1.UnimplementedIOServiceServer
	resp *sandboxiov1.EgressStatusResponse
	set  *sandboxiov1.SetEgressResponse
}

func (h *hostileEgress) EgressStatus(context.Context, *sandboxiov1.EgressStatusRequest) (*sandboxiov1.EgressStatusResponse, error) {
	return h.resp, nil
}

func (h *hostileEgress) SetEgress(context.Context, *sandboxiov1.SetEgressRequest) (*sandboxiov1.SetEgressResponse, error) {
	return h.set, nil
}

// TestHostileEgress: what a replaced sidecar answers about its gateway is
// bounded and checked: too many denials, an unknown kind, an oversized
// name, a malformed address, or a policy "applied" under another
// generation are ErrBadResponse (gRPC itself refuses strings that are not
// valid UTF-8).
func TestHostileEgress(t *testing.T) {
	ctx := t.Context()
	many := make([]*sandboxiov1.EgressDenial, 257)
	for i := range many {
		many[i] = &sandboxiov1.EgressDenial{Kind: "tcp"}
	}
	for name, resp := range map[string]*sandboxiov1.EgressStatusResponse{
		"too many denials": {Denials: many},
		"unknown kind":     {Denials: []*sandboxiov1.EgressDenial{{Kind: "icmp"}}},
		"long name":        {Denials: []*sandboxiov1.EgressDenial{{Kind: "dns", Name: strings.Repeat("a", 2<<10)}}},
		"bad address":      {Denials: []*sandboxiov1.EgressDenial{{Kind: "tcp", Address: "not:an:address"}}},
		"open connections": {ConnsOpen: 1 << 40},
	} {
		c := startHostileServer(t, &hostileEgress{resp: resp})
		_, _, _, err := c.EgressStatus(ctx)
		wantBounded(t, name, err, ErrBadResponse)
	}
	c := startHostileServer(t, &hostileEgress{set: &sandboxiov1.SetEgressResponse{Applied: true, Generation: 9}})
	if _, err := c.SetEgress(ctx, EgressPolicy{SandboxID: "sb-aaaaaaaaaaaaaaaaaaaa", Generation: 2}); !errors.Is(err, ErrBadResponse) {
		t.Errorf("SetEgress answered applied under generation 9 for 2: %v; want ErrBadResponse", err)
	}
	// A sidecar of an earlier release knows no sealed rules: it applies
	// the rest and answers no rules in force, which is not taken as
	// applied.
	c = startHostileServer(t, &hostileEgress{set: &sandboxiov1.SetEgressResponse{Applied: true, Generation: 2}})
	if _, err := c.SetEgress(ctx, EgressPolicy{SandboxID: "sb-aaaaaaaaaaaaaaaaaaaa", Generation: 2, SealedRules: []byte("sealed")}); !errors.Is(err, ErrRulesSealed) || !strings.Contains(err.Error(), "earlier release") {
		t.Errorf("SetEgress with rules, answered without rules in force: %v; want ErrRulesSealed naming the earlier release", err)
	}
}

// TestEgressRules: a sidecar with a CA directory makes the sandbox's CA,
// writes its certificate and the image's roots followed by it where the
// sandbox reads them, keeps the key to itself (0600) and the same CA
// through a restart; it opens a policy's sealed rules with its token, and
// never keeps their values in clear. Rules sealed under another token, or
// given to a sidecar with no CA, are refused saying why.
func TestEgressRules(t *testing.T) {
	ctx := t.Context()
	const id, secret = "sb-aaaaaaaaaaaaaaaaaaaa", "Bearer rule-secret-4242"
	rules := map[string]core.NetworkRule{"api.test": {Headers: map[string]string{"Authorization": secret}}}
	sealed, err := SealRules(testToken, id, rules)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(sealed), "rule-secret") {
		t.Fatalf("the sealed rules hold the value in clear")
	}
	pol := EgressPolicy{SandboxID: id, Generation: 1, AllowOut: []string{"api.test"}, DenyOut: []string{"0.0.0.0/0"}, SealedRules: sealed,
		Hosts: map[string][]netip.Addr{"api.test": {netip.MustParseAddr("198.18.250.1")}}}

	dir, caDir := t.TempDir(), t.TempDir()
	roots := filepath.Join(dir, "roots.pem")
	if err := os.WriteFile(roots, []byte("# the image's roots"), 0o644); err != nil {
		t.Fatal(err)
	}
	ec := EgressConfig{TCP: freePort(t), DNS: freePort(t), Probe: freePort(t), Source: netip.MustParseAddr("198.18.250.9"),
		StateFile: filepath.Join(dir, "policy.pb"), CADir: caDir, CAKeyFile: filepath.Join(dir, "ca-key.pem"), Roots: roots}
	ec.ProbeTarget = ec.Probe
	c, stop := serveEgress(t, dir, ec)
	cert, err := os.ReadFile(filepath.Join(caDir, CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	if blk, _ := pem.Decode(cert); blk == nil {
		t.Fatalf("%s is not PEM: %q", CACertFile, cert)
	} else if ca, err := x509.ParseCertificate(blk.Bytes); err != nil || !ca.IsCA {
		t.Fatalf("%s: %v; want a CA certificate", CACertFile, err)
	}
	if b, err := os.ReadFile(filepath.Join(caDir, CABundleFile)); err != nil || string(b) != "# the image's roots\n"+string(cert) {
		t.Errorf("%s: %q, %v; want the image's roots, then the CA", CABundleFile, b, err)
	}
	if st, err := os.Stat(ec.CAKeyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the CA's key: %v, %v; want it, 0600", st, err)
	}
	if applied, err := c.SetEgress(ctx, pol); err != nil || !applied {
		t.Fatalf("SetEgress with rules: %v, %v", applied, err)
	}
	if b, err := os.ReadFile(ec.StateFile); err != nil || strings.Contains(string(b), "rule-secret") {
		t.Errorf("the state file (%v) holds the rule's value in clear", err)
	}
	// Sealed under another token (rotated), or for another sandbox.
	for what, s := range map[string]func() ([]byte, error){
		"another token":   func() ([]byte, error) { return SealRules(testToken+"-rotated", id, rules) },
		"another sandbox": func() ([]byte, error) { return SealRules(testToken, "sb-bbbbbbbbbbbbbbbbbbbb", rules) },
		"damaged":         func() ([]byte, error) { return []byte("0123456789abcdef0123456789abcdef"), nil },
	} {
		b, err := s()
		if err != nil {
			t.Fatal(err)
		}
		bad := pol
		bad.Generation, bad.SealedRules = 2, b
		if _, err := c.SetEgress(ctx, bad); !errors.Is(err, ErrRulesSealed) {
			t.Errorf("rules sealed for %s: %v; want ErrRulesSealed", what, err)
		}
	}
	if _, _, gen, err := c.EgressStatus(ctx); err != nil || gen != 1 {
		t.Errorf("after the refused policies: generation %d, %v; want 1 still in force", gen, err)
	}
	bad := pol
	bad.Generation, bad.UpstreamRoots = 2, []byte("not PEM")
	if _, err := c.SetEgress(ctx, bad); !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), "upstream_roots") {
		t.Errorf("upstream roots that are not PEM: %v; want INVALID_ARGUMENT naming them", err)
	}
	stop()

	// A restart keeps the CA the sandbox trusts, and the policy.
	c, stop = serveEgress(t, dir, ec)
	if again, err := os.ReadFile(filepath.Join(caDir, CACertFile)); err != nil || string(again) != string(cert) {
		t.Errorf("after a restart the CA's certificate changed (%v)", err)
	}
	if _, _, gen, err := c.EgressStatus(ctx); err != nil || gen != 1 {
		t.Errorf("after a restart: generation %d, %v; want the policy with rules restored", gen, err)
	}
	stop()

	// A sidecar without a CA cannot apply rules.
	c, _ = startEgressSidecar(t, true)
	if _, err := c.SetEgress(ctx, pol); !errors.Is(err, ErrRulesSealed) || !strings.Contains(err.Error(), "no CA") {
		t.Errorf("rules for a sidecar without a CA: %v; want ErrRulesSealed saying it has no CA", err)
	}
}
