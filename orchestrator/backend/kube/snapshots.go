package kube

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/durable"
	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wsarchive"
	"github.com/sandboxd/sandboxd/orchestrator/backend/kube/iosidecar"
	"github.com/sandboxd/sandboxd/orchestrator/core"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// Named snapshots and forks on Kubernetes. A snapshot outlives its
// sandbox's Pod and claim, and any replica must find it, so it lives in a
// directory every replica mounts (Config.SnapshotDir: a ReadWriteMany
// volume in a cluster, docs/kubernetes.md), one subdirectory per
// snapshot:
//
//	<id>/snapshot.json  its record (snapRecord); its presence is the commit
//	<id>/archive.tar    the sandbox's /workspace and saved globals
//	                    (orchestrator/backend/hostio/wsarchive), as its io sidecar sent them
//
// Taking one: a live snapshot record (ioproto's "live": the sandbox keeps
// running, its log is not sealed) has the driver save the default
// context's globals in /io/hibernate; the sidecar's Export streams that
// file and /workspace as one archive into .tmp-<id>-…/, which is renamed
// into place once its record is written beside it. A crash leaves no
// snapshot or a whole one; the leader removes stale .tmp- directories.
// sandboxd never unpacks an archive, only bounds it on the way in: the
// sandbox made every file in it. The sidecar of a sandbox started from it
// unpacks it into its own /workspace (wsarchive.Extract's rules).
//
// Starting from one (Options.FromSnapshot, and each fork): the new Pod
// carries annWaking with a record naming the snapshot
// (hibRecord.FromSnapshot), so that, as for a wake, any replica finishes
// it before the sandbox runs a command: the archive goes to its sidecar
// (Import), then a restore record loads the globals.
//
// A tenant's snapshot names are unique across replicas: a name being
// taken is reserved by a file made with O_EXCL under .names/, whose
// modification time the reserving replica renews every
// snapReserveRenew while it takes the snapshot. A reservation not renewed
// for snapReserveStale is a crashed replica's and is taken over. Times
// are the directory's own (the file server's clock on NFS: renewals set
// the time to "now" as the server sees it, and staleness is judged
// against a probe file made there), so replicas' clocks need not agree.

// The files of the snapshot directory.
const (
	snapRecordFile  = "snapshot.json"
	snapArchiveFile = "archive.tar"
	snapTmpPrefix   = ".tmp-"
	snapNamesDir    = ".names"
	// snapRecordMax bounds a record read back (it is sandboxd's, but the
	// volume is shared).
	snapRecordMax = 64 << 10
	// snapStaleAfter is how old a .tmp- directory or a name reservation
	// must be before it is taken for a crashed replica's: longer than any
	// snapshot takes (the globals' save, then the export).
	snapStaleAfter = snapshotTimeout + time.Hour
	// snapSweepInterval is how often the leader sweeps the directory.
	snapSweepInterval = 10 * time.Minute
	// snapReserveRenew is how often a name reservation is renewed while
	// its snapshot is taken; snapReserveStale how long one may go
	// unrenewed before it is taken for a crashed replica's.
	snapReserveRenew = 10 * time.Second
	snapReserveStale = 2 * time.Minute
)

// snapRecord is snapshot.json.
type snapRecord struct {
	core.Snapshot
	// Hidden marks a fork's own snapshot: never listed, deleted when the
	// fork ends (or, after a crash, by the leader's sweep).
	Hidden bool `json:"hidden,omitempty"`
	// Image is the sandbox container's image: a sandbox started from the
	// snapshot runs it (its globals were saved by that image's Python).
	Image string `json:"image"`
	// Globals reports whether the archive holds the saved globals.
	Globals bool `json:"globals,omitempty"`
	// ArchiveBytes bounds the archive's content when it is unpacked.
	ArchiveBytes int64 `json:"archive_bytes"`
	// Volumes are the sandbox's named volumes, by reference: a sandbox
	// started from the snapshot without volumes of its own mounts those
	// that still exist (the volumes' files are not in the snapshot).
	Volumes []core.VolumeMount `json:"volumes,omitempty"`
	// Env and Network are the sandbox's env (without the CA's environment
	// its network adds) and network record (its rules' header values
	// sealed for the sandbox, SandboxID, never in the clear here): a
	// sandbox started from the snapshot without its own takes them.
	// Absent from a snapshot written before they were recorded.
	Env     map[string]string `json:"env,omitempty"`
	Network *netRecord        `json:"network,omitempty"`
}

