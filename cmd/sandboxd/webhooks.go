package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/sandboxd/sandboxd/orchestrator/webhooks"
)

// openWebhooks loads the --webhooks file and opens the dispatcher on the
// state directory's queue.
func openWebhooks(cfg config, log *slog.Logger) (*webhooks.Dispatcher, error) {
	eps, err := webhooks.LoadFile(cfg.webhooks.file)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(cfg.webhooks.file); err == nil && st.Mode().Perm()&0o077 != 0 {
		log.Warn("the webhooks file holds signing secrets and is readable by other users; chmod 600 it", "file", cfg.webhooks.file, "mode", st.Mode().Perm())
	}
	if err := os.MkdirAll(cfg.docker.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	d, err := webhooks.Open(webhooks.Config{StateDir: cfg.docker.StateDir, Endpoints: eps,
		Timeout: cfg.webhooks.timeout, MaxAge: cfg.webhooks.maxAge, Logger: log})
	if err != nil {
		return nil, err
	}
	names := make([]string, len(eps))
	for i, e := range eps {
		names[i] = e.Name
	}
	log.Info("webhooks on", "endpoints", names)
	return d, nil
}
