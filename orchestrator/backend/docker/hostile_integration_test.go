package docker

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Integration tests of the attacks on sandboxd through /io (SECURITY.md,
// "Everything a sandbox writes is hostile input"), on the real engine.

// loopDevicesOf returns the lines of `losetup -a` naming sandbox id's images.
func loopDevicesOf(t *testing.T, id string) []string {
	t.Helper()
	out, err := exec.Command("losetup", "-a").CombinedOutput()
	if err != nil {
		t.Fatalf("losetup -a: %v: %s", err, out)
	}
	var mine []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, id) {
			mine = append(mine, l)
		}
	}
	return mine
}

// inSandbox runs Python code in the sandbox and fails unless it ends ok.
func inSandbox(t *testing.T, m *validated, id, code string) {
	t.Helper()
	evs := runCommand(t, m, id, core.ExecRequest{Code: code})
	if d := lastDone(t, evs); d.Status != "ok" {
		t.Fatalf("sandboxed code ended %s: %+v", d.Status, evs)
	}
}

// deleteTimed deletes a sandbox, checks the time it took and that no loop
// device is left.
func deleteTimed(t *testing.T, m *validated, id string) time.Duration {
	t.Helper()
	start := time.Now()
	if err := m.Delete(t.Context(), id); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	el := time.Since(start)
	if el > 15*time.Second {
		t.Errorf("Delete took %v", el)
	}
	if loops := loopDevicesOf(t, id); len(loops) != 0 {
		t.Errorf("loop devices left after Delete: %q", loops)
	}
	return el
}

