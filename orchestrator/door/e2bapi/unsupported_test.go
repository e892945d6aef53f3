package e2bapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/backend/kube"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// kubeRefusals is the door's domain on the kubernetes backend for the
// features it lacks: the backend's own refusals (a kube.Manager never
// started: each refuses before it would use the API server, and
// core.Complete answers for the capabilities it lacks) over
// fakeManager's running sandboxes. An Acquire asking for what the backend
// lacks goes to the backend, which must refuse it (else it would reach
// for its missing API server and the request fail without an answer).
type kubeRefusals struct {
	*fakeManager
	core.Manager // a kube.Manager, as sandboxd completes it
}

func (k kubeRefusals) Get(ctx context.Context, id string) (core.Sandbox, error) {
	return k.fakeManager.Get(ctx, id)
}

func (k kubeRefusals) Delete(ctx context.Context, id string) error {
	return k.fakeManager.Delete(ctx, id)
}

func (k kubeRefusals) GetTemplate(ctx context.Context, ref string) (core.Template, error) {
	return k.Manager.GetTemplate(ctx, ref)
}

func (k kubeRefusals) Acquire(ctx context.Context, user string, opts core.Options) (core.AcquireResult, error) {
	if opts.OnIdle == core.OnIdleHibernate || opts.FromSnapshot != "" || opts.Template != "" || opts.Network ||
		opts.NetworkPolicy != nil || len(opts.Volumes) > 0 {
		return k.Manager.Acquire(ctx, user, opts)
	}
	return k.fakeManager.Acquire(ctx, user, opts)
}

// TestKubeRefusalsAreClear: on the kubernetes backend every E2B call for
// a feature it lacks answers 501 with E2B's JSON error naming the feature
// and the backend (core.Unsupported, of its own class), not the 409 of
// failed preconditions, which the SDKs' pause reads as "already paused": pause,
// autoPause (without a storage class), snapshots and forks (without a
// snapshot directory), volumes (without a class for their claims),
// network, templates.
func TestKubeRefusalsAreClear(t *testing.T) {
	s, fm := newTestServer(t)
	s.m = kubeRefusals{fakeManager: fm, Manager: core.Complete("kubernetes", &kube.Manager{})}
	hdr := map[string]string{"X-API-KEY": testKey}
	w := do(s, "POST", "/sandboxes", hdr, `{"templateID":"base"}`)
	if w.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	var created sandboxCreated
	if err := json.Unmarshal(w.Body.Bytes(), &created); err != nil {
		t.Fatal(err)
	}
	id := created.SandboxID
	const (
		hib   = "hibernation and wake"
		snaps = "snapshots and forks"
		net   = "networked sandboxes"
		vols  = "volumes without --kube-volume-class"
		tpls  = "templates (this backend"
	)
	for _, tc := range []struct {
		method, path, body string
		feature            string
	}{
		{"POST", "/sandboxes/" + id + "/pause", `{}`, hib},
		{"POST", "/sandboxes", `{"autoPause":true}`, hib},
		{"POST", "/sandboxes/" + id + "/snapshots", `{}`, snaps},
		{"GET", "/snapshots", "", snaps},
		{"POST", "/sandboxes/" + id + "/fork", `{"count":1}`, snaps},
		{"PUT", "/sandboxes/" + id + "/network", `{"allowOut":["a.com"]}`, net},
		{"POST", "/sandboxes", `{"allow_internet_access":true}`, net},
		{"POST", "/sandboxes", `{"network":{"denyOut":["0.0.0.0/0"]}}`, net},
		{"POST", "/volumes", `{"name":"data"}`, vols},
		{"GET", "/volumes", "", vols},
		{"POST", "/sandboxes", `{"volumeMounts":[{"name":"data","path":"/data"}]}`, vols},
		{"GET", "/templates", "", tpls},
		{"POST", "/v3/templates", `{"name":"my-env"}`, tpls},
	} {
		w := do(s, tc.method, tc.path, hdr, tc.body)
		var body struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(w.Body.Bytes(), &body)
		if w.Code != http.StatusNotImplemented || body.Code != w.Code || !strings.Contains(body.Message, tc.feature) ||
			!strings.Contains(body.Message, "--backend kubernetes") {
			t.Errorf("%s %s %s: %d %s; want 501 naming %q and the backend", tc.method, tc.path, tc.body, w.Code, w.Body, tc.feature)
		}
	}
	// A template name that is none of E2B's: not served, which is said
	// first, and why no snapshot of that name can be either.
	w = do(s, "POST", "/sandboxes", hdr, `{"templateID":"nope"}`)
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `template \"nope\" is not served here`) ||
		!strings.Contains(w.Body.String(), snaps) {
		t.Errorf("create from an unknown template: %d %s", w.Code, w.Body)
	}
	if len(fm.acquired) != 1 {
		t.Errorf("acquired %v: a refused create made a sandbox", fm.acquired)
	}
}
