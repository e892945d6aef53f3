package e2bapi

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestSDKVolumesOverFake runs the Volume class's scenarios of
// sdktest/volumes.test.mjs (those named "Volume…": no sandbox needed) with
// the official SDK against this door over the fake's volumes (volStore):
// the SDK's own requests and its reading of the answers, without Docker.
// TestSDK runs the whole file against a real sandboxd.
func TestSDKVolumesOverFake(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Unavailable(t, "node is not installed (needed for the E2B SDK suites)")
	}
	dir := os.Getenv("E2B_SDK_DIR")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			testenv.Unavailable(t, "no cache directory for the E2B SDKs: %v", err)
		}
		dir = filepath.Join(cache, "sandboxd", "npm", "e2b-2.51.0-ci-2.8.0") // sdk_test.go's sdkVersion, ciSDKVersion
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err != nil {
		testenv.Unavailable(t, "the E2B SDK is not installed in %s (run `make e2b-sdk-tools`)", dir)
	}
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
