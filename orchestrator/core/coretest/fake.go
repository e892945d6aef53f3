// Package coretest provides a scriptable fake of the domain's port,
// core.Manager, for tests of the doors (gRPC, E2B) and of their clients
// (sandboxctl) that must not need Docker.
package coretest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// ErrNotScripted is returned by a method whose function field is nil, so a
// test that reaches an unexpected method fails loudly (as Internal).
var ErrNotScripted = errors.New("coretest: method not scripted")

// Manager implements core.Manager (and Close) by calling its function
// fields, recording every call so tests can check what reached the domain.
// Set the fields before the server starts; they are not guarded.
//
// It applies no request rules of its own: serve it as sandboxd serves a
// backend, behind core.Validating (Validated does), so malformed requests
// are refused with the domain's own messages and never reach it (nor
// Calls), and what the function fields see is what a backend would. List,
// ListFiles and ListFilesDepth return their results in the domain's order
// (core.CompareSandboxes, CompareFiles), whatever order the function fields
// use.
type Manager struct {
	AcquireFunc    func(ctx context.Context, userID string, opts core.Options) (core.AcquireResult, error)
	GetFunc        func(ctx context.Context, sandboxID string) (core.Sandbox, error)
	ListFunc       func(ctx context.Context, flt core.ListFilter) ([]core.Sandbox, error)
	DeleteFunc     func(ctx context.Context, sandboxID string) error
	SetTimeoutFunc func(ctx context.Context, sandboxID string, d time.Duration) (core.Sandbox, error)
	HibernateFunc  func(ctx context.Context, sandboxID string) (core.Sandbox, error)
	WakeFunc       func(ctx context.Context, sandboxID string) (core.Sandbox, *core.WakeInfo, error)

	SandboxMetricsFunc func(ctx context.Context, sandboxID string, since time.Time) ([]core.SandboxMetrics, error)
	CreateSnapshotFunc func(ctx context.Context, sandboxID, name string) (core.Snapshot, error)
	ListSnapshotsFunc  func(ctx context.Context, f core.SnapshotFilter) ([]core.Snapshot, error)
	DeleteSnapshotFunc func(ctx context.Context, ref string) error
	ForkFunc           func(ctx context.Context, sandboxID string, req core.ForkRequest) ([]core.ForkResult, error)

	UpdateNetworkPolicyFunc func(ctx context.Context, sandboxID string, p core.NetworkPolicy) (core.Sandbox, error)
	NetworkStatusFunc       func(ctx context.Context, sandboxID string) (core.NetworkStatus, error)
	GetHostFunc             func(ctx context.Context, sandboxID string, port int) (core.HostInfo, error)
	PortTargetFunc          func(ctx context.Context, sandboxID string, port int, token bool) (core.PortTarget, error)

	SubmitFunc       func(ctx context.Context, req core.ExecRequest) (string, error)
	FollowFunc       func(ctx context.Context, sandboxID, commandID string, afterSeq int64, fn func(core.Event) error) error
	ExecuteFunc      func(ctx context.Context, req core.ExecRequest, submitted func(string), fn func(core.Event) error) error
	InterruptFunc    func(ctx context.Context, sandboxID, commandID string) error
	SendStdinFunc    func(ctx context.Context, sandboxID, commandID string, data []byte) error
	CloseStdinFunc   func(ctx context.Context, sandboxID, commandID string) error
	ResizePtyFunc    func(ctx context.Context, sandboxID, commandID string, size core.PtySize) error
	ListCommandsFunc func(ctx context.Context, sandboxID string, pageSize int, pageToken string) (core.CommandPage, error)

	CreateContextFunc  func(ctx context.Context, sandboxID, language, cwd string) (core.ContextInfo, error)
	ListContextsFunc   func(ctx context.Context, sandboxID string) ([]core.ContextInfo, error)
	RestartContextFunc func(ctx context.Context, sandboxID, contextID string) error
	DeleteContextFunc  func(ctx context.Context, sandboxID, contextID string) error

	UploadFunc         func(ctx context.Context, sandboxID, path string, r io.Reader) (core.FileInfo, error)
	DownloadFunc       func(ctx context.Context, sandboxID, path string) (io.ReadCloser, core.FileInfo, error)
	ListFilesFunc      func(ctx context.Context, sandboxID, path string) ([]core.FileInfo, error)
	ListFilesDepthFunc func(ctx context.Context, sandboxID, path string, depth int) ([]core.FileInfo, error)
	MakeDirectoryFunc  func(ctx context.Context, sandboxID, path string, parents bool) (core.FileInfo, error)
	RemoveFunc         func(ctx context.Context, sandboxID, path string, recursive bool) error
	RenameFunc         func(ctx context.Context, sandboxID, from, to string, overwrite bool) (core.FileInfo, error)
	WatchDirectoryFunc func(ctx context.Context, sandboxID, path string, recursive bool, fn func(core.WatchUpdate) error) error

	CreateVolumeFunc        func(ctx context.Context, name string, size int64) (core.Volume, error)
	GetVolumeFunc           func(ctx context.Context, ref string) (core.Volume, error)
	ListVolumesFunc         func(ctx context.Context, tenant string) ([]core.Volume, error)
	DeleteVolumeFunc        func(ctx context.Context, ref string, force bool) error
	VolumeUploadFunc        func(ctx context.Context, ref, path string, r io.Reader, overwrite bool) (core.FileInfo, error)
	VolumeDownloadFunc      func(ctx context.Context, ref, path string) (io.ReadCloser, core.FileInfo, error)
	VolumeStatFunc          func(ctx context.Context, ref, path string) (core.FileInfo, error)
	VolumeListFilesFunc     func(ctx context.Context, ref, path string, depth int) ([]core.FileInfo, error)
	VolumeMakeDirectoryFunc func(ctx context.Context, ref, path string, parents bool) (core.FileInfo, error)
	VolumeRemoveFunc        func(ctx context.Context, ref, path string, recursive bool) error
	VolumeSetAttributesFunc func(ctx context.Context, ref, path string, a core.FileAttributes) (core.FileInfo, error)
	PutTemplateFileFunc     func(ctx context.Context, key string, r io.Reader) (bool, error)
	HasTemplateFileFunc     func(ctx context.Context, key string) (bool, error)
	BuildTemplateFunc       func(ctx context.Context, name string, spec core.TemplateSpec, force bool) (core.Template, core.TemplateVersion, error)
	FollowTemplateBuildFunc func(ctx context.Context, ref string, version int, afterSeq int64, fn func(core.TemplateBuildEvent) error) error
	TemplateBuildLogFunc    func(ctx context.Context, ref string, version int, afterSeq int64, limit int) ([]core.TemplateBuildEvent, core.TemplateVersion, error)
	GetTemplateFunc         func(ctx context.Context, ref string) (core.Template, error)
	ListTemplatesFunc       func(ctx context.Context, tenant string) ([]core.Template, error)
	DeleteTemplateFunc      func(ctx context.Context, ref string) error

	CloseFunc func() error

	mu    sync.Mutex
	calls []string
}

