package core

import (
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// DefaultContextID is the context every sandbox has, in which commands
// without a context run.
const DefaultContextID = ioproto.DefaultContext

// ContextInfo describes a context.
type ContextInfo struct {
	ID       string
	Language string
	// Cwd is the working directory relative to /workspace ("." for
	// /workspace itself).
	Cwd       string
	CreatedAt time.Time
}

// validateContextID checks a context ID in a request; empty is allowed
// where it means the default context.
func validateContextID(id string, emptyOK bool) error {
	if id == "" && emptyOK {
		return nil
	}
	if err := ioproto.ValidateContextID(id); err != nil {
		return Invalidf("%v", err)
	}
	return nil
}
