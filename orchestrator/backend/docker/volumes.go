package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wspath"
	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/moby/sys/mountinfo"
)

// Named volumes (core/volume.go) on this backend. Each is an ext4 file
// system in a sparse image, as a sandbox's /workspace is (volume.go),
// loop-mounted once on the host and bind-mounted into every sandbox that
// mounts it:
//
//	<StateDir>/volumes/<id>/meta.json    its name, tenant, size (root's, 0600)
//	<StateDir>/volumes/<id>/volume.img   the file system
//	<StateDir>/volumes/<id>/data/        where it is mounted (mode 0 underneath)
//
// One file system under one host mount means one page cache: under runc a
// write by one sandbox is seen by every other at once, with POSIX
// semantics (no locking between them beyond what the programs do). Under
// gVisor each sandbox's Sentry caches what it has read; another sandbox's
// change is seen on the next open of the file.
//
// Crash safety: meta.json is written last when a volume is made and
// removed first when it is deleted; a directory without it is the debris
// of either and is removed at start-up. Start-up mounts every volume again
// (after a reboot), before reconcile starts any sandbox's container.
//
// What a sandbox writes to a volume is hostile input, as its /workspace
// is: host-side file operations go through os.Root (wspath), never follow
// a symlink out, and are bounded like the workspace's.

// Names under <StateDir>/volumes/<id>.
const (
	volumesDir     = "volumes"
	volMetaFile    = "meta.json"
	volImageFile   = "volume.img"
	volDataDir     = "data"
	volMetaVersion = 1
)

// volumeTree names a volume in the file operations' messages.
var volumeTree = wspath.Volume

// volFile is a volume's meta.json.
type volFile struct {
	Version   int       `json:"version"`
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Tenant    string    `json:"tenant"`
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
}

// volumes is the store of named volumes. mu is a leaf lock: no other lock
// (a sandbox's, the registry's) is taken and nothing slow (mkfs, mount) is
// waited for while it is held.
type volumes struct {
	dir      string
	disabled string // why volumes cannot be made here; "" when they can
	mu       sync.Mutex
	byID     map[string]*volEntry
}

type volEntry struct {
	f volFile
	// making is true while the volume is being made: its name is taken,
	// but it cannot be used or deleted yet.
	making bool
	// deleting is true while DeleteVolume looks for its sandboxes: no new
	// sandbox may pin it meanwhile.
	deleting bool
	// pins counts sandboxes being created with it: a plain delete waits
	// for them to be registered (then they count as mounting it).
	pins int
}

// volDir is volume id's directory.
func (v *volumes) volDir(id string) string { return filepath.Join(v.dir, id) }

// volumeDataDir is where volume id is mounted on the host.
func volumeDataDir(stateDir, id string) string {
	return filepath.Join(stateDir, volumesDir, id, volDataDir)
}

// loadVolumes reads the store, removes the debris of creations and
// deletions a crash interrupted, and mounts every volume that is not
// mounted. Without disk volumes (--disk-volumes=false) it refuses every
// volume call, saying why.
func loadVolumes(ctx context.Context, stateDir string, noDisk bool, log interface {
	Warn(string, ...any)
}) (*volumes, error) {
	v := &volumes{dir: filepath.Join(stateDir, volumesDir), byID: map[string]*volEntry{}}
	if noDisk {
		v.disabled = "volumes need disk volumes (sandboxd --disk-volumes, the default)"
		return v, nil
	}
	if err := os.MkdirAll(v.dir, 0o700); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(v.dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		dir := filepath.Join(v.dir, e.Name())
		var f volFile
		err := ioproto.ReadJSONFile(filepath.Join(dir, volMetaFile), &f)
		if err != nil || f.ID != e.Name() || !core.IsVolumeID(f.ID) {
			if rerr := removeVolumeDir(dir); rerr != nil {
				log.Warn("remove an unfinished volume", "dir", dir, "error", rerr)
			}
			continue
		}
		data := filepath.Join(dir, volDataDir)
		mounted, err := mountinfo.Mounted(data)
		if err != nil {
			return nil, fmt.Errorf("volume %s: check its mount: %w", f.ID, err)
		}
		if !mounted {
			if err := mountVolume(ctx, filepath.Join(dir, volImageFile), data); err != nil {
				return nil, fmt.Errorf("volume %s: mount it: %w", f.ID, err)
			}
		}
		v.byID[f.ID] = &volEntry{f: f}
	}
	return v, nil
}

