package kube

import (
	"context"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// The operations the Kubernetes backend does not offer yet. Each answers
// FailedPrecondition saying so, rather than Unimplemented: the API has the
// method, this server's configuration lacks it. They are listed in the
// README's "Running on Kubernetes".

// unsupported is the error of an operation this backend lacks.
func unsupported(what string) error {
	return core.Errorf(core.ErrFailedPrecondition, "%s are not supported by sandboxd's kubernetes backend yet (--backend kubernetes); the docker backend has them", what)
}

// MakeDirectory is not supported on this backend.
func (m *Manager) MakeDirectory(context.Context, string, string, bool) (core.FileInfo, error) {
	return core.FileInfo{}, unsupported("directory operations (make, remove, rename)")
}

// Remove is not supported on this backend.
func (m *Manager) Remove(context.Context, string, string, bool) error {
	return unsupported("directory operations (make, remove, rename)")
}

// Rename is not supported on this backend.
func (m *Manager) Rename(context.Context, string, string, string, bool) (core.FileInfo, error) {
	return core.FileInfo{}, unsupported("directory operations (make, remove, rename)")
}

// WatchDirectory is not supported on this backend.
func (m *Manager) WatchDirectory(context.Context, string, string, bool, func(core.WatchUpdate) error) error {
	return unsupported("directory watches")
}

// CreateContext is not supported on this backend.
func (m *Manager) CreateContext(context.Context, string, string, string) (core.ContextInfo, error) {
	return core.ContextInfo{}, unsupported("execution contexts")
}

// ListContexts is not supported on this backend.
func (m *Manager) ListContexts(context.Context, string) ([]core.ContextInfo, error) {
	return nil, unsupported("execution contexts")
}

// RestartContext is not supported on this backend.
func (m *Manager) RestartContext(context.Context, string, string) error {
	return unsupported("execution contexts")
}

// DeleteContext is not supported on this backend.
func (m *Manager) DeleteContext(context.Context, string, string) error {
	return unsupported("execution contexts")
}

// Hibernate is not supported on this backend: idle sandboxes are deleted.
func (m *Manager) Hibernate(context.Context, string) (core.Sandbox, error) {
	return core.Sandbox{}, unsupported("hibernation and wake")
}

// Wake is not supported on this backend.
func (m *Manager) Wake(context.Context, string) (core.Sandbox, *core.WakeInfo, error) {
	return core.Sandbox{}, nil, unsupported("hibernation and wake")
}
