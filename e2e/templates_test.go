package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// TestE2ETemplateKill9 kills sandboxd with SIGKILL in the middle of a
// template build and restarts it: the version cut short is failed, saying
// why, and no sandbox is made from it; the build runs again (through
// sandboxctl, from a spec file with a copied file) and the template then
// serves a sandbox with its file and env.
func TestE2ETemplateKill9(t *testing.T) {
	env := needE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d := env.start(t)
	c, _ := d.client(t)

	stream, err := c.BuildTemplate(ctx, &sandboxv1.BuildTemplateRequest{Name: "cut", Spec: &sandboxv1.TemplateSpec{Steps: []*sandboxv1.TemplateStep{
		{Step: &sandboxv1.TemplateStep_Run{Run: "echo step-started; sleep 600"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("the build's stream ended before its step ran: %v", err)
		}
		if resp.GetLine().GetLine() == "step-started" {
			break
		}
	}
	d.kill9(t)

	d = env.start(t)
	c, _ = d.client(t)
	tpl, err := c.GetTemplate(ctx, &sandboxv1.GetTemplateRequest{Template: "cut"})
	if err != nil {
		t.Fatal(err)
	}
	vs := tpl.GetTemplate().GetVersions()
	if len(vs) != 1 || vs[0].GetState() != sandboxv1.TemplateState_TEMPLATE_STATE_FAILED || !strings.Contains(vs[0].GetReason(), "stopped during the build") {
		t.Fatalf("after the kill: versions %v; want version 1 failed, saying sandboxd stopped", vs)
	}
	_, err = c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "alice", Options: &sandboxv1.SandboxOptions{Template: "cut"}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("acquiring with the template cut short: %v; want FAILED_PRECONDITION", err)
	}

	// Built again, through sandboxctl.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "greeting.txt"), []byte("hello after the kill\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := "steps:\n  - copy: {src: greeting.txt, dest: /opt/cut/}\n  - env: {CUT: \"again\"}\n  - run: echo built > /opt/cut/stamp\n"
	if err := os.WriteFile(filepath.Join(dir, "spec.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := env.ctl(t, ctx, d.addr, "template", "build", "-f", filepath.Join(dir, "spec.yaml"), "cut")
	if code != 0 {
		t.Fatalf("sandboxctl template build: exit %d\n%s\n%s", code, out, errOut)
	}
	sb, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "alice", Options: &sandboxv1.SandboxOptions{Template: "cut"}})
	if err != nil {
		t.Fatal(err)
	}
	defer deleteQuietly(c, sb.GetSandbox().GetSandboxId())
	if got := sb.GetSandbox().GetTemplateVersion(); got != 2 {
		t.Errorf("the sandbox runs version %d; want 2", got)
	}
	o, _ := execOut(t, ctx, c, sb.GetSandbox().GetSandboxId(), "check", "import os\nprint(open('/opt/cut/greeting.txt').read().strip(), open('/opt/cut/stamp').read().strip(), os.environ['CUT'])")
	if o.stdout != "hello after the kill built again\n" {
		t.Errorf("in the template's sandbox: %q %v", o.stdout, o.errs)
	}
	if _, err := c.DeleteTemplate(ctx, &sandboxv1.DeleteTemplateRequest{Template: "cut"}); err != nil {
		t.Errorf("DeleteTemplate: %v", err)
	}
}
