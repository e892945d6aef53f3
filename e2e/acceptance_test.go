package e2e

// Acceptance tests: each subtest of TestAcceptance proves one promise users
// rely on, against the real sandboxd binary, the real Docker engine and the
// real sandbox image, through the gRPC API (and the real sandboxctl binary).
// The harness (needE2E, start, client, execute) is in e2e_test.go, and so
// are the rules for when these tests skip.
//
// Subtests that only need a sandboxd share one; those that kill, restart or
// configure sandboxd differently get their own, with their own state
// directory. No sleep is used to synchronise: the tests await stream events,
// health status and Docker events, or poll Docker or the file system with a
// deadline where nothing can be awaited.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/orchestrator/labels"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

func TestAcceptance(t *testing.T) {
	env := needE2E(t)
	shared := env.start(t)

	t.Run("AliceBobIsolation", func(t *testing.T) {
		t.Parallel()
		acceptAliceBob(t, shared)
	})
	t.Run("CrashResumeExactlyOnce", func(t *testing.T) {
		t.Parallel()
		acceptCrashResume(t, env.fork(t))
	})
	t.Run("IdleTTLRemoves", func(t *testing.T) {
		t.Parallel()
		acceptIdleTTL(t, env.fork(t))
	})
	t.Run("TwentySurviveRestart", func(t *testing.T) {
		t.Parallel()
		acceptTwentySurviveRestart(t, env.fork(t))
	})
	t.Run("Sandboxctl", func(t *testing.T) {
		t.Parallel()
		acceptSandboxctl(t, env, shared)
	})
	t.Run("Files", func(t *testing.T) {
		t.Parallel()
		acceptFiles(t, env, shared)
	})
}

// 1. One sandbox per user: Python state persists within a user's sandbox, is
// invisible to another user's (a separate container), and acquiring again
// returns the same sandbox.
func acceptAliceBob(t *testing.T, d *daemon) {
	ctx := e2eCtx(t)
	c, _ := d.client(t)

	alice := acquire(t, ctx, c, "alice")
	aliceID := alice.GetSandbox().GetSandboxId()
	if !alice.GetCreated() || alice.GetSandbox().GetState() != sandboxv1.SandboxState_SANDBOX_STATE_RUNNING {
		t.Fatalf("first AcquireSandbox(alice) = %v; want a newly created, running sandbox", alice)
	}
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: aliceID, Code: "x = 21"}), "x = 21")
	if o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: aliceID, Code: "x * 2"}); len(o.results) != 1 || o.results[0]["text/plain"] != "42" {
		t.Errorf("x * 2 in alice's sandbox: results %v, errors %v, done %v; want one result with text/plain \"42\"", o.results, o.errs, o.done)
	}

	// print(x) streams its output as a stdout event, before done.
	evs := runEvents(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: aliceID, Code: "print(x)"})
	checkSeqs(t, "print(x)", evs, 1, true)
	firstStdout := slices.IndexFunc(evs, func(e *sandboxv1.ExecuteEvent) bool { return e.GetStdout() != nil })
	if firstStdout < 0 || stdoutOf(evs) != "21\n" {
		t.Errorf("print(x): stdout events %q (first at index %d of %d events); want \"21\\n\" as stdout events", stdoutOf(evs), firstStdout, len(evs))
	}
	if done := evs[len(evs)-1].GetDone(); done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
		t.Errorf("print(x): done %v; want OK", done)
	}

	bob := acquire(t, ctx, c, "bob")
	bobID := bob.GetSandbox().GetSandboxId()
	if !bob.GetCreated() || bobID == aliceID {
		t.Fatalf("AcquireSandbox(bob) = %v; want a new sandbox, not alice's %s", bob, aliceID)
	}
	aliceCtr, bobCtr := d.container(t, ctx, aliceID), d.container(t, ctx, bobID)
	if aliceCtr.id == bobCtr.id {
		t.Fatalf("alice and bob share container %s", aliceCtr.id)
	}
	if aliceCtr.user != "alice" || bobCtr.user != "bob" {
		t.Errorf("containers are labelled with users %q and %q; want alice and bob", aliceCtr.user, bobCtr.user)
	}
	o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: bobID, Code: "print(x)"})
	if len(o.errs) != 1 || o.errs[0].GetEname() != "NameError" || o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_ERROR || o.stdout != "" {
		t.Errorf("print(x) in bob's sandbox: errors %v, stdout %q, done %v; want a NameError and status ERROR (alice's x leaked?)", o.errs, o.stdout, o.done)
	}

	again := acquire(t, ctx, c, "alice")
	if again.GetSandbox().GetSandboxId() != aliceID || again.GetCreated() || again.GetStateLost() {
		t.Errorf("second AcquireSandbox(alice) = %v; want the same sandbox %s with created=false", again, aliceID)
	}
	if o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: aliceID, Code: "x"}); len(o.results) != 1 || o.results[0]["text/plain"] != "21" {
		t.Errorf("x in alice's sandbox after bob's use: results %v, errors %v", o.results, o.errs)
	}
}

