package docker

import "github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wspath"

// fsError classifies an error from the host file system for a
// user-supplied path (shown as display): wspath.FSError, the one
// classification the io sidecar of the Kubernetes backend applies too.
func fsError(op, display string, err error) error { return wspath.FSError(op, display, err) }
