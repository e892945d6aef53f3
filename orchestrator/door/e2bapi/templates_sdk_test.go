package e2bapi

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/e2bsdk"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestSDKTemplatesOverFake runs the Template scenarios of
// sdktest/templates.test.mjs (those named "Template…": no sandbox needed)
// with the official SDK against this door over the fake's templates
// (tplStore, whose builds reveal their log over a few polls, then are
// ready, or fail when a step exits 3): the SDK's own requests (build
// request, file upload link, the tar.gz's upload, build start, status
// polls, exists, getTags) and its reading of the answers, without Docker.
// TestSDK runs the whole file against a real sandboxd.
func TestSDKTemplatesOverFake(t *testing.T) {
	node, dir := e2bsdk.Need(t)
	st := newTplStore()
	st.script = func(spec core.TemplateSpec) tplBuild {
		for i, s := range spec.Steps {
			if strings.Contains(s.Run, "exit 3") {
				return tplBuild{lines: []string{"Step 1/2 : FROM sandbox", "about to fail"}, state: core.TemplateFailed,
					reason: "step " + string(rune('1'+i)) + ": the command exited with code 3"}
			}
		}
		return tplBuild{lines: []string{"Step 1/3 : FROM sandbox", "Step 2/3 : RUN …", "Step 3/3 : sandboxd's layer", "built"}, state: core.TemplateReady}
	}
	s := newTemplateServer(t, st)
	srv := httptest.NewServer(s)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-name-pattern", "^Template", "sdktest/templates.test.mjs")
	cmd.Env = append(os.Environ(), "E2B_SDK_DIR="+dir, "E2B_API_URL="+srv.URL, "E2B_SANDBOX_URL="+srv.URL,
		"E2B_API_KEY="+testKey, "E2B_API_KEY_OTHER="+otherTestKey, "E2B_DEBUG=", "E2B_DOMAIN=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sdktest/templates.test.mjs (Template…) over the fake: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "# pass 4") {
		t.Errorf("want the 4 Template scenarios run and passed:\n%s", out)
	}
	// What the SDK sent reached the domain as a spec: aptInstall an Apt
	// step, copy the uploaded tar.gz under the SDK's files hash.
	st.mu.Lock()
	defer st.mu.Unlock()
	var sawApt, sawCopy bool
	for _, vs := range st.builds {
		for _, b := range vs {
			for _, step := range b.spec.Steps {
				sawApt = sawApt || (len(step.Apt) == 1 && step.Apt[0] == "jq")
				if c := step.Copy; c != nil && c.Src == "file.txt" && c.Dest == "/opt/t/" {
					arch := st.files["acme"][c.Archive]
					sawCopy = len(arch) > 2 && arch[0] == 0x1f && arch[1] == 0x8b // gzip
				}
			}
		}
	}
	if !sawApt || !sawCopy {
		t.Errorf("specs built: apt jq %v, copy of a gzip archive %v\n%s", sawApt, sawCopy, out)
	}
	if len(st.templates) != 0 {
		t.Errorf("the suite's templates were not deleted: %d left", len(st.templates))
	}
}
