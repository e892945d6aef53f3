package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// conformanceVersion is the MCP conformance suite the Makefile's
// mcp-conformance-tools installs (MCP_CONFORMANCE_VERSION).
const conformanceVersion = "0.1.10"

// conformanceScenarios are the suite's server scenarios that apply to a
// server with its own tools. The others call the suite's reference tools,
// prompts and resources (tools-call-*, resources-*, prompts-*, completion,
// elicitation, sampling, json-schema-2020-12), which sandbox-mcp does not
// have. server-sse-polling calls the reference tool test_reconnection;
// without it, it still checks the POST SSE stream, with two SHOULD
// warnings (no priming event, no retry field: the suite speaks protocol
// 2025-03-26 there, which has neither).
var conformanceScenarios = []string{
	"server-initialize",
	"ping",
	"tools-list",
	"logging-set-level",
	"server-sse-polling",
	"server-sse-multiple-streams",
}

// conformanceDir is where the suite is installed: MCP_CONFORMANCE_DIR (the
// Makefile exports it), else the Makefile's default.
func conformanceDir(t *testing.T) string {
	if d := os.Getenv("MCP_CONFORMANCE_DIR"); d != "" {
		return d
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		testenv.Unavailable(t, "no cache directory for the MCP conformance suite: %v", err)
	}
	return filepath.Join(cache, "sandboxd", "npm", "conformance-"+conformanceVersion)
}

var passedRe = regexp.MustCompile(`Passed: (\d+)/(\d+), (\d+) failed`)

// TestConformance runs the MCP conformance suite's applicable server
// scenarios against sandbox-mcp --http (with a real sandboxd behind it).
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite is skipped in -short mode")
	}
	npx, err := exec.LookPath("npx")
	if err != nil {
		testenv.Unavailable(t, "node/npx is not installed (needed for the MCP conformance suite)")
	}
	dir := conformanceDir(t)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".bin", "conformance")); err != nil {
		testenv.Unavailable(t, "the MCP conformance suite %s is not installed in %s (run `make mcp-conformance-tools`)", conformanceVersion, dir)
	}
	url := startHTTP(t, sandboxd(t))
	results := t.TempDir()
	for _, sc := range conformanceScenarios {
		t.Run(sc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// --offline: from the cache only, never the registry.
			cmd := exec.CommandContext(ctx, npx, "--offline", "--no-install", "conformance", "server",
				"--url", url, "--scenario", sc, "-o", results)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("scenario %s did not finish within 2 minutes:\n%s", sc, out)
			}
			if err != nil {
				t.Fatalf("scenario %s failed (%v):\n%s", sc, err, out)
			}
			m := passedRe.FindSubmatch(out)
			if m == nil {
				t.Fatalf("scenario %s: no result line in the suite's output:\n%s", sc, out)
			}
			if failed, _ := strconv.Atoi(string(m[3])); failed != 0 {
				t.Fatalf("scenario %s: %s checks failed:\n%s", sc, m[3], out)
			}
			t.Logf("%s: %s", sc, m[0])
		})
	}
}
