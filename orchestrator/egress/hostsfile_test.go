package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHostsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(path, []byte("# test names\n198.18.0.1 a.test A2.test.  # trailing comment\n\n198.18.0.3\tb.test\n2001:db8::1 a.test\n::ffff:198.18.0.5 c.test\n"), 0o644)
	h, err := ReadHostsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		network, host string
		want          []string
	}{
		{"ip4", "a.test", []string{"198.18.0.1"}},
		{"ip", "A.TEST.", []string{"198.18.0.1", "2001:db8::1"}},
		{"ip6", "a.test", []string{"2001:db8::1"}},
		{"ip4", "a2.test", []string{"198.18.0.1"}},
		{"ip4", "b.test", []string{"198.18.0.3"}},
		{"ip4", "c.test", []string{"198.18.0.5"}}, // unmapped
	} {
		got, err := h.LookupNetIP(ctx, c.network, c.host)
		var s []string
		for _, a := range got {
			s = append(s, a.String())
		}
		if err != nil || strings.Join(s, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s %s: %v, %v; want %v", c.network, c.host, s, err, c.want)
		}
	}
	for _, q := range [][2]string{{"ip4", "nope.test"}, {"ip6", "b.test"}, {"ip4", "test"}} {
		_, err := h.LookupNetIP(ctx, q[0], q[1])
		var de *net.DNSError
		if !errors.As(err, &de) || !de.IsNotFound {
			t.Errorf("%s %s: %v; want not found", q[0], q[1], err)
		}
	}
	if h.Len() != 4 {
		t.Errorf("Len = %d", h.Len())
	}

	for body, want := range map[string]string{
		"198.18.0.1 a.test\nnot-an-ip b.test\n": "hosts:2: \"not-an-ip\" is not an IP address",
		"198.18.0.1\n":                          "hosts:1: 198.18.0.1 names no host",
	} {
		os.WriteFile(path, []byte(body), 0o644)
		if _, err := ReadHostsFile(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want %q", body, err, want)
		}
	}
	os.WriteFile(path, make([]byte, maxHostsFile+1), 0o644)
	if _, err := ReadHostsFile(path); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a huge file: %v", err)
	}
}

func TestRootsWith(t *testing.T) {
	ca, err := NewCA("sb-roots")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "ca.pem")
	os.WriteFile(path, ca.CertPEM(), 0o644)
	pool, err := RootsWith(path)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.leaf("private.example")
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(leaf.Certificate[0])
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "private.example"}); err != nil {
		t.Errorf("a leaf of the file's CA does not verify: %v", err)
	}
	os.WriteFile(path, []byte("not a certificate"), 0o644)
	if _, err := RootsWith(path); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a file without certificates: %v", err)
	}
	if _, err := RootsWith(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file: no error")
	}
}

// TestNewHosts: names given as a map resolve as a file's do (case and a
// trailing dot ignored), and Names gives them back, as the Kubernetes
// backend carries --egress-hosts-file to its gateways.
func TestNewHosts(t *testing.T) {
	a := netip.MustParseAddr("198.18.0.1")
	h := NewHosts(map[string][]netip.Addr{"Allowed.Test.": {a}})
	got, err := h.LookupNetIP(t.Context(), "ip4", "allowed.test")
	if err != nil || len(got) != 1 || got[0] != a {
		t.Fatalf("LookupNetIP = %v, %v; want %v", got, err, a)
	}
	if _, err := h.LookupNetIP(t.Context(), "ip4", "other.test"); err == nil {
		t.Error("an unlisted name resolved")
	}
	names := NewHosts(h.Names()).Names()
	if len(names) != 1 || len(names["allowed.test"]) != 1 || names["allowed.test"][0] != a {
		t.Errorf("Names round trip = %v", names)
	}
}
