package docker

import (
	"context"
	"net/netip"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Ports: a networked sandbox's ports are served by sandboxd's HTTP front
// (orchestrator/door/ports), which reaches them at the sandbox's own
// address S (network.go): the host routes S through the sandbox's veth,
// and the nftables table lets the replies of the host's own connections
// back in (ct state established). Nothing else about a port is this
// backend's: the URL and the traffic token are the front's
// (Config.Ports, a core.PortsFront), the same for every sandbox.

// touchEvery is how often requests through a port count as a use of their
// sandbox: at most once a second, so that a busy port costs the registry's
// lock nothing per request.
const touchEvery = time.Second

// hostOf returns the URL of sb's port on sandboxd's HTTP front and the
// traffic token it needs unless sb's policy allows public traffic.
func (m *Manager) hostOf(sb *sandbox, port int) (core.HostInfo, error) {
	sb.mu.Lock()
	public := sb.netPolicy != nil && sb.netPolicy.AllowPublicTraffic
	sb.mu.Unlock()
	return m.cfg.Ports.Host(sb.id, port, public)
}

// PortTarget tells the ports front where port of a networked sandbox is
// served and whether its policy allows public traffic; an authorised
// request (token, or a public sandbox) to a running sandbox counts as a
// use (at most once per touchEvery). A sandbox that is hibernated, or
// being hibernated or woken, is reported hibernated: the front's Wake
// waits for whichever is under way.
func (m *Manager) PortTarget(ctx context.Context, sandboxID string, port int, token bool) (core.PortTarget, error) {
	sb, err := m.lookup(ctx, sandboxID)
	if err != nil {
		return core.PortTarget{}, err
	}
	if !sb.network {
		return core.PortTarget{}, core.NoNetwork(sandboxID)
	}
	sb.mu.Lock()
	t := core.PortTarget{Tenant: sb.tenant, State: sb.state, StateReason: sb.reason,
		Public: sb.netPolicy != nil && sb.netPolicy.AllowPublicTraffic}
	if sb.hib.Phase != "" && t.State == core.StateRunning {
		t.State = core.StateHibernated
	}
	if t.State == core.StateRunning && sb.net != nil {
		t.Addr = netip.AddrPortFrom(sb.net.Addr, uint16(port))
	}
	stale := time.Since(sb.lastActive) >= touchEvery
	sb.mu.Unlock()
	if t.State == core.StateRunning && (token || t.Public) && stale {
		m.reg.touch(sb)
	}
	return t, nil
}