// snapStore is the snapshot directory.
type snapStore struct {
	dir string
	mu  sync.Mutex // serialises this replica's name reservations
}

// snapshotsOn returns the store, or the error every snapshot call answers
// without one.
func (m *Manager) snapshotsOn() (*snapStore, error) {
	if m.snaps == nil {
		return nil, core.Unsupported(backendName, featSnapshots+" without --kube-snapshot-dir (a directory every replica mounts)")
	}
	return m.snaps, nil
}

func (s *snapStore) path(id string, name ...string) string {
	return filepath.Join(append([]string{s.dir, id}, name...)...)
}

// read returns snapshot id's record; ok is false when it has none (not
// committed, deleted).
func (s *snapStore) read(id string) (rec snapRecord, ok bool, err error) {
	f, err := os.Open(s.path(id, snapRecordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return snapRecord{}, false, nil
	}
	if err != nil {
		return snapRecord{}, false, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, snapRecordMax+1))
	if err != nil {
		return snapRecord{}, false, err
	}
	if len(b) > snapRecordMax || json.Unmarshal(b, &rec) != nil || rec.ID != id {
		return snapRecord{}, false, fmt.Errorf("snapshot %s: its record is unreadable", id)
	}
	return rec, true, nil
}

// list returns every committed snapshot's record. Unreadable records are
// skipped (and reported through warn).
func (s *snapStore) list(warn func(id string, err error)) ([]snapRecord, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("read the snapshot directory: %w", err)
	}
	var out []snapRecord
	for _, e := range ents {
		if !e.IsDir() || !core.IsSnapshotID(e.Name()) {
			continue
		}
		rec, ok, err := s.read(e.Name())
		switch {
		case err != nil:
			warn(e.Name(), err)
		case ok:
			out = append(out, rec)
		}
	}
	return out, nil
}

// checkBudget refuses a snapshot of adding bytes for tenant past budget,
// counting the committed snapshots but except.
func (s *snapStore) checkBudget(budget core.SnapshotBudget, tenant, except string, adding int64, warn func(string, error)) error {
	if budget == (core.SnapshotBudget{}) {
		return nil
	}
	recs, err := s.list(warn)
	if err != nil {
		return err
	}
	var all, ofTenant int64
	for _, r := range recs {
		if r.ID == except {
			continue
		}
		all += r.Bytes
		if r.Tenant == tenant {
			ofTenant += r.Bytes
		}
	}
	return budget.Check(tenant, all, ofTenant, adding)
}

// resolve finds the snapshot ref (an ID, or a name of the caller's tenant)
// the caller may use; hidden ones only by ID (a fork's own).
func (s *snapStore) resolve(c core.Caller, ref string, hidden bool, warn func(string, error)) (snapRecord, error) {
	if core.IsSnapshotID(ref) {
		rec, ok, err := s.read(ref)
		switch {
		case err != nil:
			return snapRecord{}, err
		case !ok || (rec.Hidden && !hidden) || !c.Sees(rec.Tenant):
			return snapRecord{}, core.SnapshotNotFound(ref)
		}
		return rec, nil
	}
	all, err := s.list(warn)
	if err != nil {
		return snapRecord{}, err
	}
	var found []snapRecord
	var snaps []core.Snapshot
	for _, rec := range all {
		if rec.Name == ref && !rec.Hidden && c.Sees(rec.Tenant) {
			found, snaps = append(found, rec), append(snaps, rec.Snapshot)
		}
	}
	i, err := core.SnapshotNamed(c, ref, snaps)
	if err != nil {
		return snapRecord{}, err
	}
	return found[i], nil
}

