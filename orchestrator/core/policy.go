package core

import (
	"cmp"
	"maps"
	"net/netip"
	"runtime"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Policy is what the operator decides about sandboxes and commands: the
// image, lifetimes, limits, caps and what callers may ask for. It is one
// value for every backend (docker.Config and kube.Config embed it, and
// sandboxd fills it once from its flags), its defaults and sanity checks
// are ApplyDefaults's alone, and Validating applies its request rules
// before any backend sees a request. Zero fields take the defaults given.
type Policy struct {
	// Image is the sandbox image of new sandboxes; default DefaultImage.
	Image string
	// Runtime names the container runtime ("" the backend's default;
	// RuntimeGVisor is gVisor), for the limits it needs.
	Runtime string

	// IdleTTL is how long a sandbox lives without being used; default
	// DefaultIdleTTL.
	IdleTTL time.Duration
	// MaxLifetime caps a sandbox's age however busy it is; 0: unlimited.
	MaxLifetime time.Duration
	// MaxIdleTTL caps the idle TTL a caller may give one sandbox
	// (Options.IdleTimeout, SetTimeout); default DefaultMaxIdleTTL, or
	// IdleTTL when that is longer. Must not be below IdleTTL.
	MaxIdleTTL time.Duration
	// OnIdle is what the idle TTL does to a running sandbox: OnIdleDelete
	// (the default) or OnIdleHibernate, on a backend that hibernates.
	OnIdle string
	// HibernatedTTL is how long a hibernated sandbox is kept before it is
	// deleted; default DefaultHibernatedTTL.
	HibernatedTTL time.Duration

	// DefaultLimits apply to the zero fields of a request's limits; zero
	// fields here default to 1 GiB, 1 CPU, 256 processes and a
	// DefaultDiskBytes disk.
	DefaultLimits Limits
	// MaxLimits cap what a request may ask for; zero fields default to
	// 8 GiB, all of the host's CPUs, 4096 processes and a
	// DefaultMaxDiskBytes disk.
	MaxLimits Limits
	// NoDiskLimit: the backend cannot enforce Limits.DiskBytes (Docker
	// without disk volumes), which is then 0 in every limit in force.
	NoDiskLimit bool
	// IODiskBytes is the size of each sandbox's /io; default
	// DefaultIODiskBytes (0 with NoDiskLimit).
	IODiskBytes int64

	// DefaultTimeout applies to commands submitted without one; default
	// DefaultCommandTimeout.
	DefaultTimeout time.Duration
	// MaxTimeout caps a command's timeout; default DefaultMaxTimeout.
	MaxTimeout time.Duration
	// MaxCodeBytes caps one command's code; default (and at most)
	// MaxCodeBytes, which the /io protocol's record size allows.
	MaxCodeBytes int
	// MaxUploadBytes caps one uploaded file; default
	// DefaultMaxUploadBytes.
	MaxUploadBytes int64
	// MaxVolumeBytes caps a volume's size; default DefaultMaxVolumeBytes.
	MaxVolumeBytes int64
	// MaxVolumesPerTenant caps a tenant's volumes; default
	// DefaultMaxVolumesPerTenant.
	MaxVolumesPerTenant int
	// MaxTemplateFileBytes caps one archive uploaded for templates;
	// default DefaultMaxTemplateFileBytes. MaxTemplatesPerTenant caps a
	// tenant's templates; default DefaultMaxTemplatesPerTenant.
	MaxTemplateFileBytes  int64
	MaxTemplatesPerTenant int
	// TemplateBuilds is how many template builds may run at once (more
	// are ResourceExhausted); default DefaultTemplateBuilds.
	// MaxTemplateBuildsPerTenant is how many of them one tenant's may be,
	// so that a tenant's endless builds hold its own share, never every
	// build of the server; default a quarter of TemplateBuilds (at least
	// one), at most TemplateBuilds. TemplateBuildTimeout bounds one build
	// (past it, it fails as DeadlineExceeded); default
	// DefaultTemplateBuildTimeout.
	TemplateBuilds             int
	MaxTemplateBuildsPerTenant int
	TemplateBuildTimeout       time.Duration

	// MaxSandboxes caps the number of live sandboxes, warm-pool ones
	// included (they hold memory too); 0: unlimited.
	MaxSandboxes int
	// MaxSandboxesPerTenant caps one tenant's live sandboxes; 0: unlimited.
	MaxSandboxesPerTenant int
	// WarmPool is how many started, unclaimed sandboxes to keep ready for
	// new users; 0: none.
	WarmPool int
	// WarmPoolNetwork is how many more to keep with their network plumbing
	// made, sealed until a request with network claims one and its policy
	// takes effect (needs AllowNetwork); 0: none, and requests with
	// network start their own.
	WarmPoolNetwork int

	// The caps on WatchDirectory (WatchCaps), per tenant before they are
	// global. Each call in progress holds an inotify instance of
	// sandboxd's (Linux allows 128 per user by default:
	// fs.inotify.max_user_instances, shared with every other process of
	// root's), two descriptors and three goroutines; each directory it
	// watches holds an inotify watch (about 1 KiB of kernel memory, within
	// fs.inotify.max_user_watches) and an open descriptor. Zero fields
	// take the defaults given; a cap must not exceed the wider one
	// (sandbox ≤ tenant ≤ server), and a tenant's cap should stay below
	// the server's so that one tenant cannot take every watch.
	//
	// MaxWatches caps the calls in progress on the server; default
	// DefaultMaxWatches (half of Linux's default inotify instances).
	MaxWatches int
	// MaxWatchesPerTenant caps one tenant's calls in progress, over its
	// sandboxes; default a quarter of MaxWatches.
	MaxWatchesPerTenant int
	// MaxWatchesPerSandbox caps the calls in progress on one sandbox;
	// default DefaultMaxWatchesPerSandbox, or MaxWatchesPerTenant if lower.
	MaxWatchesPerSandbox int
	// MaxWatchDirs caps the directories all calls on the server watch;
	// default DefaultMaxWatchDirs.
	MaxWatchDirs int
	// MaxWatchDirsPerTenant caps the directories one tenant's calls
	// watch; default a quarter of MaxWatchDirs.
	MaxWatchDirsPerTenant int
	// MaxWatchDirsPerSandbox caps the directories the calls on one
	// sandbox watch; default DefaultMaxWatchDirsPerSandbox, or
	// MaxWatchDirsPerTenant if lower.
	MaxWatchDirsPerSandbox int
	// MaxWatchDirsPerCall caps the directories one call watches; default
	// DefaultMaxWatchDirsPerCall, or MaxWatchDirsPerSandbox if lower.
	MaxWatchDirsPerCall int

	// The caps on streams in progress (StreamCaps), per tenant before
	// they are global, applied by Validating: a Follow (Execute,
	// StreamCommand, the E2B door's runs and process streams), a Download
	// until it is closed, an Upload. Each holds descriptors of sandboxd's
	// (a file of the sandbox's, and on the HTTP doors a connection), which
	// every tenant shares; a caller's streams count against the caller's
	// tenant. The same rules as the watch caps'.
	//
	// MaxStreams caps the streams on the server; default
	// DefaultMaxStreams.
	MaxStreams int
	// MaxStreamsPerTenant caps one tenant's streams; default a quarter of
	// MaxStreams.
	MaxStreamsPerTenant int
	// MaxStreamsPerSandbox caps the streams on one sandbox; default
	// DefaultMaxStreamsPerSandbox, or MaxStreamsPerTenant if lower.
	MaxStreamsPerSandbox int

	// AllowNetwork lets callers ask for outbound network access
	// (Options.Network, Options.NetworkPolicy).
	AllowNetwork bool
	// EgressDefault is the policy of a sandbox whose caller asks for
	// network without one (sandboxd --egress-default-allow,
	// --egress-default-deny); nil: an empty policy, every public
	// destination. It passes the checks a caller's policy passes
	// (CheckNetworkPolicy) and is copied into each sandbox when it is
	// created: a sandbox keeps its policy when the default changes.
	EgressDefault *NetworkPolicy
	// EgressCeiling, when not empty, is the most any sandbox may reach,
	// as allow_out entries: the gateway refuses a destination none of them
	// allows, whatever the sandbox's policy says (CompiledCeiling), and an
	// allow_out entry sharing nothing with them is refused when a policy is
	// set (sandboxd --egress-ceiling).
	EgressCeiling []string
	// EgressAllowPrivate are the special ranges (SpecialRange: private,
	// loopback, link-local, ...) sandboxes may reach nonetheless, when
	// their policy allows (sandboxd --egress-allow-private). Empty: none.
	EgressAllowPrivate []netip.Prefix
}

// Defaults.
const (
	DefaultImage          = "sandboxd-sandbox:latest"
	DefaultIdleTTL        = 30 * time.Minute
	DefaultCommandTimeout = 10 * time.Minute
	DefaultMaxTimeout     = time.Hour
	DefaultMaxUploadBytes = 256 << 20
	// DefaultHibernatedTTL keeps a hibernated sandbox a week.
	DefaultHibernatedTTL = 7 * 24 * time.Hour
	// DefaultDiskBytes is a sandbox's /workspace size unless configured.
	DefaultDiskBytes = 1 << 30
	// DefaultMaxDiskBytes caps what a request may ask for unless configured.
	DefaultMaxDiskBytes = 16 << 30
	// DefaultIODiskBytes is the size of a sandbox's /io unless configured:
	// room for the command log and the retained commands' outputs.
	DefaultIODiskBytes = 1 << 30
	// MinDiskBytes is the smallest volume: ext4 with a journal needs a few
	// MiB of its own.
	MinDiskBytes = 16 << 20

	// DefaultMaxWatches is half of the 128 inotify instances Linux allows
	// a user by default, leaving the rest to sandboxd's own file watcher
	// and root's other processes (systemd, dockerd, containerd); a tenant
	// gets a quarter of it, 16, by default.
	DefaultMaxWatches = 64
	// DefaultMaxWatchesPerSandbox lets one user's sandbox hold half of its
	// tenant's default share.
	DefaultMaxWatchesPerSandbox = 8
	// DefaultMaxWatchDirs is 32000 inotify watches (about 32 MiB of kernel
	// memory; Linux allows 1% of RAM by default, about 40000 watches on a
	// 4 GiB host, since 5.11) and as many open descriptors (Go raises
	// sandboxd's soft limit to its hard one, 524288 under systemd); a
	// tenant gets a quarter of it, 8000, by default.
	DefaultMaxWatchDirs = 32000
	// DefaultMaxWatchDirsPerSandbox and DefaultMaxWatchDirsPerCall: a
	// recursive watch of a project tree with its dependencies fits in
	// one call; a sandbox holds four such calls.
	DefaultMaxWatchDirsPerSandbox = 4000
	DefaultMaxWatchDirsPerCall    = 1000

	// DefaultMaxStreams: 4096 streams hold at most about 8192 descriptors,
	// well within the soft limit Go gives sandboxd (its hard limit: 524288
	// under systemd, 20000 or more in most containers), next to the watch
	// caps'; a tenant gets a quarter of it, 1024, by default.
	DefaultMaxStreams = 4096
	// DefaultMaxStreamsPerSandbox: far more than one user's clients follow
	// at once, far fewer than a tenant's share.
	DefaultMaxStreamsPerSandbox = 256
)

// MaxCodeBytes bounds the code of one command, whatever the configuration.
// The protocol allows records up to 2 MiB; 1 MiB of code leaves room for
// JSON escaping.
const MaxCodeBytes = 1 << 20

// DefaultPolicy is the zero Policy with its defaults applied.
func DefaultPolicy() Policy {
	var p Policy
	if err := p.ApplyDefaults(); err != nil {
		panic(err) // the defaults are consistent
	}
	return p
}

// ApplyDefaults fills p's zero fields and checks the result: negative
// values, a default above its maximum, limits the runtime cannot run.
// Errors wrap ErrInvalidArgument and name the field ("config: ..."). It is
// idempotent, so a backend may apply it to a policy already applied.
func (p *Policy) ApplyDefaults() error {
	p.Image = cmp.Or(p.Image, DefaultImage)
	p.IdleTTL = cmp.Or(p.IdleTTL, DefaultIdleTTL)
	p.MaxIdleTTL = cmp.Or(p.MaxIdleTTL, max(DefaultMaxIdleTTL, p.IdleTTL))
	p.OnIdle = cmp.Or(p.OnIdle, OnIdleDelete)
	p.HibernatedTTL = cmp.Or(p.HibernatedTTL, DefaultHibernatedTTL)
	p.DefaultTimeout = cmp.Or(p.DefaultTimeout, DefaultCommandTimeout)
	p.MaxTimeout = cmp.Or(p.MaxTimeout, DefaultMaxTimeout)
	p.MaxUploadBytes = cmp.Or(p.MaxUploadBytes, DefaultMaxUploadBytes)
	p.MaxCodeBytes = cmp.Or(p.MaxCodeBytes, MaxCodeBytes)
	p.MaxVolumeBytes = cmp.Or(p.MaxVolumeBytes, DefaultMaxVolumeBytes)
	p.MaxVolumesPerTenant = cmp.Or(p.MaxVolumesPerTenant, DefaultMaxVolumesPerTenant)
	p.MaxTemplateFileBytes = cmp.Or(p.MaxTemplateFileBytes, DefaultMaxTemplateFileBytes)
	p.MaxTemplatesPerTenant = cmp.Or(p.MaxTemplatesPerTenant, DefaultMaxTemplatesPerTenant)
	p.TemplateBuilds = cmp.Or(p.TemplateBuilds, DefaultTemplateBuilds)
	p.MaxTemplateBuildsPerTenant = cmp.Or(p.MaxTemplateBuildsPerTenant, max(p.TemplateBuilds/4, 1))
	p.TemplateBuildTimeout = cmp.Or(p.TemplateBuildTimeout, DefaultTemplateBuildTimeout)
	p.DefaultLimits.MemoryBytes = cmp.Or(p.DefaultLimits.MemoryBytes, 1<<30)
	p.DefaultLimits.NanoCPUs = cmp.Or(p.DefaultLimits.NanoCPUs, 1e9)
	p.DefaultLimits.PidsLimit = cmp.Or(p.DefaultLimits.PidsLimit, 256)
	p.MaxLimits.MemoryBytes = cmp.Or(p.MaxLimits.MemoryBytes, 8<<30)
	p.MaxLimits.NanoCPUs = cmp.Or(p.MaxLimits.NanoCPUs, int64(runtime.NumCPU())*1e9)
	p.MaxLimits.PidsLimit = cmp.Or(p.MaxLimits.PidsLimit, 4096)
	p.applyWatchDefaults()
	p.MaxStreams = cmp.Or(p.MaxStreams, DefaultMaxStreams)
	p.MaxStreamsPerTenant = cmp.Or(p.MaxStreamsPerTenant, max(p.MaxStreams/4, 1))
	p.MaxStreamsPerSandbox = cmp.Or(p.MaxStreamsPerSandbox, min(DefaultMaxStreamsPerSandbox, p.MaxStreamsPerTenant))
	if p.NoDiskLimit {
		p.DefaultLimits.DiskBytes, p.MaxLimits.DiskBytes, p.IODiskBytes = 0, 0, 0
	} else {
		p.DefaultLimits.DiskBytes = cmp.Or(p.DefaultLimits.DiskBytes, DefaultDiskBytes)
		p.MaxLimits.DiskBytes = cmp.Or(p.MaxLimits.DiskBytes, DefaultMaxDiskBytes)
		p.IODiskBytes = cmp.Or(p.IODiskBytes, DefaultIODiskBytes)
	}
	switch {
	case p.OnIdle != OnIdleDelete && p.OnIdle != OnIdleHibernate:
		return Invalidf("config: OnIdle %q: want %q or %q", p.OnIdle, OnIdleHibernate, OnIdleDelete)
	case p.MaxIdleTTL < p.IdleTTL:
		return Invalidf("config: MaxIdleTTL %v is below IdleTTL %v", p.MaxIdleTTL, p.IdleTTL)
	case p.IdleTTL < 0, p.MaxLifetime < 0, p.HibernatedTTL < 0, p.DefaultTimeout < 0, p.MaxTimeout < 0, p.MaxSandboxes < 0,
		p.MaxSandboxesPerTenant < 0, p.MaxUploadBytes < 0, p.MaxCodeBytes < 0, p.IODiskBytes < 0, p.WarmPool < 0, p.WarmPoolNetwork < 0,
		p.MaxTemplateFileBytes < 0, p.MaxTemplatesPerTenant < 0, p.TemplateBuilds < 0, p.MaxTemplateBuildsPerTenant < 0, p.TemplateBuildTimeout < 0:
		return Invalidf("config: durations, sizes and caps must not be negative")
	case p.MaxTemplateBuildsPerTenant > p.TemplateBuilds:
		return Invalidf("config: MaxTemplateBuildsPerTenant %d exceeds TemplateBuilds %d", p.MaxTemplateBuildsPerTenant, p.TemplateBuilds)
	case p.DefaultTimeout > p.MaxTimeout:
		return Invalidf("config: DefaultTimeout %v exceeds MaxTimeout %v", p.DefaultTimeout, p.MaxTimeout)
	case p.MaxCodeBytes > MaxCodeBytes:
		return Invalidf("config: MaxCodeBytes %d exceeds %d, the most the /io protocol carries", p.MaxCodeBytes, MaxCodeBytes)
	case !p.NoDiskLimit && p.IODiskBytes < MinDiskBytes:
		return Invalidf("config: IODiskBytes %d is below the minimum volume size of %d", p.IODiskBytes, MinDiskBytes)
	case p.MaxSandboxes > 0 && p.WarmPool+p.WarmPoolNetwork > p.MaxSandboxes:
		return Invalidf("config: the warm pools of %d exceed MaxSandboxes %d", p.WarmPool+p.WarmPoolNetwork, p.MaxSandboxes)
	case p.WarmPoolNetwork > 0 && !p.AllowNetwork:
		return Invalidf("config: a warm pool with network (WarmPoolNetwork) needs AllowNetwork")
	}
	if err := p.checkWatchCaps(); err != nil {
		return err
	}
	if err := p.checkEgress(); err != nil {
		return err
	}
	if _, err := resolveLimits(p.DefaultLimits, p.DefaultLimits, p.MaxLimits); err != nil {
		return Invalidf("config: DefaultLimits: %v", err)
	}
	if err := checkRuntimeLimits(p.Runtime, p.DefaultLimits); err != nil {
		return Invalidf("config: DefaultLimits: %v", err)
	}
	return nil
}

// applyWatchDefaults fills the zero watch caps, each wider one first: a
// tenant's default is a quarter of the server's, a sandbox's and a call's
// defaults are lowered to fit the wider cap.
func (p *Policy) applyWatchDefaults() {
	p.MaxWatches = cmp.Or(p.MaxWatches, DefaultMaxWatches)
	p.MaxWatchesPerTenant = cmp.Or(p.MaxWatchesPerTenant, max(p.MaxWatches/4, 1))
	p.MaxWatchesPerSandbox = cmp.Or(p.MaxWatchesPerSandbox, min(DefaultMaxWatchesPerSandbox, p.MaxWatchesPerTenant))
	p.MaxWatchDirs = cmp.Or(p.MaxWatchDirs, DefaultMaxWatchDirs)
	p.MaxWatchDirsPerTenant = cmp.Or(p.MaxWatchDirsPerTenant, max(p.MaxWatchDirs/4, 1))
	p.MaxWatchDirsPerSandbox = cmp.Or(p.MaxWatchDirsPerSandbox, min(DefaultMaxWatchDirsPerSandbox, p.MaxWatchDirsPerTenant))
	p.MaxWatchDirsPerCall = cmp.Or(p.MaxWatchDirsPerCall, min(DefaultMaxWatchDirsPerCall, p.MaxWatchDirsPerSandbox))
}

// checkWatchCaps: no cap negative, none above the wider one.
func (p *Policy) checkWatchCaps() error {
	type field struct {
		name string
		v    int
	}
	for _, chain := range [][]field{
		{{"MaxWatchesPerSandbox", p.MaxWatchesPerSandbox}, {"MaxWatchesPerTenant", p.MaxWatchesPerTenant}, {"MaxWatches", p.MaxWatches}},
		{{"MaxWatchDirsPerCall", p.MaxWatchDirsPerCall}, {"MaxWatchDirsPerSandbox", p.MaxWatchDirsPerSandbox}, {"MaxWatchDirsPerTenant", p.MaxWatchDirsPerTenant}, {"MaxWatchDirs", p.MaxWatchDirs}},
		{{"MaxStreamsPerSandbox", p.MaxStreamsPerSandbox}, {"MaxStreamsPerTenant", p.MaxStreamsPerTenant}, {"MaxStreams", p.MaxStreams}},
	} {
		for i, f := range chain {
			if f.v < 0 {
				return Invalidf("config: %s %d is negative", f.name, f.v)
			}
			if i > 0 && chain[i-1].v > f.v {
				return Invalidf("config: %s %d exceeds %s %d", chain[i-1].name, chain[i-1].v, f.name, f.v)
			}
		}
	}
	return nil
}

// WatchCaps returns the caps on WatchDirectory calls in progress and on
// the directories they watch (a call's own cap on directories is
// MaxWatchDirsPerCall).
func (p *Policy) WatchCaps() (calls, dirs Caps) {
	return Caps{PerSandbox: p.MaxWatchesPerSandbox, PerTenant: p.MaxWatchesPerTenant, Server: p.MaxWatches},
		Caps{PerSandbox: p.MaxWatchDirsPerSandbox, PerTenant: p.MaxWatchDirsPerTenant, Server: p.MaxWatchDirs}
}

// StreamCaps returns the caps on streams in progress.
func (p *Policy) StreamCaps() Caps {
	return Caps{PerSandbox: p.MaxStreamsPerSandbox, PerTenant: p.MaxStreamsPerTenant, Server: p.MaxStreams}
}

// ResolveOptions validates opts for a new sandbox and applies p's defaults:
// the limits in force, metadata copied, and for a sandbox with network
// (Network, or a NetworkPolicy, which implies it) its own checked policy
// (resolveNetwork). Errors wrap ErrInvalidArgument and say what is wrong.
func (p *Policy) ResolveOptions(opts Options) (Options, error) {
	if err := validateEnv(opts.Env); err != nil {
		return Options{}, err
	}
	opts, err := p.resolveNetwork(opts)
	if err != nil {
		return Options{}, err
	}
	req := opts.Limits
	if p.NoDiskLimit {
		req.DiskBytes = 0 // not enforceable here; the limits in force say 0
	}
	limits, err := resolveLimits(req, p.DefaultLimits, p.MaxLimits)
	if err != nil {
		return Options{}, err
	}
	if err := checkRuntimeLimits(p.Runtime, limits); err != nil {
		return Options{}, err
	}
	if err := validateMetadata(opts.Metadata); err != nil {
		return Options{}, err
	}
	if opts.IdleTimeout != 0 {
		if err := p.CheckIdleTimeout(opts.IdleTimeout); err != nil {
			return Options{}, err
		}
	}
	if err := checkOnIdle(opts.OnIdle); err != nil {
		return Options{}, err
	}
	if opts.FromSnapshot != "" {
		if err := ValidateSnapshotRef(opts.FromSnapshot); err != nil {
			return Options{}, err
		}
	}
	if err := ValidateVolumeMounts(opts.Volumes); err != nil {
		return Options{}, err
	}
	if opts.Template != "" {
		if err := ValidateTemplateRef(opts.Template); err != nil {
			return Options{}, err
		}
	}
	opts.Limits, opts.Metadata, opts.Volumes = limits, maps.Clone(opts.Metadata), slices.Clone(opts.Volumes)
	return opts, nil
}

// CheckIdleTimeout checks an idle TTL a caller asks for against
// MinIdleTimeout and p.MaxIdleTTL.
func (p *Policy) CheckIdleTimeout(d time.Duration) error {
	switch {
	case d < MinIdleTimeout:
		return Invalidf("idle timeout %v is below the minimum of %v", d, MinIdleTimeout)
	case d > p.MaxIdleTTL:
		return Invalidf("idle timeout %v exceeds the server's maximum of %v (sandboxd --max-idle-ttl)", d, p.MaxIdleTTL)
	}
	return nil
}

// ResolveExec checks req (already ExecRequest.Validate'd) against p and
// applies the defaults: the canonical name of the language (empty stays
// empty: the context's language, python in the default context), the
// default context as "", a fresh command ID when it has none, the default
// timeout.
func (p *Policy) ResolveExec(req ExecRequest) (ExecRequest, error) {
	if len(req.Code) > p.MaxCodeBytes {
		return req, Invalidf("code is %d bytes long; the limit is %d", len(req.Code), p.MaxCodeBytes)
	}
	if !utf8.ValidString(req.Code) {
		return req, Invalidf("code is not valid UTF-8")
	}
	switch {
	case req.Timeout == 0:
		req.Timeout = p.DefaultTimeout
	case req.Timeout > p.MaxTimeout:
		return req, Invalidf("timeout %v exceeds the server maximum of %v", req.Timeout, p.MaxTimeout)
	}
	if req.Language != "" {
		req.Language = CanonicalLanguage(req.Language)
	}
	if req.ContextID == ioproto.DefaultContext {
		req.ContextID = "" // the same record as without one
	}
	if req.CommandID == "" {
		req.CommandID = uuid.NewString()
	}
	return req, nil
}

// ExecRecord is the /io exec record of a request Validating let through
// (an empty language is python's; a backend resolves a context's language
// first).
func ExecRecord(req ExecRequest) ioproto.Record {
	rec := ioproto.Record{Type: ioproto.KindExec, CommandID: req.CommandID, Language: CanonicalLanguage(req.Language), Code: req.Code, ContextID: req.ContextID,
		Stdin: req.Stdin || req.Pty != (PtySize{}), Pty: ioproto.PtySize{Rows: int(req.Pty.Rows), Cols: int(req.Pty.Cols)},
		TimeoutMS: req.Timeout.Milliseconds()}
	if len(req.Env) > 0 {
		rec.Env = req.Env
	}
	return rec
}
