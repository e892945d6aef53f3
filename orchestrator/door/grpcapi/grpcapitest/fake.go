// Package grpcapitest provides a scriptable fake of the domain Manager, for
// tests of the gRPC API and of its clients (sandboxctl) that must not need
// Docker.
package grpcapitest

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
var ErrNotScripted = errors.New("grpcapitest: method not scripted")

// Manager implements grpcapi.Manager (and Close) by calling its function
// fields, recording every call so tests can check what reached the domain.
// Set the fields before the server starts; they are not guarded.
//
// It keeps the promises of the real Manager that the API relies on instead
// of repeating them:
//   - it refuses malformed arguments with the domain's own validators
//     (orchestrator.ValidateSandboxID, ExecRequest.Validate, ...), before
//     recording the call or calling the function field, so such calls
//     never "reach the domain" in Calls, as with the real Manager, which
//     validates before it does anything;
//   - List and ListFiles return their results in the domain's order
//     (orchestrator.CompareSandboxes, CompareFiles), whatever order the
//     function fields use.
type Manager struct {
	AcquireFunc   func(ctx context.Context, userID string, opts core.Options) (core.AcquireResult, error)
	GetFunc       func(ctx context.Context, sandboxID string) (core.Sandbox, error)
	ListFunc      func(ctx context.Context, f core.ListFilter) ([]core.Sandbox, error)
	DeleteFunc    func(ctx context.Context, sandboxID string) error
	SubmitFunc    func(ctx context.Context, req core.ExecRequest) (string, error)
	FollowFunc    func(ctx context.Context, sandboxID, commandID string, afterSeq int64, fn func(core.Event) error) error
	InterruptFunc func(ctx context.Context, sandboxID, commandID string) error
	UploadFunc    func(ctx context.Context, sandboxID, path string, r io.Reader) (core.FileInfo, error)
	DownloadFunc  func(ctx context.Context, sandboxID, path string) (io.ReadCloser, core.FileInfo, error)
	ListFilesFunc func(ctx context.Context, sandboxID, path string) ([]core.FileInfo, error)
	CloseFunc     func() error

	MakeDirectoryFunc  func(ctx context.Context, sandboxID, path string, parents bool) (core.FileInfo, error)
	RemoveFunc         func(ctx context.Context, sandboxID, path string, recursive bool) error
	RenameFunc         func(ctx context.Context, sandboxID, from, to string, overwrite bool) (core.FileInfo, error)
	ListFilesDepthFunc func(ctx context.Context, sandboxID, path string, depth int) ([]core.FileInfo, error)
	WatchDirectoryFunc func(ctx context.Context, sandboxID, path string, recursive bool, fn func(core.WatchUpdate) error) error

	SetTimeoutFunc     func(ctx context.Context, sandboxID string, d time.Duration) (core.Sandbox, error)
	HibernateFunc      func(ctx context.Context, sandboxID string) (core.Sandbox, error)
	WakeFunc           func(ctx context.Context, sandboxID string) (core.Sandbox, *core.WakeInfo, error)
	CreateContextFunc  func(ctx context.Context, sandboxID, language, cwd string) (core.ContextInfo, error)
	ListContextsFunc   func(ctx context.Context, sandboxID string) ([]core.ContextInfo, error)
	RestartContextFunc func(ctx context.Context, sandboxID, contextID string) error
	DeleteContextFunc  func(ctx context.Context, sandboxID, contextID string) error

	mu    sync.Mutex
	calls []string
}

// record records a call whose arguments the domain accepts (valid is
// their validation's result); it returns valid.
func (m *Manager) record(name string, valid error) error {
	if valid != nil {
		return valid
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, name)
	return nil
}

// commandIDs validates the IDs of a command operation.
func commandIDs(sandboxID, commandID string) error {
	if err := core.ValidateSandboxID(sandboxID); err != nil {
		return err
	}
	return core.ValidateCommandID(commandID)
}

// Calls returns the names of the methods called so far with arguments the
// domain accepts, in order.
func (m *Manager) Calls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.calls...)
}

// Acquire calls AcquireFunc.
func (m *Manager) Acquire(ctx context.Context, userID string, opts core.Options) (core.AcquireResult, error) {
	if err := m.record("Acquire", core.ValidateUserID(userID)); err != nil {
		return core.AcquireResult{}, err
	}
	if m.AcquireFunc == nil {
		return core.AcquireResult{}, ErrNotScripted
	}
	return m.AcquireFunc(ctx, userID, opts)
}

// Get calls GetFunc.
func (m *Manager) Get(ctx context.Context, sandboxID string) (core.Sandbox, error) {
	if err := m.record("Get", core.ValidateSandboxID(sandboxID)); err != nil {
		return core.Sandbox{}, err
	}
	if m.GetFunc == nil {
		return core.Sandbox{}, ErrNotScripted
	}
	return m.GetFunc(ctx, sandboxID)
}

// List calls ListFunc.
func (m *Manager) List(ctx context.Context, f core.ListFilter) ([]core.Sandbox, error) {
	if err := m.record("List", f.Validate()); err != nil {
		return nil, err
	}
	if m.ListFunc == nil {
		return nil, ErrNotScripted
	}
	list, err := m.ListFunc(ctx, f)
	slices.SortFunc(list, core.CompareSandboxes)
	return list, err
}

// Delete calls DeleteFunc.
func (m *Manager) Delete(ctx context.Context, sandboxID string) error {
	if err := m.record("Delete", core.ValidateSandboxID(sandboxID)); err != nil {
		return err
	}
	if m.DeleteFunc == nil {
		return ErrNotScripted
	}
	return m.DeleteFunc(ctx, sandboxID)
}

