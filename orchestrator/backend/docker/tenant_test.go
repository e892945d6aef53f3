package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/orchestrator/labels"
)

// as returns a context of the test acting as caller c.
func as(t *testing.T, tenant string, admin bool) context.Context {
	return core.WithCaller(t.Context(), core.Caller{Tenant: tenant, Admin: admin})
}

func TestValidateTenant(t *testing.T) {
	for _, name := range []string{"a", "acme", "Acme-1.prod_eu", strings.Repeat("x", 64)} {
		if err := core.ValidateTenant(name); err != nil {
			t.Errorf("ValidateTenant(%q) = %v", name, err)
		}
	}
	for _, name := range []string{"", strings.Repeat("x", 65), "-a", ".a", "a b", "a/b", "a@b", "ü"} {
		if err := core.ValidateTenant(name); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("ValidateTenant(%q) = %v; want ErrInvalidArgument", name, err)
		}
	}
}

// TestTenantIsolation: a tenant sees, runs code in, reads files of and
// deletes only its own sandboxes; another tenant's IDs are not found, with
// the same message as IDs that never existed; an admin sees all.
func TestTenantIsolation(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	acme, beta, admin := as(t, "acme", false), as(t, "beta", false), as(t, "ops", true)

	a, err := m.Acquire(acme, "alice", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Acquire(beta, "alice", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Created || !b.Created || a.Sandbox.ID == b.Sandbox.ID {
		t.Fatalf("alice of acme and alice of beta share a sandbox: %+v, %+v", a, b)
	}
	if a.Sandbox.Tenant != "acme" || b.Sandbox.Tenant != "beta" {
		t.Errorf("tenants = %q, %q", a.Sandbox.Tenant, b.Sandbox.Tenant)
	}
	if again, err := m.Acquire(acme, "alice", core.Options{}); err != nil || again.Sandbox.ID != a.Sandbox.ID || again.Created {
		t.Errorf("acme's alice again = %+v, %v; want her sandbox", again, err)
	}
	if c := fd.container(a.Sandbox.ContainerID); c.cfg.Labels[labels.Tenant] != "acme" || c.cfg.Labels[labels.UserID] != "alice" {
		t.Errorf("container labels = %v", c.cfg.Labels)
	}

	unknown := core.NewSandboxID()
	_, wantErr := m.Get(acme, unknown)
	wantMsg := strings.ReplaceAll(wantErr.Error(), unknown, b.Sandbox.ID)
	notFound := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, core.ErrNotFound) || err.Error() != wantMsg {
			t.Errorf("%s on another tenant's sandbox: %v; want ErrNotFound %q", what, err, wantMsg)
		}
	}
	id := b.Sandbox.ID
	_, err = m.Get(acme, id)
	notFound("Get", err)
	_, err = m.Submit(acme, core.ExecRequest{SandboxID: id, CommandID: "c1", Code: "1"})
	notFound("Submit", err)
	notFound("Interrupt", m.Interrupt(acme, id, "c1"))
	notFound("Follow", m.Follow(acme, id, "c1", 0, func(core.Event) error { return nil }))
	_, err = m.Upload(acme, id, "x.txt", bytes.NewReader([]byte("x")))
	notFound("Upload", err)
	_, _, err = m.Download(acme, id, "x.txt")
	notFound("Download", err)
	_, err = m.ListFiles(acme, id, "")
	notFound("ListFiles", err)
	notFound("Delete", m.Delete(acme, id))
	if len(records(t, m, id)) != 0 {
		t.Errorf("another tenant's command reached the sandbox's log")
	}

	ids := func(ctx context.Context, f core.ListFilter) []string {
		t.Helper()
		list, err := m.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range list {
			out = append(out, s.Tenant+"/"+s.UserID)
		}
		slices.Sort(out)
		return out
	}
	if got := ids(acme, core.ListFilter{}); !slices.Equal(got, []string{"acme/alice"}) {
		t.Errorf("acme lists %v", got)
	}
	if got := ids(acme, core.ListFilter{Tenant: "beta"}); len(got) != 0 {
		t.Errorf("acme listing beta's sandboxes gets %v", got)
	}
	if got := ids(admin, core.ListFilter{}); !slices.Equal(got, []string{"acme/alice", "beta/alice"}) {
		t.Errorf("admin lists %v", got)
	}
	if got := ids(admin, core.ListFilter{Tenant: "beta", UserID: "alice"}); !slices.Equal(got, []string{"beta/alice"}) {
		t.Errorf("admin listing beta's alice gets %v", got)
	}

	// The admin sees and deletes any tenant's sandbox; the owner still can.
	if got, err := m.Get(admin, id); err != nil || got.Tenant != "beta" {
		t.Errorf("admin Get = %+v, %v", got, err)
	}
	if _, err := m.Upload(beta, id, "x.txt", strings.NewReader("x")); err != nil {
		t.Errorf("owner Upload: %v", err)
	}
	if err := m.Delete(admin, id); err != nil {
		t.Errorf("admin Delete: %v", err)
	}
	if _, err := m.Get(beta, id); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("deleted sandbox: %v", err)
	}
}

