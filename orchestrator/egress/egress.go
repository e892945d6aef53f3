// Package egress is sandboxd's egress gateway: the only way out of a
// networked sandbox. A backend plumbs each sandbox so that its TCP
// connections arrive at the gateway's TCP listener (with their original
// destination recoverable, e.g. through a DNAT and SO_ORIGINAL_DST) and its
// DNS queries at the gateway's DNS server, each from an address that names
// the sandbox (Attach). The gateway then judges every query and connection
// against the sandbox's policy (core.CompiledPolicy) and the operator's
// bounds (Bounds), dials what is allowed itself, from the host, and
// counts and logs what it did.
//
// Where the seam is, and why. Everything here is backend-neutral and runs
// in sandboxd's process, on the host's network stack: the Docker backend
// (orchestrator/backend/docker/network.go) owns the plumbing (veth pairs,
// the netns holder, nftables) and calls Attach, Update and Detach; a
// backend on other infrastructure could feed the same gateway. The gateway
// never trusts what a sandbox sends: the bytes it peeks at to find a name
// (a TLS ClientHello, an HTTP request line and Host) are bounded in size
// and time, parsed with the standard library's parsers, and a name is only
// ever used to decide and then to resolve on the host, never to pick an
// address the sandbox chose.
//
// How a connection is judged:
//
//  1. the source address names the sandbox (an unknown one is closed at
//     once), and the connection takes one of the sandbox's slots
//     (MaxConnsPerSandbox) and one of the gateway's (MaxConns), or is
//     closed at once, counted;
//  2. the gateway reads at most PeekBytes within PeekTimeout: a TLS
//     ClientHello gives the SNI, an HTTP/1 request its Host; else no name
//     (an IP literal or anything that is not a domain counts as none). If
//     the original destination address alone would be let through, a
//     client that sends nothing for FirstByteTimeout is taken to wait for
//     a server that speaks first (SSH, SMTP) and goes on without a name;
//  3. with a name: a name the policy denies is refused, unresolved. A name
//     the policy allows, or one it neither allows nor denies when it is
//     not an allow-list (AllowsNamesOnly), is resolved by the gateway on
//     the host (when the ceiling, if any, allows the name) and dialled at
//     the first of its addresses that passes step 5 (and, for a name the
//     policy only does not deny, is not denied by address), on the
//     original port; the original destination address is ignored, so a
//     name cannot smuggle a connection to another address. Any other name
//     (one an allow-list or the ceiling does not list) is never resolved,
//     since resolving a name the sandbox chose would carry it out through
//     the host's resolvers: the connection is judged on its original
//     address as in step 4;
//  4. without a name: the original destination address is judged
//     (JudgeAddr), and dialled if allowed;
//  5. every address dialled must pass the operator's bounds: not
//     unspecified, not one of the host's own addresses (whatever
//     AllowPrivate says), not in Bounds.SandboxNet or Bounds.Cluster, not
//     a special range (core.SpecialRange) unless Bounds.AllowPrivate
//     covers it, and within
//     Bounds.Ceiling when one is set (the ceiling allows the name dialled
//     or the address);
//  6. a TLS connection dialled by name whose name has a rule
//     (core.CompiledPolicy.Rule) is terminated with the sandbox's CA, and
//     each HTTP request is sent on with the rule's headers set, over TLS
//     verified against Config.RootCAs (intercept.go); every other
//     connection is spliced as it is (SNI passthrough), the peeked bytes
//     first. Plain HTTP to a rule's domain is passed through without the
//     headers: a secret never travels in clear.
//
// An open connection keeps the verdict it was let through on: Update (and
// Attach again) judges it anew under the new policy and closes it if
// refused. Connections close after IdleTimeout without a byte either way
// and after MaxConnLifetime in all.
//
// DNS: an A query for a name routed as in step 3 is answered with the
// addresses the host resolves that pass step 5 (at most 8, TTL 10 s);
// a name the policy denies, one an allow-list or the ceiling does not
// list (never looked up), or one whose every address is refused is
// NXDOMAIN and logged; a name the host does not know is NXDOMAIN. AAAA
// gets no data (sandboxes have no IPv6); other types (MX, TXT, HTTPS,
// SVCB, ...) are REFUSED. Queries over UDP (ServeDNS) and TCP
// (ServeDNSTCP) share the sandbox's rate (DNSPerSecond, DNSBurst), which
// also pays for the host lookups its connections' names need.
//
// # Limits (for SECURITY.md)
//
// What the gateway guarantees is the address a connection reaches, judged
// on the name the connection carries when it carries one. What it cannot
// see or stop:
//
//   - Names are what the client claims. A false name only reaches that
//     name's own addresses, but inside one connection the sandbox may ask
//     the server it reached for any site that server hosts: in a later
//     request on a kept-alive HTTP connection, or in the Host inside TLS
//     (domain fronting through a CDN that serves an allowed name and
//     others on one address).
//   - A deny_out of names alone does not keep a hostile sandbox from a
//     service: a connection that carries no name (or a name the policy
//     does not deny) sent to the service's address is judged on that
//     address. To keep a sandbox away from a service, deny its addresses,
//     or allow-list (deny_out 0.0.0.0/0 with allow_out).
//   - Encrypted Client Hello (ECH): the SNI the gateway sees is the
//     outer, public name of the ECH provider, and that is what is judged;
//     an allowed ECH front allows every site behind it. The gateway's
//     DNS refuses HTTPS and SVCB records (where ECH configurations are
//     published), so stock clients do not use ECH unless configured to
//     (or resolving through DNS over HTTPS to an allowed resolver).
//   - UDP is not carried at all, except DNS queries to the gateway: no
//     QUIC or HTTP/3 (clients fall back to TCP), no other DNS server, no
//     NTP, no WebRTC. ICMP neither. IPv6 is not carried: the gateway
//     resolves and answers IPv4 only.
//   - An allowed destination that is itself a proxy, a tunnel or a
//     resolver (an open HTTP proxy, a VPN or SSH endpoint, DNS over
//     HTTPS) reaches whatever it reaches; the gateway sees only the
//     connection to it.
//   - DNS is a channel out unless the policy is an allow-list: under a
//     deny-list or no policy, every name the sandbox asks for is looked
//     up by the host's resolver, which forwards it. Under an allow-list
//     (and outside a ceiling) a name that is not listed is never looked
//     up, in a DNS query, an SNI or a Host alike.
//   - Credentials: a rule's header values leave only in requests to the
//     rule's domain, over TLS verified against the host's roots; TRACE,
//     TRACK and CONNECT are refused on intercepted connections; the exact
//     values (8 bytes and longer, ASCII case ignored) are scrubbed from
//     every header block of a response (interim 1xx responses, headers,
//     trailers; names and values), but response bodies are passed as
//     they are, so an upstream that echoes request headers in a body (an
//     httpbin-style /headers endpoint) hands the secret to the sandbox:
//     rules belong on APIs that do not.
//     Intercepted connections speak HTTP/1.1 only (with WebSocket), so an
//     HTTP/2-only client (gRPC) cannot use a rule. Plain HTTP to a rule's
//     domain gets no headers.
//   - Server-first protocols: when a connection's address alone is
//     allowed, a client silent for FirstByteTimeout (1 s) is spliced by
//     address; under an allow-list such protocols need their address
//     allowed. A client slower than that to send its ClientHello (a
//     starved sandbox) is judged by address too.
//   - Bounds: the caps (256 connections per sandbox, 4096 in all, each
//     using two file descriptors) and rates are per gateway; a sandbox
//     that fills its own cap only refuses itself, but the global cap is
//     shared, so 16 sandboxes at their caps fill it. Every DNS packet is
//     read by the gateway before it is judged: the UDP socket's queue is
//     shared, and a flood faster than the gateway can drop it overflows
//     that queue for everyone, unless the plumbing drops each sandbox's
//     DNS past a rate before the socket (the Docker backend's nftables
//     table does, at 200 packets a second per sandbox).
//
// What a sandbox can make the gateway hold, at most (defaults):
//
//	per connection in its peek      PeekBytes 16 KiB, PeekTimeout 10 s (first byte 1 s when the address alone is allowed)
//	per spliced connection          2 × 16 KiB copy buffers, 2 file descriptors; IdleTimeout 10 min, MaxConnLifetime 24 h
//	per intercepted connection      request and response heads 64 KiB each, head within 30 s, 2 upstream connections, TLS handshakes within 10 s
//	connections                     256 per sandbox, 4096 in all; past them closed at once, counted (ConnsRefusedAtCap)
//	dialling                        10 s for every address of a name together
//	DNS                             100 queries/s per sandbox (burst 200), 32 in flight per sandbox and 512 in all, 4 KiB per query; past them dropped, counted (DNSRateLimited)
//	DNS over TCP                    a connection slot each, 32 queries per connection, 10 s per read
//	host lookups                    8 in flight per sandbox, 64 in all, 5 s each; one per name at a time; 4096 names cached 10 s (not found: 5 s)
//	leaf certificates               256 cached per sandbox CA
//	denials                         DenialLog 256 per sandbox; older ones dropped, counted (DeniedLogDropped)
//
// Goroutines per sandbox are bounded by its connection cap (two or three
// per spliced connection, up to about eight per intercepted one) and its
// DNS queries in flight.
package egress

