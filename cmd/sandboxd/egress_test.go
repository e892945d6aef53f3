package main

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/backend/docker"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/egress"
)

func TestEgressFlags(t *testing.T) {
	c, err := parseConfig(nil, env("HOME", "/root"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if mc := dockerConfig(c); mc.EgressDefault != nil || mc.EgressCeiling != nil || mc.EgressAllowPrivate != nil || mc.EgressSubnet != docker.DefaultEgressSubnet {
		t.Errorf("defaults: %+v %v %v %v", mc.EgressDefault, mc.EgressCeiling, mc.EgressAllowPrivate, mc.EgressSubnet)
	}
	c, err = parseConfig([]string{"--allow-network", "--egress-default-allow", "pypi.org,files.pythonhosted.org", "--egress-default-allow", "*.example.com",
		"--egress-default-deny", "0.0.0.0/0", "--egress-allow-private", "10.1.2.3/16", "--egress-subnet", "100.100.0.0/20"},
		env("HOME", "/root", "SANDBOXD_EGRESS_CEILING", "pypi.org, files.pythonhosted.org,*.example.com,198.18.0.0/15", "SANDBOXD_EGRESS_ALLOW_PRIVATE", "ignored/1"),
		io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	mc := dockerConfig(c)
	wantDefault := &core.NetworkPolicy{AllowOut: []string{"pypi.org", "files.pythonhosted.org", "*.example.com"}, DenyOut: []string{"0.0.0.0/0"}}
	if !reflect.DeepEqual(mc.EgressDefault, wantDefault) {
		t.Errorf("EgressDefault = %+v", mc.EgressDefault)
	}
	if !reflect.DeepEqual(mc.EgressCeiling, []string{"pypi.org", "files.pythonhosted.org", "*.example.com", "198.18.0.0/15"}) {
		t.Errorf("EgressCeiling (env) = %v", mc.EgressCeiling)
	}
	if !reflect.DeepEqual(mc.EgressAllowPrivate, []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}) {
		t.Errorf("EgressAllowPrivate = %v", mc.EgressAllowPrivate)
	}
	if mc.EgressSubnet.String() != "100.100.0.0/20" {
		t.Errorf("EgressSubnet = %v", mc.EgressSubnet)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--egress-ceiling", "pypi.org"}, "--egress-default-allow, --egress-default-deny, --egress-ceiling and --egress-allow-private need --allow-network"},
		{[]string{"--allow-network", "--egress-default-allow", "bad_name.com"}, `egress-default-allow: network destination "bad_name.com"`},
		{[]string{"--allow-network", "--egress-ceiling", "*"}, `network destination "*"`},
		{[]string{"--allow-network", "--egress-allow-private", "10.0.0.0"}, `"10.0.0.0" is not a CIDR block`},
		{[]string{"--allow-network", "--egress-default-allow", "10.0.0.5"}, `--egress-default-allow "10.0.0.5" can never be reached`},
		{[]string{"--allow-network", "--egress-ceiling", "pypi.org", "--egress-default-allow", "evil.org"}, `--egress-default-allow "evil.org" can never be reached on this server: it is outside the most any sandbox may reach here (sandboxd --egress-ceiling pypi.org)`},
		{[]string{"--egress-subnet", "fd00::/64"}, "--egress-subnet fd00::/64: want an IPv4 block"},
		{[]string{"--egress-subnet", "100.127.0.1/16"}, "did you mean 100.127.0.0/16"},
		{[]string{"--egress-subnet", "nope"}, "not a CIDR block"},
	} {
		_, err := parseConfig(tt.args, env("HOME", "/root"), io.Discard)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v; want a usage error with %q", tt.args, err, tt.want)
		}
	}
}

// TestEgressFileFlags: --egress-instance names the host objects,
// --egress-hosts-file and --egress-ca-file become the gateway's resolver
// and roots, and each refusal names its flag.
func TestEgressFileFlags(t *testing.T) {
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	os.WriteFile(hosts, []byte("198.18.0.1 allowed.test\n"), 0o644)
	ca, err := egress.NewCA("sb-flags")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, ca.CertPEM(), 0o644)
	c, err := parseConfig([]string{"--allow-network", "--egress-instance", "t1", "--egress-hosts-file", hosts, "--egress-ca-file", caFile},
		env("HOME", "/root"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	mc := dockerConfig(c)
	if mc.EgressInstance != "t1" || mc.Egress.RootCAs == nil {
		t.Errorf("instance %q, roots %v", mc.EgressInstance, mc.Egress.RootCAs)
	}
	if addrs, err := mc.Egress.Resolver.LookupNetIP(t.Context(), "ip4", "allowed.test"); err != nil || len(addrs) != 1 || addrs[0].String() != "198.18.0.1" {
		t.Errorf("resolver: %v, %v", addrs, err)
	}
	if _, err := mc.Egress.Resolver.LookupNetIP(t.Context(), "ip4", "localhost"); err == nil {
		t.Error("the hosts file's resolver answered a name the file lacks")
	}
	c, err = parseConfig([]string{"--allow-network"}, env("HOME", "/root"), io.Discard)
	if err != nil || c.docker.Egress.Resolver != nil || c.docker.Egress.RootCAs != nil || c.docker.EgressInstance != "" {
		t.Errorf("defaults: %+v, %v", c.docker.Egress, err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--egress-hosts-file", hosts}, "--egress-hosts-file and --egress-ca-file need --allow-network"},
		{[]string{"--allow-network", "--egress-hosts-file", filepath.Join(dir, "missing")}, "--egress-hosts-file: open"},
		{[]string{"--allow-network", "--egress-ca-file", hosts}, "--egress-ca-file: " + hosts + " holds no PEM certificate"},
		{[]string{"--allow-network", "--egress-instance", "Toolong"}, `--egress-instance "Toolong": want 1 to 4 lower-case letters and digits`},
	} {
		_, err := parseConfig(tt.args, env("HOME", "/root"), io.Discard)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v; want a usage error with %q", tt.args, err, tt.want)
		}
	}
}
