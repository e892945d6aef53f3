package docker

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// testArchive makes a tar of files (name → content; a name ending in "/"
// is a directory) and returns it with its key.
func testArchive(t *testing.T, files map[string]string) ([]byte, string) {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, content := range files {
		h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}
		if strings.HasSuffix(name, "/") {
			h = &tar.Header{Name: name, Mode: 0o755, Typeflag: tar.TypeDir}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(content))
	}
	tw.Close()
	sum := sha256.Sum256(b.Bytes())
	return b.Bytes(), hex.EncodeToString(sum[:])
}

// followBuild follows a build to its end and returns its log and error.
func followBuild(t *testing.T, m *validated, _ string, tenant string, ref string, version int) (string, error) {
	t.Helper()
	var log strings.Builder
	err := m.FollowTemplateBuild(as(t, tenant, false), ref, version, 0, func(ev core.TemplateBuildEvent) error {
		if ev.Done == nil {
			log.WriteString(ev.Line + "\n")
		}
		return nil
	})
	return log.String(), err
}

// TestIntegrationTemplates builds templates on the real engine, through
// the egress gateway to the host's Debian mirror only, and checks what a
// user relies on: a Debian package, files and env in a new sandbox whose
// driver is sandboxd's whatever a step did; an unchanged spec never
// rebuilt, a changed one built from the cache; a failed build keeping the
// previous version in service with its log readable; another tenant
// seeing nothing; a build cut short by a stop never used, and built again.
func TestIntegrationTemplates(t *testing.T) {
	m, c, cfg := integrationManager(t, netTestConfig(t, nil), func(c *Config) { c.NewGateway = nil })
	ctxA, ctxB := as(t, "tenant-a", false), as(t, "tenant-b", false)

	tarball, key := testArchive(t, map[string]string{"conf/": "", "conf/hello.txt": "hello from the template\n", "other.txt": "not copied"})
	if existed, err := m.PutTemplateFile(ctxA, key, bytes.NewReader(tarball)); err != nil || existed {
		t.Fatalf("PutTemplateFile: %v, %v", existed, err)
	}
	if existed, err := m.PutTemplateFile(ctxA, key, strings.NewReader("other bytes")); err != nil || !existed {
		t.Fatalf("a second upload of the key: %v, %v; want existed (keys are immutable)", existed, err)
	}
	if has, err := m.HasTemplateFile(ctxB, key); err != nil || has {
		t.Errorf("tenant-b has tenant-a's archive: %v, %v", has, err)
	}

	spec := core.TemplateSpec{Steps: []core.TemplateStep{
		{Apt: []string{"jq"}},
		{Copy: &core.TemplateCopy{Archive: key, Src: "conf", Dest: "/opt/t/", Owner: core.TemplateUserSandbox}},
		{Env: map[string]string{"TOOL_GREETING": `hi "there" $HOME`}},
		{Workdir: "/opt/t"},
		{Run: "echo built > stamp && rm -f /usr/local/bin/sandbox-driver"},
		{User: core.TemplateUserSandbox},
		{Run: "id -u > /opt/t/builder-uid"},
	}}
	// Forced: the engine's step cache outlives the test, and this build
	// must reach the mirror.
	tpl, v1, err := m.BuildTemplate(ctxA, "tools", spec, true)
	if err != nil {
		t.Fatal(err)
	}
	if !core.IsTemplateID(tpl.ID) || v1.Version != 1 || v1.State != core.TemplateBuilding {
		t.Fatalf("BuildTemplate: %+v, %+v", tpl, v1)
	}
	if _, _, err := m.BuildTemplate(ctxA, "tools", spec, false); !errors.Is(err, core.ErrFailedPrecondition) {
		t.Errorf("a second build while one runs: %v; want FAILED_PRECONDITION", err)
	}
	log, err := followBuild(t, m, "a", "tenant-a", "tools", 1)
	if err != nil {
		t.Fatalf("the build failed: %v\n%s", err, log)
	}
	if !strings.Contains(log, "Setting up jq") || !strings.Contains(log, "reaches only") {
		t.Errorf("the build's log lacks apt's output or the network it had:\n%s", log)
	}

	res, err := m.Acquire(ctxA, "alice", core.Options{Template: "tools"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.Template != tpl.ID || res.Sandbox.TemplateVersion != 1 {
		t.Errorf("the sandbox reports template %q version %d", res.Sandbox.Template, res.Sandbox.TemplateVersion)
	}
	got := stdoutOf(t, m, res.Sandbox.ID, `import os, subprocess
print(subprocess.run(["jq", "--version"], capture_output=True, text=True).stdout.strip())
print(open("/opt/t/hello.txt").read().strip(), open("/opt/t/stamp").read().strip(), open("/opt/t/builder-uid").read().strip())
print(os.environ["TOOL_GREETING"], os.getcwd(), os.getuid(), os.path.exists("/opt/t/other.txt"))`)
	want := "jq-1.6\nhello from the template built 1000\nhi \"there\" $HOME /workspace 1000 False\n"
	if got != want {
		t.Errorf("in the template's sandbox:\n got %q\nwant %q", got, want)
	}

	// Unchanged: no new version. Changed: a new one, from the cache.
	if _, v, err := m.BuildTemplate(ctxA, "tools", spec, false); err != nil || v.Version != 1 || v.State != core.TemplateReady {
		t.Errorf("an unchanged spec: %+v, %v; want version 1, ready, nothing built", v, err)
	}
	spec2 := spec
	// A step of this run only: never in the engine's cache.
	unique := core.NewTemplateID()
	spec2.Steps = append(append([]core.TemplateStep(nil), spec.Steps...), core.TemplateStep{Run: "echo two " + unique + " > /opt/t/two"})
	_, v2, err := m.BuildTemplate(ctxA, "tools", spec2, false)
	if err != nil || v2.Version != 2 {
		t.Fatalf("a changed spec: %+v, %v", v2, err)
	}
	log2, err := followBuild(t, m, "a", "tenant-a", "tools", 2)
	if err != nil {
		t.Fatalf("version 2: %v\n%s", err, log2)
	}
	if strings.Count(log2, "(cached)") != 4 || strings.Contains(log2, "Setting up jq") {
		t.Errorf("version 2 did not reuse version 1's steps:\n%s", log2)
	}

	// A failing build: version 2 stays in service, the log says why.
	spec3 := spec2
	spec3.Steps = append(append([]core.TemplateStep(nil), spec2.Steps...), core.TemplateStep{Run: "echo doomed; exit 3"})
	if _, _, err := m.BuildTemplate(ctxA, "tools", spec3, false); err != nil {
		t.Fatal(err)
	}
	log3, err := followBuild(t, m, "a", "tenant-a", "tools", 3)
	if !errors.Is(err, core.ErrFailedPrecondition) || !strings.Contains(err.Error(), "status 3") || !strings.Contains(log3, "doomed") {
		t.Errorf("a failing step: %v; want FAILED_PRECONDITION naming status 3, and its output in the log\n%s", err, log3)
	}
	evs, v3, err := m.TemplateBuildLog(ctxA, tpl.ID, 3, 0, 1000)
	if err != nil || v3.State != core.TemplateFailed || len(evs) == 0 {
		t.Errorf("the failed version's log afterwards: %d lines, %+v, %v", len(evs), v3, err)
	}
	bob, err := m.Acquire(ctxA, "bob", core.Options{Template: "tools"})
	if err != nil || bob.Sandbox.TemplateVersion != 2 {
		t.Fatalf("a sandbox after the failed build: %+v, %v; want version 2", bob.Sandbox, err)
	}
	if got := stdoutOf(t, m, bob.Sandbox.ID, `print(open("/opt/t/two").read().strip())`); got != "two "+unique+"\n" {
		t.Errorf("version 2's file: %q", got)
	}

	// Another tenant sees nothing.
	if _, err := m.GetTemplate(ctxB, "tools"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("tenant-b's GetTemplate: %v", err)
	}
	if _, err := m.GetTemplate(ctxB, tpl.ID); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("tenant-b's GetTemplate by ID: %v", err)
	}
	if _, err := m.Acquire(ctxB, "mallory", core.Options{Template: "tools"}); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("tenant-b acquiring with tenant-a's template: %v", err)
	}
	if l, err := m.ListTemplates(ctxB, ""); err != nil || len(l) != 0 {
		t.Errorf("tenant-b lists %+v, %v", l, err)
	}
	if _, _, err := m.BuildTemplate(ctxB, "x", core.TemplateSpec{Steps: []core.TemplateStep{{Copy: &core.TemplateCopy{Archive: key, Src: ".", Dest: "/opt/"}}}}, false); !errors.Is(err, core.ErrFailedPrecondition) {
		t.Errorf("tenant-b copying from tenant-a's archive: %v; want FAILED_PRECONDITION (not uploaded)", err)
	}

	// Version 1 stays while alice runs it; deleting the template keeps
	// the sandboxes running.
	got1, err := m.GetTemplate(ctxA, "tools")
	if err != nil {
		t.Fatal(err)
	}
	if len(got1.Versions) == 0 || got1.Versions[0].Version != 1 || got1.Versions[0].UsedBy != 1 {
		t.Errorf("versions while alice runs version 1: %+v", got1.Versions)
	}
	if err := m.DeleteTemplate(ctxA, "tools"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Acquire(ctxA, "carol", core.Options{Template: "tools"}); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("acquiring with a deleted template: %v", err)
	}
	if got := stdoutOf(t, m, res.Sandbox.ID, `print("still here")`); got != "still here\n" {
		t.Errorf("alice after the template's deletion: %q", got)
	}
	if err := m.Delete(ctxA, res.Sandbox.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctxA, bob.Sandbox.ID); err != nil {
		t.Fatal(err)
	}
	m.gcTemplates(t.Context())
	imgs, err := c.ImageList(t.Context(), image.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range imgs {
		for _, tag := range img.RepoTags {
			if strings.Contains(tag, tpl.ID) {
				t.Errorf("image %s of the deleted template is left once no sandbox runs it", tag)
			}
		}
	}
	_ = cfg
}

// TestIntegrationTemplateBuildCutShort: a sandboxd stopped mid-build
// leaves a version no sandbox can use, marked failed at the next start,
// and the build can be run again.
func TestIntegrationTemplateBuildCutShort(t *testing.T) {
	m, c, cfg := integrationManager(t)
	ctx := as(t, "tenant-a", false)
	spec := core.TemplateSpec{Steps: []core.TemplateStep{{Run: "echo started; sleep 600"}}}
	if _, _, err := m.BuildTemplate(ctx, "slow", spec, false); err != nil {
		t.Fatal(err)
	}
	// Wait (bounded by the test's deadline) for the step to run.
	started := make(chan struct{})
	go m.FollowTemplateBuild(ctx, "slow", 1, 0, func(ev core.TemplateBuildEvent) error {
		if ev.Line == "started" {
			close(started)
			return errors.New("seen")
		}
		return nil
	})
	<-started
	// What a kill -9 leaves on disk: template.json saying building.
	crashed := t.TempDir()
	if err := os.CopyFS(filepath.Join(crashed, templatesDir), os.DirFS(filepath.Join(cfg.StateDir, templatesDir))); err != nil {
		t.Fatal(err)
	}
	m.Close()
	cfg.StateDir = crashed
	t.Cleanup(func() { removeTestContainers(t, c, crashed) })
	m2, err := New(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m2.Close() })
	v2 := validate(m2)
	tpl, err := v2.GetTemplate(ctx, "slow")
	if err != nil || len(tpl.Versions) != 1 || tpl.Versions[0].State != core.TemplateFailed || !strings.Contains(tpl.Versions[0].Reason, "stopped during the build") {
		t.Fatalf("after the restart: %+v, %v; want version 1 failed, saying the build was cut short", tpl, err)
	}
	if _, err := v2.Acquire(ctx, "alice", core.Options{Template: "slow"}); !errors.Is(err, core.ErrFailedPrecondition) {
		t.Errorf("acquiring with a template whose only build was cut short: %v; want FAILED_PRECONDITION", err)
	}
	spec.Steps[0].Run = "echo quick"
	if _, v, err := v2.BuildTemplate(ctx, "slow", spec, false); err != nil || v.Version != 2 {
		t.Fatalf("building again: %+v, %v", v, err)
	}
	if log, err := followBuild(t, v2, "a", "tenant-a", "slow", 2); err != nil {
		t.Fatalf("the build after the restart: %v\n%s", err, log)
	}
	if _, err := v2.Acquire(ctx, "alice", core.Options{Template: "slow"}); err != nil {
		t.Errorf("acquiring after the rebuild: %v", err)
	}
}

