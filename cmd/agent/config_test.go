package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseConfig(t *testing.T) {
	env := map[string]string{
		"OPENAI_BASE_URL": "http://localhost:11434/v1", "AGENT_MODEL": "qwen2.5:7b", "HOME": "/home/ann", "USER": "ann smith",
		"AGENT_SANDBOXD_TOKEN": "tok", "AGENT_COMMAND_TIMEOUT": "90s",
	}
	c, err := parseConfig("chat", []string{"--model", "llama3.1", "--state-dir", "/tmp/s"}, envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	if c.model.Model != "llama3.1" || c.model.BaseURL != "http://localhost:11434/v1" || c.sandboxdToken != "tok" ||
		c.stateDir != "/tmp/s" || c.sandboxdAddr != "127.0.0.1:50051" || c.commandTimeout != 90*time.Second ||
		c.maxIterations != 20 || c.user != "cli-ann_smith" {
		t.Errorf("config = %+v", c)
	}
	s, err := parseConfig("serve", nil, envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	if s.listen != "127.0.0.1:8080" || s.model.Model != "qwen2.5:7b" || !strings.HasSuffix(s.stateDir, "sandboxd-agent") {
		t.Errorf("serve config = %+v", s)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, map[string]string{}, "AGENT_MODEL"},
		{[]string{"--max-iterations", "0"}, env, "--max-iterations"},
		{[]string{"--user", "a b"}, env, "--user"},
		{[]string{"--command-timeout", "soon"}, env, "--command-timeout"},
		{[]string{"extra"}, env, "unexpected argument"},
	} {
		if _, err := parseConfig("chat", tc.args, envOf(tc.env)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseConfig(%v) = %v, want an error about %s", tc.args, err, tc.want)
		}
	}
}

// TestMissingModelConfig: with no model configured the agent says, in one
// line, what to set, and exits with the usage status.
func TestMissingModelConfig(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"serve"}, envOf(map[string]string{"HOME": "/tmp"}), strings.NewReader(""), &out, &errOut)
	msg := errOut.String()
	if code != exitUsage || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "AGENT_MODEL") || !strings.Contains(msg, "OPENAI_API_KEY") || !strings.Contains(msg, "OPENAI_BASE_URL") {
		t.Errorf("exit %d, stderr %q", code, msg)
	}
}

func TestStateDirLock(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockStateDir(dir); err == nil || !strings.Contains(err.Error(), "in use by another agent process") {
		t.Errorf("second lock: %v", err)
	}
	unlock()
	unlock2, err := lockStateDir(dir)
	if err != nil {
		t.Errorf("lock after unlock: %v", err)
	} else {
		unlock2()
	}
}
