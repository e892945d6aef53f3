package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/durable"
	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Named snapshots (core.Snapshot) live in STATE_DIR/snapshots/<id>/:
//
//	snapshot.json   what it is (snapFile); written last, removed first
//	globals.pkl     the default context's globals, as the sandbox pickled
//	                them (level globals only); never read by sandboxd
//	workspace.img   a copy of the sandbox's /workspace volume image
//
// A snapshot is built in snapshots/.tmp-<id>/ and renamed into place
// whole: the rename is its commit, so a crash leaves either no snapshot
// or a complete one, and start-up removes what .tmp- directories remain.
//
// The workspace is copied at the block level: its volume is frozen
// (fsfreeze) for the copy, so the image is consistent, and no file the
// sandbox made (a symlink, a FIFO, a hard link) is ever opened by
// sandboxd. The copy is sparse (only allocated blocks take room) and
// reflinked where the host's file system can (cp --reflink=auto): on
// ext4 it copies, on XFS or Btrfs the blocks are shared until written.
// While the copy runs, a marker (frozen) in the .tmp- directory names the
// frozen volume, so that a sandboxd killed meanwhile thaws it at start-up.
//
// Snapshots need disk volumes (--disk-volumes, the default): without them
// /workspace is a directory of the host's, and copying it would mean
// walking what the sandbox made.

// snapshotsDir is the snapshots' directory under the state directory.
const snapshotsDir = "snapshots"

// The files of a snapshot.
const (
	snapMetaFile      = "snapshot.json"
	snapGlobalsFile   = "globals.pkl"
	snapWorkspaceFile = "workspace.img"
	snapFrozenMarker  = "frozen"
	snapTmpPrefix     = ".tmp-"
)

// snapFile is snapshot.json.
type snapFile struct {
	core.Snapshot
	// WorkspaceBytes is the size of the workspace image: a sandbox made
	// from the snapshot gets a /workspace of this size.
	WorkspaceBytes int64 `json:"workspace_bytes"`
	// Hidden marks a fork's temporary snapshot: never listed, removed
	// when the fork ends (or at start-up).
	Hidden bool `json:"hidden,omitempty"`
	// Volumes are the sandbox's named volumes, by reference: a sandbox
	// made from the snapshot mounts them (not copies) unless it asks for
	// its own.
	Volumes []volumeMountMeta `json:"volumes,omitempty"`
	// Image, Template and TemplateVersion are the template version the
	// sandbox ran, if any: a sandbox made from the snapshot runs the same
	// image, which the templates' clean-up keeps while the snapshot is.
	Image           string `json:"image,omitempty"`
	Template        string `json:"template,omitempty"`
	TemplateVersion int    `json:"template_version,omitempty"`
	// Options are the sandbox's options when the snapshot was taken, in
	// full (its policy's header values are secrets: snapshot.json is
	// root's, mode 0600, and they never reach a caller). Its forks are
	// made with them; a sandbox started from it takes its env and network
	// unless it asks for its own. nil in a snapshot written before they
	// were recorded.
	Options *optionsMeta `json:"options,omitempty"`
}

