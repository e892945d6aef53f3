package docker

import (
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// publish reports a change in sb's life to the lifecycle sink (sandboxd's
// webhooks), right after the change was committed. A crash of sandboxd
// between the commit and this call loses the event; the window is the
// time of a function call, and reconcile reports what it finds changed at
// start-up (a death, an expiry) itself.
func (m *Manager) publish(sb *sandbox, kind core.LifecycleKind, reason string) {
	m.cfg.Lifecycle.Publish(core.LifecycleEvent{
		Kind: kind, Time: time.Now().UTC(), Tenant: sb.tenant, UserID: sb.userID,
		SandboxID: sb.id, Metadata: sb.metadata, Reason: reason,
	})
}

// publishCommandEnd reports the end of a command that sandboxd read (a
// done event in a follow). Its ID is the sandbox's and command's, so that
// several followers of one command make one event for receivers.
func (m *Manager) publishCommandEnd(sb *sandbox, commandID string, e core.Event) {
	m.cfg.Lifecycle.Publish(core.LifecycleEvent{
		Kind: core.LifecycleCommandFinished, ID: core.CommandEndEventID(sb.id, commandID),
		Time: time.Now().UTC(), Tenant: sb.tenant, UserID: sb.userID, SandboxID: sb.id,
		Metadata: sb.metadata, Command: &core.CommandEnd{CommandID: commandID, Status: e.Status, ExitCode: e.ExitCode},
	})
}
