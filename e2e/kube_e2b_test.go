package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/e2bsdk"
)

// The E2B SDK suites that apply to the kubernetes backend: sandboxd's own
// scenarios and the ports of the SDKs' tests (commands, code interpreter,
// contexts, files, watches, list, kill, setTimeout, getInfo). What the
// backend lacks is skipped by SANDBOXD_E2B_BACKEND=kubernetes (helpers.mjs:
// on the test kubelet, which mounts no claims and serves no Summary API,
// pause and resume and metrics), and there one scenario checks that pause
// and autoPause fail naming the feature; on the real nodes, replica A has
// a storage class and pause hibernates. Replica A has a snapshot
// directory, so the snapshot suite (createSnapshot, Sandbox.create from
// it, fork) runs as under Docker, and on the real nodes the volume suite
// (a claim per volume, of replica A's storage class; the test kubelet
// mounts none). On the real nodes the network suite runs too, against a
// replica of its own with --kube-egress-cni and the ports front (its
// sandboxes are networked, so they never come from the warm pool: the
// other suites keep the pool). The template suite is not run: every call
// of its is refused on this backend (e2bapi's TestKubeRefusalsAreClear
// checks each answer).
var kubeE2BSuites = []string{"scenarios", "ported_sdk", "ported_ci", "snapshots"}

// kubeE2BSDK runs the official E2B SDKs against the E2B door of a replica
// on the kubernetes backend, and checks that a sandbox's access token
// given by one replica opens it on another replica with its own state
// directory (the secret is derived from the io sidecars' token).
func kubeE2BSDK(t *testing.T, k *kubeEnv) {
	node, dir := e2bsdk.Need(t)
	key, other := "e2b_"+strings.Repeat("6b", 20), "e2b_"+strings.Repeat("7c", 20)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(fmt.Sprintf("%s acme user\n%s beta user\n", key, other)), 0o600); err != nil {
		t.Fatal(err)
	}
	// 512 MiB, as getMetrics' scenario expects (sdk_test.go's sandboxd).
	argsA := []string{"--auth-tokens", tokens, "--e2b-listen", "127.0.0.1:0", "--default-memory", "512MiB", "--kube-snapshot-dir", t.TempDir()}
	if k.cluster != nil {
		argsA = append(argsA, "--kube-storage-class="+k.cluster.StorageClass) // pause hibernates; volumes are claims of it
	}
	a := k.replica(t, "e2b-a", argsA...)
	b := k.replica(t, "e2b-b", "--auth-tokens", tokens, "--e2b-listen", "127.0.0.1:0", "--state-dir", t.TempDir())
	addrA, addrB := e2bAddr(t, a), e2bAddr(t, b)

	t.Run("TokenAcrossReplicas", func(t *testing.T) { kubeE2BTokenAcrossReplicas(t, addrA, addrB, key) })

	suites := kubeE2BSuites
	if k.cluster != nil {
		suites = append(slices.Clone(suites), "volumes") // claims the real nodes mount
	}
	files := make([]string, len(suites))
	for i, s := range suites {
		files[i] = filepath.Join("..", "orchestrator", "door", "e2bapi", "sdktest", s+".test.mjs")
	}
	env := []string{"SANDBOXD_E2B_BACKEND=kubernetes"}
	if k.cluster != nil {
		// The real kubelets' Summary API, and the real nodes' local volumes.
		env = append(env, "SANDBOXD_E2B_KUBE_METRICS=1", "SANDBOXD_E2B_KUBE_HIBERNATION=1")
	}
	total, failed := e2bsdk.Run(t, node, dir, e2bsdk.Door{Addr: addrA, Key: key, OtherKey: other, Env: env}, files)
	if k.cluster != nil {
		n := k.replica(t, "e2b-net", "--auth-tokens", tokens, "--e2b-listen", "127.0.0.1:0", "--state-dir", t.TempDir(),
			"--allow-network", "--kube-egress-cni", "--kube-egress-deny="+k.cluster.Block().String(),
			"--ports-listen", "127.0.0.1:0", "--ports-domain", "sandboxes.test")
		door := e2bsdk.Door{Addr: e2bAddr(t, n), Key: key, OtherKey: other, Env: append(slices.Clone(env), "SANDBOXD_PORTS_ADDR="+portsAddr(t, n))}
		nt, nf := e2bsdk.Run(t, node, dir, door, []string{filepath.Join("..", "orchestrator", "door", "e2bapi", "sdktest", "network.test.mjs")})
		total, failed = total+nt, failed+nf
	}
	t.Logf("on kubernetes: %s", e2bsdk.Summary(total, failed))
}

// e2bAddr is the E2B door's address a replica logged.
func e2bAddr(t *testing.T, d *daemon) string {
	t.Helper()
	var m []string
	if !pollUntil(30*time.Second, func() bool { m = e2bServingLine.FindStringSubmatch(d.logs.String()); return m != nil }) {
		t.Fatalf("the replica did not log its E2B address:\n%s", d.logs)
	}
	return m[1]
}

// kubeE2BTokenAcrossReplicas: a sandbox created through replica A's door
// is reached through B's with the access token A gave (a missing file is
// 404 there, not 401), a wrong token is refused, and B kills it.
func kubeE2BTokenAcrossReplicas(t *testing.T, addrA, addrB, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	do := func(method, url string, hdr map[string]string, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return resp.StatusCode, string(b)
	}
	code, body := do("POST", "http://"+addrA+"/sandboxes", map[string]string{"X-API-KEY": key, "Content-Type": "application/json"}, `{"templateID":"base","timeout":300}`)
	if code != http.StatusCreated {
		t.Fatalf("create through replica A: %d %s", code, body)
	}
	var created struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	if err := json.Unmarshal([]byte(body), &created); err != nil {
		t.Fatal(err)
	}
	envd := func(tok string) (int, string) {
		return do("GET", "http://"+addrB+"/files?path=missing.txt", map[string]string{"E2b-Sandbox-Port": "49983",
			"E2b-Sandbox-Id": created.SandboxID, "X-Access-Token": tok}, "")
	}
	if code, body := envd(created.EnvdAccessToken); code != http.StatusNotFound {
		t.Errorf("replica B with A's access token: %d %s; want 404 for the missing file", code, body)
	}
	if code, body := envd(created.EnvdAccessToken + "x"); code != http.StatusUnauthorized {
		t.Errorf("replica B with a wrong access token: %d %s; want 401", code, body)
	}
	if code, body := do("DELETE", "http://"+addrB+"/sandboxes/"+created.SandboxID, map[string]string{"X-API-KEY": key}, ""); code != http.StatusNoContent {
		t.Errorf("kill through replica B: %d %s", code, body)
	}
}