func TestIntegrationForgedLogAfterRestart(t *testing.T) {
	m1, _, cfg := integrationManager(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	bad, err := m1.Acquire(ctx, "it-forger", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The attack: a copy of the log, made sparse and huge (16 TiB, or the
	// most ext4 allows), renamed onto /io/stdin.
	inSandbox(t, m1, bad.Sandbox.ID, `import os, shutil
shutil.copy('/io/stdin', '/io/x')
size = 16 << 40
while True:
    try:
        os.truncate('/io/x', size); break
    except OSError:
        size -= 1 << 30
os.rename('/io/x', '/io/stdin')
print(size)`)
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}

	m2, err := newValidated(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	// Meanwhile another user works normally.
	var wg sync.WaitGroup
	var otherRT time.Duration
	var otherID string
	wg.Go(func() {
		start := time.Now()
		res, err := m2.Acquire(ctx, "it-bystander", core.Options{})
		if err != nil {
			t.Errorf("bystander Acquire: %v", err)
			return
		}
		otherID = res.Sandbox.ID
		runCommand(t, m2, otherID, core.ExecRequest{Code: "print('fine')"})
		otherRT = time.Since(start)
	})
	start := time.Now()
	_, err = m2.Submit(ctx, core.ExecRequest{SandboxID: bad.Sandbox.ID, Code: "print(1)"})
	execTime := time.Since(start)
	if !errors.Is(err, core.ErrFailedPrecondition) || !strings.Contains(err.Error(), "tampered with its command log") {
		t.Fatalf("Execute in the forger's sandbox = %v, want FailedPrecondition (tampered)", err)
	}
	if execTime > 2*time.Second {
		t.Errorf("Execute on the forged log took %v to fail", execTime)
	}
	// Follow of a command from before the forgery: the same answer.
	err = m2.Follow(ctx, bad.Sandbox.ID, "anything", 0, func(core.Event) error { return nil })
	if !errors.Is(err, core.ErrFailedPrecondition) {
		t.Errorf("Follow in the forger's sandbox = %v, want FailedPrecondition", err)
	}
	delTime := deleteTimed(t, m2, bad.Sandbox.ID)
	wg.Wait()
	if otherRT > 30*time.Second {
		t.Errorf("bystander's Acquire+Execute took %v during the attack", otherRT)
	}
	t.Logf("forged log: Execute failed in %v; Delete took %v; bystander's Acquire+Execute %v", execTime, delTime, otherRT)
	if otherID != "" {
		deleteTimed(t, m2, otherID)
	}
}

// forgeEvents writes, from inside the sandbox, the events file of command
// cmd (which already ran) from Python code making its lines, plus setup.
func forgeEvents(t *testing.T, m *validated, id, cmd, setup, lines string) {
	t.Helper()
	inSandbox(t, m, id, fmt.Sprintf(`import os
%s
with open('/io/out/f.tmp', 'w') as f:
%s
os.rename('/io/out/f.tmp', '/io/out/%s.events')`, setup, lines, cmd))
}

func TestIntegrationRefsToSparseArtifact(t *testing.T) {
	m, _, _ := integrationManager(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := m.Acquire(ctx, "it-refs", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sandbox.ID
	runCommand(t, m, id, core.ExecRequest{CommandID: "victim", Code: "pass"})
	// One display event referring 8 times to one sparse 64 MiB artifact.
	refs := make([]string, 8)
	for i := range refs {
		refs[i] = fmt.Sprintf(`"image/x-%d":"victim.2.1"`, i)
	}
	forgeEvents(t, m, id, "victim",
		`open('/io/out/victim.2.1', 'w').truncate(64 << 20)`,
		`    f.write('{"seq":1,"type":"started"}\n')
    f.write('{"seq":2,"type":"display","data":{"text/plain":"x"},"refs":{`+strings.Join(refs, ",")+`}}\n')
    f.write('{"seq":3,"type":"done","status":"ok"}\n')`)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var got []core.Event
	start := time.Now()
	err = m.Follow(ctx, id, "victim", 0, func(e core.Event) error { got = append(got, e); return nil })
	el := time.Since(start)
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	if err != nil || len(got) != 3 {
		t.Fatalf("Follow = %v, %d events; want the 3, the refs skipped", err, len(got))
	}
	if len(got[1].Data) != 1 || got[1].Data["text/plain"] != "x" {
		t.Errorf("display = %v, want only text/plain", got[1].Data)
	}
	if alloc > 32<<20 {
		t.Errorf("Follow allocated %d MiB for 8 refs to a sparse artifact, want < 32", alloc>>20)
	}
	t.Logf("8 refs to a sparse 64 MiB artifact: Follow %v, %d KiB allocated", el, alloc>>10)

	// The command ID re-used for other code: the conflict; the same code:
	// its output replayed.
	_, err = m.Submit(ctx, core.ExecRequest{SandboxID: id, CommandID: "victim", Code: "print('other')"})
	if !errors.Is(err, core.ErrAlreadyExists) {
		t.Errorf("Submit of victim with other code = %v, want ErrAlreadyExists", err)
	}
	if again := runCommand(t, m, id, core.ExecRequest{CommandID: "victim", Code: "pass"}); len(again) != 3 {
		t.Errorf("replay of victim = %d events, want the 3 logged", len(again))
	}
	deleteTimed(t, m, id)
}

func TestIntegrationFollowHugeEvents(t *testing.T) {
	m, _, _ := integrationManager(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	res, err := m.Acquire(ctx, "it-huge", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sandbox.ID
	runCommand(t, m, id, core.ExecRequest{CommandID: "victim", Code: "pass"})
	// A dense events file of ~150 MiB of tiny events and no done: reading
	// it all takes seconds.
	forgeEvents(t, m, id, "victim", "",
		`    line = '{"seq":%d,"type":"stdout","text":"x"}\n'
    f.write(''.join(line % i for i in range(1, 4_000_001)))`)
	sbh := m.reg.get(id)
	goroutines := runtime.NumGoroutine()

	// A caller with a short deadline: Follow returns just after it.
	dctx, dcancel := context.WithTimeout(ctx, time.Second)
	start := time.Now()
	n := 0
	err = m.Follow(dctx, id, "victim", 0, func(core.Event) error { n++; return nil })
	dcancel()
	el := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Follow with a 1 s deadline = %v after %d events, want DeadlineExceeded", err, n)
	}
	if el > 2*time.Second {
		t.Errorf("Follow with a 1 s deadline returned after %v", el)
	}
	if r := sbh.io.OpenReaders(); r != 0 {
		t.Errorf("%d readers of the sandbox's io/ left open after Follow returned", r)
	}
	t.Logf("huge events file: Follow with a 1 s deadline returned after %v (%d events)", el, n)

	// A Follow without a deadline, then Delete: both end promptly, and no
	// loop device is left.
	followed := make(chan error, 1)
	go func() {
		followed <- m.Follow(ctx, id, "victim", 0, func(core.Event) error { return nil })
	}()
	for deadline := time.Now().Add(10 * time.Second); sbh.io.OpenReaders() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the follower never opened the events file")
		}
		runtime.Gosched()
	}
	delTime := deleteTimed(t, m, id)
	select {
	case err := <-followed:
		if !errors.Is(err, core.ErrNotFound) {
			t.Errorf("Follow during Delete = %v, want ErrNotFound", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Follow still running 5 s after Delete returned")
	}
	if g := runtime.NumGoroutine(); g > goroutines+2 {
		t.Errorf("%d goroutines after the follows, %d before", g, goroutines)
	}
	t.Logf("Delete during a Follow of it: %v", delTime)
}