// slowCode counts its runs in a global and in a workspace file, then prints
// eight ticks half a second apart.
const slowCode = `import os, time
counter = globals().get('counter', 0) + 1
_n = int(open('counter.txt').read()) if os.path.exists('counter.txt') else 0
with open('counter.txt', 'w') as _f:
    _f.write(str(_n + 1))
for i in range(8):
    print(f"tick {i}", flush=True)
    time.sleep(0.5)
`

const slowTicks = "tick 0\ntick 1\ntick 2\ntick 3\ntick 4\ntick 5\ntick 6\ntick 7\n"

// 2. Crash safety: a SIGKILLed sandboxd loses nothing. The command goes on
// in its container, its whole output can be streamed from the restarted
// sandboxd (from the start, or resumed without duplicates or gaps), globals
// survive, and retrying the command ID replays instead of running again.
func acceptCrashResume(t *testing.T, env *e2eEnv) {
	ctx := e2eCtx(t)
	d := env.start(t)
	c, _ := d.client(t)
	sbID := acquire(t, ctx, c, "crash-user").GetSandbox().GetSandboxId()

	req := &sandboxv1.ExecuteRequest{SandboxId: sbID, CommandId: "slow-1", Code: slowCode}
	s, err := c.Execute(ctx, req)
	if err != nil {
		t.Fatalf("Execute slow-1: %v", err)
	}
	var seen []*sandboxv1.ExecuteEvent
	for !slices.ContainsFunc(seen, func(e *sandboxv1.ExecuteEvent) bool { return e.GetStdout() != nil }) {
		ev, err := s.Recv()
		if err != nil {
			t.Fatalf("Execute slow-1 ended before its first stdout event (after %d events): %v", len(seen), err)
		}
		seen = append(seen, ev)
	}
	addr := d.addr
	d.kill9(t)
	// Events already in flight may still arrive; then the stream must break.
	for {
		ev, err := s.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				t.Fatalf("Execute stream ended cleanly although sandboxd was killed")
			}
			break
		}
		seen = append(seen, ev)
	}
	checkSeqs(t, "events seen before the crash", seen, 1, false)
	if seen[len(seen)-1].GetDone() != nil {
		t.Fatalf("slow-1 finished before sandboxd was killed; the crash did not land mid-command")
	}
	lastSeen := seen[len(seen)-1].GetSeq()

	d = env.start(t, "--listen", addr)
	c, conn := d.client(t)
	testenv.WaitServing(t, conn)
	restarted := time.Now()

	full := streamEvents(t, ctx, c, sbID, "slow-1", 0)
	checkSeqs(t, "StreamCommand(after_seq=0) after the crash", full, 1, true)
	if got := stdoutOf(full); got != slowTicks {
		t.Errorf("StreamCommand(after_seq=0) stdout = %q; want all eight ticks in order: %q", got, slowTicks)
	}
	done := full[len(full)-1].GetDone()
	if done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK || done.GetStateLost() {
		t.Errorf("slow-1 done = %v; want OK without state loss (the container outlives sandboxd)", done)
	}
	t.Logf("sandboxd was killed after seq %d; the restarted one served %v before slow-1 ended",
		lastSeen, done.GetTime().AsTime().Sub(restarted).Round(time.Millisecond))
	for i, ev := range seen {
		if i < len(full) && !proto.Equal(ev, full[i]) {
			t.Errorf("event %d differs between the live stream before the crash (%v) and the stream after it (%v)", i+1, ev, full[i])
		}
	}

	rest := streamEvents(t, ctx, c, sbID, "slow-1", lastSeen)
	checkSeqs(t, fmt.Sprintf("StreamCommand(after_seq=%d)", lastSeen), rest, lastSeen+1, true)
	if got := stdoutOf(seen) + stdoutOf(rest); got != slowTicks {
		t.Errorf("stdout before the crash + resumed after seq %d = %q; want each tick exactly once: %q", lastSeen, got, slowTicks)
	}
	if int64(len(full)) == lastSeen+int64(len(rest)) {
		for i, ev := range rest {
			if !proto.Equal(ev, full[int(lastSeen)+i]) {
				t.Errorf("resumed event seq %d = %v; the full stream has %v", ev.GetSeq(), ev, full[int(lastSeen)+i])
			}
		}
	}

	assertCounter := func(when string) {
		t.Helper()
		if o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: sbID, Code: "counter"}); len(o.results) != 1 || o.results[0]["text/plain"] != "1" {
			t.Errorf("global counter %s: results %v, errors %v; want \"1\" (globals lost, or slow-1 ran again?)", when, o.results, o.errs)
		}
		if got := string(download(t, ctx, c, sbID, "counter.txt")); got != "1" {
			t.Errorf("workspace counter.txt %s = %q; want \"1\" (slow-1 ran again?)", when, got)
		}
	}
	assertCounter("after the restart")

	// Retrying the same command ID replays; nothing runs again.
	replay := runEvents(t, ctx, c, req)
	if len(replay) != len(full) {
		t.Errorf("retried Execute slow-1 streamed %d events; want the %d of the original run", len(replay), len(full))
	} else {
		for i := range replay {
			if !proto.Equal(replay[i], full[i]) {
				t.Errorf("retried Execute slow-1 event %d = %v; want the original %v", i+1, replay[i], full[i])
			}
		}
	}
	assertCounter("after retrying slow-1")
}

