package iosidecar

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestSealRules: the largest policy core allows seals under the bound the
// sidecar reads (and so fits the Pod's annotations), and opens to the
// same rules; only with the same token, for the same sandbox, untouched.
func TestSealRules(t *testing.T) {
	const id = "sb-aaaaaaaaaaaaaaaaaaaa"
	rules := map[string]core.NetworkRule{}
	size := 0
	for i := 0; i < core.MaxNetworkRules; i++ {
		h := map[string]string{}
		for j := 0; j < core.MaxRuleHeaders; j++ {
			name := fmt.Sprintf("X-H%d", j)
			v := strings.Repeat("\t", 50) // escaped six-fold by JSON; not by the sealed encoding
			if size+len(name)+len(v)+32 > core.MaxNetworkPolicySize {
				break
			}
			h[name], size = v, size+len(name)+len(v)
		}
		if len(h) == 0 {
			break
		}
		d := fmt.Sprintf("d%d.example.com", i)
		rules[d], size = core.NetworkRule{Headers: h}, size+len(d)
	}
	if _, err := core.CompileNetworkPolicy(core.NetworkPolicy{Rules: rules}); err != nil {
		t.Fatalf("the test's policy is not a valid one: %v", err)
	}
	sealed, err := SealRules(testToken, id, rules)
	if err != nil {
		t.Fatal(err)
	}
	if len(sealed) > maxSealedRules/2 {
		t.Errorf("the largest policy seals to %d bytes; want at most %d (half the sidecar's bound: the Pod's annotations hold 256 KiB in all, base64)", len(sealed), maxSealedRules/2)
	}
	got, err := OpenRules(testToken, id, sealed)
	if err != nil || len(got) != len(rules) {
		t.Fatalf("OpenRules: %d rules, %v; want %d", len(got), err, len(rules))
	}
	for d, r := range rules {
		for h, v := range r.Headers {
			if got[d].Headers[h] != v {
				t.Fatalf("rule %s header %s: %q after a round trip", d, h, got[d].Headers[h])
			}
		}
	}
	flipped := append([]byte(nil), sealed...)
	flipped[len(flipped)/2] ^= 1
	for what, try := range map[string]func() error{
		"another token":   func() error { _, err := OpenRules(testToken+"x", id, sealed); return err },
		"another sandbox": func() error { _, err := OpenRules(testToken, "sb-bbbbbbbbbbbbbbbbbbbb", sealed); return err },
		"a flipped bit":   func() error { _, err := OpenRules(testToken, id, flipped); return err },
		"too short":       func() error { _, err := OpenRules(testToken, id, sealed[:20]); return err },
		"too long":        func() error { _, err := OpenRules(testToken, id, make([]byte, maxSealedRules+1)); return err },
	} {
		if err := try(); !errors.Is(err, ErrRulesSealed) {
			t.Errorf("opening with %s: %v; want ErrRulesSealed", what, err)
		}
	}
	if b, err := SealRules(testToken, id, nil); err != nil || b != nil {
		t.Errorf("no rules seal to %q, %v; want nothing", b, err)
	}
}