// TestIntegrationTemplateWarmPool: a template's warm pool serves its
// tenant's new users with sandboxes already started, follows the template
// to its next version, and serves no one else.
func TestIntegrationTemplateWarmPool(t *testing.T) {
	m, _, _ := integrationManager(t, func(c *Config) { c.WarmPoolTemplates = map[string]int{"tenant-a/pooled": 1} })
	ctxA, ctxB := as(t, "tenant-a", false), as(t, "tenant-b", false)
	spec := core.TemplateSpec{Steps: []core.TemplateStep{{Run: "echo one > /etc/pooled"}}}
	if _, _, err := m.BuildTemplate(ctxA, "pooled", spec, false); err != nil {
		t.Fatal(err)
	}
	if log, err := followBuild(t, m, "a", "tenant-a", "pooled", 1); err != nil {
		t.Fatalf("build: %v\n%s", err, log)
	}
	p := m.tplPools.pools[0]
	// pooled waits (bounded) until the pool holds a sandbox of version v
	// and returns its ID.
	pooled := func(v int) string {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			select {
			case m.tplPools.wake <- struct{}{}:
			default:
			}
			p.mu.Lock()
			var id string
			if p.version == v && len(p.ready) > 0 && p.ready[0].templateVersion == v {
				id = p.ready[0].id
			}
			p.mu.Unlock()
			if id != "" {
				return id
			}
			time.Sleep(50 * time.Millisecond) // polling the pool's state, bounded by the deadline
		}
		t.Fatalf("the template's pool holds no sandbox of version %d after 2 minutes", v)
		return ""
	}
	want := pooled(1)
	if _, err := m.Acquire(ctxB, "mallory", core.Options{Template: "pooled"}); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("tenant-b asking for tenant-a's template: %v", err)
	}
	res, err := m.Acquire(ctxA, "alice", core.Options{Template: "pooled"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.ID != want || res.Sandbox.Tenant != "tenant-a" || res.Sandbox.UserID != "alice" {
		t.Errorf("alice got %s (%s/%s); want the pool's %s", res.Sandbox.ID, res.Sandbox.Tenant, res.Sandbox.UserID, want)
	}
	if got := stdoutOf(t, m, res.Sandbox.ID, `print(open("/etc/pooled").read().strip())`); got != "one\n" {
		t.Errorf("alice's pooled sandbox: %q", got)
	}

	spec.Steps[0].Run = "echo two > /etc/pooled"
	if _, _, err := m.BuildTemplate(ctxA, "pooled", spec, false); err != nil {
		t.Fatal(err)
	}
	if log, err := followBuild(t, m, "a", "tenant-a", "pooled", 2); err != nil {
		t.Fatalf("build 2: %v\n%s", err, log)
	}
	want2 := pooled(2)
	res2, err := m.Acquire(ctxA, "bob", core.Options{Template: "pooled"})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Sandbox.ID != want2 || res2.Sandbox.TemplateVersion != 2 {
		t.Errorf("bob got %s version %d; want the pool's %s, version 2", res2.Sandbox.ID, res2.Sandbox.TemplateVersion, want2)
	}
	if got := stdoutOf(t, m, res2.Sandbox.ID, `print(open("/etc/pooled").read().strip())`); got != "two\n" {
		t.Errorf("bob's pooled sandbox: %q", got)
	}
}

// TestIntegrationTemplateBounds: a build past its time limit fails as
// DEADLINE_EXCEEDED, saying so, and a build beyond --template-builds is
// RESOURCE_EXHAUSTED; neither leaves a version in service.
func TestIntegrationTemplateBounds(t *testing.T) {
	m, _, _ := integrationManager(t, func(c *Config) {
		c.TemplateBuilds = 1
		c.TemplateBuildTimeout = 3 * time.Second
	})
	ctx := as(t, "tenant-a", false)
	slow := core.TemplateSpec{Steps: []core.TemplateStep{{Run: "echo sleeping; sleep 60"}}}
	if _, _, err := m.BuildTemplate(ctx, "slow", slow, false); err != nil {
		t.Fatal(err)
	}
	other := core.TemplateSpec{Steps: []core.TemplateStep{{Run: "true"}}}
	if _, _, err := m.BuildTemplate(ctx, "other", other, false); !errors.Is(err, core.ErrResourceExhausted) || !strings.Contains(err.Error(), "--template-builds") {
		t.Errorf("a second build at once with --template-builds 1: %v; want RESOURCE_EXHAUSTED naming the flag", err)
	}
	log, err := followBuild(t, m, "a", "tenant-a", "slow", 1)
	if !errors.Is(err, core.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "--template-build-timeout") {
		t.Errorf("a build past its limit: %v; want DEADLINE_EXCEEDED naming the flag\n%s", err, log)
	}
	if _, err := m.Acquire(ctx, "alice", core.Options{Template: "slow"}); !errors.Is(err, core.ErrFailedPrecondition) {
		t.Errorf("acquiring with a template whose build timed out: %v; want FAILED_PRECONDITION", err)
	}
	// The slot is free again: the build starts (whether it ends within
	// this test's short limit depends on the machine's load, not on
	// sandboxd).
	if _, v, err := m.BuildTemplate(ctx, "other", other, false); err != nil || v.State != core.TemplateBuilding {
		t.Errorf("a build after the first ended: %+v, %v; want it started", v, err)
	}
}

// TestIntegrationTemplateImagesAreTheirServers: the clean-up of one
// sandboxd never removes the template images of another on the same
// engine.
func TestIntegrationTemplateImagesAreTheirServers(t *testing.T) {
	m1, _, _ := integrationManager(t)
	m2, _, _ := integrationManager(t)
	ctx := as(t, "tenant-a", false)
	if _, _, err := m1.BuildTemplate(ctx, "mine", core.TemplateSpec{Steps: []core.TemplateStep{{Run: "true"}}}, false); err != nil {
		t.Fatal(err)
	}
	if log, err := followBuild(t, m1, "a", "tenant-a", "mine", 1); err != nil {
		t.Fatalf("build: %v\n%s", err, log)
	}
	m2.gcTemplates(t.Context())
	if _, err := m1.Acquire(ctx, "alice", core.Options{Template: "mine"}); err != nil {
		t.Errorf("acquiring from the first server's template after the second's clean-up: %v", err)
	}
}