var _ core.Manager = (*Manager)(nil)

// Validated is m behind core.Validating with the default policy, closed
// through m: what a door's test serves, as sandboxd serves a backend.
func Validated(m *Manager) *ValidatedManager {
	return ValidatedWith(m, core.DefaultPolicy())
}

// NetworkPolicy is the default policy with network allowed
// (core.Policy.AllowNetwork), for tests of the network API.
func NetworkPolicy() core.Policy {
	p := core.Policy{AllowNetwork: true}
	if err := p.ApplyDefaults(); err != nil {
		panic(err) // the defaults are consistent
	}
	return p
}

// ValidatedWith is m behind core.Validating with policy p (defaults
// applied by the caller).
func ValidatedWith(m *Manager, p core.Policy) *ValidatedManager {
	return &ValidatedManager{Manager: core.Validating(m, p), Fake: m}
}

// Without is m as a backend named backend that lacks caps, completed as
// sandboxd completes a backend (core.Complete): their calls answer
// Unsupported and never reach m. For tests of how the doors say "not
// here".
func Without(m *Manager, backend string, caps ...core.Capability) core.Manager {
	return core.Complete(backend, lacking{Manager: m, backend: backend, caps: caps})
}

// lacking is a fake that says it lacks some capabilities.
type lacking struct {
	*Manager
	backend string
	caps    []core.Capability
}

func (l lacking) Lacks(c core.Capability) error {
	if slices.Contains(l.caps, c) {
		return core.Unsupported(l.backend, string(c))
	}
	return nil
}

// ValidatedManager is a fake behind the validating layer.
type ValidatedManager struct {
	core.Manager
	Fake *Manager
}

