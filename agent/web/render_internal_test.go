package web

import "testing"

// TestChipLabel: a chip says what its call is doing, not "ran" while it
// runs or after it failed.
func TestChipLabel(t *testing.T) {
	for _, tc := range []struct{ name, language, status, want string }{
		{"run_code", "python", "pending", "python (waiting)"},
		{"run_code", "python", "running", "running python…"},
		{"run_code", "python", "ok", "ran python"},
		{"run_code", "bash", "error", "bash: error"},
		{"run_code", "python", "interrupted", "python: interrupted"},
		{"chart", "", "ok", "called chart"},
		{"chart", "", "timeout", "chart: timeout"},
	} {
		if got := chipLabel(tc.name, tc.language, tc.status); got != tc.want {
			t.Errorf("chipLabel(%q, %q, %q) = %q, want %q", tc.name, tc.language, tc.status, got, tc.want)
		}
	}
}