// Submit calls SubmitFunc.
func (m *Manager) Submit(ctx context.Context, req core.ExecRequest) (string, error) {
	if err := m.record("Submit", req.Validate()); err != nil {
		return "", err
	}
	if m.SubmitFunc == nil {
		return "", ErrNotScripted
	}
	return m.SubmitFunc(ctx, req)
}

// Follow calls FollowFunc.
func (m *Manager) Follow(ctx context.Context, sandboxID, commandID string, afterSeq int64, fn func(core.Event) error) error {
	if err := m.record("Follow", commandIDs(sandboxID, commandID)); err != nil {
		return err
	}
	if m.FollowFunc == nil {
		return ErrNotScripted
	}
	return m.FollowFunc(ctx, sandboxID, commandID, afterSeq, fn)
}

// Interrupt calls InterruptFunc.
func (m *Manager) Interrupt(ctx context.Context, sandboxID, commandID string) error {
	if err := m.record("Interrupt", commandIDs(sandboxID, commandID)); err != nil {
		return err
	}
	if m.InterruptFunc == nil {
		return ErrNotScripted
	}
	return m.InterruptFunc(ctx, sandboxID, commandID)
}

// Upload calls UploadFunc.
func (m *Manager) Upload(ctx context.Context, sandboxID, path string, r io.Reader) (core.FileInfo, error) {
	if err := m.record("Upload", core.ValidateSandboxID(sandboxID)); err != nil {
		return core.FileInfo{}, err
	}
	if m.UploadFunc == nil {
		return core.FileInfo{}, ErrNotScripted
	}
	return m.UploadFunc(ctx, sandboxID, path, r)
}

// Download calls DownloadFunc.
func (m *Manager) Download(ctx context.Context, sandboxID, path string) (io.ReadCloser, core.FileInfo, error) {
	if err := m.record("Download", core.ValidateSandboxID(sandboxID)); err != nil {
		return nil, core.FileInfo{}, err
	}
	if m.DownloadFunc == nil {
		return nil, core.FileInfo{}, ErrNotScripted
	}
	return m.DownloadFunc(ctx, sandboxID, path)
}

// ListFiles calls ListFilesFunc.
func (m *Manager) ListFiles(ctx context.Context, sandboxID, path string) ([]core.FileInfo, error) {
	if err := m.record("ListFiles", core.ValidateSandboxID(sandboxID)); err != nil {
		return nil, err
	}
	if m.ListFilesFunc == nil {
		return nil, ErrNotScripted
	}
	files, err := m.ListFilesFunc(ctx, sandboxID, path)
	slices.SortFunc(files, core.CompareFiles)
	return files, err
}

// MakeDirectory calls MakeDirectoryFunc.
func (m *Manager) MakeDirectory(ctx context.Context, sandboxID, path string, parents bool) (core.FileInfo, error) {
	if err := m.record("MakeDirectory", core.ValidateSandboxID(sandboxID)); err != nil {
		return core.FileInfo{}, err
	}
	if m.MakeDirectoryFunc == nil {
		return core.FileInfo{}, ErrNotScripted
	}
	return m.MakeDirectoryFunc(ctx, sandboxID, path, parents)
}

// Remove calls RemoveFunc.
func (m *Manager) Remove(ctx context.Context, sandboxID, path string, recursive bool) error {
	if err := m.record("Remove", core.ValidateSandboxID(sandboxID)); err != nil {
		return err
	}
	if m.RemoveFunc == nil {
		return ErrNotScripted
	}
	return m.RemoveFunc(ctx, sandboxID, path, recursive)
}

// Rename calls RenameFunc.
func (m *Manager) Rename(ctx context.Context, sandboxID, from, to string, overwrite bool) (core.FileInfo, error) {
	if err := m.record("Rename", core.ValidateSandboxID(sandboxID)); err != nil {
		return core.FileInfo{}, err
	}
	if m.RenameFunc == nil {
		return core.FileInfo{}, ErrNotScripted
	}
	return m.RenameFunc(ctx, sandboxID, from, to, overwrite)
}

// ListFilesDepth calls ListFilesDepthFunc, and returns its result sorted.
func (m *Manager) ListFilesDepth(ctx context.Context, sandboxID, path string, depth int) ([]core.FileInfo, error) {
	if err := m.record("ListFilesDepth", core.ValidateSandboxID(sandboxID)); err != nil {
		return nil, err
	}
	if m.ListFilesDepthFunc == nil {
		return nil, ErrNotScripted
	}
	files, err := m.ListFilesDepthFunc(ctx, sandboxID, path, depth)
	slices.SortFunc(files, core.CompareFiles)
	return files, err
}

// WatchDirectory calls WatchDirectoryFunc.
func (m *Manager) WatchDirectory(ctx context.Context, sandboxID, path string, recursive bool, fn func(core.WatchUpdate) error) error {
	if err := m.record("WatchDirectory", core.ValidateSandboxID(sandboxID)); err != nil {
		return err
	}
	if m.WatchDirectoryFunc == nil {
		return ErrNotScripted
	}
	return m.WatchDirectoryFunc(ctx, sandboxID, path, recursive, fn)
}

// Close calls CloseFunc, or does nothing when it is nil.
func (m *Manager) Close() error {
	m.record("Close", nil)
	if m.CloseFunc == nil {
		return nil
	}
	return m.CloseFunc()
}

// Errorf returns an error of the domain class (orchestrator.ErrNotFound,
// ...) whose message is only the formatted text, as the real Manager's
// errors are, so tests see the messages clients would.
func Errorf(class error, format string, args ...any) error {
	return &classError{class: class, msg: fmt.Sprintf(format, args...)}
}

type classError struct {
	class error
	msg   string
}

func (e *classError) Error() string { return e.msg }
func (e *classError) Unwrap() error { return e.class }