// Close closes the fake.
func (v *ValidatedManager) Close() error { return v.Fake.Close() }

// Calls returns the calls that reached the fake.
func (v *ValidatedManager) Calls() []string { return v.Fake.Calls() }

// record records a call that reached the fake.
func (m *Manager) record(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, name)
}

// Calls returns the names of the methods called so far, in order.
func (m *Manager) Calls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.calls...)
}

// Acquire calls AcquireFunc.
func (m *Manager) Acquire(ctx context.Context, userID string, opts core.Options) (core.AcquireResult, error) {
	m.record("Acquire")
	if m.AcquireFunc == nil {
		return core.AcquireResult{}, ErrNotScripted
	}
	return m.AcquireFunc(ctx, userID, opts)
}

// Get calls GetFunc.
func (m *Manager) Get(ctx context.Context, sandboxID string) (core.Sandbox, error) {
	m.record("Get")
	if m.GetFunc == nil {
		return core.Sandbox{}, ErrNotScripted
	}
	return m.GetFunc(ctx, sandboxID)
}

// List calls ListFunc, and returns its result sorted.
func (m *Manager) List(ctx context.Context, flt core.ListFilter) ([]core.Sandbox, error) {
	m.record("List")
	if m.ListFunc == nil {
		return nil, ErrNotScripted
	}
	list, err := m.ListFunc(ctx, flt)
	slices.SortFunc(list, core.CompareSandboxes)
	return list, err
}

// Delete calls DeleteFunc.
func (m *Manager) Delete(ctx context.Context, sandboxID string) error {
	m.record("Delete")
	if m.DeleteFunc == nil {
		return ErrNotScripted
	}
	return m.DeleteFunc(ctx, sandboxID)
}

// SetTimeout calls SetTimeoutFunc.
func (m *Manager) SetTimeout(ctx context.Context, sandboxID string, d time.Duration) (core.Sandbox, error) {
	m.record("SetTimeout")
	if m.SetTimeoutFunc == nil {
		return core.Sandbox{}, ErrNotScripted
	}
	return m.SetTimeoutFunc(ctx, sandboxID, d)
}

// Hibernate calls HibernateFunc.
func (m *Manager) Hibernate(ctx context.Context, sandboxID string) (core.Sandbox, error) {
	m.record("Hibernate")
	if m.HibernateFunc == nil {
		return core.Sandbox{}, ErrNotScripted
	}
	return m.HibernateFunc(ctx, sandboxID)
}

// Wake calls WakeFunc.
func (m *Manager) Wake(ctx context.Context, sandboxID string) (core.Sandbox, *core.WakeInfo, error) {
	m.record("Wake")
	if m.WakeFunc == nil {
		return core.Sandbox{}, nil, ErrNotScripted
	}
	return m.WakeFunc(ctx, sandboxID)
}

// CreateSnapshot calls CreateSnapshotFunc.
func (m *Manager) CreateSnapshot(ctx context.Context, sandboxID, name string) (core.Snapshot, error) {
	m.record("CreateSnapshot")
	if m.CreateSnapshotFunc == nil {
		return core.Snapshot{}, ErrNotScripted
	}
	return m.CreateSnapshotFunc(ctx, sandboxID, name)
}

// ListSnapshots calls ListSnapshotsFunc.
func (m *Manager) ListSnapshots(ctx context.Context, f core.SnapshotFilter) ([]core.Snapshot, error) {
	m.record("ListSnapshots")
	if m.ListSnapshotsFunc == nil {
		return nil, ErrNotScripted
	}
	return m.ListSnapshotsFunc(ctx, f)
}

// DeleteSnapshot calls DeleteSnapshotFunc.
func (m *Manager) DeleteSnapshot(ctx context.Context, ref string) error {
	m.record("DeleteSnapshot")
	if m.DeleteSnapshotFunc == nil {
		return ErrNotScripted
	}
	return m.DeleteSnapshotFunc(ctx, ref)
}

// Fork calls ForkFunc.
func (m *Manager) Fork(ctx context.Context, sandboxID string, req core.ForkRequest) ([]core.ForkResult, error) {
	m.record("Fork")
	if m.ForkFunc == nil {
		return nil, ErrNotScripted
	}
	return m.ForkFunc(ctx, sandboxID, req)
}

