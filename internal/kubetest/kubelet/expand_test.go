package kubelet

import "testing"

// TestExpand checks $(VAR) expansion against Kubernetes' rules, which a
// Pod's command and args rely on.
func TestExpand(t *testing.T) {
	vals := map[string]string{"A": "x", "EMPTY": ""}
	for in, want := range map[string]string{
		"plain":            "plain",
		"$(A)":             "x",
		"a-$(A)-b":         "a-x-b",
		"$(EMPTY)|":        "|",
		"$(UNSET)":         "$(UNSET)",
		"$$(A)":            "$(A)",
		"$$":               "$",
		"$A $":             "$A $",
		"$(A":              "$(A",
		"$(A)$(A)":         "xx",
		"echo $(A) $$HOME": "echo x $HOME",
	} {
		if got := expand(in, vals); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}