// optionsMeta is core.Options as snapshot.json keeps them: the file's
// format is this backend's own, not the domain type's field names.
// Options.FromSnapshot is not an option of the sandbox but its state;
// Volumes and Template are snapFile's own (Volumes, Template).
type optionsMeta struct {
	Limits        core.Limits       `json:"limits"`
	Env           map[string]string `json:"env,omitempty"`
	Network       bool              `json:"network,omitempty"`
	NetworkPolicy *netPolicyMeta    `json:"network_policy,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	IdleTimeout   time.Duration     `json:"idle_timeout_ns,omitempty"`
	OnIdle        string            `json:"on_idle,omitempty"`
}

// snapFileOf is the record of a snapshot of sb (its identity, level and
// size are the taker's to fill in): the options sb runs with, its
// volumes and its template version.
func snapFileOf(sb *sandbox) snapFile {
	o := sb.options()
	f := snapFile{Volumes: mountsToMeta(o.Volumes), Options: &optionsMeta{
		Limits: o.Limits, Env: o.Env, Network: o.Network, NetworkPolicy: policyToMeta(o.NetworkPolicy),
		Metadata: o.Metadata, IdleTimeout: o.IdleTimeout, OnIdle: o.OnIdle}}
	if o.Template != "" {
		f.Image, f.Template, f.TemplateVersion = sb.image, sb.template, sb.templateVersion
	}
	return f
}

// options are the options the snapshot's sandbox ran with (those it
// recorded: a snapshot written before options were recorded has its
// volumes and template only). Template is empty: the snapshot's image
// (f.Image) is the one its sandboxes run, whatever version is now the
// template's latest, and Acquire takes it when Options.Template is
// empty. TestSandboxOptionsCarryEveryField checks that nothing else is
// left out.
func (f *snapFile) options() core.Options {
	o := core.Options{Volumes: mountsFromMeta(f.Volumes)}
	if m := f.Options; m != nil {
		o.Limits, o.Env, o.Network, o.NetworkPolicy = m.Limits, maps.Clone(m.Env), m.Network, m.NetworkPolicy.policy()
		o.Metadata, o.IdleTimeout, o.OnIdle = maps.Clone(m.Metadata), m.IdleTimeout, m.OnIdle
	}
	return o
}

// startOptions are the options of a new sandbox started from the
// snapshot with the caller's opts: the snapshot's env and network (its
// policy, header rules included) unless opts ask for their own, as for
// its volumes and template (Acquire): the state it holds was made with
// them. The rest (limits, metadata, timeouts) is the new sandbox's own.
func (f *snapFile) startOptions(opts core.Options) core.Options {
	rec := f.options()
	if opts.Env == nil {
		opts.Env = rec.Env
	}
	if !opts.Network && opts.NetworkPolicy == nil {
		opts.Network, opts.NetworkPolicy = rec.Network, rec.NetworkPolicy
	}
	return opts
}

// snapshots is the Manager's index of named snapshots.
type snapshots struct {
	dir string
	mu  sync.Mutex
	// byID (mu) is every committed snapshot.
	byID map[string]snapFile
	// names (mu) reserves tenant/name pairs of snapshots being made.
	names map[string]bool
}

func nameKey(tenant, name string) string { return tenant + "/" + name }

// loadSnapshots reads the committed snapshots and removes the debris of
// unfinished ones (thawing a volume a killed sandboxd left frozen).
func loadSnapshots(stateDir string, log interface {
	Warn(string, ...any)
}) (*snapshots, error) {
	s := &snapshots{dir: filepath.Join(stateDir, snapshotsDir), byID: map[string]snapFile{}, names: map[string]bool{}}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		p := filepath.Join(s.dir, e.Name())
		if strings.HasPrefix(e.Name(), snapTmpPrefix) {
			if b, err := os.ReadFile(filepath.Join(p, snapFrozenMarker)); err == nil {
				thaw(string(b))
			}
			if err := os.RemoveAll(p); err != nil {
				log.Warn("remove an unfinished snapshot", "dir", p, "error", err)
			}
			continue
		}
		b, err := os.ReadFile(filepath.Join(p, snapMetaFile))
		var f snapFile
		if err == nil {
			err = json.Unmarshal(b, &f)
		}
		if err != nil || f.ID != e.Name() || f.Hidden {
			// A deletion or a fork that stopped half way.
			if err := os.RemoveAll(p); err != nil {
				log.Warn("remove a snapshot's remains", "dir", p, "error", err)
			}
			continue
		}
		s.byID[f.ID] = f
	}
	return s, nil
}

// total returns the bytes of all snapshots and of tenant's.
func (s *snapshots) total(tenant string) (all, ofTenant int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.byID {
		all += f.Bytes
		if f.Tenant == tenant {
			ofTenant += f.Bytes
		}
	}
	return all, ofTenant
}

// resolve finds the snapshot ref (an ID, or a name in the caller's
// tenant) that the caller may use; hidden ones only by ID, for forks.
func (s *snapshots) resolve(c core.Caller, ref string, hidden bool) (snapFile, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if core.IsSnapshotID(ref) {
		f, ok := s.byID[ref]
		if !ok || !c.Sees(f.Tenant) || (f.Hidden && !hidden) {
			return snapFile{}, core.SnapshotNotFound(ref)
		}
		return f, nil
	}
	var found []snapFile
	var snaps []core.Snapshot
	for _, f := range s.byID {
		if f.Name == ref && !f.Hidden && c.Sees(f.Tenant) {
			found, snaps = append(found, f), append(snaps, f.Snapshot)
		}
	}
	i, err := core.SnapshotNamed(c, ref, snaps)
	if err != nil {
		return snapFile{}, err
	}
	return found[i], nil
}

// CreateSnapshot saves sb's state as a named snapshot of its tenant.
func (m *Manager) CreateSnapshot(ctx context.Context, sandboxID, name string) (core.Snapshot, error) {
	f, err := m.takeNamed(ctx, sandboxID, name, false)
	return f.Snapshot, err
}

// takeNamed takes a named (or, for a fork, hidden) snapshot of a sandbox.
func (m *Manager) takeNamed(ctx context.Context, sandboxID, name string, hidden bool) (snapFile, error) {
	if err := m.checkOpen(); err != nil {
		return snapFile{}, err
	}
	if m.cfg.NoDiskVolumes {
		return snapFile{}, core.Preconditionf("snapshots and forks need disk volumes (sandboxd --disk-volumes, the default): without them /workspace is a directory of the host's")
	}
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return snapFile{}, err
	}
	if st, reason := sb.status(); st == core.StateDead {
		return snapFile{}, core.Preconditionf("sandbox %s is dead (%s): it has no state to save", sb.id, reason)
	}
	if name != "" {
		m.snaps.mu.Lock()
		taken := m.snaps.names[nameKey(sb.tenant, name)]
		for _, f := range m.snaps.byID {
			taken = taken || (f.Tenant == sb.tenant && f.Name == name)
		}
		if !taken {
			m.snaps.names[nameKey(sb.tenant, name)] = true
		}
		m.snaps.mu.Unlock()
		if taken {
			return snapFile{}, core.Errorf(core.ErrAlreadyExists, "tenant %s already has a snapshot named %q", sb.tenant, name)
		}
		defer func() {
			m.snaps.mu.Lock()
			delete(m.snaps.names, nameKey(sb.tenant, name))
			m.snaps.mu.Unlock()
		}()
	}
	if err := m.checkSnapshotBudget(sb.tenant, 0); err != nil {
		return snapFile{}, err
	}
	// One state change of a sandbox at a time: not during a hibernation,
	// a wake or a removal.
	unlock, err := m.userLocks.lock(ctx, sb.key().String())
	if err != nil {
		return snapFile{}, err
	}
	defer unlock()
	if st, _ := sb.status(); st != core.StateRunning {
		return snapFile{}, core.Preconditionf("sandbox %s is %s; it must be running to be snapshotted", sb.id, st)
	}

	id := core.NewSnapshotID()
	tmp := filepath.Join(m.snaps.dir, snapTmpPrefix+id)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return snapFile{}, fmt.Errorf("make the snapshot's directory: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = os.RemoveAll(tmp)
		}
	}()
	start := time.Now()
	suffix := randomSuffix()
	taken := m.takeSnapshot(ctx, sb, &snapMeta{File: "named-" + suffix, Record: "sbx-named-snapshot-" + suffix})
	f := snapFileOf(sb)
	f.Snapshot = core.Snapshot{ID: id, Name: name, Tenant: sb.tenant, SandboxID: sb.id,
		Level: taken.Level, Reason: taken.Reason, CreatedAt: time.Now().UTC()}
	f.Hidden = hidden
	if taken.Level == ioproto.LevelGlobals {
		n, err := moveSnapshotOut(sb.dir, taken.File, filepath.Join(tmp, snapGlobalsFile), m.cfg.IODiskBytes)
		if err != nil {
			return snapFile{}, fmt.Errorf("keep the snapshot of the globals: %w", err)
		}
		f.Bytes += n
	}
	ws, err := copyFrozen(ctx, filepath.Join(sb.dir, workspaceDir), filepath.Join(sb.dir, workspaceDir+".img"), tmp, m.step)
	if err != nil {
		return snapFile{}, fmt.Errorf("copy /workspace: %w", err)
	}
	f.Bytes += ws.allocated
	f.WorkspaceBytes = ws.size
	if err := m.checkSnapshotBudget(sb.tenant, f.Bytes); err != nil {
		return snapFile{}, err
	}
	b, _ := json.Marshal(f)
	if err := durable.WriteFile(filepath.Join(tmp, snapMetaFile), b); err != nil {
		return snapFile{}, err
	}
	m.step(stepSnapshotCopied)
	if err := os.Rename(tmp, filepath.Join(m.snaps.dir, id)); err != nil {
		return snapFile{}, fmt.Errorf("commit the snapshot: %w", err)
	}
	committed = true
	durable.SyncDir(m.snaps.dir)
	m.snaps.mu.Lock()
	m.snaps.byID[id] = f
	m.snaps.mu.Unlock()
	m.log.Info("snapshot taken", "snapshot_id", id, "name", name, "sandbox_id", sb.id, "tenant", sb.tenant,
		"level", f.Level, "bytes", f.Bytes, "hidden", hidden, "took", time.Since(start))
	return f, nil
}

// checkSnapshotBudget refuses a snapshot of adding bytes when the named
// snapshots would pass --snapshot-disk-budget or the tenant's share.
func (m *Manager) checkSnapshotBudget(tenant string, adding int64) error {
	all, ofTenant := m.snaps.total(tenant)
	return core.SnapshotBudget{All: m.cfg.SnapshotDiskBudget, PerTenant: m.cfg.SnapshotDiskBudgetPerTenant}.Check(tenant, all, ofTenant, adding)
}

// ListSnapshots lists the snapshots the caller may see, newest first.
func (m *Manager) ListSnapshots(ctx context.Context, f core.SnapshotFilter) ([]core.Snapshot, error) {
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	c := core.CallerOf(ctx)
	m.snaps.mu.Lock()
	var out []core.Snapshot
	for _, s := range m.snaps.byID {
		if f.Shows(c, s.Snapshot, s.Hidden) {
			out = append(out, s.Snapshot)
		}
	}
	m.snaps.mu.Unlock()
	core.SortSnapshots(out)
	return out, nil
}

// DeleteSnapshot deletes a snapshot: snapshot.json first (the commit), then
// the rest; a crash in between leaves remains that start-up removes.
func (m *Manager) DeleteSnapshot(ctx context.Context, ref string) error {
	if err := m.checkOpen(); err != nil {
		return err
	}
	f, err := m.snaps.resolve(core.CallerOf(ctx), ref, false)
	if err != nil {
		return err
	}
	return m.removeSnapshot(f)
}

func (m *Manager) removeSnapshot(f snapFile) error {
	m.snaps.mu.Lock()
	if _, ok := m.snaps.byID[f.ID]; !ok {
		m.snaps.mu.Unlock()
		return core.SnapshotNotFound(f.ID)
	}
	delete(m.snaps.byID, f.ID)
	m.snaps.mu.Unlock()
	dir := filepath.Join(m.snaps.dir, f.ID)
	if err := os.Remove(filepath.Join(dir, snapMetaFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		m.snaps.mu.Lock()
		m.snaps.byID[f.ID] = f
		m.snaps.mu.Unlock()
		return fmt.Errorf("delete snapshot %s: %w", f.ID, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		m.log.Warn("remove a deleted snapshot's files; the next start removes them", "snapshot_id", f.ID, "error", err)
	}
	if !f.Hidden {
		m.log.Info("snapshot deleted", "snapshot_id", f.ID, "name", f.Name, "tenant", f.Tenant)
	}
	return nil
}

// moveSnapshotOut moves the snapshot file name from the sandbox's
// io/hibernate/ to dst: opened through an os.Root confined to io/, never
// following a symlink, a regular file of at most limit bytes (the /io
// volume's size); the sandbox's copy is then removed. It returns the size.
func moveSnapshotOut(dir, name, dst string, limit int64) (int64, error) {
	if !ioproto.ValidSnapshotName(name) {
		return 0, fmt.Errorf("invalid snapshot name %q", name)
	}
	root, err := os.OpenRoot(filepath.Join(dir, ioDir))
	if err != nil {
		return 0, err
	}
	defer root.Close()
	rel := ioproto.HibernateDir + "/" + name
	src, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return 0, err
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("%s is not a regular file", rel)
	}
	if limit > 0 && st.Size() > limit {
		return 0, fmt.Errorf("%s is larger than /io (%d bytes)", rel, limit)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, io.LimitReader(src, st.Size()))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	_ = root.Remove(rel)
	return n, nil
}

// copied is what copyFrozen made.
type copied struct {
	size, allocated int64
}

// copyFrozen copies the volume image img, whose file system is mounted on
// mountpoint, into dir as workspace.img, with the file system frozen for
// the copy; a marker in dir names the frozen mount meanwhile.
func copyFrozen(ctx context.Context, mountpoint, img, dir string, step func(string)) (copied, error) {
	marker := filepath.Join(dir, snapFrozenMarker)
	if err := durable.WriteFile(marker, []byte(mountpoint)); err != nil {
		return copied{}, err
	}
	if err := runTool(ctx, "fsfreeze", "--freeze", mountpoint); err != nil {
		return copied{}, err
	}
	step(stepSnapshotFrozen)
	dst := filepath.Join(dir, snapWorkspaceFile)
	// Not the caller's context: a cancelled copy must still thaw.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	err := runTool(cctx, "cp", "--sparse=always", "--reflink=auto", img, dst)
	cancel()
	thaw(mountpoint)
	_ = os.Remove(marker)
	if err != nil {
		return copied{}, err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dst, &st); err != nil {
		return copied{}, err
	}
	return copied{size: st.Size, allocated: st.Blocks * 512}, nil
}

// thaw unfreezes the file system mounted on mountpoint (a no-op when it
// is not frozen).
func thaw(mountpoint string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = runTool(ctx, "fsfreeze", "--unfreeze", mountpoint)
}

// prepareRestore puts a snapshot's globals in a new sandbox's
// io/hibernate/, owned by the sandbox user as the driver's own are, and
// names the restore record in its hibernation state, so that meta.json
// (written at the end of create) carries it.
func (m *Manager) prepareRestore(sb *sandbox, f *snapFile) error {
	if f.Level != ioproto.LevelGlobals {
		return nil // nothing but /workspace, already copied
	}
	hib := filepath.Join(sb.dir, ioDir, ioproto.HibernateDir)
	if err := os.Mkdir(hib, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := chownSandboxUser(hib); err != nil {
		return err
	}
	suffix := randomSuffix()
	name := "from-" + suffix
	src, err := os.Open(filepath.Join(m.snaps.dir, f.ID, snapGlobalsFile))
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(filepath.Join(hib, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = chownSandboxUser(filepath.Join(hib, name))
	}
	if err != nil {
		return err
	}
	sb.mu.Lock()
	sb.hib.Seq = 1
	sb.hib.Snapshot = &snapMeta{Level: ioproto.LevelGlobals, File: name, Record: "sbx-from-" + f.ID, TakenAt: f.CreatedAt}
	sb.hib.WakeRecord, sb.hib.WakeLevel = "sbx-restore-from-"+suffix, ioproto.LevelGlobals
	sb.mu.Unlock()
	return nil
}

// restoreFrom appends a new sandbox's restore record (prepareRestore named
// it) and waits, bounded, for its answer: how the snapshot's state came
// back, never silently.
func (m *Manager) restoreFrom(ctx context.Context, sb *sandbox, f *snapFile) *core.WakeInfo {
	if f.Level != ioproto.LevelGlobals {
		return &core.WakeInfo{Level: ioproto.LevelFiles, Time: time.Now().UTC(),
			Reason: core.JoinReasons("the snapshot kept files only", f.Reason)}
	}
	m.step(stepRestoreRegistered)
	sb.mu.Lock()
	rec := ioproto.Record{Type: ioproto.KindRestore, CommandID: sb.hib.WakeRecord, Level: ioproto.LevelGlobals,
		Snapshot: sb.hib.Snapshot.File, TimeoutMS: restoreTimeout.Milliseconds()}
	sb.mu.Unlock()
	res, err := m.runHibRecord(ctx, sb, rec, restoreTimeout+30*time.Second)
	w := core.WakeFromEvent(res)
	if err != nil || w == nil {
		reason := "the sandbox did not answer the restore"
		if err != nil {
			reason = "the state could not be restored: " + err.Error()
		}
		w = &core.WakeInfo{Level: ioproto.LevelFiles, Reason: reason}
	}
	w.Time = time.Now().UTC()
	sb.mu.Lock()
	sb.hib.WakeRecord, sb.hib.WakeLevel, sb.hib.Wake = "", "", w
	sb.mu.Unlock()
	if err := sb.persist(true); err != nil {
		m.log.Error("persist sandbox metadata", "sandbox_id", sb.id, "error", err)
	}
	return w.Clone()
}

// Fork makes req.Count sandboxes from a hidden snapshot of the source,
// taken between its commands; the source keeps running. Each fork is an
// Acquire from that snapshot for its user (given, or "fork-" and random),
// and succeeds or fails on its own; the snapshot is deleted after. A user
// who already has a live sandbox gets no fork (ErrAlreadyExists for it).
func (m *Manager) Fork(ctx context.Context, sandboxID string, req core.ForkRequest) ([]core.ForkResult, error) {
	src, err := m.Get(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	f, err := m.takeNamed(ctx, sandboxID, "", true)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := m.removeSnapshot(f); err != nil {
			m.log.Warn("remove a fork's snapshot; the next start removes it", "snapshot_id", f.ID, "error", err)
		}
	}()
	// The source's options, all of them, as the snapshot recorded them
	// (network policy, header rules and env included), checked again
	// against the server's policy, which may have changed since the
	// source was made; or those the caller gave, to which the start from
	// the snapshot adds the source's env and network where they have
	// none (snapFile.startOptions).
	var opts core.Options
	if req.Options != nil {
		opts = *req.Options
	} else if opts, err = forkOptions(m.cfg.Policy, f); err != nil {
		return nil, err
	}
	opts.FromSnapshot = f.ID
	// The forks are the source's tenant's, whoever asked (an admin may).
	actx := core.WithCaller(ctx, core.Caller{Tenant: src.Tenant, Name: core.CallerOf(ctx).Name})
	return core.ForkEach(req, func(user string) core.ForkResult {
		if cur := m.reg.currentOf(userKey{src.Tenant, user}); cur != nil {
			if st, _ := cur.status(); st != core.StateDead {
				return core.ForkResult{Err: core.ForkTaken(user, cur.id)}
			}
		}
		res, err := m.Acquire(actx, user, opts)
		switch {
		case err != nil:
			return core.ForkResult{Err: err}
		case !res.Created:
			return core.ForkResult{Err: core.ForkTaken(user, res.Sandbox.ID)}
		}
		return core.ForkResult{Sandbox: res.Sandbox, Woke: res.Woke}
	}), nil
}

// forkOptions are the options of the forks of the sandbox f is a
// snapshot of, when the caller gives none: the source's, resolved again
// by p (the server may no longer allow what the source has, e.g. network
// after a restart without --allow-network: FAILED_PRECONDITION, saying
// why).
func forkOptions(p core.Policy, f snapFile) (core.Options, error) {
	opts, err := p.ResolveOptions(f.options())
	if err != nil {
		return core.Options{}, core.Preconditionf("the forks would have the options of sandbox %s, which this server no longer allows: %v", f.SandboxID, err)
	}
	return opts, nil
}