// SandboxMetrics calls SandboxMetricsFunc.
func (m *Manager) SandboxMetrics(ctx context.Context, sandboxID string, since time.Time) ([]core.SandboxMetrics, error) {
	m.record("SandboxMetrics")
	if m.SandboxMetricsFunc == nil {
		return nil, ErrNotScripted
	}
	return m.SandboxMetricsFunc(ctx, sandboxID, since)
}

// UpdateNetworkPolicy calls UpdateNetworkPolicyFunc.
func (m *Manager) UpdateNetworkPolicy(ctx context.Context, sandboxID string, p core.NetworkPolicy) (core.Sandbox, error) {
	m.record("UpdateNetworkPolicy")
	if m.UpdateNetworkPolicyFunc == nil {
		return core.Sandbox{}, ErrNotScripted
	}
	return m.UpdateNetworkPolicyFunc(ctx, sandboxID, p)
}

// NetworkStatus calls NetworkStatusFunc.
func (m *Manager) NetworkStatus(ctx context.Context, sandboxID string) (core.NetworkStatus, error) {
	m.record("NetworkStatus")
	if m.NetworkStatusFunc == nil {
		return core.NetworkStatus{}, ErrNotScripted
	}
	return m.NetworkStatusFunc(ctx, sandboxID)
}

// GetHost calls GetHostFunc.
func (m *Manager) GetHost(ctx context.Context, sandboxID string, port int) (core.HostInfo, error) {
	m.record("GetHost")
	if m.GetHostFunc == nil {
		return core.HostInfo{}, ErrNotScripted
	}
	return m.GetHostFunc(ctx, sandboxID, port)
}

// PortTarget calls PortTargetFunc.
func (m *Manager) PortTarget(ctx context.Context, sandboxID string, port int, token bool) (core.PortTarget, error) {
	m.record("PortTarget")
	if m.PortTargetFunc == nil {
		return core.PortTarget{}, ErrNotScripted
	}
	return m.PortTargetFunc(ctx, sandboxID, port, token)
}

// Submit calls SubmitFunc.
func (m *Manager) Submit(ctx context.Context, req core.ExecRequest) (string, error) {
	m.record("Submit")
	if m.SubmitFunc == nil {
		return "", ErrNotScripted
	}
	return m.SubmitFunc(ctx, req)
}

// Follow calls FollowFunc.
func (m *Manager) Follow(ctx context.Context, sandboxID, commandID string, afterSeq int64, fn func(core.Event) error) error {
	m.record("Follow")
	if m.FollowFunc == nil {
		return ErrNotScripted
	}
	return m.FollowFunc(ctx, sandboxID, commandID, afterSeq, fn)
}

// Execute calls ExecuteFunc, or else Submit then Follow
// (core.SubmitThenFollow; recorded as those two calls).
func (m *Manager) Execute(ctx context.Context, req core.ExecRequest, submitted func(string), fn func(core.Event) error) error {
	if m.ExecuteFunc != nil {
		m.record("Execute")
		return m.ExecuteFunc(ctx, req, submitted, fn)
	}
	return core.SubmitThenFollow(ctx, m, req, submitted, fn)
}

// Interrupt calls InterruptFunc.
func (m *Manager) Interrupt(ctx context.Context, sandboxID, commandID string) error {
	m.record("Interrupt")
	if m.InterruptFunc == nil {
		return ErrNotScripted
	}
	return m.InterruptFunc(ctx, sandboxID, commandID)
}

// SendStdin calls SendStdinFunc.
func (m *Manager) SendStdin(ctx context.Context, sandboxID, commandID string, data []byte) error {
	m.record("SendStdin")
	if m.SendStdinFunc == nil {
		return ErrNotScripted
	}
	return m.SendStdinFunc(ctx, sandboxID, commandID, data)
}

// CloseStdin calls CloseStdinFunc.
func (m *Manager) CloseStdin(ctx context.Context, sandboxID, commandID string) error {
	m.record("CloseStdin")
	if m.CloseStdinFunc == nil {
		return ErrNotScripted
	}
	return m.CloseStdinFunc(ctx, sandboxID, commandID)
}

// ResizePty calls ResizePtyFunc.
func (m *Manager) ResizePty(ctx context.Context, sandboxID, commandID string, size core.PtySize) error {
	m.record("ResizePty")
	if m.ResizePtyFunc == nil {
		return ErrNotScripted
	}
	return m.ResizePtyFunc(ctx, sandboxID, commandID, size)
}

