package kube

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator"
)

// IOConn is a connection to one sandbox's io sidecar: the host half of
// /io, at the Pod's IP. Its errors wrap the ErrIO* sentinels below where
// they mean something to the domain. Everything it returns came from the
// sandbox's Pod and was bounded and checked by the implementation.
type IOConn interface {
	Append(ctx context.Context, rec ioproto.Record) (appended bool, err error)
	Follow(ctx context.Context, commandID string, afterSeq int64, fn func(ioproto.Event) error) error
	Upload(ctx context.Context, path string, r io.Reader, maxBytes int64) (orchestrator.FileInfo, error)
	Download(ctx context.Context, path string) (io.ReadCloser, orchestrator.FileInfo, error)
	ListFiles(ctx context.Context, path string) ([]orchestrator.FileInfo, error)
	Close() error
}

// What an IOConn's errors mean.
var (
	ErrIOConflict       = errors.New("command ID used for a different command")
	ErrIOUnknownCommand = errors.New("unknown command")
	ErrIOPruned         = errors.New("command output pruned")
	ErrIOLogFull        = errors.New("command log full")
	ErrIOTampered       = errors.New("io file tampered with")
	ErrIONotFound       = errors.New("file not found")
	ErrIOInvalid        = errors.New("invalid request")
	ErrIOTooLarge       = errors.New("too large")
	ErrIOUnavailable    = errors.New("io sidecar unavailable")
)

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
		return nil, orchestrator.Errorf(orchestrator.ErrUnavailable, "connecting to the io sidecar of sandbox %s at %s: %w", p.Labels[labelSandboxID], addr, err)
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

// ioError classifies an error of a sandbox's sidecar. Its messages come
// from the Pod: the IOConn bounded and sanitised them.
func (m *Manager) ioError(id, cmd string, err error) error {
	switch {
	case orchestrator.IsClassified(err):
		return err
	case errors.Is(err, ErrIOUnknownCommand):
		return orchestrator.Errorf(orchestrator.ErrNotFound, "command %s not found in sandbox %s", cmd, id)
	case errors.Is(err, ErrIOPruned):
		return orchestrator.Errorf(orchestrator.ErrNotFound, "the output of command %s in sandbox %s is no longer available: it was pruned", cmd, id)
	case errors.Is(err, ErrIOLogFull):
		return orchestrator.Errorf(orchestrator.ErrResourceExhausted, "sandbox %s takes no more commands: %v; acquire a new one", id, err)
	case errors.Is(err, ErrIOTampered):
		m.log.Error("io file tampered with", "sandbox_id", id, "error", err)
		return orchestrator.Errorf(orchestrator.ErrFailedPrecondition, "sandbox %s tampered with its /io files (altered from inside the sandbox): %v; it is unusable: delete it and acquire a new one", id, err)
	case errors.Is(err, ErrIONotFound):
		return orchestrator.Errorf(orchestrator.ErrNotFound, "%v", err)
	case errors.Is(err, ErrIOInvalid):
		return orchestrator.Errorf(orchestrator.ErrInvalidArgument, "%v", err)
	case errors.Is(err, ErrIOTooLarge):
		return orchestrator.Errorf(orchestrator.ErrResourceExhausted, "%v", err)
	case errors.Is(err, ErrIOUnavailable):
		return orchestrator.Errorf(orchestrator.ErrUnavailable, "the io sidecar of sandbox %s: %v; try again", id, err)
	}
	return orchestrator.Errorf(orchestrator.ErrUnavailable, "the io sidecar of sandbox %s failed: %v", id, err)
}

// dialSidecar connects to a real io sidecar.
func dialSidecar(ctx context.Context, addr, token string) (IOConn, error) {
	return nil, errors.New("not yet")
}
