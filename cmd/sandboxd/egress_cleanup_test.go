package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestEgressCleanupCommand: `sandboxd egress cleanup` passes the instance
// to the cleanup, prints what it removed, and reports its refusal; bad
// command lines are usage errors that call nothing.
func TestEgressCleanupCommand(t *testing.T) {
	var got []string
	cleanup := func(instance string) ([]string, error) {
		got = append(got, instance)
		switch instance {
		case "run":
			return nil, errors.New("the egress instance of bridge sandboxd-run and nftables table inet sandboxd-run is in use by a running sandboxd (pid 42)")
		case "":
			return nil, nil
		}
		return []string{"interface sx" + instance + "-01234567", "bridge sandboxd-" + instance, "nftables table inet sandboxd-" + instance}, nil
	}
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := egressCommand(args, &out, &errOut, cleanup)
		return out.String(), err
	}

	out, err := run("cleanup", "--instance", "ab1")
	if err != nil || out != "removed interface sxab1-01234567\nremoved bridge sandboxd-ab1\nremoved nftables table inet sandboxd-ab1\n" {
		t.Errorf("cleanup --instance ab1: %q, %v", out, err)
	}
	if out, err := run("cleanup"); err != nil || out != "nothing to remove\n" {
		t.Errorf("cleanup (the default instance): %q, %v", out, err)
	}
	if _, err := run("cleanup", "--instance", "run"); err == nil || !strings.Contains(err.Error(), "running sandboxd (pid 42)") {
		t.Errorf("cleanup of a running instance: %v", err)
	} else if errors.As(err, new(usageError)) {
		t.Errorf("a refusal is no usage error: %v", err)
	}
	if want := []string{"ab1", "", "run"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("cleanups of %q; want %q", got, want)
	}

	got = nil
	for _, args := range [][]string{nil, {"remove"}, {"cleanup", "--instance", "Toolong"}, {"cleanup", "extra"}, {"cleanup", "--bogus"}} {
		if _, err := run(args...); !errors.As(err, new(usageError)) {
			t.Errorf("%q: %v; want a usage error", args, err)
		}
	}
	if len(got) > 0 {
		t.Errorf("bad command lines cleaned up %q", got)
	}
}
