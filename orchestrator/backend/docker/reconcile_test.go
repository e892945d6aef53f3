package docker

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// The reconcile plan without Docker: what start-up does with each kind of
// sandbox directory, container and interrupted hibernation or wake.

var reconcileNow = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// reconcileTestPolicy: idle TTL 30 minutes, hibernated sandboxes kept a
// week, no lifetime bound, on-idle delete, a warm pool of 2.
func reconcileTestPolicy() reconcilePolicy {
	reg := newRegistry(30*time.Minute, 0)
	reg.hibernatedTTL = 7 * 24 * time.Hour
	return reconcilePolicy{now: reconcileNow, reg: reg, onIdle: core.OnIdleDelete, warmPool: 2}
}

// testEntry is the survey's entry for md, whose container Docker lists in
// state (none when "").
func testEntry(t *testing.T, md meta, state container.ContainerState) stateEntry {
	t.Helper()
	md.Version = metaVersion
	if md.CreatedAt.IsZero() {
		md.CreatedAt = reconcileNow.Add(-time.Hour)
	}
	if md.LastActiveAt.IsZero() {
		md.LastActiveAt = reconcileNow.Add(-time.Minute)
	}
	if !md.Pool && md.UserID == "" {
		md.UserID, md.Tenant = "u", core.DefaultTenant
	}
	if md.ContainerID == "" && md.State != core.StateHibernated {
		md.ContainerID = "c-" + md.ID
	}
	dir := filepath.Join(t.TempDir(), md.ID)
	e := stateEntry{name: md.ID, dir: dir, isSandboxDir: true, sb: newSandbox(dir, md), containerID: md.ContainerID}
	if state != "" {
		e.listed = true
		e.c = container.Summary{ID: md.ContainerID, State: state}
	}
	return e
}

