package kube

import (
	"context"
	"net/netip"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	corev1 "k8s.io/api/core/v1"
)

// Ports. A networked sandbox's ports are served by sandboxd's HTTP front
// (orchestrator/door/ports), as on Docker: the front asks PortTarget
// where a port is, and dials it from the replica that got the request, at
// the sandbox's Pod IP. Three things let that connection in, and nothing
// else:
//
//   - the shipped NetworkPolicy sandbox-network admits TCP from sandboxd's
//     Pods to a networked sandbox's Pod, on any port (sandbox-isolation
//     admits only the io sidecar's port, for every sandbox);
//   - the node's table (podnet) lets the sandbox user answer a connection
//     someone else opened (ct direction reply), where it drops everything
//     else that user sends beyond the Pod's loopback;
//   - the io sidecar's own port is never a sandbox's port: PortTarget and
//     GetHost refuse it, so the front never proxies to it (the sidecar
//     wants its token anyway).
//
// The URLs and traffic tokens are the front's (Config.Ports), keyed alike
// on every replica, so a URL one replica gave is served by any.

// GetHost returns the URL of a networked sandbox's port (core.PortsFront.
// Host), hibernated or not. It neither wakes a hibernated sandbox (a
// request to the URL does) nor counts as a use. A sandbox without network
// has no ports (core.NoNetwork); a dead one is core.SandboxDead.
func (m *Manager) GetHost(ctx context.Context, sandboxID string, port int) (core.HostInfo, error) {
	rec, p, _, err := m.portsOf(ctx, sandboxID, port)
	if err != nil {
		return core.HostInfo{}, err
	}
	if p != nil {
		if _, dead, reason, _ := podState(p); dead {
			return core.HostInfo{}, deadError(sandboxID, reason)
		}
	}
	return m.cfg.Ports.Host(sandboxID, port, rec.Policy.AllowPublicTraffic)
}

// PortTarget tells the ports front where port of a networked sandbox is
// served (its Pod IP, while the Pod is ready) and whether its policy
// allows public traffic; an authorised request (token, or a public
// sandbox) to a running sandbox counts as a use. A sandbox that is
// hibernated or being hibernated is reported hibernated (the front's Wake
// waits for the hibernation and wakes it); a Pod still starting is
// reported running without an address (the front answers 502).
func (m *Manager) PortTarget(ctx context.Context, sandboxID string, port int, token bool) (core.PortTarget, error) {
	rec, p, c, err := m.portsOf(ctx, sandboxID, port)
	if err != nil {
		return core.PortTarget{}, err
	}
	t := core.PortTarget{Public: rec.Policy.AllowPublicTraffic, State: core.StateHibernated}
	if p == nil {
		t.Tenant = c.Annotations[annTenant]
		return t, nil
	}
	t.Tenant = p.Annotations[annTenant]
	_, dead, reason, ready := podState(p)
	switch {
	case dead:
		t.State, t.StateReason = core.StateDead, reason
	case p.Annotations[annHibernating] != "":
		// Hibernated, as far as a request is concerned: Wake waits.
	case ready:
		t.State = core.StateRunning
		if ip, err := netip.ParseAddr(p.Status.PodIP); err == nil {
			t.Addr = netip.AddrPortFrom(ip.Unmap(), uint16(port))
		}
		if token || t.Public {
			m.touch(sandboxID, p)
		}
	default:
		t.State = core.StateRunning // starting: no address yet
	}
	return t, nil
}

// portsOf is what GetHost and PortTarget share: the sandbox's network
// record and its Pod, or, while it is hibernated, its claim (lookup); or
// why it has no such port: the backend lacks networking, the sandbox has
// no network, or the port is the io sidecar's.
func (m *Manager) portsOf(ctx context.Context, id string, port int) (*netRecord, *corev1.Pod, *corev1.PersistentVolumeClaim, error) {
	if err := m.networking(); err != nil {
		return nil, nil, nil, err
	}
	if port == m.cfg.IOPort {
		return nil, nil, nil, core.Preconditionf("port %d is the io sidecar's in every sandbox's Pod on this backend, not the sandbox's; serve on another port", port)
	}
	p, c, err := m.lookup(ctx, id)
	if err != nil {
		return nil, nil, nil, err
	}
	var rec *netRecord
	if p != nil {
		rec = parseNetRecord(p.Annotations[annNetwork])
	} else {
		rec = parseNetRecord(c.Annotations[annNetwork])
	}
	if rec == nil {
		return nil, nil, nil, core.NoNetwork(id)
	}
	return rec, p, c, nil
}
