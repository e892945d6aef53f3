package docker

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/labels"
)

// buildTestTemplate builds template name of tenant from steps, and fails
// the test if the build does.
func buildTestTemplate(t *testing.T, m *validated, tenant, name string, steps ...core.TemplateStep) {
	t.Helper()
	if _, _, err := m.BuildTemplate(as(t, tenant, false), name, core.TemplateSpec{Steps: steps}, true); err != nil {
		t.Fatalf("build template %s: %v", name, err)
	}
	if log, err := followBuild(t, m, "", tenant, name, 1); err != nil {
		t.Fatalf("build template %s: %v\n%s", name, err, log)
	}
}

// TestIntegrationHostileTemplateNetwork: a template is its tenant's, and
// neither its files nor its programs reach sandboxd or the sandbox's
// network holder.
//
//   - A template whose CA bundle is a FIFO: its networked acquires fail at
//     once with FAILED_PRECONDITION saying so, and leave nothing (no
//     container, no address); another tenant's networked acquire works;
//     the Manager closes at once. (Each such acquire held a sandboxd
//     thread, a holder and an address for good, until the subnet was
//     exhausted for everyone and sandboxd no longer stopped.)
//   - A template whose `sleep` burns CPU: the holder of its sandbox runs
//     sandboxd's image, not the template's, under small limits, and burns
//     nothing. (The holder ran the template's `sleep`, under runc, without
//     a CPU limit.)
func TestIntegrationHostileTemplateNetwork(t *testing.T) {
	m, c, cfg := integrationManager(t, netTestConfig(t, nil))
	buildTestTemplate(t, m, "tenant-a", "fifo",
		core.TemplateStep{Run: "rm -f /etc/ssl/certs/ca-certificates.crt && mkfifo /etc/ssl/certs/ca-certificates.crt"})
	buildTestTemplate(t, m, "tenant-a", "burner",
		core.TemplateStep{Run: "printf '#!/bin/sh\\nwhile :; do :; done\\n' > /usr/bin/sleep.burn && chmod 755 /usr/bin/sleep.burn && mv /usr/bin/sleep.burn /usr/bin/sleep"})
	abs, _ := filepath.Abs(cfg.StateDir)
	managed := func() []container.Summary {
		t.Helper()
		list, err := c.ContainerList(t.Context(), container.ListOptions{All: true, Filters: filters.NewArgs(
			filters.Arg("label", labels.StateDir+"="+abs), filters.Arg("label", labels.Managed+"=true"))})
		if err != nil {
			t.Fatal(err)
		}
		return list
	}

	// Two at once, as a tenant hammering it would.
	type result struct {
		err  error
		took time.Duration
	}
	results := make(chan result, 2)
	for i := range 2 {
		go func() {
			ctx, cancel := context.WithTimeout(as(t, "tenant-a", false), 2*time.Minute)
			defer cancel()
			start := time.Now()
			_, err := m.Acquire(ctx, "fifo-"+strconv.Itoa(i), core.Options{Template: "fifo", Network: true})
			results <- result{err, time.Since(start)}
		}()
	}
	for range 2 {
		select {
		case r := <-results:
			wantClass(t, r.err, core.ErrFailedPrecondition, "/etc/ssl/certs/ca-certificates.crt as a FIFO")
			t.Logf("a networked acquire of the FIFO template failed in %v: %v", r.took.Round(time.Millisecond), r.err)
		case <-time.After(90 * time.Second):
			t.Fatal("a networked acquire of a template whose CA bundle is a FIFO did not end within 90s")
		}
	}
	if left := managed(); len(left) != 0 {
		t.Errorf("the failed acquires left %d containers, first %v", len(left), left[0].Names)
	}
	m.Manager.net.pool.mu.Lock()
	taken := len(m.Manager.net.pool.used)
	m.Manager.net.pool.mu.Unlock()
	if taken != 0 {
		t.Errorf("the failed acquires left %d addresses taken", taken)
	}
	other, err := m.Acquire(as(t, "tenant-b", false), "bob", core.Options{Network: true})
	if err != nil {
		t.Fatalf("another tenant's networked acquire: %v", err)
	}
	if out := stdoutOf(t, m, other.Sandbox.ID, `import os; print(os.path.getsize("/etc/sandboxd/ca-bundle.pem") > 100000)`); out != "True\n" {
		t.Errorf("the other tenant's bundle lacks the image's roots: %q", out)
	}

	res, err := m.Acquire(as(t, "tenant-a", false), "burner", core.Options{Template: "burner", Network: true,
		Limits: core.Limits{NanoCPUs: 250_000_000}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.ContainerInspect(t.Context(), holderNamePrefix+res.Sandbox.ID)
	if err != nil {
		t.Fatal(err)
	}
	own, err := c.ImageInspect(t.Context(), cfg.Image)
	if err != nil {
		t.Fatal(err)
	}
	r := h.HostConfig.Resources
	pids := int64(-1)
	if r.PidsLimit != nil {
		pids = *r.PidsLimit
	}
	if h.Image != own.ID || h.Config.Image != cfg.Image || h.Path != "sleep" || h.HostConfig.Runtime != "runc" ||
		r.NanoCPUs != holderNanoCPUs || r.Memory != holderMemory || pids != holderPids {
		t.Errorf("the holder: image %s (%s), path %q, runtime %q, CPU %d, memory %d, pids %d; want sandboxd's image %s (%s) running sleep under runc, limited",
			h.Config.Image, h.Image, h.Path, h.HostConfig.Runtime, r.NanoCPUs, r.Memory, pids, cfg.Image, own.ID)
	}
	cg, ok := defaultCgroupPaths(cgroupRoot, h.ID)
	if !ok {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(h.State.Pid) + "/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		cg = parseProcCgroup(cgroupRoot, b)
	}
	// The limits in force, as the kernel has them.
	limits := map[string]string{ // path → content
		filepath.Join(cg.cpu, "cpu.max"):       strconv.Itoa(holderNanoCPUs/10_000) + " 100000",
		filepath.Join(cg.memory, "memory.max"): strconv.Itoa(holderMemory),
		filepath.Join(cg.pids, "pids.max"):     strconv.Itoa(holderPids),
	}
	if !cg.v2 {
		// cg.cpu is cpuacct's, mounted with cpu's or apart.
		cpu := cg.cpu
		if _, err := os.Stat(filepath.Join(cpu, "cpu.cfs_quota_us")); err != nil {
			cpu = strings.Replace(cpu, "/cpuacct/", "/cpu/", 1)
		}
		limits = map[string]string{
			filepath.Join(cpu, "cpu.cfs_quota_us"):            strconv.Itoa(holderNanoCPUs / 10_000),
			filepath.Join(cg.memory, "memory.limit_in_bytes"): strconv.Itoa(holderMemory),
			filepath.Join(cg.pids, "pids.max"):                strconv.Itoa(holderPids),
		}
	}
	for file, want := range limits {
		b, err := os.ReadFile(file)
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("the holder's %s: %q, %v; want %q", file, b, err, want)
		}
	}
	// What the holder runs uses no CPU: over a second, nothing.
	before := cg.read()
	time.Sleep(time.Second) // a measurement's window, not a wait for anything
	after := cg.read()
	if !before.cpuOK || !after.cpuOK {
		t.Fatalf("the holder's CPU use is unreadable under %+v", cg)
	}
	if used := time.Duration(after.cpuNanos - before.cpuNanos); used > 10*time.Millisecond {
		t.Errorf("the holder of a template whose sleep burns CPU used %v of CPU in a second", used)
	} else {
		t.Logf("the holder used %v of CPU in a second", used)
	}

	// Close ends at once: nothing is stuck.
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the Manager did not close within 30s")
	}
}
