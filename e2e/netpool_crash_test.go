package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/nettest"
	"github.com/sandboxd/sandboxd/internal/sandboxdproc"
	"github.com/sandboxd/sandboxd/orchestrator/backend/docker"
	"github.com/sandboxd/sandboxd/orchestrator/labels"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// netPoolReadyLogged matches the refill's log line for the pool with
// network.
var netPoolReadyLogged = regexp.MustCompile(`"warm pool: sandbox ready".* network=true ready=(\d+)`)

// netPoolHolds is the pool with network's size as the log last said it.
func netPoolHolds(log string) int {
	ms := netPoolReadyLogged.FindAllStringSubmatch(log, -1)
	if len(ms) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(ms[len(ms)-1][1])
	return n
}

// TestE2EClaimShapeNetworkCrash kills sandboxd (SIGKILL, from its test
// hooks) at each step of a claim from the pool with network (the claim
// recorded, its policy given) and of a networked sandbox's fast wake (the
// carrier recorded; the carrier's namespace made the sandbox's and the
// volumes stacked), restarts it, and checks, against test hosts of its
// own:
//
//   - a claim: the user has no sandbox (the Acquire never returned one),
//     and the next Acquire's sandbox reaches the allowed host and not the
//     other;
//   - a wake: the sandbox is running or hibernated with its files, its
//     globals back or reported lost, and reaches the allowed host and not
//     the other, with its own address;
//   - either way no network holder is left that no sandbox names, and no
//     pool sandbox half borrowed.
//
// runc only: gVisor sandboxes never wake fast, and their claims are the
// same code as runc's.
func TestE2EClaimShapeNetworkCrash(t *testing.T) {
	env := needE2E(t)
	if env.runtime != "" && env.runtime != "runc" {
		t.Skipf("runc's (runtime %q)", env.runtime)
	}
	if os.Geteuid() != 0 {
		t.Skip("networked sandboxes need root")
	}
	env = env.withRuntime(t, "runc")
	crashing := env.withCrashHooks(t)
	in := nettest.New(t, nettest.Options{Hosts: []string{"allowed.test", "other.test"}})
	caFile := filepath.Join(t.TempDir(), "test-ca.pem")
	if err := os.WriteFile(caFile, in.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	// A /16 of its own (sandboxdproc.NewEgressNet): the network suite's is
	// 100.125, and a shard may run it at the same time.
	egress, err := sandboxdproc.NewEgressNet('k', netip.MustParsePrefix("100.122.0.0/16"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := egress.Remove(); err != nil {
			t.Logf("removing the test's network objects: %v", err)
		}
	})
	// One sandbox in each pool, without fast wake's imports in the claim
	// half (the claim is what is tested).
	flags := append([]string{"--allow-network", "--egress-hosts-file", in.HostsFile, "--egress-ca-file", caFile,
		"--warm-pool", "1", "--warm-pool-network", "1"}, egress.Flags()...)
	policy := &sandboxv1.NetworkPolicy{AllowOut: []string{"allowed.test"}, DenyOut: []string{"0.0.0.0/0"}}
	netOpts := &sandboxv1.SandboxOptions{Network: true, NetworkPolicy: policy, Env: map[string]string{"SHAPED": "net"}}
	probe := `import os, urllib.request
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode().strip()
    except Exception as e:
        return "refused: %s" % type(e).__name__
print(os.environ.get("SHAPED"), get("http://allowed.test/"), "|", get("http://other.test/"))
`
	reaches := func(t *testing.T, ctx context.Context, c sandboxv1.SandboxServiceClient, id, what string) {
		t.Helper()
		otherBefore := in.Hosts["other.test"].AllAccepts()
		o, _ := execOut(t, ctx, c, id, "probe-"+strconv.FormatInt(time.Now().UnixNano(), 36), probe)
		if o.stdout != "net hello from allowed.test | refused: URLError\n" {
			t.Errorf("%s: %q %v; want its env, the allowed host and not the other", what, o.stdout, o.errs)
		}
		if n := in.Hosts["other.test"].AllAccepts(); n != otherBefore {
			t.Errorf("%s reached other.test", what)
		}
	}
	netPoolReady := func(t *testing.T, d *daemon) {
		t.Helper()
		if !pollUntil(2*time.Minute, func() bool { return netPoolHolds(d.logs.String()) >= 1 }) {
			t.Fatal("the pool with network had no ready sandbox within 2 minutes")
		}
	}

	for i, step := range docker.ClaimSteps {
		t.Run("claim-"+strings.ReplaceAll(step, ":", "-"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			user := "net-claim-crash-" + strconv.Itoa(i)
			d := crashing.startEnv(t, []string{"SANDBOXD_TEST_CRASH_AT=" + step}, append(flags, "--fast-wake=false")...)
			netPoolReady(t, d)
			c, _ := d.client(t)
			_, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: user, Options: netOpts})
			awaitCrash(t, d, step, err)

			d = env.start(t, append(flags, "--fast-wake=false")...)
			c, _ = d.client(t)
			if !strings.Contains(d.logs.String(), "claimed but not yet shaped") {
				t.Errorf("the restart did not report the half-shaped sandbox it removed")
			}
			ls, err := c.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{UserId: user})
			if err != nil {
				t.Fatal(err)
			}
			if n := len(ls.GetSandboxes()); n != 0 {
				t.Fatalf("after the crash at %s the user has %d sandboxes; want none: the Acquire never returned one", step, n)
			}
			netPoolReady(t, d)
			got, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: user, Options: netOpts})
			if err != nil {
				t.Fatal(err)
			}
			id := got.GetSandbox().GetSandboxId()
			reaches(t, ctx, c, id, "the sandbox acquired after the crash")
			if _, err := c.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: id}); err != nil {
				t.Fatalf("DeleteSandbox: %v", err)
			}
			d.stop(t)
			checkHolders(t, env.stateDir)
		})
	}

	for i, step := range docker.FastWakeSteps {
		t.Run("wake-"+strings.ReplaceAll(step, ":", "-"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			d := env.start(t, flags...)
			c, _ := d.client(t)
			netPoolReady(t, d)
			got, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "net-wake-crash-" + strconv.Itoa(i), Options: netOpts})
			if err != nil {
				t.Fatal(err)
			}
			sbID := got.GetSandbox().GetSandboxId()
			execOut(t, ctx, c, sbID, "set", "x = 41\nopen('/workspace/f.txt', 'w').write('file kept')")
			if _, err := c.HibernateSandbox(ctx, &sandboxv1.HibernateSandboxRequest{SandboxId: sbID}); err != nil {
				t.Fatalf("HibernateSandbox: %v", err)
			}
			d.stop(t)
			d = crashing.startEnv(t, []string{"SANDBOXD_TEST_CRASH_AT=" + step}, flags...)
			netPoolReady(t, d)
			c, _ = d.client(t)
			_, err = c.WakeSandbox(ctx, &sandboxv1.WakeSandboxRequest{SandboxId: sbID})
			awaitCrash(t, d, step, err)

			d = env.start(t, flags...)
			c, _ = d.client(t)
			checkNoHalfBorrowed(t, env.stateDir)
			checkAfterCrash(t, ctx, c, sbID, step, "print(open('/workspace/f.txt').read())\nprint(x)", "file kept\n41\n")
			reaches(t, ctx, c, sbID, fmt.Sprintf("the sandbox after the crash at %s", step))
			if _, err := c.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sbID}); err != nil {
				t.Fatalf("DeleteSandbox: %v", err)
			}
			d.stop(t)
			checkNoHalfBorrowed(t, env.stateDir)
			checkHolders(t, env.stateDir)
		})
	}
}

// checkHolders fails if a network holder of stateDir's sandboxd is named
// by no sandbox's meta.json (a pool sandbox's included): one a crash left.
func checkHolders(t *testing.T, stateDir string) {
	t.Helper()
	abs, _ := filepath.Abs(stateDir)
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label="+labels.NetHolder+"=true",
		"--filter", "label="+labels.StateDir+"="+abs, "--format", "{{.ID}}").Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	named := ""
	metas, _ := filepath.Glob(filepath.Join(stateDir, "sandboxes", "*", "meta.json"))
	for _, m := range metas {
		b, _ := os.ReadFile(m)
		named += string(b)
	}
	for _, id := range strings.Fields(string(out)) {
		if !strings.Contains(named, id) {
			t.Errorf("network holder %s is named by no sandbox: a crash left it", id)
		}
	}
}
