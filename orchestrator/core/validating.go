package core

import (
	"context"
	"io"
	"sync"
)

// Validating returns m behind the domain's request rules: the form of IDs,
// names, languages, environments and paths (validate.go, path.go) and p's
// bounds and defaults (Policy). It is the one place those rules are
// applied, so a backend (and a test's fake) never re-checks them, and every
// backend refuses a bad request with the same message. A request it
// refuses never reaches m.
//
// What m receives is normalised: Options with the limits in force (and,
// for a sandbox with network, a checked policy of its own), an
// ExecRequest resolved by Policy.ResolveExec (canonical language, a
// command ID, a timeout), paths in CleanPath's relative form, an empty
// context ID of RestartContext and DeleteContext as DefaultContextID,
// ListCommands' page size defaulted, uploads cut off past
// Policy.MaxUploadBytes. Rules that need a sandbox's state (does the
// command exist, does the image have the language) stay the backend's.
//
// It also holds the caps on streams in progress (Policy.StreamCaps): a
// Follow, a Download until it is closed and an Upload each take one for
// the caller's tenant, after the request's checks.
//
// The order of checks is the API's: the sandbox ID first, then the other
// arguments in the order the method takes them.
//
// It wraps each capability of m on its own (validating_*.go), so a
// capability m lacks still answers Unsupported, but only once the
// request's form has passed.
func Validating(m Manager, p Policy) Manager {
	v := &validator{p: p}
	parts := PartsOf(m)
	return Parts{
		Sandboxes:  validatingSandboxes{v, parts.Sandboxes},
		Commands:   validatingCommands{v, parts.Commands},
		Files:      validatingFiles{v, parts.Files},
		Network:    validatingNetwork{v, parts.Network},
		Snapshots:  validatingSnapshots{v, parts.Snapshots},
		Volumes:    validatingVolumes{v, parts.Volumes},
		Templates:  validatingTemplates{v, parts.Templates},
		Monitoring: validatingMonitoring{v, parts.Monitoring},
	}
}

// validator is what Validating's wrappers share: the policy, and the
// streams in progress, counted across every capability.
type validator struct {
	p       Policy
	streams Usage
}

// stream takes one of the caller's streams on sandboxID, or says which cap
// refuses it; release gives it back.
func (v *validator) stream(ctx context.Context, sandboxID string) (release func(), err error) {
	tenant, caps := CallerOf(ctx).Tenant, v.p.StreamCaps()
	if scope, ok := v.streams.Take(caps, sandboxID, tenant, 1); !ok {
		who := sandboxID
		if scope == ScopeTenant {
			who = tenant
		}
		return nil, StreamsCapReached(scope, who, caps.Of(scope))
	}
	var once sync.Once
	return func() { once.Do(func() { v.streams.Release(sandboxID, tenant, 1) }) }, nil
}

// ids checks a sandbox ID and, for an operation on a command, its ID.
func ids(sandboxID string, commandID ...string) error {
	if err := ValidateSandboxID(sandboxID); err != nil {
		return err
	}
	for _, c := range commandID {
		if err := ValidateCommandID(c); err != nil {
			return err
		}
	}
	return nil
}

// sandboxPath checks a sandbox ID and a path, returning the clean path.
func sandboxPath(sandboxID, p string) (string, error) {
	if err := ValidateSandboxID(sandboxID); err != nil {
		return "", err
	}
	return CleanPath(p)
}

// contextOf checks the context ID of an operation on a context: empty is
// the default context, as for Execute.
func contextOf(sandboxID, contextID string) (string, error) {
	if err := ids(sandboxID); err != nil {
		return "", err
	}
	if contextID == "" {
		return DefaultContextID, nil
	}
	return contextID, validateContextID(contextID, false)
}

// uploadLimit fails the read past Policy.MaxUploadBytes, so a backend
// never stores more than the limit, whatever the caller sends.
type uploadLimit struct {
	r         io.Reader
	max, left int64
	path      string
	volume    bool   // path is on a volume, not under /workspace
	what      string // when set, what is uploaded and the flag bounding it (not a file)
}

func (u *uploadLimit) Read(p []byte) (int, error) {
	if u.left < 0 {
		return 0, u.tooLarge()
	}
	if int64(len(p)) > u.left+1 {
		p = p[:u.left+1]
	}
	n, err := u.r.Read(p)
	u.left -= int64(n)
	if u.left < 0 {
		return 0, u.tooLarge()
	}
	return n, err
}

func (u *uploadLimit) tooLarge() error {
	if u.what != "" {
		return Errorf(ErrResourceExhausted, "%s is larger than the server's limit of %d bytes", u.what, u.max)
	}
	show := DisplayPath(u.path)
	if u.volume {
		show = VolumePathDisplay(u.path) + " on the volume"
	}
	return Invalidf("upload to %s is larger than the server's upload limit of %d bytes (sandboxd --max-upload)", show, u.max)
}

// releasingReader gives its stream back when it is closed.
type releasingReader struct {
	io.ReadCloser
	release func()
}

func (r *releasingReader) Close() error {
	defer r.release()
	return r.ReadCloser.Close()
}

// MaxListDepth bounds ListFilesDepth's depth.
const MaxListDepth = 10
