package docker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/docker/docker/api/types/system"
)

// infoDocker is a fake engine that says its default runtime.
type infoDocker struct {
	*fakeDocker
	info system.Info
	err  error
}

func (d infoDocker) Info(context.Context) (system.Info, error) { return d.info, d.err }

// TestDecideFastWake: pool sandboxes carry wakes only with a pool, disk
// volumes and runc, the engine's default runtime included.
func TestDecideFastWake(t *testing.T) {
	base := func(c *Config) { c.WarmPool, c.Runtime = 1, "" }
	for _, tc := range []struct {
		name   string
		config func(*Config)
		docker DockerAPI
		want   bool
	}{
		{"pool, runc by default", base, infoDocker{newFakeDocker(testImage), system.Info{DefaultRuntime: "runc"}, nil}, true},
		{"pool, runc named", func(c *Config) { base(c); c.Runtime = "runc" }, newFakeDocker(testImage), true},
		{"no pool", func(c *Config) { base(c); c.WarmPool = 0 }, newFakeDocker(testImage), false},
		{"turned off", func(c *Config) { base(c); c.NoFastWake = true }, newFakeDocker(testImage), false},
		{"no disk volumes", func(c *Config) { base(c); c.NoDiskVolumes = true }, newFakeDocker(testImage), false},
		{"gVisor named", func(c *Config) { base(c); c.Runtime = "runsc" }, newFakeDocker(testImage), false},
		{"gVisor the engine's default", base, infoDocker{newFakeDocker(testImage), system.Info{DefaultRuntime: "runsc"}, nil}, false},
		{"the engine's default unknown", base, infoDocker{newFakeDocker(testImage), system.Info{}, errors.New("engine down")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg Config
			tc.config(&cfg)
			m := &Manager{cfg: cfg, docker: tc.docker, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			if got := m.decideFastWake(t.Context()); got != tc.want {
				t.Fatalf("decideFastWake = %v; want %v", got, tc.want)
			}
		})
	}
}