func TestClassifyEntry(t *testing.T) {
	const running, exited = container.StateRunning, container.StateExited
	ago := func(d time.Duration) time.Time { return reconcileNow.Add(-d) }
	hibernated := func(at time.Time, h hibMeta) meta {
		h.HibernatedAt = at
		h.Seq = 1
		return meta{State: core.StateHibernated, Hib: &h}
	}
	cases := []struct {
		name      string
		md        meta
		container container.ContainerState
		policy    func(*reconcilePolicy)
		want      dirAction
		recover   hibRecovery
	}{
		{name: "running, TTL left", container: running, want: actAdopt},
		{name: "container gone: adopted, then found dead", want: actAdopt},
		{name: "container stopped", container: exited, want: actAdopt},
		{name: "dead, TTL left", md: meta{State: core.StateDead, StateReason: "oom"}, want: actAdopt},
		{name: "dead, expired", md: meta{State: core.StateDead, LastActiveAt: ago(time.Hour)}, want: actRemoveExpired},
		{name: "idle TTL over, on-idle delete", md: meta{LastActiveAt: ago(31 * time.Minute)}, container: running, want: actRemoveExpired},
		{name: "own idle TTL left", md: meta{LastActiveAt: ago(31 * time.Minute), IdleTTL: time.Hour}, container: running, want: actAdopt},
		{name: "idle TTL over, on-idle hibernate", md: meta{LastActiveAt: ago(31 * time.Minute)}, container: running,
			policy: func(p *reconcilePolicy) { p.onIdle = core.OnIdleHibernate }, want: actHibernateSoon},
		{name: "idle TTL over, its own on-idle hibernate", md: meta{LastActiveAt: ago(31 * time.Minute), OnIdle: core.OnIdleHibernate}, container: running, want: actHibernateSoon},
		{name: "idle TTL over, on-idle hibernate, lifetime over", md: meta{LastActiveAt: ago(31 * time.Minute), OnIdle: core.OnIdleHibernate}, container: running,
			policy: func(p *reconcilePolicy) { p.maxLifetime = 50 * time.Minute; p.reg.maxLifetime = p.maxLifetime }, want: actRemoveExpired},
		{name: "dead, idle TTL over, on-idle hibernate", md: meta{State: core.StateDead, LastActiveAt: ago(31 * time.Minute), OnIdle: core.OnIdleHibernate}, want: actRemoveExpired},
		{name: "lifetime over", container: running, policy: func(p *reconcilePolicy) { p.reg.maxLifetime, p.maxLifetime = time.Minute, time.Minute }, want: actRemoveExpired},

		{name: "hibernated", md: hibernated(ago(24*time.Hour), hibMeta{}), want: actAdopt},
		{name: "hibernated past its TTL", md: hibernated(ago(8*24*time.Hour), hibMeta{}), want: actRemoveExpired},
		{name: "hibernated at level memory, its stopped container", md: func() meta {
			m := hibernated(ago(time.Hour), hibMeta{Snapshot: &snapMeta{Level: "memory", Checkpoint: "ck"}})
			m.ContainerID = "c-mem"
			return m
		}(), container: exited, want: actAdopt},
		{name: "crash in a wake before its container started", md: hibernated(ago(time.Hour), hibMeta{Phase: phaseWaking}), want: actAdopt, recover: recoverStayHibernated},
		{name: "crash in a hibernation, container alive", md: meta{Hib: &hibMeta{Phase: phaseHibernating, Seq: 1, Pending: &snapMeta{File: "snap-1-x"}}},
			container: running, want: actAdopt, recover: recoverStayRunning},
		{name: "crash in a hibernation, container removed", md: meta{Hib: &hibMeta{Phase: phaseHibernating, Seq: 1}},
			want: actAdopt, recover: recoverFinishHibernation},
		{name: "crash in a hibernation, container stopped", md: meta{Hib: &hibMeta{Phase: phaseHibernating, Seq: 1}},
			container: exited, want: actAdopt, recover: recoverFinishHibernation},
		// Finished, it is hibernated now: its idle TTL no longer counts.
		{name: "crash in a hibernation, container removed, idle TTL over", md: meta{LastActiveAt: ago(2 * time.Hour), Hib: &hibMeta{Phase: phaseHibernating, Seq: 1}},
			want: actAdopt, recover: recoverFinishHibernation},
		{name: "crash in a hibernation, container alive, idle TTL over", md: meta{LastActiveAt: ago(2 * time.Hour), Hib: &hibMeta{Phase: phaseHibernating, Seq: 1}},
			container: running, want: actRemoveExpired, recover: recoverStayRunning},
		{name: "crash in a wake, its container running", md: meta{Hib: &hibMeta{Phase: phaseWaking, Seq: 1, WakeRecord: "sbx-restore-1-x", WakeLevel: "globals"}},
			container: running, want: actAdopt, recover: recoverWakeRestore},
		{name: "crash in a wake, its container gone", md: meta{Hib: &hibMeta{Phase: phaseWaking, Seq: 1, WakeRecord: "sbx-restore-1-x", WakeLevel: "globals"}},
			want: actAdopt, recover: recoverClear},

		{name: "warm pool, alive", md: meta{Pool: true}, container: running, want: actReturnToPool},
		{name: "a template's warm pool, alive", md: meta{Pool: true, Template: "tpl-aaaaaaaaaaaaaaaaaaaa", TemplateVersion: 1}, container: running, want: actRemovePoolExcess},
		{name: "warm pool, container gone", md: meta{Pool: true}, want: actRemovePoolDead},
		{name: "warm pool, container stopped", md: meta{Pool: true}, container: exited, want: actRemovePoolDead},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.md.ID = fmt.Sprintf("sb-case%02d", i)
			p := reconcileTestPolicy()
			if c.policy != nil {
				c.policy(&p)
			}
			got := classifyEntry(testEntry(t, c.md, c.container), p)
			if got.action != c.want || got.recover != c.recover {
				t.Errorf("classifyEntry = %v, recover %v; want %v, recover %v", got.action, got.recover, c.want, c.recover)
			}
		})
	}
	t.Run("not a sandbox directory", func(t *testing.T) {
		if got := classifyEntry(stateEntry{name: "lost+found"}, reconcileTestPolicy()); got.action != actIgnore {
			t.Errorf("classifyEntry = %v; want %v", got.action, actIgnore)
		}
	})
	t.Run("no valid meta.json", func(t *testing.T) {
		if got := classifyEntry(stateEntry{name: "x", isSandboxDir: true, metaErr: errTest}, reconcileTestPolicy()); got.action != actRemoveDebris {
			t.Errorf("classifyEntry = %v; want %v", got.action, actRemoveDebris)
		}
	})
}

