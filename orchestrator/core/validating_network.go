package core

import (
	"context"
)

// validatingNetwork is Validating's wrapper of a Network port.
type validatingNetwork struct {
	*validator
	m Network
}

// network checks a network operation's sandbox ID and that the server
// gives sandboxes network at all.
func (v validatingNetwork) network(sandboxID string) error {
	if err := ids(sandboxID); err != nil {
		return err
	}
	if !v.p.AllowNetwork {
		return NetworkNotEnabled()
	}
	return nil
}

func (v validatingNetwork) UpdateNetworkPolicy(ctx context.Context, sandboxID string, np NetworkPolicy) (Sandbox, error) {
	if err := v.network(sandboxID); err != nil {
		return Sandbox{}, err
	}
	np, err := v.p.CheckNetworkPolicy(np)
	if err != nil {
		return Sandbox{}, err
	}
	return v.m.UpdateNetworkPolicy(ctx, sandboxID, np)
}

func (v validatingNetwork) NetworkStatus(ctx context.Context, sandboxID string) (NetworkStatus, error) {
	if err := v.network(sandboxID); err != nil {
		return NetworkStatus{}, err
	}
	return v.m.NetworkStatus(ctx, sandboxID)
}

func (v validatingNetwork) GetHost(ctx context.Context, sandboxID string, port int) (HostInfo, error) {
	if err := v.network(sandboxID); err != nil {
		return HostInfo{}, err
	}
	if err := ValidatePort(port); err != nil {
		return HostInfo{}, err
	}
	return v.m.GetHost(ctx, sandboxID, port)
}

func (v validatingNetwork) PortTarget(ctx context.Context, sandboxID string, port int, token bool) (PortTarget, error) {
	if err := v.network(sandboxID); err != nil {
		return PortTarget{}, err
	}
	if err := ValidatePort(port); err != nil {
		return PortTarget{}, err
	}
	return v.m.PortTarget(ctx, sandboxID, port, token)
}
