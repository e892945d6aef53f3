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
//  1. the source address names the sandbox (an unknown one is dropped);
//  2. the gateway reads at most PeekBytes within PeekTimeout: a TLS
//     ClientHello gives the SNI, an HTTP/1 request its Host; else no name;
//  3. with a name: the policy judges the name (JudgeName); if allowed, the
//     gateway resolves the name itself and dials the first address that
//     passes the address checks (step 4) on the original port; the
//     original destination address is ignored (a name cannot smuggle a
//     connection to another address);
//  4. without a name: the original destination address is judged
//     (JudgeAddr), and dialled if allowed;
//  5. every address dialled must pass the operator's bounds: not a special
//     range (core.SpecialRange) unless Bounds.AllowPrivate covers it, not
//     one of the host's own addresses, not the sandboxes' own subnet, and
//     within Bounds.Ceiling when one is set;
//  6. a name with a rule (core.CompiledPolicy.Rule) over TLS is
//     terminated with the sandbox's CA, and each HTTP request is sent on
//     with the rule's headers set, over TLS verified against the host's
//     roots; every other connection is spliced as it is (SNI passthrough).
//
// DNS: an A query for a name the policy allows is answered with the
// addresses the host resolves that pass step 5 (short TTL); AAAA gets no
// answer (sandboxes have no IPv6); a denied name is NXDOMAIN and logged;
// other types are refused. When the policy allows every name
// (!AllowsNamesOnly), any name resolves, and connections are still judged.
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
	// Reason says what refused it: "denied by deny_out 0.0.0.0/0",
	// "private (RFC 1918) address 10.0.0.5", "outside the server's
	// ceiling", "the connection carried no name within 10s", ...
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
