package client

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunStateless: the run's events and outcome arrive as Run's do, with
// the request's language, code, timeout and options; a stream that breaks
// is an error that says nothing can be resumed.
func TestRunStateless(t *testing.T) {
	f := newFake()
	c := startFake(t, f)
	var seen string
	out, err := c.RunStateless(context.Background(), Stateless{Language: LanguageBash, Code: "echo hi", Timeout: time.Minute},
		func(ev Event) { seen += ev.Text }, WithEnv(map[string]string{"A": "1"}))
	if err != nil || seen != "abc" || out.Stdout != "abc" || out.Done == nil || out.Done.Status != StatusOK {
		t.Fatalf("RunStateless = %q, %+v, %v", seen, out, err)
	}
	req := f.stateless[0]
	if req.GetLanguage() != LanguageBash || req.GetCode() != "echo hi" || req.GetTimeout().AsDuration() != time.Minute || req.GetOptions().GetEnv()["A"] != "1" {
		t.Errorf("request: %v", req)
	}
	f.breakAfter = 2
	out, err = c.RunStateless(context.Background(), Stateless{Code: "x"}, nil)
	if err == nil || out.Stdout != "a" && out.Stdout != "ab" {
		t.Errorf("broken stream: %+v, %v; want an error and what arrived", out, err)
	}
	if err != nil && !strings.Contains(err.Error(), "stateless run") {
		t.Errorf("error %q does not say what failed", err)
	}
}