// ListCommands calls ListCommandsFunc.
func (m *Manager) ListCommands(ctx context.Context, sandboxID string, pageSize int, pageToken string) (core.CommandPage, error) {
	m.record("ListCommands")
	if m.ListCommandsFunc == nil {
		return core.CommandPage{}, ErrNotScripted
	}
	return m.ListCommandsFunc(ctx, sandboxID, pageSize, pageToken)
}

// CreateContext calls CreateContextFunc.
func (m *Manager) CreateContext(ctx context.Context, sandboxID, language, cwd string) (core.ContextInfo, error) {
	m.record("CreateContext")
	if m.CreateContextFunc == nil {
		return core.ContextInfo{}, ErrNotScripted
	}
	return m.CreateContextFunc(ctx, sandboxID, language, cwd)
}

// ListContexts calls ListContextsFunc.
func (m *Manager) ListContexts(ctx context.Context, sandboxID string) ([]core.ContextInfo, error) {
	m.record("ListContexts")
	if m.ListContextsFunc == nil {
		return nil, ErrNotScripted
	}
	return m.ListContextsFunc(ctx, sandboxID)
}

// RestartContext calls RestartContextFunc.
func (m *Manager) RestartContext(ctx context.Context, sandboxID, contextID string) error {
	m.record("RestartContext")
	if m.RestartContextFunc == nil {
		return ErrNotScripted
	}
	return m.RestartContextFunc(ctx, sandboxID, contextID)
}

// DeleteContext calls DeleteContextFunc.
func (m *Manager) DeleteContext(ctx context.Context, sandboxID, contextID string) error {
	m.record("DeleteContext")
	if m.DeleteContextFunc == nil {
		return ErrNotScripted
	}
	return m.DeleteContextFunc(ctx, sandboxID, contextID)
}

// Upload calls UploadFunc.
func (m *Manager) Upload(ctx context.Context, sandboxID, path string, r io.Reader) (core.FileInfo, error) {
	m.record("Upload")
	if m.UploadFunc == nil {
		return core.FileInfo{}, ErrNotScripted
	}
	return m.UploadFunc(ctx, sandboxID, path, r)
}

// Download calls DownloadFunc.
func (m *Manager) Download(ctx context.Context, sandboxID, path string) (io.ReadCloser, core.FileInfo, error) {
	m.record("Download")
	if m.DownloadFunc == nil {
		return nil, core.FileInfo{}, ErrNotScripted
	}
	return m.DownloadFunc(ctx, sandboxID, path)
}

// ListFiles calls ListFilesFunc, and returns its result sorted.
func (m *Manager) ListFiles(ctx context.Context, sandboxID, path string) ([]core.FileInfo, error) {
	m.record("ListFiles")
	if m.ListFilesFunc == nil {
		return nil, ErrNotScripted
	}
	list, err := m.ListFilesFunc(ctx, sandboxID, path)
	slices.SortFunc(list, core.CompareFiles)
	return list, err
}

// ListFilesDepth calls ListFilesDepthFunc, and returns its result sorted.
func (m *Manager) ListFilesDepth(ctx context.Context, sandboxID, path string, depth int) ([]core.FileInfo, error) {
	m.record("ListFilesDepth")
	if m.ListFilesDepthFunc == nil {
		return nil, ErrNotScripted
	}
	list, err := m.ListFilesDepthFunc(ctx, sandboxID, path, depth)
	slices.SortFunc(list, core.CompareFiles)
	return list, err
}

// MakeDirectory calls MakeDirectoryFunc.
func (m *Manager) MakeDirectory(ctx context.Context, sandboxID, path string, parents bool) (core.FileInfo, error) {
	m.record("MakeDirectory")
	if m.MakeDirectoryFunc == nil {
		return core.FileInfo{}, ErrNotScripted
	}
	return m.MakeDirectoryFunc(ctx, sandboxID, path, parents)
}

// Remove calls RemoveFunc.
func (m *Manager) Remove(ctx context.Context, sandboxID, path string, recursive bool) error {
	m.record("Remove")
	if m.RemoveFunc == nil {
		return ErrNotScripted
	}
	return m.RemoveFunc(ctx, sandboxID, path, recursive)
}

