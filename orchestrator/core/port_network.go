package core

import (
	"context"
)

// Network is the network of a sandbox created with one (Options.Network)
// and its ports. A sandbox without network answers NoNetwork; a server
// without networking NetworkNotEnabled (Validating).
type Network interface {
	// UpdateNetworkPolicy replaces the sandbox's egress policy (checked and
	// normalised by Validating, as Options.NetworkPolicy is) and returns the
	// sandbox with it, redacted. The policy is persisted before it is
	// applied: new connections follow it at once, open ones it refuses are
	// closed. A hibernated sandbox keeps it for its wake, without waking;
	// a dead one is SandboxDead.
	UpdateNetworkPolicy(ctx context.Context, sandboxID string, p NetworkPolicy) (Sandbox, error)

	// NetworkStatus returns the sandbox's policy (redacted), its egress
	// counters and its recent denials. It does not wake a hibernated
	// sandbox (its counters are then zero).
	NetworkStatus(ctx context.Context, sandboxID string) (NetworkStatus, error)

	// GetHost returns the URL at which port of the sandbox is served by
	// sandboxd's HTTP front, and the traffic token it needs unless the
	// sandbox's policy allows public traffic. It does not wake a
	// hibernated sandbox: a request to the URL does.
	GetHost(ctx context.Context, sandboxID string, port int) (HostInfo, error)

	// PortTarget tells sandboxd's ports front (orchestrator/door/ports)
	// how to reach port of a networked sandbox, and whether a request
	// without the sandbox's traffic token may (PortTarget.Public). token
	// says that the request carried the sandbox's token (the front checks
	// it, PortsFront.CheckToken). The front authorises a request before it
	// acts on the answer; an authorised one (token, or Public) to a running
	// sandbox counts as a use of it, as a command does, and nothing else
	// changes anything. PortTarget never wakes a hibernated sandbox (the
	// front calls Wake once it has authorised the request) and reports the
	// sandbox's state rather than failing for it; a sandbox without
	// network is NoNetwork.
	PortTarget(ctx context.Context, sandboxID string, port int, token bool) (PortTarget, error)
}
