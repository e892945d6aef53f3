package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/agent/llm"
	"github.com/sandboxd/sandboxd/agent/loop"
	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/agent/tools"
	"github.com/sandboxd/sandboxd/client"
)

// app is an assembled agent and what must be closed after it.
type app struct {
	agent    *loop.Agent
	sandboxd *client.Client // for the web interface's sandbox figures
	closers  []func()
}

func (a *app) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
}

// assemble locks the state directory and builds the agent.
func assemble(cfg config, logger *slog.Logger) (*app, error) {
	a := &app{}
	if err := os.MkdirAll(cfg.stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	unlock, err := lockStateDir(cfg.stateDir)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, unlock)
	store, err := session.Open(filepath.Join(cfg.stateDir, "agent.db"))
	if err != nil {
		a.close()
		return nil, err
	}
	a.closers = append(a.closers, func() { store.Close() })
	sbc, err := client.Dial(cfg.sandboxdAddr, client.WithToken(cfg.sandboxdToken))
	if err != nil {
		a.close()
		return nil, err
	}
	a.closers = append(a.closers, func() { sbc.Close() })
	a.sandboxd = sbc
	reg, err := tools.NewRegistry(tools.RunCode(sbc, tools.RunCodeOptions{Timeout: cfg.commandTimeout, NoImageInput: !cfg.imageInput}))
	if err != nil {
		a.close()
		return nil, err
	}
	model, err := llm.New(cfg.model)
	if err != nil {
		a.close()
		return nil, err
	}
	a.agent, err = loop.New(loop.Config{Store: store, Model: model, Tools: reg, Sandboxes: sbc, MaxIterations: cfg.maxIterations, NoImageInput: !cfg.imageInput, Logger: logger})
	if err != nil {
		a.close()
		return nil, err
	}
	// Closed first: running turns are left to be resumed.
	a.closers = append(a.closers, a.agent.Close)
	return a, nil
}

// lockStateDir makes sure one agent process uses the state directory:
// two would both try to resume the same interrupted conversations. The lock
// is an flock, so the kernel releases it when the process dies, however it
// dies.
func lockStateDir(dir string) (func(), error) {
	path := filepath.Join(dir, "agent.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state directory lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		owner, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("state directory %s is in use by another agent process (pid %s); stop it or use another --state-dir", dir, strings.TrimSpace(string(owner)))
		}
		return nil, fmt.Errorf("locking state directory: %w", err)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { f.Close() }, nil
}