// reserveName reserves tenant's snapshot name for a snapshot being taken,
// across replicas, renewing the reservation until release frees it. A
// reservation not renewed for snapReserveStale is a crashed replica's and
// is taken over.
func (s *snapStore) reserveName(tenant, name string, warn func(string, error)) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	taken := core.Errorf(core.ErrAlreadyExists, "tenant %s already has a snapshot named %q", tenant, name)
	all, err := s.list(warn)
	if err != nil {
		return nil, err
	}
	if slices.ContainsFunc(all, func(r snapRecord) bool { return r.Tenant == tenant && r.Name == name }) {
		return nil, taken
	}
	if err := os.MkdirAll(filepath.Join(s.dir, snapNamesDir), 0o700); err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(tenant + "\x00" + name))
	p := filepath.Join(s.dir, snapNamesDir, hex.EncodeToString(sum[:]))
	for range 2 {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			f.Close()
			return renewReservation(p, snapReserveRenew), nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		if s.reservationStale(p) {
			_ = os.Remove(p) // a crashed replica's: taken over
			continue
		}
		return nil, core.Errorf(core.ErrAlreadyExists, "tenant %s's snapshot named %q is being taken", tenant, name)
	}
	return nil, taken
}

// renewReservation renews reservation p every interval (its modification
// time set to the file system's "now") until the returned release, which
// stops renewing and removes it.
func renewReservation(p string, interval time.Duration) (release func()) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = touchNow(p)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			<-done
			_ = os.Remove(p)
		})
	}
}

// touchNow sets p's times to the file system's current time (UTIME_NOW:
// an NFS server's clock, not this replica's).
func touchNow(p string) error {
	now := unix.Timespec{Nsec: unix.UTIME_NOW}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{now, now}, 0)
}

// reservationStale reports whether reservation p has gone unrenewed for
// snapReserveStale, judged by the directory's clock: a probe file made
// beside it now. When the probe cannot be made, this replica's clock
// judges, with snapStaleAfter's margin.
func (s *snapStore) reservationStale(p string) bool {
	st, err := os.Stat(p)
	if err != nil {
		return false // gone: the next O_EXCL create decides
	}
	if now, ok := s.dirNow(); ok {
		return now.Sub(st.ModTime()) > snapReserveStale
	}
	return time.Since(st.ModTime()) > snapStaleAfter
}

// dirNow is the current time as the snapshot directory's file system
// sees it: the modification time of a probe file made there.
func (s *snapStore) dirNow() (time.Time, bool) {
	f, err := os.CreateTemp(filepath.Join(s.dir, snapNamesDir), ".probe-")
	if err != nil {
		return time.Time{}, false
	}
	defer os.Remove(f.Name())
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return time.Time{}, false
	}
	return st.ModTime(), true
}

