package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wspath"
)

// On-disk layout. Everything sandboxd knows about a sandbox that Docker does
// not is in its directory, so a restarted sandboxd rebuilds its registry from
// Docker plus these directories alone:
//
//	<StateDir>/sandboxes/<id>/meta.json      sandboxd's metadata (root only)
//	<StateDir>/sandboxes/<id>/io/            bind-mounted at /io (the /io protocol)
//	<StateDir>/sandboxes/<id>/workspace/     bind-mounted at /workspace
//	<StateDir>/sandboxes/<id>/io.img         the volume mounted on io/
//	<StateDir>/sandboxes/<id>/workspace.img  the volume mounted on workspace/
//
// (The images exist unless Config.NoDiskVolumes; see volume.go.)
//
// meta.json is written last when a sandbox is created and removed first when
// it is destroyed: it is the commit point. A directory without it is debris
// of an interrupted create or delete, and reconcile removes it.
const (
	sandboxesDir = "sandboxes"
	metaFile     = "meta.json"
	ioDir        = "io"
	workspaceDir = "workspace"
)

// sandboxUID and sandboxGID are the user the container runs as ("1000:1000",
// set by the image). The host directories it writes to belong to it.
const (
	sandboxUID = wspath.UID
	sandboxGID = wspath.GID
)

// metaVersion is the format version of meta.json.
const metaVersion = 1

// meta is meta.json: what sandboxd must remember about a sandbox across its
// own restarts.
type meta struct {
	Version int    `json:"version"`
	ID      string `json:"id"`
	// Tenant is empty in metadata written before tenants existed, which
	// readMeta reads as DefaultTenant.
	Tenant string `json:"tenant,omitempty"`
	// UserID is empty for an unclaimed warm-pool sandbox.
	UserID string `json:"user_id"`
	// Pool is true while the sandbox waits, unclaimed, in the warm pool.
	// Claiming it sets Tenant and UserID and clears Pool here: meta.json is
	// the record of the assignment, since a container's labels cannot change.
	Pool bool `json:"pool,omitempty"`
	// Shaping is true between a warm-pool sandbox's claim and the end of
	// its shaping to the request (shape.go): reconcile removes a sandbox
	// that still says so.
	Shaping bool `json:"shaping,omitempty"`
	// VolumesMounted is true when the sandbox's volumes were mounted into
	// its running container (shape_volumes.go) rather than given to the
	// container at its creation: a restart of the container loses them,
	// and sandboxd mounts them again.
	VolumesMounted bool        `json:"volumes_mounted,omitempty"`
	Network        bool        `json:"network,omitempty"`
	ContainerID    string      `json:"container_id"`
	Image          string      `json:"image"`
	Runtime        string      `json:"runtime,omitempty"`
	Limits         core.Limits `json:"limits"`
	CreatedAt      time.Time   `json:"created_at"`
	// LastActiveAt is persisted (throttled) so that idle TTLs continue across
	// restarts instead of starting over.
	LastActiveAt time.Time `json:"last_active_at"`
	// State and StateReason persist a death, so a sandbox reported dead stays
	// dead with the same reason after a restart.
	State       core.State `json:"state"`
	StateReason string     `json:"state_reason,omitempty"`
	// Metadata is the caller's labels (Options.Metadata). A claimed
	// warm-pool sandbox gets them here, with its claim: container labels
	// cannot change.
	Metadata map[string]string `json:"metadata,omitempty"`
	// IdleTTL is the sandbox's own idle TTL in nanoseconds (Options.IdleTimeout
	// or SetTimeout); zero follows the server's --idle-ttl.
	IdleTTL time.Duration `json:"idle_ttl_ns,omitempty"`
	// OnIdle is the sandbox's own Options.OnIdle; empty follows the
	// server's --on-idle.
	OnIdle string `json:"on_idle,omitempty"`
	// Env is the caller's Options.Env, kept so a woken sandbox's new
	// container gets it again (meta.json is root's, mode 0600).
	Env map[string]string `json:"env,omitempty"`
	// Hib is the hibernation state machine (hibernate.go); nil for a
	// sandbox never hibernated.
	Hib *hibMeta `json:"hibernation,omitempty"`
	// NetworkPolicy is a networked sandbox's egress policy, in full: its
	// rules' header values are secrets, kept here on the host (meta.json
	// is root's, mode 0600) and never in the sandbox. nil without network;
	// a sandbox with network written before policies existed has none,
	// which newSandbox reads as the empty policy it had in effect.
	NetworkPolicy *netPolicyMeta `json:"network_policy,omitempty"`
	// Net is a networked sandbox's address and holder (network.go).
	Net *netMeta `json:"net,omitempty"`
	// Carrier is the warm-pool sandbox whose container and directories
	// carry this sandbox since a fast wake (carrier.go); nil otherwise.
	Carrier *carrierMeta `json:"carrier,omitempty"`
	// Volumes are the sandbox's named volumes (volumes.go), by ID.
	Volumes []volumeMountMeta `json:"volumes,omitempty"`
	// Template and TemplateVersion name the template version whose image
	// (Image, by ID) the sandbox runs; empty for the server's image.
	Template        string `json:"template,omitempty"`
	TemplateVersion int    `json:"template_version,omitempty"`
}