// 3. Idle expiry: a sandbox nobody uses is removed, container and state
// directory, soon after its expires_at.
func acceptIdleTTL(t *testing.T, env *e2eEnv) {
	const ttl = 3 * time.Second
	const slack = 15 * time.Second
	ctx := e2eCtx(t)
	d := env.start(t, "--idle-ttl", ttl.String(), "--on-idle", "delete")
	c, _ := d.client(t)

	since := time.Now().Add(-2 * time.Second)
	sb := acquire(t, ctx, c, "idle-user").GetSandbox()
	sbID := sb.GetSandboxId()
	ctr := runningContainer(t, ctx, sbID)
	expires, last := sb.GetExpiresAt().AsTime(), sb.GetLastActiveAt().AsTime()
	if sb.GetExpiresAt() == nil || expires.Sub(last) < ttl-100*time.Millisecond || expires.Sub(last) > ttl+100*time.Millisecond {
		t.Errorf("expires_at %v is not last_active_at %v plus the idle TTL %v", expires, last, ttl)
	}
	dir := filepath.Join(env.stateDir, "sandboxes", sbID)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the sandbox's state directory: %v", err)
	}

	// No call may touch the sandbox now: await Docker's destroy event.
	ectx, cancel := context.WithDeadline(ctx, expires.Add(slack))
	defer cancel()
	removedAt, err := awaitDestroy(ectx, ctr.id, since)
	if err != nil {
		state, _ := exec.Command("docker", "inspect", "--format", "{{.State.Status}}", ctr.id).CombinedOutput()
		t.Fatalf("container %s of idle sandbox %s was not removed within %v of its expiry at %v (docker state now: %s): %v",
			ctr.id, sbID, slack, expires.Format(time.RFC3339Nano), strings.TrimSpace(string(state)), err)
	}
	t.Logf("container removed %v after expires_at", removedAt.Sub(expires).Round(time.Millisecond))
	if removedAt.Before(expires.Add(-time.Second)) {
		t.Errorf("container removed at %v, before the sandbox's expiry at %v", removedAt, expires)
	}

	if _, err := c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: sbID}); status.Code(err) != codes.NotFound {
		t.Errorf("GetSandbox of the expired sandbox: %v; want NotFound", err)
	}
	// The directory goes right after the container, in the same removal.
	if !pollUntil(5*time.Second, func() bool { _, err := os.Stat(dir); return errors.Is(err, os.ErrNotExist) }) {
		entries, _ := os.ReadDir(dir)
		t.Errorf("state directory %s still exists 5s after the container's removal (entries %v)", dir, entries)
	}
	if ids := dockerLines(t, ctx, "ps", "-aq", "--filter", "id="+ctr.id); len(ids) != 0 {
		t.Errorf("docker still lists container %s: %v", ctr.id, ids)
	}
}

