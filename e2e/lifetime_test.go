package e2e

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/orchestrator/labels"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// TestE2ELifetime: metadata set at acquire comes back from acquire, get and
// list, filters the list, reaches a sandbox claimed from the warm pool and
// survives a sandboxd restart; SetSandboxTimeout shortens a sandbox's life
// (it goes long before the server's idle TTL) and extends it (it outlives
// a sandbox on the server's default), within the server's maximum, for its
// own tenant only. Through gRPC and the Go client, under each runtime.
func TestE2ELifetime(t *testing.T) {
	env := needE2E(t)
	for _, rt := range suiteRuntimes(t) {
		t.Run(rt, func(t *testing.T) { lifetimeSuite(t, env.withRuntime(t, rt)) })
	}
}

func lifetimeSuite(t *testing.T, env *e2eEnv) {
	// The server's default idle TTL is short enough to wait out, long
	// enough that the set-up calls never race it.
	const idleTTL = 10 * time.Second
	ctx := e2eCtx(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(e2eAcme+" acme user\n"+e2eBeta+" beta user\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--auth-tokens", tokens, "--idle-ttl", idleTTL.String(), "--on-idle", "delete", "--max-idle-ttl", "1h", "--warm-pool", "1"}
	d := env.start(t, flags...)
	c, _ := d.client(t)
	acme, beta := bearer(ctx, e2eAcme), bearer(ctx, e2eBeta)

	// The warm pool's sandbox is ready before anyone acquires, so the first
	// plain acquire below is served from it.
	if !pollUntil(90*time.Second, func() bool { return strings.Contains(d.logs.String(), "warm pool: sandbox ready") }) {
		t.Fatal("the warm pool's sandbox was not ready within 90s")
	}

	// Metadata through the pool: the claimed sandbox's container was made
	// for the pool (its labels say so and cannot change), yet it carries
	// the caller's metadata.
	poolMD := map[string]string{"project": "alpha", "origin": "pool"}
	pooled, err := c.AcquireSandbox(acme, &sandboxv1.AcquireSandboxRequest{UserId: "pooled", Options: &sandboxv1.SandboxOptions{
		Metadata: poolMD, IdleTimeout: durationpb.New(10 * time.Minute)}})
	if err != nil {
		t.Fatalf("AcquireSandbox(pooled): %v", err)
	}
	pooledID := pooled.GetSandbox().GetSandboxId()
	if lbl := dockerLines(t, ctx, "ps", "--filter", "label="+labels.SandboxID+"="+pooledID, "--format", `{{.Label "`+labels.Pool+`"}}`); len(lbl) != 1 || lbl[0] != "true" {
		t.Fatalf("sandbox %s was not taken from the warm pool (its container's %s label: %v)", pooledID, labels.Pool, lbl)
	}
	if got := pooled.GetSandbox().GetMetadata(); !maps.Equal(got, poolMD) {
		t.Errorf("pool-claimed sandbox metadata = %v; want %v", got, poolMD)
	}
	if got := pooled.GetSandbox().GetIdleTimeout().AsDuration(); got != 10*time.Minute {
		t.Errorf("pool-claimed sandbox idle_timeout = %v; want 10m", got)
	}

	// Metadata through the Go client, on a sandbox created cold.
	cl, err := client.Dial(d.addr, client.WithToken(e2eAcme))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	aliceMD := map[string]string{"project": "alpha", "session": "s-42"}
	alice, err := cl.Acquire(ctx, "alice", client.WithMetadata(aliceMD))
	if err != nil {
		t.Fatalf("client Acquire(alice): %v", err)
	}
	// Extended at once, before the server's 10s default could take it.
	ext, err := cl.SetTimeout(ctx, alice.ID, 30*time.Minute)
	if err != nil {
		t.Fatalf("client SetTimeout(alice, 30m): %v", err)
	}
	if ext.GetIdleTimeout().AsDuration() != 30*time.Minute || ext.GetExpiresAt().AsTime().Before(time.Now().Add(29*time.Minute)) {
		t.Errorf("after SetTimeout(30m): idle_timeout %v, expires_at %v", ext.GetIdleTimeout().AsDuration(), ext.GetExpiresAt().AsTime())
	}
	if got, err := cl.Get(ctx, alice.ID); err != nil || !maps.Equal(got.GetMetadata(), aliceMD) {
		t.Errorf("client Get(alice) metadata = %v, %v; want %v", got.GetMetadata(), err, aliceMD)
	}
	// Acquiring again keeps the metadata and the timeout (no silent reset).
	again, err := cl.Acquire(ctx, "alice", client.WithMetadata(map[string]string{"project": "other"}))
	if err != nil || again.Created || !maps.Equal(again.Sandbox.GetMetadata(), aliceMD) || again.Sandbox.GetIdleTimeout().AsDuration() != 30*time.Minute {
		t.Errorf("re-acquire = %v, %v; want alice's sandbox with its metadata and 30m", again.Sandbox, err)
	}

	bob := acquire(t, acme, c, "bob").GetSandbox()   // shortened below
	dave := acquire(t, acme, c, "dave").GetSandbox() // keeps the server's default
	if len(bob.GetMetadata()) != 0 || bob.GetIdleTimeout().AsDuration() != idleTTL {
		t.Errorf("bob's sandbox: metadata %v, idle_timeout %v; want none and the server's %v", bob.GetMetadata(), bob.GetIdleTimeout().AsDuration(), idleTTL)
	}

	// The list filter, through gRPC and the client.
	listIDs := func(md map[string]string) []string {
		t.Helper()
		sbs, err := cl.List(ctx, client.ListFilter{Metadata: md})
		if err != nil {
			t.Fatalf("List(%v): %v", md, err)
		}
		var ids []string
		for _, sb := range sbs {
			ids = append(ids, sb.GetSandboxId())
		}
		slices.Sort(ids)
		return ids
	}
	want := []string{pooledID, alice.ID}
	slices.Sort(want)
	if got := listIDs(map[string]string{"project": "alpha"}); !slices.Equal(got, want) {
		t.Errorf("List project=alpha = %v; want %v", got, want)
	}
	if got := listIDs(map[string]string{"project": "alpha", "session": "s-42"}); !slices.Equal(got, []string{alice.ID}) {
		t.Errorf("List project=alpha,session=s-42 = %v; want [%s]", got, alice.ID)
	}
	if got := listIDs(map[string]string{"project": "beta"}); len(got) != 0 {
		t.Errorf("List project=beta = %v; want none", got)
	}
	_, err = c.ListSandboxes(acme, &sandboxv1.ListSandboxesRequest{Metadata: map[string]string{"no spaces": "x"}})
	wantCode(t, "ListSandboxes with a malformed key", err, codes.InvalidArgument, `"no spaces"`, false)
	_, err = c.AcquireSandbox(acme, &sandboxv1.AcquireSandboxRequest{UserId: "erin", Options: &sandboxv1.SandboxOptions{
		Metadata: map[string]string{"big": strings.Repeat("x", 513)}}})
	wantCode(t, "AcquireSandbox with a 513-byte value", err, codes.InvalidArgument, "key big", false)

	// Bounds and tenancy.
	_, err = c.SetSandboxTimeout(acme, &sandboxv1.SetSandboxTimeoutRequest{SandboxId: bob.GetSandboxId(), Timeout: durationpb.New(2 * time.Hour)})
	wantCode(t, "SetSandboxTimeout above the maximum", err, codes.InvalidArgument, "maximum of 1h0m0s", false)
	_, err = cl.SetTimeout(ctx, bob.GetSandboxId(), 500*time.Millisecond)
	if !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("client SetTimeout below the minimum: %v; want ErrInvalidArgument", err)
	}
	_, err = c.SetSandboxTimeout(beta, &sandboxv1.SetSandboxTimeoutRequest{SandboxId: alice.ID, Timeout: durationpb.New(time.Second)})
	wantCode(t, "beta's SetSandboxTimeout of acme's sandbox", err, codes.NotFound, "not found", false)
	if got, err := cl.Get(ctx, alice.ID); err != nil || got.GetIdleTimeout().AsDuration() != 30*time.Minute {
		t.Errorf("after beta's attempt, alice's idle_timeout = %v, %v; want 30m", got.GetIdleTimeout().AsDuration(), err)
	}
	if list, err := c.ListSandboxes(beta, &sandboxv1.ListSandboxesRequest{Metadata: map[string]string{"project": "alpha"}}); err != nil || len(list.GetSandboxes()) != 0 {
		t.Errorf("beta lists acme's sandboxes by metadata: %v, %v", list.GetSandboxes(), err)
	}

	// Shortening: bob goes within about a second, long before the 10s default.
	bobCtr, daveCtr := runningContainer(t, ctx, bob.GetSandboxId()), runningContainer(t, ctx, dave.GetSandboxId())
	since := time.Now().Add(-2 * time.Second)
	short, err := c.SetSandboxTimeout(acme, &sandboxv1.SetSandboxTimeoutRequest{SandboxId: bob.GetSandboxId(), Timeout: durationpb.New(time.Second)})
	if err != nil {
		t.Fatalf("SetSandboxTimeout(bob, 1s): %v", err)
	}
	setAt := time.Now()
	if exp := short.GetSandbox().GetExpiresAt().AsTime(); exp.After(setAt.Add(time.Second)) || exp.Before(setAt.Add(-time.Second)) {
		t.Errorf("bob's expires_at %v is not about 1s from the call (%v)", exp, setAt)
	}
	bctx, cancel := context.WithDeadline(ctx, setAt.Add(idleTTL))
	removed, err := awaitDestroy(bctx, bobCtr.id, since)
	cancel()
	if err != nil {
		t.Fatalf("bob's sandbox, shortened to 1s, was not removed within the server's default of %v: %v", idleTTL, err)
	}
	t.Logf("bob's container removed %v after SetSandboxTimeout(1s)", removed.Sub(setAt).Round(time.Millisecond))
	_, err = c.GetSandbox(acme, &sandboxv1.GetSandboxRequest{SandboxId: bob.GetSandboxId()})
	wantCode(t, "GetSandbox of the expired bob", err, codes.NotFound, "not found", false)

	// Extending: dave, on the default, expires; alice, extended, and the
	// pool-claimed sandbox, with their own timeouts, stay. Get and List
	// meanwhile do not count as use.
	dctx, cancel := context.WithDeadline(ctx, dave.GetExpiresAt().AsTime().Add(15*time.Second))
	_, err = awaitDestroy(dctx, daveCtr.id, since)
	cancel()
	if err != nil {
		t.Fatalf("dave's sandbox, on the server's default %v, was not removed: %v", idleTTL, err)
	}
	for _, id := range []string{alice.ID, pooledID} {
		sb, err := cl.Get(ctx, id)
		if err != nil || sb.GetState() != sandboxv1.SandboxState_SANDBOX_STATE_RUNNING {
			t.Errorf("sandbox %s with a longer timeout, after the default one expired: %v, %v", id, sb, err)
		}
	}

	// A restart keeps metadata and timeouts, and the filter still works.
	before, err := cl.Get(ctx, alice.ID)
	if err != nil {
		t.Fatal(err)
	}
	d.stop(t)
	d = env.start(t, flags...)
	c, _ = d.client(t)
	acme = bearer(ctx, e2eAcme)
	got, err := c.GetSandbox(acme, &sandboxv1.GetSandboxRequest{SandboxId: alice.ID})
	if err != nil {
		t.Fatalf("GetSandbox(alice) after restart: %v", err)
	}
	if sb := got.GetSandbox(); !maps.Equal(sb.GetMetadata(), aliceMD) || sb.GetIdleTimeout().AsDuration() != 30*time.Minute ||
		!sb.GetExpiresAt().AsTime().Equal(before.GetExpiresAt().AsTime()) {
		t.Errorf("alice after restart: metadata %v, idle_timeout %v, expires_at %v; want %v, 30m, %v",
			sb.GetMetadata(), sb.GetIdleTimeout().AsDuration(), sb.GetExpiresAt().AsTime(), aliceMD, before.GetExpiresAt().AsTime())
	}
	list, err := c.ListSandboxes(acme, &sandboxv1.ListSandboxesRequest{Metadata: map[string]string{"origin": "pool"}})
	if err != nil || len(list.GetSandboxes()) != 1 || list.GetSandboxes()[0].GetSandboxId() != pooledID ||
		list.GetSandboxes()[0].GetIdleTimeout().AsDuration() != 10*time.Minute {
		t.Errorf("after restart, List origin=pool = %v, %v; want the pool-claimed %s with 10m", list.GetSandboxes(), err, pooledID)
	}

	// sandboxctl: the filter and the column, and set-timeout.
	out, stderr, code := env.ctl(t, ctx, d.addr, "--token", e2eAcme, "list", "--metadata", "session=s-42")
	if code != 0 || !strings.Contains(out, alice.ID) || strings.Contains(out, pooledID) || !strings.Contains(out, "project=alpha,session=s-42") {
		t.Errorf("sandboxctl list --metadata session=s-42: exit %d, stderr %q:\n%s", code, stderr, out)
	}
	out, stderr, code = env.ctl(t, ctx, d.addr, "--token", e2eAcme, "set-timeout", alice.ID, "40m")
	if code != 0 || !strings.Contains(out, "idle timeout 40m0s") {
		t.Errorf("sandboxctl set-timeout 40m: exit %d, stderr %q, stdout %q", code, stderr, out)
	}
	if _, stderr, code = env.ctl(t, ctx, d.addr, "--token", e2eAcme, "set-timeout", alice.ID, "2h"); code != 1 || !strings.Contains(stderr, "maximum of 1h0m0s") {
		t.Errorf("sandboxctl set-timeout above the maximum: exit %d, stderr %q", code, stderr)
	}
}