import (
	"net/netip"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Bounds are the operator's, above every sandbox's policy.
type Bounds struct {
	// AllowPrivate are special ranges (core.SpecialRange) sandboxes may
	// reach nonetheless (sandboxd --egress-allow-private). Empty: none.
	AllowPrivate []netip.Prefix
	// Ceiling, when not nil, is the most any sandbox may reach: a
	// destination it does not allow (JudgeName/JudgeAddr Verdict not
	// VerdictAllowed) is refused whatever the sandbox's policy says
	// (sandboxd --egress-ceiling).
	Ceiling *core.CompiledPolicy
	// SandboxNet is the block the backend addresses sandboxes from: never
	// reachable through the gateway (one sandbox never reaches another).
	SandboxNet netip.Prefix
	// Cluster are further blocks never reachable, whatever AllowPrivate
	// says: on Kubernetes, the cluster's Pod, Service and node ranges
	// (sandboxd --kube-egress-deny), where the other sandboxes, sandboxd
	// and the kubelets are.
	Cluster []netip.Prefix
}

// Denial is one refused query or connection, kept in a bounded ring per
// sandbox so a user can learn why a download failed.
type Denial struct {
	Time time.Time
	// Kind is "dns" or "tcp".
	Kind string
	// Name is the name asked for or carried (SNI, Host), if any.
	Name string
	// Addr is the destination address (tcp), if known.
	Addr netip.AddrPort
	// Reason says what refused it: "denied by deny_out" (the name),
	// "not in allow_out (deny_out 0.0.0.0/0 makes it an allow-list)",
	// "private (RFC 1918) address 10.0.0.5", "outside the server's
	// ceiling", "no TLS SNI or HTTP Host: judged by address: address
	// 198.18.0.1 denied by deny_out", "resolves only to refused
	// addresses: ...", ... It names the sandbox's own policy and the
	// operator's bounds only, so it may be shown to the sandbox's user.
	Reason string
}

// Stats are a sandbox's counters since it was attached.
type Stats struct {
	BytesOut, BytesIn uint64 // to and from the world
	ConnsAllowed      uint64
	ConnsDenied       uint64
	DNSAllowed        uint64
	DNSDenied         uint64
	ConnsOpen         int
	RuleRequests      uint64 // HTTP requests sent on with a rule's headers
	DeniedLogDropped  uint64 // denials past the ring's size
	DNSRateLimited    uint64
	ConnsRefusedAtCap uint64
}
