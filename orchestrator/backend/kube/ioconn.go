package kube

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/cmdlog"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
	"github.com/sandboxd/sandboxd/orchestrator/core"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/kube/iosidecar"
)

// IOConn is a connection to one sandbox's io sidecar: the host half of
// /io, at the Pod's IP. Its errors mean what iosidecar's table says
// (iosidecar/errors.go): they match iolog's sentinels (ErrConflict,
// ErrUnknownCommand, ...), core's classes or iosidecar's own (ErrBadResponse,
// ...). Everything it returns came from the sandbox's Pod and was bounded
// and checked by the implementation (iosidecar.Client).
type IOConn interface {
	Append(ctx context.Context, rec ioproto.Record) (appended bool, err error)
	Follow(ctx context.Context, commandID string, afterSeq int64, fn func(ioproto.Event) error) error
	Run(ctx context.Context, rec ioproto.Record, submitted func(appended bool), fn func(ioproto.Event) error) error
	Upload(ctx context.Context, path string, r io.Reader, maxBytes int64) (core.FileInfo, error)
	Download(ctx context.Context, path string) (io.ReadCloser, core.FileInfo, error)
	ListFiles(ctx context.Context, path string, depth int) ([]core.FileInfo, error)
	MakeDirectory(ctx context.Context, path string, parents bool) (core.FileInfo, error)
	Remove(ctx context.Context, path string, recursive bool) error
	Rename(ctx context.Context, from, to string, overwrite bool) (core.FileInfo, error)
	ListCommands(ctx context.Context, page cmdlog.Page) (core.CommandPage, error)
	ListContexts(ctx context.Context) ([]core.ContextInfo, error)
	DriverStatus(ctx context.Context) (ioproto.DriverStatus, error)
	WatchDirectory(ctx context.Context, rel string, recursive bool, maxDirs int, fn func(iosidecar.WatchUpdate) error) error
	Export(ctx context.Context, globals string, maxBytes int64, w io.Writer) (iosidecar.ArchiveStats, error)
	Import(ctx context.Context, globals string, r io.Reader, maxBytes int64) (iosidecar.ArchiveStats, error)
	// Volume is the files API on a named volume the Pod mounts.
	Volume(id string) iosidecar.VolumeFiles
	// SetEgress and EgressStatus reach a networked sandbox's egress
	// gateway (network.go).
	SetEgress(ctx context.Context, p iosidecar.EgressPolicy) (applied bool, err error)
	EgressStatus(ctx context.Context) (core.NetworkCounters, []core.NetworkDenial, uint64, error)
	Close() error
}

// ioEntry is an open connection, for the Pod whose IP it dialled.
type ioEntry struct {
	ip   string
	conn IOConn
}

// io returns the connection to ready Pod p's sidecar, dialling it once.
func (m *Manager) io(ctx context.Context, p *corev1.Pod) (IOConn, error) {
	uid := string(p.UID)
	m.mu.Lock()
	e := m.conns[uid]
	if e != nil && e.ip == p.Status.PodIP {
		m.mu.Unlock()
		return e.conn, nil
	}
	m.mu.Unlock()
	addr := net.JoinHostPort(p.Status.PodIP, strconv.Itoa(m.cfg.IOPort))
	c, err := m.cfg.DialIO(ctx, addr, m.cfg.IOToken)
	if err != nil {
		return nil, core.Errorf(core.ErrUnavailable, "connecting to the io sidecar of sandbox %s at %s: %w", p.Labels[labelSandboxID], addr, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.conns[uid]; e != nil {
		if e.ip == p.Status.PodIP {
			c.Close() // another call dialled first
			return e.conn, nil
		}
		e.conn.Close()
	}
	m.conns[uid] = &ioEntry{ip: p.Status.PodIP, conn: c}
	return c, nil
}

// ioError says what an error of sandbox id's sidecar (on command cmd, if
// any) means to sandboxd's callers. iosidecar.Client has already turned
// the sidecar's answer back into what it means (its reason, through the
// table in iosidecar/errors.go); this only adds the sandbox's context, as
// the Docker backend does with iolog's errors on the host. The messages
// come from the Pod: the Client bounded and sanitised them.
func (m *Manager) ioError(id, cmd string, err error) error {
	switch {
	case errors.Is(err, iolog.ErrUnknownCommand):
		return core.CommandNotFound(cmd, id)
	case errors.Is(err, cmdlog.ErrNoTerminal), errors.Is(err, cmdlog.ErrNoInput), errors.Is(err, cmdlog.ErrFinished):
		return cmdlog.InputError(id, cmd, err)
	case errors.Is(err, iolog.ErrPruned):
		return core.OutputPruned(cmd, id)
	case errors.Is(err, iolog.ErrConflict):
		return core.CommandIDReused(cmd, id)
	case errors.Is(err, iolog.ErrLogFull):
		return core.LogFull(id, err)
	case errors.Is(err, iolog.ErrHibernating):
		return core.Errorf(core.ErrUnavailable, "sandbox %s is being hibernated; try again (the next use wakes it)", id)
	case errors.Is(err, iolog.ErrTampered), errors.Is(err, iosidecar.ErrBadResponse):
		m.log.Error("sandbox tampered with its /io files or its io sidecar", "sandbox_id", id, "error", err)
		return core.Tampered(id, "its /io files", err)
	case errors.Is(err, iosidecar.ErrUnavailable), errors.Is(err, core.ErrUnavailable):
		return core.Errorf(core.ErrUnavailable, "the io sidecar of sandbox %s: %v; try again", id, err)
	case errors.Is(err, iosidecar.ErrRulesSealed):
		// The sandbox's header rules cannot be put in force in its Pod:
		// never taken as applied, until the policy or the Pod changes.
		return core.Errorf(core.ErrFailedPrecondition, "the network rules of sandbox %s: %v", id, err)
	case errors.Is(err, iosidecar.ErrUnauthenticated):
		m.log.Error("an io sidecar refused sandboxd's token: --kube-io-token-file and the Secret differ", "sandbox_id", id)
		return core.Errorf(core.ErrUnavailable, "the io sidecar of sandbox %s refused sandboxd's token (a configuration error; see sandboxd's log)", id)
	case core.IsClassified(err):
		// The files API's errors, in the class the sidecar gave them and
		// with its text ("io sidecar: …"); and the caller's own (its
		// context, core.Validating's upload limit), as they are.
		return err
	case errors.Is(err, ioproto.ErrMalformed):
		return core.Errorf(core.ErrInvalidArgument, "%v", err)
	}
	return core.Errorf(core.ErrUnavailable, "the io sidecar of sandbox %s failed: %v", id, err)
}

// dialSidecar connects to a real io sidecar.
func dialSidecar(_ context.Context, addr, token string) (IOConn, error) {
	return iosidecar.Dial(addr, token)
}
