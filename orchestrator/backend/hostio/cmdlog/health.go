package cmdlog

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// A sandbox's health is what its driver says in /io/driver.json (see
// ioproto/PROTOCOL.md): "ok", or "io_full" with a reason while /io has no
// room for commands' output. A sandbox that is not healthy stays running
// (commands that fit still work, and it recovers by itself once room is
// made); core.Sandbox.HealthReason says what is wrong. Each backend reads
// the file as it reaches it (the Docker backend on the host, the
// Kubernetes backend through the Pod's io sidecar); what it means is
// HealthReason's, the same on both.

// MaxHealthReason bounds the reason passed on to callers, in bytes (an
// ellipsis marks a cut).
const MaxHealthReason = 1 << 10

// HealthReason is the core.Sandbox.HealthReason a driver status means: ""
// for ok (or no health, from drivers before it existed), otherwise the
// driver's reason, or a reason made up when it gave none. The status is
// the sandbox's (hostile): the reason is made valid UTF-8 and bounded by
// MaxHealthReason, cut at a character's boundary.
func HealthReason(ds ioproto.DriverStatus) string {
	switch ds.Health {
	case "", ioproto.HealthOK:
		return ""
	}
	r := ds.HealthReason
	if r == "" {
		if ds.Health == ioproto.HealthIOFull {
			r = "/io is full"
		} else {
			r = "the sandbox's driver reports health " + core.Truncate(fmt.Sprintf("%q", ds.Health), 64)
		}
	}
	if !utf8.ValidString(r) {
		r = strings.ToValidUTF8(r, "\uFFFD")
	}
	if len(r) <= MaxHealthReason {
		return r
	}
	cut := MaxHealthReason
	for cut > 0 && !utf8.RuneStart(r[cut]) {
		cut--
	}
	return r[:cut] + "…"
}