var errTest = errors.New("meta.json: missing or invalid fields")

// TestPlanReconcile: what needs the whole survey: the warm pool's size, the
// orphan containers and each user's current sandbox.
func TestPlanReconcile(t *testing.T) {
	const running = container.StateRunning
	id := func(s string) string { return "sb-" + s }
	at := func(h int) time.Time { return reconcileNow.Add(time.Duration(-h) * time.Hour) }
	entries := []stateEntry{
		testEntry(t, meta{ID: id("pool3"), Pool: true, CreatedAt: at(1)}, running),
		testEntry(t, meta{ID: id("pool1"), Pool: true, CreatedAt: at(3)}, running),
		testEntry(t, meta{ID: id("pool2"), Pool: true, CreatedAt: at(2)}, running),
		testEntry(t, meta{ID: id("old"), UserID: "alice", Tenant: "t", CreatedAt: at(5), State: core.StateDead}, ""),
		testEntry(t, meta{ID: id("new"), UserID: "alice", Tenant: "t", CreatedAt: at(4)}, running),
		testEntry(t, meta{ID: id("bob"), UserID: "alice", Tenant: "t2", CreatedAt: at(6)}, running),
		{name: id("debris"), isSandboxDir: true, metaErr: errTest},
		// A fast-woken sandbox and its carrier, whose meta.json is gone;
		// a waking one whose carrier's pool meta.json a crash left.
		testEntry(t, meta{ID: id("woken"), UserID: "carol", Tenant: "t", CreatedAt: at(7), ContainerID: "c-carrier1",
			Carrier: &carrierMeta{ID: id("carrier1"), ContainerID: "c-carrier1"}}, running),
		{name: id("carrier1"), isSandboxDir: true, metaErr: fs.ErrNotExist},
		testEntry(t, meta{ID: id("waking"), UserID: "dave", Tenant: "t", CreatedAt: at(8), State: core.StateHibernated,
			Hib: &hibMeta{Phase: phaseWaking, Seq: 1, HibernatedAt: at(1)}, Carrier: &carrierMeta{ID: id("carrier2"), ContainerID: "c-" + id("carrier2")}}, ""),
		testEntry(t, meta{ID: id("carrier2"), Pool: true, CreatedAt: at(9)}, running),
	}
	containers := map[string]container.Summary{"orphan-b": {ID: "orphan-b"}, "orphan-a": {ID: "orphan-a"}}
	for _, e := range entries {
		if e.listed {
			containers[e.containerID] = e.c
		}
	}
	plan := planReconcile(entries, containers, reconcileTestPolicy())

	want := map[string]struct {
		action  dirAction
		current bool
	}{
		id("pool1"): {actReturnToPool, false}, id("pool2"): {actReturnToPool, false}, id("pool3"): {actRemovePoolExcess, false},
		id("old"): {actAdopt, false}, id("new"): {actAdopt, true}, id("bob"): {actAdopt, true},
		id("debris"): {actRemoveDebris, false},
		id("woken"):  {actAdopt, true}, id("carrier1"): {actCarrier, false},
		id("waking"): {actAdopt, true}, id("carrier2"): {actCarrier, false},
	}
	for i, e := range plan.entries {
		d := plan.decisions[i]
		if w := want[e.name]; d.action != w.action || d.current != w.current {
			t.Errorf("%s: %v, current %v; want %v, current %v", e.name, d.action, d.current, w.action, w.current)
		}
	}
	var pool []string
	for _, i := range plan.pool {
		pool = append(pool, plan.entries[i].name)
	}
	if !slices.Equal(pool, []string{id("pool1"), id("pool2")}) {
		t.Errorf("back to the pool: %v; want the two oldest, oldest first", pool)
	}
	var orphans []string
	for _, c := range plan.orphans {
		orphans = append(orphans, c.ID)
	}
	if !slices.Equal(orphans, []string{"orphan-a", "orphan-b"}) {
		t.Errorf("orphans %v; want the containers no meta.json names", orphans)
	}
}