// removeVolumeDir unmounts a volume's data/ (lazily if busy) and removes
// its directory.
func removeVolumeDir(dir string) error {
	if err := unmountStack(filepath.Join(dir, volDataDir)); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// findLocked returns the entry of ref (an ID, or a name of the caller's tenant;
// an admin's name must be unique across tenants). Call with mu held.
func (v *volumes) findLocked(c core.Caller, ref string) (*volEntry, error) {
	if core.IsVolumeID(ref) {
		e := v.byID[ref]
		if e == nil || e.making || !c.Sees(e.f.Tenant) {
			return nil, core.VolumeNotFound(ref)
		}
		return e, nil
	}
	var found []*volEntry
	for _, e := range v.byID {
		if e.f.Name == ref && !e.making && c.Sees(e.f.Tenant) {
			found = append(found, e)
		}
	}
	if err := core.VolumeNamed(ref, len(found)); err != nil {
		return nil, err
	}
	return found[0], nil
}

// resolve returns volume ref's record.
func (v *volumes) resolve(c core.Caller, ref string) (volFile, error) {
	if v.disabled != "" {
		return volFile{}, core.Preconditionf("%s", v.disabled)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	e, err := v.findLocked(c, ref)
	if err != nil {
		return volFile{}, err
	}
	return e.f, nil
}

// exists reports whether volume id exists (a sandbox's mount of a volume
// deleted with force is skipped).
func (v *volumes) exists(id string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.byID[id]
	return e != nil && !e.making
}

// pin resolves a new sandbox's mounts to volume IDs and pins them until
// unpin: a plain DeleteVolume meanwhile is refused.
func (v *volumes) pin(c core.Caller, ms []core.VolumeMount) ([]core.VolumeMount, func(), error) {
	if len(ms) == 0 {
		return nil, func() {}, nil
	}
	if v.disabled != "" {
		return nil, nil, core.Preconditionf("%s", v.disabled)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]core.VolumeMount, len(ms))
	var pinned []*volEntry
	for i, m := range ms {
		e, err := v.findLocked(c, m.Volume)
		switch {
		case err != nil:
		case e.f.Tenant != c.Tenant:
			err = core.VolumeNotFound(m.Volume) // a sandbox mounts its own tenant's volumes only, an admin's too
		case e.deleting:
			err = core.Preconditionf("volume %s is being deleted", m.Volume)
		}
		if err != nil {
			for _, p := range pinned {
				p.pins--
			}
			return nil, nil, err
		}
		if slices.ContainsFunc(out[:i], func(o core.VolumeMount) bool { return o.Volume == e.f.ID }) {
			for _, p := range pinned {
				p.pins--
			}
			return nil, nil, core.Invalidf("volumes: %s is mounted twice (by its ID and its name)", e.f.Name)
		}
		e.pins++
		pinned = append(pinned, e)
		out[i] = core.VolumeMount{Volume: e.f.ID, Path: m.Path, ReadOnly: m.ReadOnly}
	}
	var once sync.Once
	return out, func() {
		once.Do(func() {
			v.mu.Lock()
			defer v.mu.Unlock()
			for _, p := range pinned {
				p.pins--
			}
		})
	}, nil
}

// mountedBy lists the registered sandboxes, running or hibernated, that
// mount volume id, in ID order.
func (m *Manager) mountedBy(id string) []string {
	var by []string
	for _, sb := range m.reg.all() {
		if !slices.ContainsFunc(sb.volumes, func(vm core.VolumeMount) bool { return vm.Volume == id }) {
			continue
		}
		if st, _ := sb.status(); st == core.StateDead {
			continue
		}
		by = append(by, sb.id)
	}
	slices.Sort(by)
	return by
}

// describeVolume is volume f for callers.
func (m *Manager) describeVolume(f volFile) core.Volume {
	vol := core.Volume{ID: f.ID, Name: f.Name, Tenant: f.Tenant, SizeBytes: f.SizeBytes, CreatedAt: f.CreatedAt, MountedBy: m.mountedBy(f.ID)}
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Join(m.vols.volDir(f.ID), volDataDir), &st); err == nil {
		vol.UsedBytes = int64(st.Blocks-st.Bfree) * st.Bsize
	}
	return vol
}