// 4. Twenty sandboxes, their containers and Python globals survive a
// SIGKILL of sandboxd and are all served again by the next one.
func acceptTwentySurviveRestart(t *testing.T, env *e2eEnv) {
	const n, parallel = 20, 5
	ctx := e2eCtx(t)
	d := env.start(t)
	c, _ := d.client(t)

	users := make([]string, n)
	ids := make([]string, n)
	forEach := func(f func(i int)) {
		sem := make(chan struct{}, parallel)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				f(i)
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	forEach(func(i int) {
		users[i] = fmt.Sprintf("user-%02d", i)
		resp, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: users[i]})
		if err != nil {
			t.Errorf("AcquireSandbox(%s): %v", users[i], err)
			return
		}
		ids[i] = resp.GetSandbox().GetSandboxId()
		o, err := tryExecute(ctx, c, &sandboxv1.ExecuteRequest{SandboxId: ids[i], Code: fmt.Sprintf("v = %q", users[i])})
		if err != nil || o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
			t.Errorf("setting v in %s's sandbox: %v, done %v, errors %v", users[i], err, o.done, o.errs)
		}
	})
	before := containersByID(t, ctx, env)
	if len(before) != n {
		t.Fatalf("%d containers run for %d sandboxes: %v", len(before), n, before)
	}

	d.kill9(t)
	d = env.start(t)
	c, conn := d.client(t)
	testenv.WaitServing(t, conn)

	list, err := c.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{})
	if err != nil {
		t.Fatalf("ListSandboxes after the restart: %v", err)
	}
	var listed []string
	for _, sb := range list.GetSandboxes() {
		listed = append(listed, sb.GetSandboxId())
	}
	if want := slices.Sorted(slices.Values(ids)); !slices.Equal(slices.Sorted(slices.Values(listed)), want) {
		t.Errorf("ListSandboxes after the restart = %v; want the %d sandboxes %v", listed, n, want)
	}
	forEach(func(i int) {
		g, err := c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: ids[i]})
		if err != nil {
			t.Errorf("GetSandbox(%s) of %s after the restart: %v", ids[i], users[i], err)
			return
		}
		if sb := g.GetSandbox(); sb.GetState() != sandboxv1.SandboxState_SANDBOX_STATE_RUNNING || sb.GetUserId() != users[i] {
			t.Errorf("GetSandbox(%s) after the restart = %v; want %s's running sandbox", ids[i], sb, users[i])
		}
		o, err := tryExecute(ctx, c, &sandboxv1.ExecuteRequest{SandboxId: ids[i], Code: "v"})
		if want := fmt.Sprintf("'%s'", users[i]); err != nil || len(o.results) != 1 || o.results[0]["text/plain"] != want {
			t.Errorf("v in %s's sandbox after the restart: %v, results %v, errors %v; want %s", users[i], err, o.results, o.errs, want)
		}
	})
	if after := containersByID(t, ctx, env); !maps.Equal(before, after) {
		t.Errorf("containers changed across the restart:\nbefore %v\nafter  %v", before, after)
	}
}