// TestTenantRestored: the tenant survives a restart, from meta.json.
func TestTenantRestored(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	m1, err := newValidated(t.Context(), cfg, fd)
	if err != nil {
		t.Fatal(err)
	}
	a, err := m1.Acquire(as(t, "acme", false), "alice", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m1.Close()
	m2 := newTestManager(t, cfg, fd)
	if _, err := m2.Get(as(t, "beta", false), a.Sandbox.ID); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("after restart another tenant gets %v", err)
	}
	again, err := m2.Acquire(as(t, "acme", false), "alice", core.Options{})
	if err != nil || again.Created || again.Sandbox.ID != a.Sandbox.ID || again.Sandbox.Tenant != "acme" {
		t.Errorf("after restart acme's alice gets %+v, %v", again, err)
	}
	if b, err := m2.Acquire(as(t, "beta", false), "alice", core.Options{}); err != nil || !b.Created {
		t.Errorf("after restart beta's alice gets %+v, %v; want a new sandbox", b, err)
	}
}

// TestMetaWithoutTenant: metadata from before tenants existed belongs to
// the default tenant.
func TestMetaWithoutTenant(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	m1, err := newValidated(t.Context(), cfg, fd)
	if err != nil {
		t.Fatal(err)
	}
	old := acquire(t, m1, "legacy").Sandbox
	m1.Close()
	dir := sandboxDir(m1.cfg.StateDir, old.ID)
	md, err := readMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	md.Tenant = ""
	if err := writeMeta(dir, md); err != nil {
		t.Fatal(err)
	}
	m2 := newTestManager(t, cfg, fd)
	got, err := m2.Get(as(t, core.DefaultTenant, false), old.ID)
	if err != nil || got.Tenant != core.DefaultTenant {
		t.Errorf("legacy sandbox = %+v, %v; want tenant %q", got, err, core.DefaultTenant)
	}
}