// netPolicyMeta is a core.NetworkPolicy as meta.json keeps it: the file's
// format is this backend's own, not the domain type's field names.
type netPolicyMeta struct {
	AllowOut []string `json:"allow_out,omitempty"`
	DenyOut  []string `json:"deny_out,omitempty"`
	// Rules map a domain pattern to the headers its rule sets.
	Rules              map[string]map[string]string `json:"rules,omitempty"`
	AllowPublicTraffic bool                         `json:"allow_public_traffic,omitempty"`
}

// policyToMeta converts a policy for meta.json (nil stays nil).
func policyToMeta(p *core.NetworkPolicy) *netPolicyMeta {
	if p == nil {
		return nil
	}
	c := p.Clone()
	m := &netPolicyMeta{AllowOut: c.AllowOut, DenyOut: c.DenyOut, AllowPublicTraffic: c.AllowPublicTraffic}
	if c.Rules != nil {
		m.Rules = make(map[string]map[string]string, len(c.Rules))
		for k, r := range c.Rules {
			m.Rules[k] = r.Headers
		}
	}
	return m
}

// policy converts meta.json's policy back (nil stays nil).
func (m *netPolicyMeta) policy() *core.NetworkPolicy {
	if m == nil {
		return nil
	}
	p := core.NetworkPolicy{AllowOut: m.AllowOut, DenyOut: m.DenyOut, AllowPublicTraffic: m.AllowPublicTraffic}
	if m.Rules != nil {
		p.Rules = make(map[string]core.NetworkRule, len(m.Rules))
		for k, h := range m.Rules {
			p.Rules[k] = core.NetworkRule{Headers: h}
		}
	}
	p = p.Clone()
	return &p
}

// sandboxDir returns the directory of sandbox id under stateDir.
func sandboxDir(stateDir, id string) string {
	return filepath.Join(stateDir, sandboxesDir, id)
}

// readMeta reads and checks dir's meta.json. A missing file is reported with
// fs.ErrNotExist; a malformed one with a descriptive error.
func readMeta(dir string) (meta, error) {
	var m meta
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("decode %s: %w", filepath.Join(dir, metaFile), err)
	}
	switch {
	case m.Version != metaVersion:
		return m, fmt.Errorf("%s: unsupported version %d", filepath.Join(dir, metaFile), m.Version)
	case m.ID != filepath.Base(dir):
		return m, fmt.Errorf("%s: id %q does not match its directory", filepath.Join(dir, metaFile), m.ID)
	case m.Pool && (m.UserID != "" || m.Tenant != ""),
		!m.Pool && core.ValidateUserID(m.UserID) != nil,
		m.Tenant != "" && core.ValidateTenant(m.Tenant) != nil,
		m.ContainerID == "" && m.State != core.StateHibernated, m.CreatedAt.IsZero():
		return m, fmt.Errorf("%s: missing or invalid fields", filepath.Join(dir, metaFile))
	}
	if !m.Pool && m.Tenant == "" {
		m.Tenant = core.DefaultTenant
	}
	if m.State != core.StateDead && m.State != core.StateHibernated {
		m.State = core.StateRunning
	}
	return m, nil
}