// remove deletes snapshot id: its record first (the commit), then the
// rest; what a crash in between leaves, sweep removes.
func (s *snapStore) remove(id string) error {
	if err := os.Remove(s.path(id, snapRecordFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return os.RemoveAll(s.path(id))
}

// sweep removes what crashed replicas left: .tmp- directories and
// snapshot directories without a record, older than snapStaleAfter, and
// hidden snapshots (forks') as old. It returns how many it removed.
func (s *snapStore) sweep(now time.Time) (int, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		info, err := e.Info()
		if err != nil || !e.IsDir() || now.Sub(info.ModTime()) < snapStaleAfter {
			continue
		}
		name := e.Name()
		switch {
		case strings.HasPrefix(name, snapTmpPrefix):
		case core.IsSnapshotID(name):
			rec, ok, err := s.read(name)
			if err != nil || (ok && !rec.Hidden) {
				continue
			}
		default:
			continue
		}
		if os.RemoveAll(filepath.Join(s.dir, name)) == nil {
			n++
		}
	}
	return n, nil
}

// maxArchiveBytes bounds the content of a snapshot of a sandbox with
// limits: its /workspace's disk limit and its /io, where the globals are.
func (m *Manager) maxArchiveBytes(limits core.Limits) int64 {
	return cmp.Or(limits.DiskBytes, m.cfg.DefaultLimits.DiskBytes, 10<<30) + m.cfg.IODiskBytes
}

// CreateSnapshot saves a running sandbox's state as a named snapshot of
// its tenant.
func (m *Manager) CreateSnapshot(ctx context.Context, sandboxID, name string) (core.Snapshot, error) {
	rec, err := m.takeSnapshot(ctx, sandboxID, name, false)
	return rec.Snapshot, err
}

// takeSnapshot takes a named (or, for a fork, hidden) snapshot.
func (m *Manager) takeSnapshot(ctx context.Context, sandboxID, name string, hidden bool) (snapRecord, error) {
	if err := m.checkOpen(); err != nil {
		return snapRecord{}, err
	}
	store, err := m.snapshotsOn()
	if err != nil {
		return snapRecord{}, err
	}
	p, err := m.live(ctx, sandboxID)
	if err != nil {
		return snapRecord{}, err
	}
	tenant := p.Annotations[annTenant]
	if name != "" {
		release, err := store.reserveName(tenant, name, m.warnSnapshot)
		if err != nil {
			return snapRecord{}, err
		}
		defer release()
	}
	if err := store.checkBudget(m.cfg.SnapshotBudget, tenant, "", 0, m.warnSnapshot); err != nil {
		return snapRecord{}, err
	}
	start := time.Now()
	id := core.NewSnapshotID()
	tmp := filepath.Join(store.dir, snapTmpPrefix+id)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return snapRecord{}, fmt.Errorf("make the snapshot's directory: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = os.RemoveAll(tmp)
		}
	}()

	// The globals, saved in the sandbox's /io by a live snapshot record.
	suffix := randomSuffix()
	srec := ioproto.Record{Type: ioproto.KindSnapshot, CommandID: "sbx-named-snapshot-" + suffix, Snapshot: "named-" + suffix,
		Live: true, TimeoutMS: snapshotTimeout.Milliseconds()}
	res, herr := m.runHib(ctx, p, srec, snapshotTimeout+10*time.Second)
	rec := snapRecord{Snapshot: core.Snapshot{ID: id, Name: name, Tenant: tenant, SandboxID: sandboxID, Level: ioproto.LevelFiles},
		Hidden: hidden, Image: imageOf(p), Volumes: decodeMounts(p.Annotations[annVolumes]),
		Env: callerEnvOf(p), Network: parseNetRecord(p.Annotations[annNetwork])}
	globals := ""
	switch {
	case herr != nil:
		if core.ClassOf(herr) == core.ErrFailedPrecondition {
			return snapRecord{}, herr // dead, hibernating, going: no state to save
		}
		rec.Reason = herr.Error()
	case res.Level != ioproto.LevelGlobals:
		rec.Reason = cmp.Or(res.Reason, "the sandbox did not save its globals")
	default:
		rec.Level, rec.Globals, globals = ioproto.LevelGlobals, true, srec.Snapshot
		if len(res.Lost) > 0 {
			names := make([]string, 0, len(res.Lost))
			for _, l := range res.Lost {
				names = append(names, l.Name)
			}
			rec.Reason = "not kept: " + strings.Join(names, ", ")
		}
	}

	// The archive: the globals (moved out of /io) and /workspace.
	conn, err := m.io(ctx, p)
	if err != nil {
		return snapRecord{}, err
	}
	f, err := os.OpenFile(filepath.Join(tmp, snapArchiveFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return snapRecord{}, err
	}
	limit := m.maxArchiveBytes(limitsOf(p))
	// The client bounds the stream too; this bound is the store's own.
	w := &boundedWriter{w: f, left: wsarchive.Limits{MaxBytes: limit}.MaxArchiveBytes()}
	st, err := conn.Export(ctx, globals, limit, w)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if core.ClassOf(err) != nil {
			return snapRecord{}, fmt.Errorf("sandbox %s: copy its workspace: %w", sandboxID, err)
		}
		return snapRecord{}, m.ioError(sandboxID, "", err)
	}
	if st.SkippedCount > 0 {
		rec.Reason = core.JoinReasons(rec.Reason, fmt.Sprintf("not kept from /workspace (%d): %s", st.SkippedCount, strings.Join(st.Skipped, "; ")))
	}
	rec.Reason = core.Truncate(rec.Reason, 1024)
	rec.Bytes, rec.ArchiveBytes, rec.CreatedAt = w.n, limit, time.Now().UTC()
	if err := store.checkBudget(m.cfg.SnapshotBudget, tenant, id, rec.Bytes, m.warnSnapshot); err != nil {
		return snapRecord{}, err
	}
	b, _ := json.Marshal(rec)
	if err := durable.WriteFile(filepath.Join(tmp, snapRecordFile), b); err != nil {
		return snapRecord{}, err
	}
	if err := os.Rename(tmp, store.path(id)); err != nil {
		return snapRecord{}, fmt.Errorf("commit the snapshot: %w", err)
	}
	committed = true
	durable.SyncDir(store.dir)
	m.log.Info("snapshot taken", "snapshot_id", id, "name", name, "sandbox_id", sandboxID, "tenant", tenant,
		"level", rec.Level, "bytes", rec.Bytes, "hidden", hidden, "took", time.Since(start))
	return rec, nil
}

