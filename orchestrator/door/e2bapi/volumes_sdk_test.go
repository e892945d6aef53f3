package e2bapi

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/e2bsdk"
)

// TestSDKVolumesOverFake runs the Volume class's scenarios of
// sdktest/volumes.test.mjs (those named "Volume…": no sandbox needed) with
// the official SDK against this door over the fake's volumes (volStore):
// the SDK's own requests and its reading of the answers, without Docker.
// TestSDK runs the whole file against a real sandboxd.
func TestSDKVolumesOverFake(t *testing.T) {
	node, dir := e2bsdk.Need(t)
	s, _, _ := newVolumeServer(t)
	srv := httptest.NewServer(s)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-name-pattern", "^Volume", "sdktest/volumes.test.mjs")
	cmd.Env = append(os.Environ(), "E2B_SDK_DIR="+dir, "E2B_API_URL="+srv.URL, "E2B_SANDBOX_URL="+srv.URL,
		"E2B_VOLUME_API_URL="+srv.URL, "E2B_API_KEY="+testKey, "E2B_API_KEY_OTHER="+otherTestKey, "E2B_DEBUG=", "E2B_DOMAIN=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sdktest/volumes.test.mjs (Volume…) over the fake: %v\n%s", err, out)
	}
}
