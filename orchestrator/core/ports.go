package core

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Ports: what the domain knows of sandboxd's HTTP front for sandbox ports
// (orchestrator/door/ports). A networked sandbox's port is served there
// under a URL of one of two forms, and a private sandbox's ports open to
// whoever holds its traffic token:
//
//   - the Host form, on deployments with wildcard DNS for a domain D
//     (sandboxd --ports-domain): SCHEME://PORT-SANDBOXID.D[:P]/, the
//     sandbox and port in the first label of the Host (E2B's form: its
//     SDK's getHost computes it);
//   - the path form, on the front's own address: SCHEME://HOST[:P]/
//     sandboxes/SANDBOXID/PORT/, the prefix taken off before the request
//     reaches the sandbox.
//
// The traffic token is an HMAC-SHA256 of the sandbox's ID under a secret
// of the server's (kept in its state directory), so it survives restarts
// and needs nothing stored per sandbox. It is another key's than the E2B
// door's access token: a port's token must never open envd.
//
// PortsFront is shared by the backends (GetHost answers with Host), the
// front (which reads URLs back and checks tokens) and the E2B door (whose
// getHost URLs are the front's Host form).

// The request headers that carry a traffic token: sandboxd's own, and
// E2B's (what its SDKs send with Sandbox.trafficAccessToken).
const (
	TrafficTokenHeader    = "Sandboxd-Traffic-Token"
	E2BTrafficTokenHeader = "E2B-Traffic-Access-Token"
)

// PortsPathPrefix starts every URL of the path form.
const PortsPathPrefix = "/sandboxes/"

// PortTarget is how sandboxd's ports front reaches a port of a networked
// sandbox (Manager.PortTarget).
type PortTarget struct {
	// Tenant is the sandbox's: the front acts as it (to wake the sandbox).
	Tenant string
	// State is the sandbox's: running (Addr serves), hibernated (wake it
	// first) or dead (StateReason says why).
	State       State
	StateReason string
	// Public is set when the sandbox's policy allows public traffic
	// (NetworkPolicy.AllowPublicTraffic): no token is needed.
	Public bool
	// Addr is where the port is reached from sandboxd: the sandbox's own
	// address and the port. Valid while the sandbox runs.
	Addr netip.AddrPort
}

// PortsFront is the front's URL scheme and its traffic tokens. Build it
// with NewPortsFront.
type PortsFront struct {
	base   *url.URL // SCHEME://HOST[:PORT], no path
	domain string   // lower case, no dots at either end; "" without the Host form
	secret []byte
}

// NewPortsFront returns the front whose URLs are under base (SCHEME://
// HOST[:PORT]: how clients reach the front, http or https, no path) and,
// when domain is set, of the Host form under domain; secret (at least 16
// bytes) keys the traffic tokens.
func NewPortsFront(base, domain string, secret []byte) (*PortsFront, error) {
	if len(secret) < 16 {
		return nil, errors.New("the traffic-token secret is missing or shorter than 16 bytes")
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("the ports front's URL %q: want http:// or https:// with a host and an optional port, nothing else", base)
	}
	u = &url.URL{Scheme: u.Scheme, Host: strings.ToLower(u.Host)}
	domain = strings.ToLower(strings.Trim(domain, "."))
	if domain != "" {
		for _, label := range strings.Split(domain, ".") {
			if !dnsLabel(label) {
				return nil, fmt.Errorf("the ports domain %q is not a DNS name (labels of letters, digits and inner hyphens)", domain)
			}
		}
	}
	return &PortsFront{base: u, domain: domain, secret: secret}, nil
}

// dnsLabel reports whether s is a DNS label of letters, digits and inner
// hyphens, at most 63 long.
func dnsLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Domain is the Host form's domain ("" when the front has none).
func (f *PortsFront) Domain() string { return f.domain }

// Base is the front's own URL, SCHEME://HOST[:PORT].
func (f *PortsFront) Base() string { return f.base.String() }

// URL is the URL of port of sandbox id: the Host form when the front has
// a domain, else the path form; both end with a slash.
func (f *PortsFront) URL(id string, port int) string {
	if f.domain == "" {
		return f.base.String() + PathOf(id, port) + "/"
	}
	host := strconv.Itoa(port) + "-" + id + "." + f.domain
	if p := f.base.Port(); p != "" {
		host = net.JoinHostPort(host, p)
	}
	return f.base.Scheme + "://" + host + "/"
}

// Host is what GetHost answers for port of sandbox id on the front f
// (nil: the server has none, and port URLs are refused): its URL, and,
// unless the sandbox's policy allows public traffic, the traffic token a
// request needs. Every backend answers with it.
func (f *PortsFront) Host(id string, port int, public bool) (HostInfo, error) {
	if f == nil {
		return HostInfo{}, Preconditionf("port URLs need sandboxd's HTTP front for ports, which is off on this server (sandboxd --ports-listen)")
	}
	h := HostInfo{URL: f.URL(id, port), TokenRequired: !public, TokenHeader: TrafficTokenHeader}
	if !public {
		h.Token = f.Token(id)
	}
	return h, nil
}

// PathOf is the path form's prefix for port of sandbox id, without the
// trailing slash: /sandboxes/ID/PORT.
func PathOf(id string, port int) string {
	return PortsPathPrefix + id + "/" + strconv.Itoa(port)
}

// Token is sandbox id's traffic token: 64 hex digits.
func (f *PortsFront) Token(id string) string {
	mac := hmac.New(sha256.New, f.secret)
	mac.Write([]byte("sandboxd-port-traffic:" + id))
	return hex.EncodeToString(mac.Sum(nil))
}

// CheckToken reports whether tok is sandbox id's traffic token, in
// constant time.
func (f *PortsFront) CheckToken(id, tok string) bool {
	return tok != "" && hmac.Equal([]byte(tok), []byte(f.Token(id)))
}

// ParseHost reads a Host of the Host form (a port after a colon allowed):
// the sandbox and port in its first label, PORT-SANDBOXID, under the
// front's domain. A front without a domain reads the first label under
// any domain: only E2B's SDK then makes such a Host (getHost, under its
// own E2B_DOMAIN), and the label alone names the port. ok is false for
// any other Host.
func (f *PortsFront) ParseHost(host string) (id string, port int, ok bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	label, rest, found := strings.Cut(host, ".")
	if !found || (f.domain != "" && rest != f.domain) {
		return "", 0, false
	}
	ps, id, found := strings.Cut(label, "-")
	if !found {
		return "", 0, false
	}
	if port, ok = parsePort(ps); !ok || ValidateSandboxID(id) != nil {
		return "", 0, false
	}
	return id, port, true
}

// ParsePath reads a path of the path form: /sandboxes/ID/PORT followed by
// nothing or by the rest of the path (starting with a slash). ok is false
// for any other path.
func ParsePath(path string) (id string, port int, rest string, ok bool) {
	p, found := strings.CutPrefix(path, PortsPathPrefix)
	if !found {
		return "", 0, "", false
	}
	id, p, found = strings.Cut(p, "/")
	if !found || ValidateSandboxID(id) != nil {
		return "", 0, "", false
	}
	ps, rest := p, ""
	if i := strings.IndexByte(p, '/'); i >= 0 {
		ps, rest = p[:i], p[i:]
	}
	if port, ok = parsePort(ps); !ok {
		return "", 0, "", false
	}
	return id, port, rest, true
}

// parsePort reads a port of 1-65535 in decimal, without sign or leading
// zeros (a port has one spelling, so a URL has one).
func parsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 || s[0] == '0' || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxPort {
		return 0, false
	}
	return n, true
}