// ListSnapshots lists the snapshots the caller may see, newest first.
func (m *Manager) ListSnapshots(ctx context.Context, f core.SnapshotFilter) ([]core.Snapshot, error) {
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	store, err := m.snapshotsOn()
	if err != nil {
		return nil, err
	}
	all, err := store.list(m.warnSnapshot)
	if err != nil {
		return nil, err
	}
	c := core.CallerOf(ctx)
	var out []core.Snapshot
	for _, s := range all {
		if f.Shows(c, s.Snapshot, s.Hidden) {
			out = append(out, s.Snapshot)
		}
	}
	core.SortSnapshots(out)
	return out, nil
}

// DeleteSnapshot deletes a snapshot. Sandboxes started from it keep what
// they got.
func (m *Manager) DeleteSnapshot(ctx context.Context, ref string) error {
	if err := m.checkOpen(); err != nil {
		return err
	}
	store, err := m.snapshotsOn()
	if err != nil {
		return err
	}
	rec, err := store.resolve(core.CallerOf(ctx), ref, false, m.warnSnapshot)
	if err != nil {
		return err
	}
	if err := store.remove(rec.ID); err != nil {
		return err
	}
	m.log.Info("snapshot deleted", "snapshot_id", rec.ID, "name", rec.Name, "tenant", rec.Tenant)
	return nil
}

// Fork makes req.Count sandboxes from a hidden snapshot of the source,
// taken between its commands; the source keeps running. Each fork is an
// Acquire from that snapshot for its user (given, or "fork-" and random),
// and succeeds or fails on its own; the snapshot is deleted after. A user
// who already has a sandbox gets no fork (ErrAlreadyExists for it). The
// rules are the Docker backend's.
func (m *Manager) Fork(ctx context.Context, sandboxID string, req core.ForkRequest) ([]core.ForkResult, error) {
	if _, err := m.snapshotsOn(); err != nil {
		return nil, err
	}
	src, err := m.Get(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	rec, err := m.takeSnapshot(ctx, sandboxID, "", true)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := m.snaps.remove(rec.ID); err != nil {
			m.log.Warn("remove a fork's snapshot; the leader's sweep removes it", "snapshot_id", rec.ID, "error", err)
		}
	}()
	// The source's options as they stand after the snapshot, all of them
	// (network policy with its header rules, env), or the caller's with
	// the source's env and network unless they have their own: the
	// Docker backend's rules.
	opts, err := m.forkOptions(ctx, sandboxID, req.Options)
	if err != nil {
		return nil, err
	}
	opts.FromSnapshot = rec.ID
	// The forks are the source's tenant's, whoever asked (an admin may).
	actx := core.WithCaller(ctx, core.Caller{Tenant: src.Tenant, Name: core.CallerOf(ctx).Name})
	return core.ForkEach(req, func(user string) core.ForkResult {
		res, err := m.acquire(actx, user, opts, true)
		switch {
		case err != nil:
			return core.ForkResult{Err: err}
		case !res.Created:
			return core.ForkResult{Err: core.ForkTaken(user, res.Sandbox.ID)}
		}
		return core.ForkResult{Sandbox: res.Sandbox, Woke: res.Woke}
	}), nil
}

