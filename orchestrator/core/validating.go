package core

import (
	"context"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
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
func Validating(m Manager, p Policy) Manager {
	return &validating{m: m, p: p}
}

type validating struct {
	m       Manager
	p       Policy
	streams Usage
}

// stream takes one of the caller's streams on sandboxID, or says which cap
// refuses it; release gives it back.
func (v *validating) stream(ctx context.Context, sandboxID string) (release func(), err error) {
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

func (v *validating) Acquire(ctx context.Context, userID string, opts Options) (AcquireResult, error) {
	if err := ValidateTenant(CallerOf(ctx).Tenant); err != nil {
		return AcquireResult{}, err
	}
	if err := ValidateUserID(userID); err != nil {
		return AcquireResult{}, err
	}
	opts, err := v.p.ResolveOptions(opts)
	if err != nil {
		return AcquireResult{}, err
	}
	return v.m.Acquire(ctx, userID, opts)
}

func (v *validating) Get(ctx context.Context, sandboxID string) (Sandbox, error) {
	if err := ids(sandboxID); err != nil {
		return Sandbox{}, err
	}
	return v.m.Get(ctx, sandboxID)
}

func (v *validating) List(ctx context.Context, f ListFilter) ([]Sandbox, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return v.m.List(ctx, f)
}

func (v *validating) Delete(ctx context.Context, sandboxID string) error {
	if err := ids(sandboxID); err != nil {
		return err
	}
	return v.m.Delete(ctx, sandboxID)
}

func (v *validating) SetTimeout(ctx context.Context, sandboxID string, d time.Duration) (Sandbox, error) {
	if err := ids(sandboxID); err != nil {
		return Sandbox{}, err
	}
	if err := v.p.CheckIdleTimeout(d); err != nil {
		return Sandbox{}, err
	}
	return v.m.SetTimeout(ctx, sandboxID, d)
}

func (v *validating) Hibernate(ctx context.Context, sandboxID string) (Sandbox, error) {
	if err := ids(sandboxID); err != nil {
		return Sandbox{}, err
	}
	return v.m.Hibernate(ctx, sandboxID)
}

func (v *validating) Wake(ctx context.Context, sandboxID string) (Sandbox, *WakeInfo, error) {
	if err := ids(sandboxID); err != nil {
		return Sandbox{}, nil, err
	}
	return v.m.Wake(ctx, sandboxID)
}

func (v *validating) CreateSnapshot(ctx context.Context, sandboxID, name string) (Snapshot, error) {
	if err := ids(sandboxID); err != nil {
		return Snapshot{}, err
	}
	if err := ValidateSnapshotName(name); err != nil {
		return Snapshot{}, err
	}
	return v.m.CreateSnapshot(ctx, sandboxID, name)
}

func (v *validating) ListSnapshots(ctx context.Context, f SnapshotFilter) ([]Snapshot, error) {
	if f.SandboxID != "" {
		if err := ids(f.SandboxID); err != nil {
			return nil, err
		}
	}
	if f.Tenant != "" {
		if err := ValidateTenant(f.Tenant); err != nil {
			return nil, err
		}
		if c := CallerOf(ctx); !c.Admin && f.Tenant != c.Tenant {
			return nil, Invalidf("only an admin may list another tenant's snapshots")
		}
	}
	return v.m.ListSnapshots(ctx, f)
}

func (v *validating) DeleteSnapshot(ctx context.Context, ref string) error {
	if err := ValidateSnapshotRef(ref); err != nil {
		return err
	}
	return v.m.DeleteSnapshot(ctx, ref)
}

func (v *validating) Fork(ctx context.Context, sandboxID string, req ForkRequest) ([]ForkResult, error) {
	if err := ids(sandboxID); err != nil {
		return nil, err
	}
	if req.Count < 1 || req.Count > MaxForks {
		return nil, Invalidf("fork count %d: want 1 to %d", req.Count, MaxForks)
	}
	if len(req.UserIDs) != 0 && len(req.UserIDs) != req.Count {
		return nil, Invalidf("fork: %d user IDs for %d forks; give one per fork or none", len(req.UserIDs), req.Count)
	}
	seen := map[string]bool{}
	for _, u := range req.UserIDs {
		if err := ValidateUserID(u); err != nil {
			return nil, err
		}
		if seen[u] {
			return nil, Invalidf("fork: user %q is named twice", u)
		}
		seen[u] = true
	}
	if req.Options != nil {
		if req.Options.FromSnapshot != "" {
			return nil, Invalidf("fork: options.from_snapshot does not apply (the fork's state is the source's)")
		}
		opts, err := v.p.ResolveOptions(*req.Options)
		if err != nil {
			return nil, err
		}
		req.Options = &opts
	}
	return v.m.Fork(ctx, sandboxID, req)
}

func (v *validating) SandboxMetrics(ctx context.Context, sandboxID string, since time.Time) ([]SandboxMetrics, error) {
	if err := ids(sandboxID); err != nil {
		return nil, err
	}
	return v.m.SandboxMetrics(ctx, sandboxID, since)
}

// network checks a network operation's sandbox ID and that the server
// gives sandboxes network at all.
func (v *validating) network(sandboxID string) error {
	if err := ids(sandboxID); err != nil {
		return err
	}
	if !v.p.AllowNetwork {
		return NetworkNotEnabled()
	}
	return nil
}

func (v *validating) UpdateNetworkPolicy(ctx context.Context, sandboxID string, np NetworkPolicy) (Sandbox, error) {
	if err := v.network(sandboxID); err != nil {
		return Sandbox{}, err
	}
	np, err := v.p.CheckNetworkPolicy(np)
	if err != nil {
		return Sandbox{}, err
	}
	return v.m.UpdateNetworkPolicy(ctx, sandboxID, np)
}

func (v *validating) NetworkStatus(ctx context.Context, sandboxID string) (NetworkStatus, error) {
	if err := v.network(sandboxID); err != nil {
		return NetworkStatus{}, err
	}
	return v.m.NetworkStatus(ctx, sandboxID)
}

func (v *validating) GetHost(ctx context.Context, sandboxID string, port int) (HostInfo, error) {
	if err := v.network(sandboxID); err != nil {
		return HostInfo{}, err
	}
	if err := ValidatePort(port); err != nil {
		return HostInfo{}, err
	}
	return v.m.GetHost(ctx, sandboxID, port)
}

func (v *validating) PortTarget(ctx context.Context, sandboxID string, port int, token bool) (PortTarget, error) {
	if err := v.network(sandboxID); err != nil {
		return PortTarget{}, err
	}
	if err := ValidatePort(port); err != nil {
		return PortTarget{}, err
	}
	return v.m.PortTarget(ctx, sandboxID, port, token)
}

func (v *validating) Submit(ctx context.Context, req ExecRequest) (string, error) {
	if err := req.Validate(); err != nil {
		return "", err
	}
	req, err := v.p.ResolveExec(req)
	if err != nil {
		return "", err
	}
	return v.m.Submit(ctx, req)
}

func (v *validating) Follow(ctx context.Context, sandboxID, commandID string, afterSeq int64, fn func(Event) error) error {
	if err := ids(sandboxID, commandID); err != nil {
		return err
	}
	release, err := v.stream(ctx, sandboxID)
	if err != nil {
		return err
	}
	defer release()
	return v.m.Follow(ctx, sandboxID, commandID, afterSeq, fn)
}

// Execute checks the request as Submit does and takes a stream as Follow
// does, both before anything is submitted: a command whose stream would
// be refused is not run.
func (v *validating) Execute(ctx context.Context, req ExecRequest, submitted func(string), fn func(Event) error) error {
	if err := req.Validate(); err != nil {
		return err
	}
	req, err := v.p.ResolveExec(req)
	if err != nil {
		return err
	}
	release, err := v.stream(ctx, req.SandboxID)
	if err != nil {
		return err
	}
	defer release()
	return v.m.Execute(ctx, req, submitted, fn)
}

func (v *validating) Interrupt(ctx context.Context, sandboxID, commandID string) error {
	if err := ids(sandboxID, commandID); err != nil {
		return err
	}
	return v.m.Interrupt(ctx, sandboxID, commandID)
}

func (v *validating) SendStdin(ctx context.Context, sandboxID, commandID string, data []byte) error {
	if err := ids(sandboxID, commandID); err != nil {
		return err
	}
	if len(data) > MaxStdinChunk {
		return Invalidf("stdin data is %d bytes; the limit is %d per call", len(data), MaxStdinChunk)
	}
	return v.m.SendStdin(ctx, sandboxID, commandID, data)
}

func (v *validating) CloseStdin(ctx context.Context, sandboxID, commandID string) error {
	if err := ids(sandboxID, commandID); err != nil {
		return err
	}
	return v.m.CloseStdin(ctx, sandboxID, commandID)
}

func (v *validating) ResizePty(ctx context.Context, sandboxID, commandID string, size PtySize) error {
	if err := ids(sandboxID, commandID); err != nil {
		return err
	}
	if err := validatePtySize(size); err != nil {
		return err
	}
	return v.m.ResizePty(ctx, sandboxID, commandID, size)
}

func (v *validating) ListCommands(ctx context.Context, sandboxID string, pageSize int, pageToken string) (CommandPage, error) {
	if err := ids(sandboxID); err != nil {
		return CommandPage{}, err
	}
	switch {
	case pageSize < 0 || pageSize > MaxCommandPage:
		return CommandPage{}, Invalidf("page_size %d is outside 0-%d", pageSize, MaxCommandPage)
	case pageSize == 0:
		pageSize = DefaultCommandPage
	}
	return v.m.ListCommands(ctx, sandboxID, pageSize, pageToken)
}

func (v *validating) CreateContext(ctx context.Context, sandboxID, language, cwd string) (ContextInfo, error) {
	if err := ids(sandboxID); err != nil {
		return ContextInfo{}, err
	}
	if err := validateLanguage(language); err != nil {
		return ContextInfo{}, err
	}
	rel, err := CleanPath(cwd)
	if err != nil {
		return ContextInfo{}, err
	}
	if rel, err = ioproto.CleanContextCwd(rel); err != nil { // the protocol's length bound
		return ContextInfo{}, Invalidf("%v", err)
	}
	return v.m.CreateContext(ctx, sandboxID, CanonicalLanguage(language), rel)
}

func (v *validating) ListContexts(ctx context.Context, sandboxID string) ([]ContextInfo, error) {
	if err := ids(sandboxID); err != nil {
		return nil, err
	}
	return v.m.ListContexts(ctx, sandboxID)
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

func (v *validating) RestartContext(ctx context.Context, sandboxID, contextID string) error {
	contextID, err := contextOf(sandboxID, contextID)
	if err != nil {
		return err
	}
	return v.m.RestartContext(ctx, sandboxID, contextID)
}

func (v *validating) DeleteContext(ctx context.Context, sandboxID, contextID string) error {
	contextID, err := contextOf(sandboxID, contextID)
	if err != nil {
		return err
	}
	return v.m.DeleteContext(ctx, sandboxID, contextID)
}

func (v *validating) Upload(ctx context.Context, sandboxID, p string, r io.Reader) (FileInfo, error) {
	rel, err := sandboxPath(sandboxID, p)
	if err != nil {
		return FileInfo{}, err
	}
	if rel == "." {
		return FileInfo{}, Invalidf("upload path is empty: name a file under /workspace")
	}
	release, err := v.stream(ctx, sandboxID)
	if err != nil {
		return FileInfo{}, err
	}
	defer release()
	return v.m.Upload(ctx, sandboxID, rel, &uploadLimit{r: r, max: v.p.MaxUploadBytes, left: v.p.MaxUploadBytes, path: rel})
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

func (v *validating) Download(ctx context.Context, sandboxID, p string) (io.ReadCloser, FileInfo, error) {
	rel, err := sandboxPath(sandboxID, p)
	if err != nil {
		return nil, FileInfo{}, err
	}
	release, err := v.stream(ctx, sandboxID)
	if err != nil {
		return nil, FileInfo{}, err
	}
	rc, fi, err := v.m.Download(ctx, sandboxID, rel)
	if err != nil {
		release()
		return nil, FileInfo{}, err
	}
	return &releasingReader{ReadCloser: rc, release: release}, fi, nil
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

func (v *validating) ListFiles(ctx context.Context, sandboxID, p string) ([]FileInfo, error) {
	rel, err := sandboxPath(sandboxID, p)
	if err != nil {
		return nil, err
	}
	return v.m.ListFiles(ctx, sandboxID, rel)
}

// MaxListDepth bounds ListFilesDepth's depth.
const MaxListDepth = 10

func (v *validating) ListFilesDepth(ctx context.Context, sandboxID, p string, depth int) ([]FileInfo, error) {
	rel, err := sandboxPath(sandboxID, p)
	if err != nil {
		return nil, err
	}
	if depth < 0 || depth > MaxListDepth {
		return nil, Invalidf("list depth %d is out of range: give 0 to %d", depth, MaxListDepth)
	}
	return v.m.ListFilesDepth(ctx, sandboxID, rel, depth)
}

func (v *validating) MakeDirectory(ctx context.Context, sandboxID, p string, parents bool) (FileInfo, error) {
	rel, err := sandboxPath(sandboxID, p)
	if err != nil {
		return FileInfo{}, err
	}
	return v.m.MakeDirectory(ctx, sandboxID, rel, parents)
}

func (v *validating) Remove(ctx context.Context, sandboxID, p string, recursive bool) error {
	rel, err := sandboxPath(sandboxID, p)
	if err != nil {
		return err
	}
	if rel == "." {
		return Invalidf("remove %s: the workspace itself cannot be removed; remove what is in it", DisplayPath(rel))
	}
	return v.m.Remove(ctx, sandboxID, rel, recursive)
}

func (v *validating) Rename(ctx context.Context, sandboxID, from, to string, overwrite bool) (FileInfo, error) {
	relFrom, err := sandboxPath(sandboxID, from)
	if err != nil {
		return FileInfo{}, err
	}
	relTo, err := CleanPath(to)
	if err != nil {
		return FileInfo{}, err
	}
	showFrom, showTo := DisplayPath(relFrom), DisplayPath(relTo)
	switch {
	case relFrom == ".":
		return FileInfo{}, Invalidf("rename %s: the workspace itself cannot be moved", showFrom)
	case relTo == ".":
		return FileInfo{}, Invalidf("rename %s to %s: the destination is the workspace itself", showFrom, showTo)
	case relTo == relFrom:
		return FileInfo{}, Invalidf("rename %s: source and destination are the same path", showFrom)
	case strings.HasPrefix(relTo, relFrom+"/"):
		return FileInfo{}, Invalidf("rename %s to %s: cannot move a directory into itself", showFrom, showTo)
	}
	return v.m.Rename(ctx, sandboxID, relFrom, relTo, overwrite)
}

func (v *validating) WatchDirectory(ctx context.Context, sandboxID, p string, recursive bool, fn func(WatchUpdate) error) error {
	rel, err := sandboxPath(sandboxID, p)
	if err != nil {
		return err
	}
	return v.m.WatchDirectory(ctx, sandboxID, rel, recursive, fn)
}