// CreateVolume makes an empty volume of size bytes (Validating bounds it)
// for the caller's tenant. The name must be new in the tenant
// (ErrAlreadyExists), and the tenant below Policy.MaxVolumesPerTenant
// (ErrResourceExhausted).
func (m *Manager) CreateVolume(ctx context.Context, name string, size int64) (core.Volume, error) {
	if err := m.checkOpen(); err != nil {
		return core.Volume{}, err
	}
	v := m.vols
	if v.disabled != "" {
		return core.Volume{}, core.Preconditionf("%s", v.disabled)
	}
	tenant := core.CallerOf(ctx).Tenant
	f := volFile{Version: volMetaVersion, ID: core.NewVolumeID(), Name: name, Tenant: tenant, SizeBytes: size, CreatedAt: time.Now().UTC()}
	v.mu.Lock()
	n := 0
	for _, e := range v.byID {
		if e.f.Tenant != tenant {
			continue
		}
		if e.f.Name == name {
			v.mu.Unlock()
			return core.Volume{}, core.AlreadyExistsf("volume %q already exists (%s)", name, e.f.ID)
		}
		n++
	}
	if max := m.cfg.MaxVolumesPerTenant; max > 0 && n >= max {
		v.mu.Unlock()
		return core.Volume{}, core.Exhaustedf("tenant %q has %d volumes, the most this server allows (sandboxd --max-volumes-per-tenant); delete one first", tenant, n)
	}
	v.byID[f.ID] = &volEntry{f: f, making: true}
	v.mu.Unlock()

	dir := v.volDir(f.ID)
	err := m.makeVolume(context.WithoutCancel(ctx), dir, f)
	v.mu.Lock()
	if err != nil {
		delete(v.byID, f.ID)
	} else {
		v.byID[f.ID].making = false
	}
	v.mu.Unlock()
	if err != nil {
		if rerr := removeVolumeDir(dir); rerr != nil {
			m.log.Error("remove a failed volume's directory; the next start removes it", "dir", dir, "error", rerr)
		}
		return core.Volume{}, fmt.Errorf("make volume %q: %w", name, err)
	}
	m.log.Info("volume created", "volume_id", f.ID, "name", name, "tenant", tenant, "size_bytes", size)
	return m.describeVolume(f), nil
}

// makeVolume creates volume f's directory, file system and mount, then its
// meta.json.
func (m *Manager) makeVolume(ctx context.Context, dir string, f volFile) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	data := filepath.Join(dir, volDataDir)
	if err := os.Mkdir(data, 0); err != nil {
		return err
	}
	if err := createVolume(ctx, filepath.Join(dir, volImageFile), data, f.SizeBytes, "0"); err != nil {
		return err
	}
	return ioproto.WriteJSONFileAtomic(filepath.Join(dir, volMetaFile), f, 0o600)
}

// GetVolume describes a volume the caller may see.
func (m *Manager) GetVolume(ctx context.Context, ref string) (core.Volume, error) {
	if err := m.checkOpen(); err != nil {
		return core.Volume{}, err
	}
	f, err := m.vols.resolve(core.CallerOf(ctx), ref)
	if err != nil {
		return core.Volume{}, err
	}
	return m.describeVolume(f), nil
}

// ListVolumes lists the volumes the caller may see (an admin's: of tenant,
// or all), by tenant and name. Without disk volumes the list is empty.
func (m *Manager) ListVolumes(ctx context.Context, tenant string) ([]core.Volume, error) {
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	c := core.CallerOf(ctx)
	m.vols.mu.Lock()
	var fs []volFile
	for _, e := range m.vols.byID {
		if !e.making && c.Sees(e.f.Tenant) && (tenant == "" || e.f.Tenant == tenant) {
			fs = append(fs, e.f)
		}
	}
	m.vols.mu.Unlock()
	slices.SortFunc(fs, func(a, b volFile) int {
		return strings.Compare(a.Tenant+"\x00"+a.Name, b.Tenant+"\x00"+b.Name)
	})
	out := make([]core.Volume, 0, len(fs))
	for _, f := range fs {
		out = append(out, m.describeVolume(f))
	}
	return out, nil
}

