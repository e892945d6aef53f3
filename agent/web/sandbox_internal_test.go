package web

import (
	"context"
	"errors"
	"html/template"
	"log/slog"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// fakeMetrics answers samples, or fails.
type fakeMetrics struct {
	samples []*sandboxv1.SandboxMetricsSample
	err     error
	asked   []string
}

func (f *fakeMetrics) SandboxMetrics(_ context.Context, id string, _ time.Time) ([]*sandboxv1.SandboxMetricsSample, error) {
	f.asked = append(f.asked, id)
	return f.samples, f.err
}

// TestSandboxHTML: the newest sample's CPU (of the limit) and memory;
// "no figures yet" without a sample; nothing without a sandbox, without
// metrics, or when sandboxd fails.
func TestSandboxHTML(t *testing.T) {
	tmpl, err := template.New("").Funcs(template.FuncMap{"thousands": thousands}).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeMetrics{samples: []*sandboxv1.SandboxMetricsSample{
		{CpuUsedCores: 0.1, CpuLimitCores: 2},
		{CpuUsedCores: 1.5, CpuLimitCores: 2, MemoryUsedBytes: 210 << 20, MemoryLimitBytes: 512 << 20},
	}}
	s := &Server{tmpl: tmpl, log: slog.New(slog.DiscardHandler), metrics: f}
	ctx := t.Context()
	got := string(s.sandboxHTML(ctx, "sb-aaaaaaaaaaaaaaaaaaaa"))
	for _, want := range []string{"CPU <b>75%</b> of 2", "memory <b>210 MiB</b> of 512 MiB", "sandbox sb-aaaaaaaaaaaaaaaaaaaa"} {
		if !strings.Contains(got, want) {
			t.Errorf("sandboxHTML = %q; want %q in it", got, want)
		}
	}
	f.samples = nil
	if got := string(s.sandboxHTML(ctx, "sb-aaaaaaaaaaaaaaaaaaaa")); !strings.Contains(got, "no figures yet") {
		t.Errorf("without samples: %q", got)
	}
	f.err = errors.New("sandboxd is down")
	if got := s.sandboxHTML(ctx, "sb-aaaaaaaaaaaaaaaaaaaa"); got != "" {
		t.Errorf("when sandboxd fails: %q", got)
	}
	asked := len(f.asked)
	if got := s.sandboxHTML(ctx, ""); got != "" || len(f.asked) != asked {
		t.Errorf("without a sandbox: %q, sandboxd asked", got)
	}
	s.metrics = nil
	if got := s.sandboxHTML(ctx, "sb-aaaaaaaaaaaaaaaaaaaa"); got != "" {
		t.Errorf("without metrics: %q", got)
	}
}