func TestSandboxCaps(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.MaxSandboxes = 3
	cfg.MaxSandboxesPerTenant = 2
	m := newTestManager(t, cfg, fd)
	acme, beta := as(t, "acme", false), as(t, "beta", false)
	for _, u := range []string{"a1", "a2"} {
		if _, err := m.Acquire(acme, u, core.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := m.Acquire(acme, "a3", core.Options{})
	wantClass(t, err, core.ErrResourceExhausted, "tenant acme runs its maximum of 2 sandboxes (sandboxd --max-sandboxes-per-tenant)")
	// An existing user is not a new sandbox: no cap applies.
	if _, err := m.Acquire(acme, "a1", core.Options{}); err != nil {
		t.Errorf("existing user at the tenant cap: %v", err)
	}
	if _, err := m.Acquire(beta, "b1", core.Options{}); err != nil {
		t.Fatal(err)
	}
	_, err = m.Acquire(beta, "b2", core.Options{})
	wantClass(t, err, core.ErrResourceExhausted, "the server runs its maximum of 3 sandboxes (sandboxd --max-sandboxes)")
	// Dead sandboxes do not count.
	list, _ := m.List(acme, core.ListFilter{UserID: "a1"})
	fd.exit(list[0].ContainerID, 1, false)
	awaitDead(t, m, list[0].ID)
	if _, err := m.Acquire(beta, "b2", core.Options{}); err != nil {
		t.Errorf("after a death, a new sandbox: %v", err)
	}
}

// TestSandboxCapsConcurrent: acquires for a tenant's users running at
// once do not pass its cap together (they did: each counted only the
// registered sandboxes, so acme got the server's every sandbox, and beta
// none).
func TestSandboxCapsConcurrent(t *testing.T) {
	fd := newFakeDocker(testImage)
	fd.startDelay = 200 * time.Millisecond // creations overlap
	cfg := testConfig(t)
	cfg.MaxSandboxes, cfg.MaxSandboxesPerTenant = 4, 2
	m := newTestManager(t, cfg, fd)
	acme, beta := as(t, "acme", false), as(t, "beta", false)
	errs := make(chan error, 6)
	for i := range 6 {
		go func() {
			_, err := m.Acquire(acme, fmt.Sprint("a", i), core.Options{})
			errs <- err
		}()
	}
	got := 0
	for range 6 {
		if err := <-errs; err == nil {
			got++
		} else {
			wantClass(t, err, core.ErrResourceExhausted, "tenant acme runs its maximum of 2 sandboxes (sandboxd --max-sandboxes-per-tenant)")
		}
	}
	if got != 2 {
		t.Errorf("tenant acme, capped at 2, got %d sandboxes from 6 acquires at once", got)
	}
	for _, u := range []string{"b1", "b2"} {
		if _, err := m.Acquire(beta, u, core.Options{}); err != nil {
			t.Errorf("tenant beta's %s after acme's acquires: %v", u, err)
		}
	}
}

func TestNetworkOption(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	m := newTestManager(t, cfg, fd)
	_, err := m.Acquire(t.Context(), "n", core.Options{Network: true})
	wantClass(t, err, core.ErrInvalidArgument, "network access is not allowed on this server")
	if fd.createCount() != 0 {
		t.Errorf("a refused request created a container")
	}
	res := acquire(t, m, "none")
	if c := fd.container(res.Sandbox.ContainerID); c.host.NetworkMode != "none" || res.Sandbox.Network {
		t.Errorf("default network = %q (sandbox says %v); want none", c.host.NetworkMode, res.Sandbox.Network)
	}

	cfg = testConfig(t)
	cfg.AllowNetwork = true
	m = newTestManager(t, cfg, fd)
	res, err = m.Acquire(t.Context(), "n", core.Options{Network: true})
	if err != nil {
		t.Fatal(err)
	}
	c := fd.container(res.Sandbox.ContainerID)
	holder := fd.containerNamed(holderNamePrefix + res.Sandbox.ID)
	if holder == nil || c.host.NetworkMode != container.NetworkMode("container:"+holder.id) || !res.Sandbox.Network {
		t.Fatalf("network = %q (sandbox says %v), holder %v; want the holder's", c.host.NetworkMode, res.Sandbox.Network, holder)
	}
	if holder.host.NetworkMode != "none" || holder.cfg.Labels[labels.NetHolder] != "true" || !holder.host.ReadonlyRootfs ||
		holder.cfg.User != containerUser || holder.host.Runtime != "runc" {
		t.Errorf("holder spec: network %q, labels %v, read-only %v, user %q, runtime %q", holder.host.NetworkMode, holder.cfg.Labels,
			holder.host.ReadonlyRootfs, holder.cfg.User, holder.host.Runtime)
	}
	if !slices.Contains(c.cfg.Env, "SSL_CERT_FILE=/etc/sandboxd/ca-bundle.pem") || !slices.ContainsFunc(c.host.Binds, func(b string) bool {
		return strings.HasSuffix(b, ":/etc/sandboxd:ro")
	}) {
		t.Errorf("CA env %v, binds %v", c.cfg.Env, c.host.Binds)
	}

	// Under runsc, networked sandboxes run under runsc-net.
	cfg = testConfig(t)
	cfg.AllowNetwork, cfg.Runtime = true, "runsc"
	m = newTestManager(t, cfg, fd)
	res, err = m.Acquire(t.Context(), "n", core.Options{Network: true, Limits: core.Limits{PidsLimit: 256}})
	if err != nil {
		t.Fatal(err)
	}
	if c := fd.container(res.Sandbox.ContainerID); c.host.Runtime != RuntimeGVisorNet {
		t.Errorf("runtime %q; want %s", c.host.Runtime, RuntimeGVisorNet)
	}
}

func TestCodeSizeLimit(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.MaxCodeBytes = 10
	m := newTestManager(t, cfg, fd)
	sb := acquire(t, m, "u").Sandbox
	_, err := m.Submit(t.Context(), core.ExecRequest{SandboxID: sb.ID, Code: "x = 1 + 2 + 3"})
	wantClass(t, err, core.ErrInvalidArgument, "code is 13 bytes long; the limit is 10")
	if _, err := m.Submit(t.Context(), core.ExecRequest{SandboxID: sb.ID, Code: "x = 1"}); err != nil {
		t.Errorf("code under the limit: %v", err)
	}

	cfg = testConfig(t)
	cfg.MaxCodeBytes = core.MaxCodeBytes + 1
	_, err = New(t.Context(), cfg, fd)
	wantClass(t, err, core.ErrInvalidArgument, "the most the /io protocol carries")
}

// TestUploadLimitIsInvalidArgument: an upload above the cap is the
// request's fault, and the message names the cap.
func TestUploadLimitIsInvalidArgument(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.MaxUploadBytes = 4
	m := newTestManager(t, cfg, fd)
	sb := acquire(t, m, "u").Sandbox
	_, err := m.Upload(t.Context(), sb.ID, "f", io.LimitReader(zeros{}, 5))
	wantClass(t, err, core.ErrInvalidArgument, "larger than the server's upload limit of 4 bytes (sandboxd --max-upload)")
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestGVisorPidsMinimum: under runsc the pids limit also counts gVisor's
// own threads; below the minimum the sandbox would crash, so it is refused.
func TestGVisorPidsMinimum(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.Runtime = core.RuntimeGVisor
	m := newTestManager(t, cfg, fd)
	_, err := m.Acquire(t.Context(), "u", core.Options{Limits: core.Limits{PidsLimit: 64}})
	wantClass(t, err, core.ErrInvalidArgument, "under the runsc runtime the minimum is 128")
	if _, err := m.Acquire(t.Context(), "u", core.Options{Limits: core.Limits{PidsLimit: 128}}); err != nil {
		t.Errorf("128 under runsc: %v", err)
	}

	cfg = testConfig(t)
	cfg.Runtime, cfg.DefaultLimits.PidsLimit = core.RuntimeGVisor, 100
	_, err = New(t.Context(), cfg, fd)
	wantClass(t, err, core.ErrInvalidArgument, "under the runsc runtime the minimum is 128")
}
