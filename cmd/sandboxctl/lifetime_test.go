package main

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
)

func TestSetTimeout(t *testing.T) {
	var gotID string
	var gotD time.Duration
	addr := startServer(t, &coretest.Manager{SetTimeoutFunc: func(_ context.Context, id string, d time.Duration) (core.Sandbox, error) {
		gotID, gotD = id, d
		sb := sandboxes()[0]
		sb.IdleTimeout, sb.ExpiresAt = d, t0.Add(2*time.Hour)
		return sb, nil
	}})
	r := runCLI(t, nil, addr, "", "set-timeout", sbA, "2h")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if gotID != sbA || gotD != 2*time.Hour {
		t.Errorf("server got %s, %v", gotID, gotD)
	}
	if want := sbA + "\tidle timeout 2h0m0s\texpires 2026-11-21 09:30:00\n"; r.stdout != want {
		t.Errorf("stdout %q; want %q", r.stdout, want)
	}
	if r := runCLI(t, nil, addr, "", "set-timeout", sbA, "soon"); r.code != exitUsage {
		t.Errorf("bad duration: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestListMetadata(t *testing.T) {
	var got core.ListFilter
	addr := startServer(t, &coretest.Manager{ListFunc: func(_ context.Context, f core.ListFilter) ([]core.Sandbox, error) {
		got = f
		sbs := sandboxes()
		sbs[0].Metadata = map[string]string{"project": "alpha", "note": "two words"}
		return sbs, nil
	}})
	r := runCLI(t, nil, addr, "", "list", "--metadata", "project=alpha", "--metadata", "team=x")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if !maps.Equal(got.Metadata, map[string]string{"project": "alpha", "team": "x"}) {
		t.Errorf("server got filter %+v", got)
	}
	lines := strings.Split(r.stdout, "\n")
	if !strings.HasSuffix(lines[0], "METADATA") || !strings.HasSuffix(lines[1], `note="two words",project=alpha`) || !strings.HasSuffix(lines[2], " -") {
		t.Errorf("table:\n%s", r.stdout)
	}
	if r := runCLI(t, nil, addr, "", "list", "--metadata", "novalue"); r.code != exitUsage {
		t.Errorf("--metadata without =: exit %d", r.code)
	}
}