// startFrom is what a new sandbox takes from the snapshot it starts from.
type startFrom struct {
	// image it runs, and the wake record its Pod carries (annWaking).
	image, waking string
	// rec is the snapshot's record.
	rec snapRecord
	// volumes are the snapshot's sandbox's.
	volumes []core.VolumeMount
}

// fromSnapshot resolves Options.FromSnapshot for a new sandbox.
func (m *Manager) fromSnapshot(ctx context.Context, ref string, hidden bool) (startFrom, error) {
	store, err := m.snapshotsOn()
	if err != nil {
		return startFrom{}, err
	}
	rec, err := store.resolve(core.CallerOf(ctx), ref, hidden, m.warnSnapshot)
	if err != nil {
		return startFrom{}, err
	}
	hr := hibRecord{Level: rec.Level, Reason: rec.Reason, TakenAt: rec.CreatedAt, FromSnapshot: rec.ID}
	if rec.Globals {
		hr.File = "from-" + randomSuffix()
	}
	b, _ := json.Marshal(hr)
	return startFrom{image: rec.Image, waking: string(b), rec: rec, volumes: rec.Volumes}, nil
}

// startOptions are the options of a new sandbox started from snapshot
// from with the caller's opts: the snapshot's env and network (its
// policy, header rules opened from their seal) unless opts have their
// own, as on the Docker backend, checked again by the server's policy
// (which may no longer allow the snapshot's network).
func (m *Manager) startOptions(from startFrom, opts core.Options) (core.Options, error) {
	rec := from.rec
	if opts.Env == nil && len(rec.Env) > 0 {
		opts.Env = rec.Env
	}
	if !opts.Network && opts.NetworkPolicy == nil && rec.Network != nil {
		np, err := m.openPolicy(rec.SandboxID, rec.Network)
		if err != nil {
			return core.Options{}, err
		}
		opts.Network, opts.NetworkPolicy = true, np
	}
	opts, err := m.cfg.Policy.ResolveOptions(opts)
	if err != nil {
		return core.Options{}, core.Preconditionf("snapshot %s was taken of a sandbox whose options this server no longer allows: %v", rec.ID, err)
	}
	return opts, nil
}

// openPolicy is sandbox id's network record r as a policy in full, its
// rules' header values opened from their seal.
func (m *Manager) openPolicy(id string, r *netRecord) (*core.NetworkPolicy, error) {
	np := r.Policy.Clone()
	rules, err := iosidecar.OpenRules(m.cfg.IOToken, id, r.Sealed)
	if err != nil {
		return nil, core.Preconditionf("the header rules of sandbox %s cannot be read to give them to a sandbox made from it: %v", id, err)
	}
	np.Rules = rules
	return &np, nil
}

// callerEnvOf is the env of Pod p's sandbox as its caller gave it: without
// the CA's environment its network adds (podNetwork), which a networked
// sandbox made from it gets again.
func callerEnvOf(p *corev1.Pod) map[string]string {
	env := envOf(p)
	if p.Annotations[annNetwork] != "" {
		for k, v := range caEnv() {
			if env[k] == v {
				delete(env, k)
			}
		}
	}
	if len(env) == 0 {
		return nil
	}
	return env
}