// Rename calls RenameFunc.
func (m *Manager) Rename(ctx context.Context, sandboxID, from, to string, overwrite bool) (core.FileInfo, error) {
	m.record("Rename")
	if m.RenameFunc == nil {
		return core.FileInfo{}, ErrNotScripted
	}
	return m.RenameFunc(ctx, sandboxID, from, to, overwrite)
}

// WatchDirectory calls WatchDirectoryFunc.
func (m *Manager) WatchDirectory(ctx context.Context, sandboxID, path string, recursive bool, fn func(core.WatchUpdate) error) error {
	m.record("WatchDirectory")
	if m.WatchDirectoryFunc == nil {
		return ErrNotScripted
	}
	return m.WatchDirectoryFunc(ctx, sandboxID, path, recursive, fn)
}

// CreateVolume calls CreateVolumeFunc.
func (m *Manager) CreateVolume(ctx context.Context, name string, size int64) (core.Volume, error) {
	m.record("CreateVolume")
	if m.CreateVolumeFunc == nil {
		return core.Volume{}, ErrNotScripted
	}
	return m.CreateVolumeFunc(ctx, name, size)
}

// GetVolume calls GetVolumeFunc.
func (m *Manager) GetVolume(ctx context.Context, ref string) (core.Volume, error) {
	m.record("GetVolume")
	if m.GetVolumeFunc == nil {
		return core.Volume{}, ErrNotScripted
	}
	return m.GetVolumeFunc(ctx, ref)
}

// ListVolumes calls ListVolumesFunc.
func (m *Manager) ListVolumes(ctx context.Context, tenant string) ([]core.Volume, error) {
	m.record("ListVolumes")
	if m.ListVolumesFunc == nil {
		return nil, ErrNotScripted
	}
	return m.ListVolumesFunc(ctx, tenant)
}

// DeleteVolume calls DeleteVolumeFunc.
func (m *Manager) DeleteVolume(ctx context.Context, ref string, force bool) error {
	m.record("DeleteVolume")
	if m.DeleteVolumeFunc == nil {
		return ErrNotScripted
	}
	return m.DeleteVolumeFunc(ctx, ref, force)
}

// VolumeUpload calls VolumeUploadFunc.
func (m *Manager) VolumeUpload(ctx context.Context, ref, path string, r io.Reader, overwrite bool) (core.FileInfo, error) {
	m.record("VolumeUpload")
	if m.VolumeUploadFunc == nil {
		return core.FileInfo{}, ErrNotScripted
	}
	return m.VolumeUploadFunc(ctx, ref, path, r, overwrite)
}

// VolumeDownload calls VolumeDownloadFunc.
func (m *Manager) VolumeDownload(ctx context.Context, ref, path string) (io.ReadCloser, core.FileInfo, error) {
	m.record("VolumeDownload")
	if m.VolumeDownloadFunc == nil {
		return nil, core.FileInfo{}, ErrNotScripted
	}
	return m.VolumeDownloadFunc(ctx, ref, path)
}

// VolumeStat calls VolumeStatFunc.
func (m *Manager) VolumeStat(ctx context.Context, ref, path string) (core.FileInfo, error) {
	m.record("VolumeStat")
	if m.VolumeStatFunc == nil {
		return core.FileInfo{}, ErrNotScripted
	}
	return m.VolumeStatFunc(ctx, ref, path)
}

// VolumeListFiles calls VolumeListFilesFunc.
func (m *Manager) VolumeListFiles(ctx context.Context, ref, path string, depth int) ([]core.FileInfo, error) {
	m.record("VolumeListFiles")
	if m.VolumeListFilesFunc == nil {
		return nil, ErrNotScripted
	}
	return m.VolumeListFilesFunc(ctx, ref, path, depth)
}

// VolumeMakeDirectory calls VolumeMakeDirectoryFunc.
func (m *Manager) VolumeMakeDirectory(ctx context.Context, ref, path string, parents bool) (core.FileInfo, error) {
	m.record("VolumeMakeDirectory")
	if m.VolumeMakeDirectoryFunc == nil {
		return core.FileInfo{}, ErrNotScripted
	}
	return m.VolumeMakeDirectoryFunc(ctx, ref, path, parents)
}

// VolumeRemove calls VolumeRemoveFunc.
func (m *Manager) VolumeRemove(ctx context.Context, ref, path string, recursive bool) error {
	m.record("VolumeRemove")
	if m.VolumeRemoveFunc == nil {
		return ErrNotScripted
	}
	return m.VolumeRemoveFunc(ctx, ref, path, recursive)
}

