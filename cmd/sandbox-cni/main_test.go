//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/backend/kube/podnet"
)

// prevResult is what the bridge plugin before it hands on: the plugin
// must print it unchanged.
const prevResult = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/x"}],"ips":[{"address":"198.18.0.2/24","interface":0}]}`

func config(namespaces string, prev bool) string {
	c := `{"cniVersion":"1.0.0","name":"pods","type":"sandbox-cni","namespaces":` + namespaces
	if prev {
		c += `,"prevResult":` + prevResult
	}
	return c + "}"
}

// run runs the plugin binary as a container runtime does.
func run(t *testing.T, bin, command, netnsPath, podNS, stdin string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=c1", "CNI_NETNS=" + netnsPath, "CNI_IFNAME=eth0",
		"CNI_PATH=/nonexistent", "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=" + podNS + ";K8S_POD_NAME=p"}
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func hasTable(t *testing.T, ns string) bool {
	t.Helper()
	return exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", podnet.TableName).Run() == nil
}

// TestPlugin: the plugin, run as a runtime runs it, installs the table in
// a listed namespace's Pod and prints the previous result unchanged; it
// leaves an unlisted namespace's Pod alone; CHECK says whether the table
// is there; DEL succeeds; a configuration it cannot use fails with the
// spec's error JSON.
func TestPlugin(t *testing.T) {
	for _, b := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(b); err != nil || os.Geteuid() != 0 {
			if os.Getenv("CI") == "true" {
				t.Fatalf("the plugin's test needs root, ip and nft (%v)", err)
			}
			t.Skipf("the plugin's test needs root, ip and nft (%v)", err)
		}
	}
	bin := filepath.Join(t.TempDir(), "sandbox-cni")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	ns := fmt.Sprintf("sbxcni-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	path := "/var/run/netns/" + ns

	// Another namespace's Pod: untouched, its result passed on.
	out, err := run(t, bin, "ADD", path, "default", config(`["sandboxd"]`, true))
	if err != nil || hasTable(t, ns) {
		t.Fatalf("ADD for another namespace's pod: %v %s (table: %v); want its result, no table", err, out, hasTable(t, ns))
	}
	if out, err := run(t, bin, "CHECK", path, "default", config(`["sandboxd"]`, true)); err != nil {
		t.Errorf("CHECK for another namespace's pod: %v %s", err, out)
	}
	if out, err := run(t, bin, "CHECK", path, "sandboxd", config(`["sandboxd"]`, true)); err == nil {
		t.Errorf("CHECK of a listed pod without the table passed: %s", out)
	}

	out, err = run(t, bin, "ADD", path, "sandboxd", config(`["sandboxd"]`, true))
	if err != nil {
		t.Fatalf("ADD: %v %s", err, out)
	}
	var got, want map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("ADD printed %q: %v", out, err)
	}
	_ = json.Unmarshal([]byte(prevResult), &want)
	gotJS, _ := json.Marshal(got)
	wantJS, _ := json.Marshal(want)
	if !bytes.Equal(gotJS, wantJS) {
		t.Errorf("ADD printed %s; want the previous result %s", gotJS, wantJS)
	}
	if !hasTable(t, ns) {
		t.Fatal("ADD left no table in the pod's namespace")
	}
	if out, err := run(t, bin, "CHECK", path, "sandboxd", config(`["sandboxd"]`, true)); err != nil {
		t.Errorf("CHECK with the table: %v %s", err, out)
	}
	if out, err := run(t, bin, "DEL", path, "sandboxd", config(`["sandboxd"]`, false)); err != nil {
		t.Errorf("DEL: %v %s", err, out)
	}

	// Not chained, or not JSON: the spec's error, non-zero exit.
	for name, stdin := range map[string]string{"no previous result": config(`[]`, false), "not JSON": "{"} {
		out, err := run(t, bin, "ADD", path, "sandboxd", stdin)
		var e struct {
			Code int    `json:"code"`
			Msg  string `json:"msg"`
		}
		if err == nil || json.Unmarshal([]byte(out), &e) != nil || e.Code == 0 || e.Msg == "" {
			t.Errorf("ADD, %s: %v %q; want a CNI error and a non-zero exit", name, err, out)
		}
	}
}