// importSnapshot sends snapshot hr.FromSnapshot's archive to ready Pod p's
// sidecar: its /workspace, and its globals as hr.File in /io/hibernate.
// Sent again (a replica finishing another's start), it writes the same.
func (m *Manager) importSnapshot(ctx context.Context, p *corev1.Pod, hr hibRecord) error {
	store, err := m.snapshotsOn()
	if err != nil {
		return err
	}
	rec, ok, err := store.read(hr.FromSnapshot)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("snapshot %s was deleted before the sandbox started from it", hr.FromSnapshot)
	}
	f, err := os.Open(store.path(rec.ID, snapArchiveFile))
	if err != nil {
		return err
	}
	defer f.Close()
	conn, err := m.io(ctx, p)
	if err != nil {
		return err
	}
	globals := ""
	if rec.Globals {
		globals = hr.File
	}
	if _, err := conn.Import(ctx, globals, f, rec.ArchiveBytes); err != nil {
		return m.ioError(p.Labels[labelSandboxID], "", err)
	}
	return nil
}

// limitsOf is the limits Pod p's sandbox was given.
func limitsOf(p *corev1.Pod) core.Limits {
	var l core.Limits
	_ = json.Unmarshal([]byte(p.Annotations[annLimits]), &l)
	return l
}

func (m *Manager) warnSnapshot(id string, err error) {
	m.log.Warn("skipping an unreadable snapshot", "snapshot_id", id, "error", err)
}

// boundedWriter writes at most left bytes to w, then fails: what a
// sidecar sends is bounded before it is stored.
type boundedWriter struct {
	w    io.Writer
	left int64
	n    int64
}

func (b *boundedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > b.left {
		return 0, core.Errorf(core.ErrResourceExhausted, "the snapshot's archive passed its bound of %d bytes", b.n+b.left)
	}
	n, err := b.w.Write(p)
	b.left -= int64(n)
	b.n += int64(n)
	return n, err
}

// randomSuffix names a sandbox's snapshot records and files.
func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// forkOptions are the options of the forks of sandbox id: given, the
// caller's (resolved by core.Validating; a start from the fork's snapshot
// fills in the source's env and network where they have none,
// startOptions); nil, the source's, all of them, resolved again by the
// server's policy (which may no longer allow what the source has).
func (m *Manager) forkOptions(ctx context.Context, id string, given *core.Options) (core.Options, error) {
	if given != nil {
		return *given, nil
	}
	p, _, err := m.lookup(ctx, id)
	if err != nil {
		return core.Options{}, err
	}
	if p == nil {
		return core.Options{}, core.Preconditionf("sandbox %s was hibernated while it was being forked; fork it again", id)
	}
	src, err := m.optionsOf(p)
	if err != nil {
		return core.Options{}, err
	}
	opts, err := m.cfg.Policy.ResolveOptions(src)
	if err != nil {
		return core.Options{}, core.Preconditionf("the forks would have the options of sandbox %s, which this server no longer allows: %v", id, err)
	}
	return opts, nil
}

// optionsOf returns the options the sandbox of Pod p was made with, as
// they stand (its policy and idle timeout as last set), in full: its
// rules' header values are opened from their seal, so they are never
// shown to a caller. Every field of core.Options is set but FromSnapshot
// (the sandbox's state) and Template (this backend has none):
// TestKubeForkCarriesOptions fails on a field added to core.Options and
// not carried here.
func (m *Manager) optionsOf(p *corev1.Pod) (core.Options, error) {
	a := p.Annotations
	o := core.Options{Env: callerEnvOf(p), Volumes: decodeMounts(a[annVolumes])}
	_ = json.Unmarshal([]byte(a[annLimits]), &o.Limits)
	if s := a[annMetadata]; s != "" {
		_ = json.Unmarshal([]byte(s), &o.Metadata)
	}
	if d, err := time.ParseDuration(a[annIdleTimeout]); err == nil && d > 0 {
		o.IdleTimeout = d
	}
	if v := a[annOnIdle]; v == core.OnIdleHibernate || v == core.OnIdleDelete {
		o.OnIdle = v
	}
	if r := parseNetRecord(a[annNetwork]); r != nil {
		np, err := m.openPolicy(p.Labels[labelSandboxID], r)
		if err != nil {
			return core.Options{}, err
		}
		o.Network, o.NetworkPolicy = true, np
	}
	return o, nil
}
