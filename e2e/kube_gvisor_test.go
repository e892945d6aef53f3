package e2e

// gVisor on the real nodes: a replica started with --kube-runtime-class
// names the cluster's gVisor RuntimeClass (internal/kubetest/node: the
// nodes' containerd runs runsc for its handler), and its sandbox's Pod,
// the io sidecar included, runs in one gVisor sandbox. Everything the
// replica does goes through that sidecar, across gVisor's file system
// (where the driver's inotify misses the sidecar's writes, and it polls).

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// The sandbox sees gVisor's kernel where a runc sandbox sees the host's;
// globals are kept across calls; files go both ways through the io
// sidecar; a bash command reads its standard input; the deleted sandbox
// leaves no container behind.
func kubeGVisor(t *testing.T, k *kubeEnv) {
	if k.cluster == nil {
		t.Skip("gVisor runs on the real nodes only")
	}
	rc := k.cluster.NeedGVisor(t)
	ctx := e2eCtx(t)
	d := k.replica(t, "gvisor-a", "--kube-runtime-class", rc, "--kube-snapshot-dir", t.TempDir())
	c, _ := d.client(t)
	begin := time.Now()
	id := acquire(t, ctx, c, "gvisor-user").GetSandbox().GetSandboxId()
	t.Logf("acquire under gVisor: %v", time.Since(begin).Round(time.Millisecond))
	p := k.podOf(t, ctx, id)
	if p.Spec.RuntimeClassName == nil || *p.Spec.RuntimeClassName != rc {
		t.Fatalf("pod %s has runtimeClassName %v; want %q", p.Name, p.Spec.RuntimeClassName, rc)
	}
	bash := func(sb, code string) string {
		t.Helper()
		o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: sb, Language: "bash", Code: code})
		mustOK(t, o, code)
		return o.stdout
	}

	// The kernel, as seen from inside: gVisor's, not the host's, which a
	// runc sandbox (a replica without the RuntimeClass) sees.
	host, err := os.ReadFile("/proc/version")
	if err != nil {
		t.Fatal(err)
	}
	inside := bash(id, "cat /proc/version; dmesg")
	t.Logf("the sandbox's kernel under gVisor: %s", strings.SplitN(inside, "\n", 2)[0])
	if strings.Contains(inside, strings.TrimSpace(string(host))) || !strings.Contains(inside, "gVisor") {
		t.Errorf("under gVisor the sandbox sees %q; want gVisor's kernel (its dmesg says gVisor), not the host's %q", inside, host)
	}
	plain := k.replica(t, "gvisor-runc")
	pc, _ := plain.client(t)
	runcID := acquire(t, ctx, pc, "gvisor-runc-user").GetSandbox().GetSandboxId()
	if rcn := k.podOf(t, ctx, runcID).Spec.RuntimeClassName; rcn != nil {
		t.Errorf("the replica without --kube-runtime-class made a pod with runtimeClassName %q", *rcn)
	}
	if got := execute(t, ctx, pc, &sandboxv1.ExecuteRequest{SandboxId: runcID, Language: "bash", Code: "cat /proc/version"}).stdout; strings.TrimSpace(got) != strings.TrimSpace(string(host)) {
		t.Errorf("under runc the sandbox sees %q; want the host's kernel %q", got, host)
	}
	deleteQuietly(pc, runcID)

	// Globals are kept across calls (each a round trip through the
	// sidecar and the driver's polling of /io).
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "x = 41"}), "x = 41")
	begin = time.Now()
	o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "x + 1"})
	t.Logf("a Python call under gVisor: %v", time.Since(begin).Round(time.Millisecond))
	if len(o.results) != 1 || o.results[0]["text/plain"] != "42" {
		t.Errorf("x + 1 = %v (%v); want 42", o.results, o.errs)
	}

	// Files: uploaded through the sidecar, read and written inside,
	// downloaded and listed through the sidecar.
	data := []byte(strings.Repeat("sandboxd under gVisor\n", 50000)) // 1.1 MB: several chunks
	if _, err := upload(ctx, c, id, "g/in.txt", data); err != nil {
		t.Fatalf("upload: %v", err)
	}
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id,
		Code: "n = len(open('g/in.txt').read())\nopen('g/out.txt', 'w').write(f'read {n}')"}), "read in.txt, write out.txt")
	if got, want := string(download(t, ctx, c, id, "g/out.txt")), fmt.Sprintf("read %d", len(data)); got != want {
		t.Errorf("download out.txt = %q; want %q", got, want)
	}
	var names []string
	for _, f := range listPaths(t, ctx, c, id, "g") {
		names = append(names, strings.TrimPrefix(f, "/workspace/"))
	}
	if strings.Join(names, " ") != "g/in.txt g/out.txt" {
		t.Errorf("ListFiles(g) = %v; want g/in.txt and g/out.txt", names)
	}

	// A fork: the sidecar walks /workspace and the new sandbox's unpacks
	// it, both inside gVisor; the globals come back by the restore.
	fr, err := c.ForkSandbox(ctx, &sandboxv1.ForkSandboxRequest{SandboxId: id, Count: 1})
	if err != nil || len(fr.GetResults()) != 1 || fr.GetResults()[0].GetErrorCode() != 0 {
		t.Fatalf("ForkSandbox under gVisor: %v, %v", fr.GetResults(), err)
	}
	fork := fr.GetResults()[0].GetSandbox().GetSandboxId()
	if o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: fork, Code: "print(x, open('g/out.txt').read())"}); o.stdout != fmt.Sprintf("41 read %d\n", len(data)) {
		t.Errorf("the fork under gVisor prints %q (%v); want the source's x and files", o.stdout, o.errs)
	}
	deleteQuietly(c, fork)

	// A bash command reading its standard input: the prompt comes out,
	// the answer goes in, through the sidecar both ways.
	gc, err := client.Dial(d.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	proc, err := gc.Start(ctx, client.Command{SandboxID: id, ID: "ask", Language: "bash", Stdin: true, Code: `echo "name?"; read name; echo "hi $name from $(uname -r)"`})
	if err != nil {
		t.Fatal(err)
	}
	w := startWait(proc)
	w.awaitStdout(t, ctx, "name?")
	if err := proc.SendStdin(ctx, []byte("Ada\n")); err != nil {
		t.Fatal(err)
	}
	if out := w.result(t, ctx); !strings.HasPrefix(out.Stdout, "name?\nhi Ada from ") || out.Done.Status != client.StatusOK {
		t.Errorf("interactive read: stdout %q, done %+v", out.Stdout, out.Done)
	}

	// Deleted, the sandbox leaves neither of its Pod's containers.
	var ctrs []string
	for _, name := range []string{"sandbox", "io"} {
		ctr := k.nodes.containerID(ctx, p.Name, name)
		if ctr == "" {
			t.Fatalf("no node runs container %s of pod %s", name, p.Name)
		}
		ctrs = append(ctrs, ctr)
	}
	if _, err := c.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: id}); err != nil {
		t.Fatalf("DeleteSandbox: %v", err)
	}
	begin = time.Now()
	for _, ctr := range ctrs {
		if !pollUntil(time.Minute, func() bool { return k.nodes.containerGone(ctx, ctr) }) {
			t.Errorf("container %s of the deleted gVisor sandbox still exists a minute after", ctr)
		}
	}
	t.Logf("the deleted sandbox's containers gone in %v", time.Since(begin).Round(time.Millisecond))

	// With a storage class, a gVisor sandbox hibernates and wakes as a
	// runc one does: the claim's subPaths through gVisor's mounts, the
	// globals back in the new Pod.
	h := k.replica(t, "gvisor-hib", "--kube-runtime-class", rc, "--kube-storage-class="+k.cluster.StorageClass)
	hc, _ := h.client(t)
	hid := acquire(t, ctx, hc, "gvisor-hib-user").GetSandbox().GetSandboxId()
	defer deleteQuietly(hc, hid)
	execOut(t, ctx, hc, hid, "set", "import numpy as np\nkept = np.arange(5) * 2\nopen('/workspace/f.txt', 'w').write('under gVisor')")
	if _, err := hc.HibernateSandbox(ctx, &sandboxv1.HibernateSandboxRequest{SandboxId: hid}); err != nil {
		t.Fatalf("HibernateSandbox under gVisor: %v", err)
	}
	got, started := execOut(t, ctx, hc, hid, "get", "(kept.tolist(), open('/workspace/f.txt').read())")
	if started.GetWake().GetLevel() != "globals" || len(got.results) == 0 || got.results[0]["text/plain"] != "([0, 2, 4, 6, 8], 'under gVisor')" {
		t.Fatalf("after the wake under gVisor: wake %v, result %v %v", started.GetWake(), got.results, got.errs)
	}
	if rcn := k.podOf(t, ctx, hid).Spec.RuntimeClassName; rcn == nil || *rcn != rc {
		t.Errorf("the woken pod's runtimeClassName %v; want %q", rcn, rc)
	}
}
