package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
)

// The operator's fixed names and roots (sandboxd --egress-hosts-file,
// --egress-ca-file): for deployments whose sandboxes reach a known set of
// private services by name, and for the tests' own internet
// (internal/nettest), where the gateway must resolve the test names and
// trust the test CA without asking anything outside the machine.

// maxHostsFile bounds a hosts file: it is the operator's, but read whole.
const maxHostsFile = 4 << 20

// HostsFile is a Resolver answering from a hosts(5) file alone: a name it
// does not list is not found, and no DNS server is ever asked. Names are
// matched without regard to case or a trailing dot.
type HostsFile struct {
	names map[string][]netip.Addr
}

// ReadHostsFile reads a hosts(5) file: lines of an address and its names,
// "#" starting a comment. An address that does not parse is an error
// naming its line, so a typo never silently drops a name.
func ReadHostsFile(path string) (*HostsFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxHostsFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxHostsFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxHostsFile)
	}
	h := &HostsFile{names: map[string][]netip.Addr{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), maxHostsFile)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %q is not an IP address", path, n, f[0])
		}
		if len(f) == 1 {
			return nil, fmt.Errorf("%s:%d: %s names no host", path, n, f[0])
		}
		for _, name := range f[1:] {
			k := hostsKey(name)
			h.names[k] = append(h.names[k], a.Unmap())
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, nil
}

// NewHosts is a HostsFile of names given as a map (names to addresses):
// the operator's names carried elsewhere than in a file (sandboxd sends
// its --egress-hosts-file to the Kubernetes backend's gateways this way).
func NewHosts(names map[string][]netip.Addr) *HostsFile {
	h := &HostsFile{names: make(map[string][]netip.Addr, len(names))}
	for name, addrs := range names {
		k := hostsKey(name)
		for _, a := range addrs {
			h.names[k] = append(h.names[k], a.Unmap())
		}
	}
	return h
}

// Names returns a copy of the names and their addresses (NewHosts's
// input).
func (h *HostsFile) Names() map[string][]netip.Addr {
	out := make(map[string][]netip.Addr, len(h.names))
	for k, v := range h.names {
		out[k] = slices.Clone(v)
	}
	return out
}

func hostsKey(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

// Len is the number of names the file lists.
func (h *HostsFile) Len() int { return len(h.names) }

// LookupNetIP implements Resolver: the name's addresses of network ("ip",
// "ip4" or "ip6"), in the file's order.
func (h *HostsFile) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range h.names[hostsKey(host)] {
		if network == "ip" || (network == "ip4") == a.Is4() {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "not in the gateway's hosts file", Name: host, IsNotFound: true}
	}
	return out, nil
}

// RootsWith returns the host's roots (SSL_CERT_FILE and SSL_CERT_DIR
// honoured) with the PEM certificates of path added: the pool that
// verifies the upstreams of intercepted connections when the operator
// trusts a private CA too. A file without a certificate is an error.
func RootsWith(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return RootsWithPEM(b, path)
}

// RootsWithPEM is RootsWith of PEM certificates already read (what names
// them in its error): the Kubernetes backend's gateways, in their Pods,
// get the operator's file's contents from sandboxd.
func RootsWithPEM(b []byte, what string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool() // no system roots here: the file's alone
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, errors.New(what + " holds no PEM certificate")
	}
	return pool, nil
}