// DeleteVolume deletes a volume and its files. While sandboxes mount it
// (running or hibernated, or being created with it) it is refused with
// the sandboxes named, unless force: then the volume is gone for new
// sandboxes and calls at once, the host's mount is detached, and the
// sandboxes that mount it keep their view of it until their container
// stops (a hibernation, a restart), after which they run without it.
func (m *Manager) DeleteVolume(ctx context.Context, ref string, force bool) error {
	if err := m.checkOpen(); err != nil {
		return err
	}
	v := m.vols
	if v.disabled != "" {
		return core.Preconditionf("%s", v.disabled)
	}
	// The store's lock is a leaf, so the sandboxes are looked at without
	// it: marked deleting, the volume gets no new sandbox meanwhile, and
	// one being created holds a pin until it is registered.
	v.mu.Lock()
	e, err := v.findLocked(core.CallerOf(ctx), ref)
	switch {
	case err != nil:
		v.mu.Unlock()
		return err
	case e.deleting:
		v.mu.Unlock()
		return core.Preconditionf("volume %s is being deleted", ref)
	case !force && e.pins > 0:
		v.mu.Unlock()
		return core.Preconditionf("volume %s is being mounted by a sandbox being created: try again, or delete with force", ref)
	}
	e.deleting = true
	v.mu.Unlock()
	by := m.mountedBy(e.f.ID)
	v.mu.Lock()
	if !force && len(by) > 0 {
		e.deleting = false
		v.mu.Unlock()
		return core.VolumeInUse(ref, by)
	}
	delete(v.byID, e.f.ID)
	v.mu.Unlock()
	dir := v.volDir(e.f.ID)
	// meta.json first: a crash after it leaves debris start-up removes.
	if err := os.Remove(filepath.Join(dir, volMetaFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		m.log.Error("remove a deleted volume's meta.json", "volume_id", e.f.ID, "error", err)
	}
	if err := removeVolumeDir(dir); err != nil {
		m.log.Error("remove a deleted volume's files; the next start removes them", "volume_id", e.f.ID, "error", err)
	}
	m.log.Info("volume deleted", "volume_id", e.f.ID, "name", e.f.Name, "tenant", e.f.Tenant, "force", force, "mounted_by", by)
	for _, id := range by {
		// Its sandboxes go on without it: one whose volumes were mounted
		// after its start must not have its driver wait for it.
		if sb := m.reg.get(id); sb != nil {
			m.restateMounts(ctx, sb)
		}
	}
	return nil
}

// openVolume opens the root of volume ref's files.
func (m *Manager) openVolume(ctx context.Context, ref string) (*os.Root, volFile, error) {
	if err := m.checkOpen(); err != nil {
		return nil, volFile{}, err
	}
	f, err := m.vols.resolve(core.CallerOf(ctx), ref)
	if err != nil {
		return nil, volFile{}, err
	}
	root, err := os.OpenRoot(filepath.Join(m.vols.volDir(f.ID), volDataDir))
	if err != nil {
		return nil, volFile{}, fmt.Errorf("open volume %s: %w", f.ID, err)
	}
	return root, f, nil
}

// VolumeUpload writes r to a file on the volume, atomically, creating
// missing parents, as Upload does in a workspace; without overwrite an
// existing file is ErrAlreadyExists. What it creates belongs to the
// sandbox user. A file that does not fit is ErrResourceExhausted.
func (m *Manager) VolumeUpload(ctx context.Context, ref, rel string, r io.Reader, overwrite bool) (core.FileInfo, error) {
	root, f, err := m.openVolume(ctx, ref)
	if err != nil {
		return core.FileInfo{}, err
	}
	defer root.Close()
	fi, n, err := volumeTree.Upload(ctx, root, rel, r, overwrite)
	if err != nil {
		return core.FileInfo{}, err
	}
	m.log.Debug("volume file uploaded", "volume_id", f.ID, "path", core.VolumePathDisplay(rel), "bytes", n)
	return fi, nil
}

// VolumeDownload opens a regular file on the volume for reading.
func (m *Manager) VolumeDownload(ctx context.Context, ref, rel string) (io.ReadCloser, core.FileInfo, error) {
	root, _, err := m.openVolume(ctx, ref)
	if err != nil {
		return nil, core.FileInfo{}, err
	}
	defer root.Close()
	file, fi, err := volumeTree.Open(root, rel)
	if err != nil {
		return nil, core.FileInfo{}, err
	}
	return file, fi, nil
}

// VolumeStat describes a file on the volume (a symlink as a link).
func (m *Manager) VolumeStat(ctx context.Context, ref, rel string) (core.FileInfo, error) {
	root, _, err := m.openVolume(ctx, ref)
	if err != nil {
		return core.FileInfo{}, err
	}
	defer root.Close()
	return volumeTree.Stat(root, rel)
}

// VolumeListFiles lists a directory of the volume over depth levels, as
// ListFilesDepth does in a workspace.
func (m *Manager) VolumeListFiles(ctx context.Context, ref, rel string, depth int) ([]core.FileInfo, error) {
	root, _, err := m.openVolume(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return volumeTree.List(ctx, root, rel, depth)
}

// VolumeMakeDirectory creates a directory on the volume, as MakeDirectory
// does in a workspace.
func (m *Manager) VolumeMakeDirectory(ctx context.Context, ref, rel string, parents bool) (core.FileInfo, error) {
	root, _, err := m.openVolume(ctx, ref)
	if err != nil {
		return core.FileInfo{}, err
	}
	defer root.Close()
	return volumeTree.MakeDirectory(root, rel, parents)
}

// VolumeRemove removes a file or directory from the volume, as Remove does
// in a workspace.
func (m *Manager) VolumeRemove(ctx context.Context, ref, rel string, recursive bool) error {
	root, f, err := m.openVolume(ctx, ref)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := volumeTree.Remove(root, rel, recursive); err != nil {
		return err
	}
	m.log.Debug("volume file removed", "volume_id", f.ID, "path", core.VolumePathDisplay(rel), "recursive", recursive)
	return nil
}

// VolumeSetAttributes sets a file's owner, group or mode on the volume
// (wspath's Tree.SetAttributes: never through a symlink).
func (m *Manager) VolumeSetAttributes(ctx context.Context, ref, rel string, a core.FileAttributes) (core.FileInfo, error) {
	root, f, err := m.openVolume(ctx, ref)
	if err != nil {
		return core.FileInfo{}, err
	}
	defer root.Close()
	fi, err := volumeTree.SetAttributes(root, rel, a)
	if err != nil {
		return core.FileInfo{}, err
	}
	m.log.Debug("volume file attributes set", "volume_id", f.ID, "path", core.VolumePathDisplay(rel))
	return fi, nil
}

// volumeBinds are the bind mounts of a sandbox's volumes, for its
// container: those whose volume still exists (one deleted with force is
// left out, and logged).
func (m *Manager) volumeBinds(sb *sandbox) []string {
	var binds []string
	for _, vm := range sb.volumes {
		if !m.vols.exists(vm.Volume) {
			m.log.Warn("a sandbox's volume was deleted; its container starts without it", "sandbox_id", sb.id, "volume_id", vm.Volume, "path", vm.Path)
			continue
		}
		mode := "rw"
		if vm.ReadOnly {
			mode = "ro"
		}
		binds = append(binds, volumeDataDir(m.cfg.StateDir, vm.Volume)+":"+vm.Path+":"+mode)
	}
	return binds
}

// volumesOf is sb's mounts for callers: those whose volume exists.
func (m *Manager) volumesOf(sb *sandbox) []core.VolumeMount {
	var out []core.VolumeMount
	for _, vm := range sb.volumes {
		if m.vols.exists(vm.Volume) {
			out = append(out, vm)
		}
	}
	return out
}

// volumeMountMeta is how meta.json keeps a sandbox's mounts.
type volumeMountMeta struct {
	Volume   string `json:"volume"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

func mountsToMeta(ms []core.VolumeMount) []volumeMountMeta {
	var out []volumeMountMeta
	for _, vm := range ms {
		out = append(out, volumeMountMeta(vm))
	}
	return out
}

func mountsFromMeta(ms []volumeMountMeta) []core.VolumeMount {
	var out []core.VolumeMount
	for _, vm := range ms {
		out = append(out, core.VolumeMount(vm))
	}
	return out
}
