package main

import (
	"flag"
	"io"
	"testing"
)

func TestEnvFlag(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	env := envFlag{}
	fs.Var(env, "env", "")
	if err := fs.Parse([]string{"--env", "A=1", "--env", "B=x=y", "--env", "C="}); err != nil {
		t.Fatal(err)
	}
	if len(env) != 3 || env["A"] != "1" || env["B"] != "x=y" || env["C"] != "" {
		t.Fatalf("env = %v", env)
	}
	for _, bad := range []string{"A", "=v"} {
		if err := fs.Parse([]string{"--env", bad}); err == nil {
			t.Errorf("--env %q accepted", bad)
		}
	}
}