// 5. sandboxctl, the real binary against the real server: list (table and
// JSON) and kill, including the error path.
func acceptSandboxctl(t *testing.T, env *e2eEnv, d *daemon) {
	ctx := e2eCtx(t)
	c, _ := d.client(t)
	keepID := acquire(t, ctx, c, "ctl-keep").GetSandbox().GetSandboxId()
	killID := acquire(t, ctx, c, "ctl-kill").GetSandbox().GetSandboxId()
	t.Cleanup(func() { deleteQuietly(c, keepID) })
	killCtr := d.container(t, ctx, killID)

	out, errOut, code := env.ctl(t, ctx, d.addr, "list")
	if code != 0 || errOut != "" {
		t.Fatalf("sandboxctl list: exit %d, stderr %q", code, errOut)
	}
	for id, user := range map[string]string{keepID: "ctl-keep", killID: "ctl-kill"} {
		if !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool {
			f := strings.Fields(l)
			return len(f) >= 4 && f[0] == id && f[1] == "default" && f[2] == user && f[3] == "running"
		}) {
			t.Errorf("sandboxctl list has no row \"%s default %s running ...\":\n%s", id, user, out)
		}
	}

	out, errOut, code = env.ctl(t, ctx, d.addr, "list", "--json")
	var rows []map[string]any
	if code != 0 || errOut != "" {
		t.Fatalf("sandboxctl list --json: exit %d, stderr %q", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("sandboxctl list --json is not a JSON array: %v\n%s", err, out)
	}
	for _, id := range []string{keepID, killID} {
		if !slices.ContainsFunc(rows, func(r map[string]any) bool {
			return r["sandbox_id"] == id && r["state"] == "SANDBOX_STATE_RUNNING"
		}) {
			t.Errorf("sandboxctl list --json has no running sandbox_id %s:\n%s", id, out)
		}
	}

	out, errOut, code = env.ctl(t, ctx, d.addr, "kill", killID)
	if code != 0 || out != killID+"\n" || errOut != "" {
		t.Fatalf("sandboxctl kill %s: exit %d, stdout %q, stderr %q; want exit 0 and the ID", killID, code, out, errOut)
	}
	if _, err := c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: killID}); status.Code(err) != codes.NotFound {
		t.Errorf("GetSandbox after sandboxctl kill: %v; want NotFound", err)
	}
	d.checkContainerGone(t, ctx, killCtr.id)
	if _, err := c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: keepID}); err != nil {
		t.Errorf("the other sandbox is affected by the kill: GetSandbox(%s): %v", keepID, err)
	}

	for _, bad := range []string{"sb-doesnotexist", "sb-aaaaaaaaaaaaaaaaaaaa"} {
		out, errOut, code = env.ctl(t, ctx, d.addr, "kill", bad)
		if code == 0 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasSuffix(errOut, "\n") || !strings.Contains(errOut, bad) {
			t.Errorf("sandboxctl kill %s: exit %d, stdout %q, stderr %q; want a non-zero exit and one line on stderr naming it", bad, code, out, errOut)
		}
	}
}

// 6. Files: upload, use from Python (pandas), download and list; paths and
// symlinks leading out of the workspace are refused and the host untouched.
func acceptFiles(t *testing.T, env *e2eEnv, d *daemon) {
	ctx := e2eCtx(t)
	c, _ := d.client(t)
	sbID := acquire(t, ctx, c, "files-user").GetSandbox().GetSandboxId()
	t.Cleanup(func() { deleteQuietly(c, sbID) })
	wsParent := filepath.Join(env.stateDir, "sandboxes", sbID)

	const csv = "a,b\n1,2\n3,4\n"
	info, err := upload(ctx, c, sbID, "data/in.csv", []byte(csv))
	if err != nil || info.GetPath() != "data/in.csv" || info.GetSize() != int64(len(csv)) {
		t.Fatalf("UploadFile data/in.csv = %v, %v; want %d bytes at data/in.csv", info, err, len(csv))
	}
	o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: sbID,
		Code: "import pandas as pd\ndf = pd.read_csv('data/in.csv')\ndf.to_csv('out.csv')\ndf['a'].sum()"})
	if len(o.results) != 1 || o.results[0]["text/plain"] != "4" {
		t.Errorf("pandas sum: results %v, errors %v, stderr %q; want text/plain \"4\"", o.results, o.errs, o.stderr)
	}
	if got, want := string(download(t, ctx, c, sbID, "out.csv")), ",a,b\n0,1,2\n1,3,4\n"; got != want {
		t.Errorf("DownloadFile out.csv = %q; want %q", got, want)
	}
	if got := listPaths(t, ctx, c, sbID, ""); !slices.Contains(got, "data/") || !slices.Contains(got, "out.csv") {
		t.Errorf("ListFiles(/workspace) = %v; want data/ and out.csv", got)
	}
	if got := listPaths(t, ctx, c, sbID, "data"); !slices.Equal(got, []string{"data/in.csv"}) {
		t.Errorf("ListFiles(data) = %v; want [data/in.csv]", got)
	}

	// Paths leading out of the workspace.
	if _, err := upload(ctx, c, sbID, "../x", []byte("escaped")); status.Code(err) != codes.InvalidArgument {
		t.Errorf("UploadFile ../x: %v; want InvalidArgument", err)
	}
	if _, err := os.Lstat(filepath.Join(wsParent, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("UploadFile ../x wrote next to the workspace: %v", err)
	}
	if got, err := tryDownload(ctx, c, sbID, "../../etc/passwd"); status.Code(err) != codes.InvalidArgument || len(got) != 0 {
		t.Errorf("DownloadFile ../../etc/passwd: %d bytes, %v; want InvalidArgument and nothing", len(got), err)
	}

	// Symlinks the sandboxed code plants, pointing at the host's /etc.
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: sbID,
		Code: "import os\nos.symlink('/etc/passwd', 'leak')\nos.symlink('/etc', 'etcdir')"}), "planting symlinks")
	got, err := tryDownload(ctx, c, sbID, "leak")
	t.Logf("DownloadFile through a symlink to /etc/passwd: %v", err)
	if !refused(err) || len(got) != 0 {
		t.Errorf("DownloadFile leak (-> /etc/passwd): %d bytes, %v; want InvalidArgument or PermissionDenied and nothing", len(got), err)
	}
	pwned := fmt.Sprintf("sandboxd-acceptance-%d", time.Now().UnixNano())
	hostPwned := filepath.Join("/etc", pwned)
	_, err = upload(ctx, c, sbID, "etcdir/"+pwned, []byte("pwned\n"))
	t.Logf("UploadFile through a symlink to /etc: %v", err)
	if !refused(err) {
		t.Errorf("UploadFile etcdir/%s (etcdir -> /etc): %v; want InvalidArgument or PermissionDenied", pwned, err)
	}
	if _, serr := os.Lstat(hostPwned); !errors.Is(serr, os.ErrNotExist) {
		os.Remove(hostPwned)
		t.Errorf("UploadFile through a symlink wrote the host's %s (stat: %v)", hostPwned, serr)
	}
	if lf, err := c.ListFiles(ctx, &sandboxv1.ListFilesRequest{SandboxId: sbID, Path: "etcdir"}); !refused(err) {
		t.Errorf("ListFiles etcdir (-> /etc): %d entries, %v; want InvalidArgument or PermissionDenied", len(lf.GetFiles()), err)
	}
}