// VolumeSetAttributes calls VolumeSetAttributesFunc.
func (m *Manager) VolumeSetAttributes(ctx context.Context, ref, path string, a core.FileAttributes) (core.FileInfo, error) {
	m.record("VolumeSetAttributes")
	if m.VolumeSetAttributesFunc == nil {
		return core.FileInfo{}, ErrNotScripted
	}
	return m.VolumeSetAttributesFunc(ctx, ref, path, a)
}

// PutTemplateFile calls PutTemplateFileFunc.
func (m *Manager) PutTemplateFile(ctx context.Context, key string, r io.Reader) (bool, error) {
	m.record("PutTemplateFile")
	if m.PutTemplateFileFunc == nil {
		return false, ErrNotScripted
	}
	return m.PutTemplateFileFunc(ctx, key, r)
}

// HasTemplateFile calls HasTemplateFileFunc.
func (m *Manager) HasTemplateFile(ctx context.Context, key string) (bool, error) {
	m.record("HasTemplateFile")
	if m.HasTemplateFileFunc == nil {
		return false, ErrNotScripted
	}
	return m.HasTemplateFileFunc(ctx, key)
}

// BuildTemplate calls BuildTemplateFunc.
func (m *Manager) BuildTemplate(ctx context.Context, name string, spec core.TemplateSpec, force bool) (core.Template, core.TemplateVersion, error) {
	m.record("BuildTemplate")
	if m.BuildTemplateFunc == nil {
		return core.Template{}, core.TemplateVersion{}, ErrNotScripted
	}
	return m.BuildTemplateFunc(ctx, name, spec, force)
}

// FollowTemplateBuild calls FollowTemplateBuildFunc.
func (m *Manager) FollowTemplateBuild(ctx context.Context, ref string, version int, afterSeq int64, fn func(core.TemplateBuildEvent) error) error {
	m.record("FollowTemplateBuild")
	if m.FollowTemplateBuildFunc == nil {
		return ErrNotScripted
	}
	return m.FollowTemplateBuildFunc(ctx, ref, version, afterSeq, fn)
}

// TemplateBuildLog calls TemplateBuildLogFunc.
func (m *Manager) TemplateBuildLog(ctx context.Context, ref string, version int, afterSeq int64, limit int) ([]core.TemplateBuildEvent, core.TemplateVersion, error) {
	m.record("TemplateBuildLog")
	if m.TemplateBuildLogFunc == nil {
		return nil, core.TemplateVersion{}, ErrNotScripted
	}
	return m.TemplateBuildLogFunc(ctx, ref, version, afterSeq, limit)
}

// GetTemplate calls GetTemplateFunc.
func (m *Manager) GetTemplate(ctx context.Context, ref string) (core.Template, error) {
	m.record("GetTemplate")
	if m.GetTemplateFunc == nil {
		return core.Template{}, ErrNotScripted
	}
	return m.GetTemplateFunc(ctx, ref)
}

// ListTemplates calls ListTemplatesFunc.
func (m *Manager) ListTemplates(ctx context.Context, tenant string) ([]core.Template, error) {
	m.record("ListTemplates")
	if m.ListTemplatesFunc == nil {
		return nil, ErrNotScripted
	}
	return m.ListTemplatesFunc(ctx, tenant)
}

// DeleteTemplate calls DeleteTemplateFunc.
func (m *Manager) DeleteTemplate(ctx context.Context, ref string) error {
	m.record("DeleteTemplate")
	if m.DeleteTemplateFunc == nil {
		return ErrNotScripted
	}
	return m.DeleteTemplateFunc(ctx, ref)
}

// Close calls CloseFunc, or does nothing when it is nil.
func (m *Manager) Close() error {
	m.record("Close")
	if m.CloseFunc == nil {
		return nil
	}
	return m.CloseFunc()
}

// Errorf returns an error of the domain class (core.ErrNotFound, ...)
// whose message is only the formatted text, as the real Manager's errors
// are, so tests see the messages clients would.
func Errorf(class error, format string, args ...any) error {
	return &classError{class: class, msg: fmt.Sprintf(format, args...)}
}

type classError struct {
	class error
	msg   string
}

func (e *classError) Error() string { return e.msg }
func (e *classError) Unwrap() error { return e.class }