// writeMeta replaces dir's meta.json atomically, so a crash leaves either the
// old or the new version, never a torn one.
func writeMeta(dir string, m meta) error {
	m.Version = metaVersion
	return ioproto.WriteJSONFileAtomic(filepath.Join(dir, metaFile), m, 0o600)
}

// prepareDirs creates a new sandbox's directory tree before its container
// starts: io/ (with out/ and an empty stdin log) and workspace/, each on a
// volume of its size (see volume.go) or, for a zero size, a plain
// directory. io/, out/ and workspace/ belong to the sandbox user, who must
// write there. stdin stays root's (0644): the sandbox only reads the command
// log. On failure the caller removes dir with removeSandboxDir.
func prepareDirs(ctx context.Context, dir string, sizes volumeSizes) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	for _, v := range []struct {
		name, reserve string
		size          int64
	}{{ioDir, ioRootReservePercent, sizes.io}, {workspaceDir, "0", sizes.workspace}} {
		p := filepath.Join(dir, v.name)
		if v.size == 0 {
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
			if err := chownSandboxUser(p); err != nil {
				return err
			}
			continue
		}
		if err := os.Mkdir(p, 0); err != nil { // unusable unless mounted on
			return err
		}
		if v.name == workspaceDir && sizes.workspaceFrom != "" {
			img := filepath.Join(dir, v.name+".img")
			if err := runTool(ctx, "cp", "--sparse=always", "--reflink=auto", sizes.workspaceFrom, img); err != nil {
				return fmt.Errorf("copy the snapshot's workspace: %w", err)
			}
			if err := mountVolume(ctx, img, p); err != nil {
				return fmt.Errorf("mount the snapshot's workspace: %w", err)
			}
			continue
		}
		if err := createVolume(ctx, filepath.Join(dir, v.name+".img"), p, v.size, v.reserve); err != nil {
			return fmt.Errorf("create %s volume: %w", v.name, err)
		}
	}
	out := filepath.Join(dir, ioDir, ioproto.OutDir)
	if err := os.Mkdir(out, 0o755); err != nil {
		return err
	}
	if err := chownSandboxUser(out); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, ioDir, ioproto.StdinFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// chownSandboxUser hands a host path to the sandbox user. Running sandboxd as
// root (the normal case, it talks to Docker anyway) makes this work; a
// sandboxd that runs as uid 1000 itself already creates files with the
// right owner, so EPERM is fine there.
func chownSandboxUser(p string) error {
	err := os.Lchown(p, sandboxUID, sandboxGID)
	if err != nil && errors.Is(err, fs.ErrPermission) && os.Geteuid() == sandboxUID {
		return nil
	}
	if err != nil {
		return fmt.Errorf("chown %s to the sandbox user %d:%d (sandboxd must run as root): %w", p, sandboxUID, sandboxGID, err)
	}
	return nil
}

// removeSandboxDir deletes a sandbox's directory: meta.json first (so an
// interrupted removal leaves debris that reconcile recognises, not a
// half-deleted sandbox), then its volumes are unmounted, then the rest goes
// (the images with it). Nothing is deleted while a volume stays mounted, so
// the removal never walks into a volume. os.RemoveAll never follows
// symlinks the sandbox may have planted.
func removeSandboxDir(dir string) error {
	if err := os.Remove(filepath.Join(dir, metaFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := unmountVolumes(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// lockFile is the state directory's lock file.
const lockFile = ".lock"

// lockStateDir takes an exclusive lock on stateDir for this process. Two
// sandboxd processes on one state directory would both append to the same
// command logs, each unaware of the other's command IDs, and a command could
// run twice; the lock turns that mistake into a clear start-up error. The
// lock dies with the process, so a crash never leaves it stale.
func lockStateDir(stateDir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(stateDir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open state directory lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, core.Preconditionf("state directory %s is in use by another sandboxd process", stateDir)
		}
		return nil, fmt.Errorf("lock state directory: %w", err)
	}
	return f, nil
}