// --- helpers ---

// fork returns an environment with e's binaries and a state directory of
// its own, for a test that runs its own sandboxd.
func (e *e2eEnv) fork(t *testing.T) *e2eEnv {
	f := *e
	f.stateDir = filepath.Join(t.TempDir(), "state")
	t.Cleanup(func() { f.removeContainers(t) })
	return &f
}

// kill9 kills sandboxd with SIGKILL (no graceful anything) and waits for it
// to be gone.
func (d *daemon) kill9(t *testing.T) {
	t.Helper()
	d.signalExit(t, syscall.SIGKILL, "SIGKILL")
}

// signalExit sends sandboxd sig (called name in messages) and waits, up to
// 30s, for it to exit.
func (d *daemon) signalExit(t *testing.T, sig syscall.Signal, name string) {
	t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("sandboxd did not exit within 30s of %s", name)
	}
}

// ctl runs the sandboxctl binary against addr.
func (e *e2eEnv) ctl(t *testing.T, ctx context.Context, addr string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, e.sandboxctl, append([]string{"--addr", addr}, args...)...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("sandboxctl %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

func acquire(t *testing.T, ctx context.Context, c sandboxv1.SandboxServiceClient, user string) *sandboxv1.AcquireSandboxResponse {
	t.Helper()
	resp, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: user})
	if err != nil {
		t.Fatalf("AcquireSandbox(%s): %v", user, err)
	}
	return resp
}

func deleteQuietly(c sandboxv1.SandboxServiceClient, sbID string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sbID})
}

func mustOK(t *testing.T, o outcome, what string) {
	t.Helper()
	if o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
		t.Fatalf("%s: done %v, errors %v, stderr %q", what, o.done, o.errs, o.stderr)
	}
}

// tryExecute is execute for goroutines other than the test's: it reports
// failures instead of calling t.Fatal.
func tryExecute(ctx context.Context, c sandboxv1.SandboxServiceClient, req *sandboxv1.ExecuteRequest) (outcome, error) {
	s, err := c.Execute(ctx, req)
	if err != nil {
		return outcome{}, err
	}
	evs, err := recvEvents(s)
	if err != nil {
		return outcome{}, err
	}
	o := outcomeOf(evs)
	if o.done == nil {
		return o, fmt.Errorf("stream ended without done after %d events", o.events)
	}
	return o, nil
}

// recvEvents reads a command stream to its end; the error is nil when it
// ended normally.
func recvEvents(s grpc.ServerStreamingClient[sandboxv1.ExecuteEvent]) ([]*sandboxv1.ExecuteEvent, error) {
	var evs []*sandboxv1.ExecuteEvent
	for {
		ev, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

// runEvents runs a command and returns its raw events.
func runEvents(t *testing.T, ctx context.Context, c sandboxv1.SandboxServiceClient, req *sandboxv1.ExecuteRequest) []*sandboxv1.ExecuteEvent {
	t.Helper()
	s, err := c.Execute(ctx, req)
	if err != nil {
		t.Fatalf("Execute %q: %v", req.GetCode(), err)
	}
	evs, err := recvEvents(s)
	if err != nil {
		t.Fatalf("Execute %q: stream failed after %d events: %v", req.GetCode(), len(evs), err)
	}
	return evs
}

// streamEvents follows a command with StreamCommand and returns its events.
func streamEvents(t *testing.T, ctx context.Context, c sandboxv1.SandboxServiceClient, sbID, cmdID string, afterSeq int64) []*sandboxv1.ExecuteEvent {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	s, err := c.StreamCommand(sctx, &sandboxv1.StreamCommandRequest{SandboxId: sbID, CommandId: cmdID, AfterSeq: afterSeq})
	if err != nil {
		t.Fatalf("StreamCommand(%s, after_seq=%d): %v", cmdID, afterSeq, err)
	}
	evs, err := recvEvents(s)
	if err != nil {
		t.Fatalf("StreamCommand(%s, after_seq=%d) failed after %d events: %v", cmdID, afterSeq, len(evs), err)
	}
	return evs
}

// checkSeqs fails unless evs are numbered first, first+1, ... without gaps
// and, when complete, end with their only done event.
func checkSeqs(t *testing.T, what string, evs []*sandboxv1.ExecuteEvent, first int64, complete bool) {
	t.Helper()
	if len(evs) == 0 {
		t.Fatalf("%s: no events", what)
	}
	for i, ev := range evs {
		if ev.GetSeq() != first+int64(i) {
			t.Fatalf("%s: event %d has seq %d, want %d (duplicate or gap); seqs %v", what, i, ev.GetSeq(), first+int64(i), seqsOf(evs))
		}
		if ev.GetDone() != nil && i != len(evs)-1 {
			t.Fatalf("%s: done at seq %d is not the last event; seqs %v", what, ev.GetSeq(), seqsOf(evs))
		}
	}
	if complete && evs[len(evs)-1].GetDone() == nil {
		t.Fatalf("%s: the stream ended without done; last event %v", what, evs[len(evs)-1])
	}
}

func seqsOf(evs []*sandboxv1.ExecuteEvent) []int64 {
	var s []int64
	for _, ev := range evs {
		s = append(s, ev.GetSeq())
	}
	return s
}

func stdoutOf(evs []*sandboxv1.ExecuteEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		b.WriteString(ev.GetStdout().GetText())
	}
	return b.String()
}

func upload(ctx context.Context, c sandboxv1.SandboxServiceClient, sbID, path string, data []byte) (*sandboxv1.FileInfo, error) {
	up, err := c.UploadFile(ctx)
	if err != nil {
		return nil, err
	}
	msgs := []*sandboxv1.UploadFileRequest{
		{Payload: &sandboxv1.UploadFileRequest_Header{Header: &sandboxv1.UploadFileHeader{SandboxId: sbID, Path: path}}},
		{Payload: &sandboxv1.UploadFileRequest_Chunk{Chunk: data}},
	}
	for _, m := range msgs {
		if err := up.Send(m); err != nil {
			break // the server ended the call; CloseAndRecv says why
		}
	}
	resp, err := up.CloseAndRecv()
	return resp.GetFile(), err
}

func tryDownload(ctx context.Context, c sandboxv1.SandboxServiceClient, sbID, path string) ([]byte, error) {
	dl, err := c.DownloadFile(ctx, &sandboxv1.DownloadFileRequest{SandboxId: sbID, Path: path})
	if err != nil {
		return nil, err
	}
	var got []byte
	for {
		m, err := dl.Recv()
		if errors.Is(err, io.EOF) {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		got = append(got, m.GetChunk()...)
	}
}

func download(t *testing.T, ctx context.Context, c sandboxv1.SandboxServiceClient, sbID, path string) []byte {
	t.Helper()
	b, err := tryDownload(ctx, c, sbID, path)
	if err != nil {
		t.Fatalf("DownloadFile %s: %v", path, err)
	}
	return b
}

// listPaths lists a workspace directory; directories get a trailing slash.
func listPaths(t *testing.T, ctx context.Context, c sandboxv1.SandboxServiceClient, sbID, dir string) []string {
	t.Helper()
	lf, err := c.ListFiles(ctx, &sandboxv1.ListFilesRequest{SandboxId: sbID, Path: dir})
	if err != nil {
		t.Fatalf("ListFiles %q: %v", dir, err)
	}
	var paths []string
	for _, f := range lf.GetFiles() {
		p := f.GetPath()
		if f.GetIsDir() {
			p += "/"
		}
		paths = append(paths, p)
	}
	return paths
}

// refused: the server said no for a reason of the request, not by failing.
func refused(err error) bool {
	c := status.Code(err)
	return c == codes.InvalidArgument || c == codes.PermissionDenied
}

type containerInfo struct{ id, user string }

// container is the running container of a sandbox, on either backend.
func (d *daemon) container(t *testing.T, ctx context.Context, sbID string) containerInfo {
	t.Helper()
	if d.kube != nil {
		return d.kube.sandboxContainer(t, ctx, sbID)
	}
	return runningContainer(t, ctx, sbID)
}

// checkContainerGone checks that a deleted sandbox's container is gone:
// at once under Docker, where DeleteSandbox returns once it is removed;
// within a bound on Kubernetes, where the kubelet removes it after the
// Pod's deletion.
// kubeTeardownWithin is how soon a deleted sandbox's containers are gone
// from a node.
const kubeTeardownWithin = 2 * time.Minute

func (d *daemon) checkContainerGone(t *testing.T, ctx context.Context, ctrID string) {
	t.Helper()
	if d.kube != nil {
		// The kubelet tears the Pod down on its own schedule: under the
		// load of make test's shards a real node took past 30 s.
		if !pollUntil(kubeTeardownWithin, func() bool { return d.kube.nodes.containerGone(ctx, ctrID) }) {
			t.Errorf("container %s of the deleted sandbox still exists %v after", ctrID, kubeTeardownWithin)
		}
		return
	}
	if ids := dockerLines(t, ctx, "ps", "-aq", "--filter", "id="+ctrID); len(ids) != 0 {
		t.Errorf("container %s of the deleted sandbox still exists: %v", ctrID, ids)
	}
}

// runningContainer is the one running container of a sandbox, found by
// Docker label.
func runningContainer(t *testing.T, ctx context.Context, sbID string) containerInfo {
	t.Helper()
	lines := dockerLines(t, ctx, "ps", "--filter", "label="+labels.SandboxID+"="+sbID,
		"--format", `{{.ID}} {{.Label "`+labels.UserID+`"}}`)
	if len(lines) != 1 {
		t.Fatalf("docker ps finds %d running containers labelled %s=%s, want 1: %v", len(lines), labels.SandboxID, sbID, lines)
	}
	id, user, _ := strings.Cut(lines[0], " ")
	return containerInfo{id: id, user: user}
}

// containersByID maps sandbox IDs to the running containers of env's state
// directory.
func containersByID(t *testing.T, ctx context.Context, env *e2eEnv) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, l := range dockerLines(t, ctx, "ps", "--filter", "label="+labels.StateDir+"="+env.stateDir,
		"--format", `{{.Label "`+labels.SandboxID+`"}} {{.ID}}`) {
		sb, ctr, _ := strings.Cut(l, " ")
		if _, dup := m[sb]; dup {
			t.Errorf("sandbox %s has several running containers", sb)
		}
		m[sb] = ctr
	}
	return m
}

func dockerLines(t *testing.T, ctx context.Context, args ...string) []string {
	t.Helper()
	out, err := exec.CommandContext(ctx, "docker", args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("docker %v: %v: %s", args, err, stderr)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// awaitDestroy waits for Docker's destroy event of a container (replaying
// events since since, so a removal before the call is seen too) and returns
// its time. ctx bounds the wait.
func awaitDestroy(ctx context.Context, containerID string, since time.Time) (time.Time, error) {
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ectx, "docker", "events", "--since", strconv.FormatInt(since.Unix(), 10),
		"--filter", "container="+containerID, "--filter", "event=destroy", "--format", "{{.TimeNano}}")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return time.Time{}, err
	}
	if err := cmd.Start(); err != nil {
		return time.Time{}, err
	}
	defer cmd.Wait()
	defer cancel()
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		if ctx.Err() != nil {
			return time.Time{}, ctx.Err()
		}
		return time.Time{}, fmt.Errorf("docker events ended without a destroy event: %v", sc.Err())
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(sc.Text()), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("docker events printed %q: %v", sc.Text(), err)
	}
	return time.Unix(0, ns), nil
}

// pollUntil checks cond every 50ms until it holds or timeout passes; for
// states nothing announces.
func pollUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}
