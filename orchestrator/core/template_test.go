package core

import (
	"errors"
	"strings"
	"testing"
)

func goodSpec() TemplateSpec {
	return TemplateSpec{Steps: []TemplateStep{
		{Apt: []string{"jq", "r-cran-ggplot2", "libssl3=3.0.11-1", "curl/bookworm-backports"}},
		{Copy: &TemplateCopy{Archive: strings.Repeat("ab", 32), Src: "conf/config.yaml", Dest: "/opt/tool/", Mode: 0o640, Owner: TemplateUserSandbox}},
		{Env: map[string]string{"TOOL_HOME": "/opt/tool", "GREETING": `say "hi" for $5 \o/`}},
		{Workdir: "/opt/tool"},
		{User: TemplateUserSandbox},
		{Run: "echo built > /opt/tool/stamp"},
	}}
}

func TestTemplateSpecRules(t *testing.T) {
	if err := goodSpec().Validate(); err != nil {
		t.Fatalf("a good spec: %v", err)
	}
	for want, mutate := range map[string]func(*TemplateSpec){
		"at least one step":        func(s *TemplateSpec) { s.Steps = nil },
		"exactly one of":           func(s *TemplateSpec) { s.Steps[0].Run = "true" },
		"(0 set)":                  func(s *TemplateSpec) { s.Steps[0] = TemplateStep{} },
		"not a Debian package":     func(s *TemplateSpec) { s.Steps[0].Apt = []string{"jq; rm -rf /"} },
		"apt: no packages":         func(s *TemplateSpec) { s.Steps[0].Apt = []string{} },
		"64 lower-case hex":        func(s *TemplateSpec) { s.Steps[1].Copy.Archive = "xyz" },
		"clean relative path":      func(s *TemplateSpec) { s.Steps[1].Copy.Src = "../etc/passwd" },
		"source \"/x\"":            func(s *TemplateSpec) { s.Steps[1].Copy.Src = "/x" },
		"absolute, clean":          func(s *TemplateSpec) { s.Steps[1].Copy.Dest = "opt/x" },
		"/io is sandboxd's":        func(s *TemplateSpec) { s.Steps[1].Copy.Dest = "/io/stdin" },
		"/workspace is":            func(s *TemplateSpec) { s.Steps[3].Workdir = "/workspace" },
		"sandbox-driver is":        func(s *TemplateSpec) { s.Steps[1].Copy.Dest = "/usr/local/bin/sandbox-driver" },
		"ld.so.preload is":         func(s *TemplateSpec) { s.Steps[1].Copy.Dest = "/etc/ld.so.preload" },
		"not the root":             func(s *TemplateSpec) { s.Steps[3].Workdir = "/" },
		"at most 1024 of":          func(s *TemplateSpec) { s.Steps[3].Workdir = "/opt/a b" },
		"blank":                    func(s *TemplateSpec) { s.Steps[5].Run = "  " },
		"NUL byte":                 func(s *TemplateSpec) { s.Steps[5].Run = "a\x00b" },
		"permission bits":          func(s *TemplateSpec) { s.Steps[1].Copy.Mode = 0o4755 },
		"copy owner":               func(s *TemplateSpec) { s.Steps[1].Copy.Owner = "nobody" },
		"user \"admin\"":           func(s *TemplateSpec) { s.Steps[4].User = "admin" },
		"base":                     func(s *TemplateSpec) { s.Base = "a/b" },
		"not starting with":        func(s *TemplateSpec) { s.Steps[2].Env = map[string]string{"1X": "x"} },
		"control characters":       func(s *TemplateSpec) { s.Steps[2].Env = map[string]string{"X": "1\nRUN evil"} },
		"env: no variables":        func(s *TemplateSpec) { s.Steps[2].Env = map[string]string{} },
		"step 6: run: the command": func(s *TemplateSpec) { s.Steps[5].Run = strings.Repeat("x", MaxTemplateRunBytes+1) },
	} {
		s := goodSpec()
		mutate(&s)
		if err := s.Validate(); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want InvalidArgument saying %q", want, err, want)
		}
	}
	many := TemplateSpec{}
	for range MaxTemplateSteps + 1 {
		many.Steps = append(many.Steps, TemplateStep{Run: "true"})
	}
	if err := many.Validate(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("%d steps: %v", len(many.Steps), err)
	}
}

func TestTemplateNamesAndRefs(t *testing.T) {
	id := NewTemplateID()
	if !IsTemplateID(id) || ValidateTemplateRef(id) != nil {
		t.Fatalf("%s: not a template ID", id)
	}
	if err := ValidateTemplateName(id); err == nil {
		t.Error("a name of the form of an ID was accepted")
	}
	for _, bad := range []string{"", "a/b", "..", strings.Repeat("a", 65), "é"} {
		if err := ValidateTemplateRef(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ref %q: %v", bad, err)
		}
	}
	if err := ValidateTemplateFileKey(strings.Repeat("A", 64)); err == nil {
		t.Error("an upper-case key was accepted")
	}
}

func TestTemplateSpecHash(t *testing.T) {
	a := goodSpec()
	if a.SpecHash("img1") != goodSpec().SpecHash("img1") {
		t.Error("one spec, two hashes")
	}
	if a.SpecHash("img1") == a.SpecHash("img2") {
		t.Error("another base image did not change the hash")
	}
	c := goodSpec()
	c.Steps[5].Run = "false"
	if a.SpecHash("img1") == c.SpecHash("img1") {
		t.Error("another command did not change the hash")
	}
	d := goodSpec()
	d.Steps[3], d.Steps[5] = d.Steps[5], d.Steps[3]
	if a.SpecHash("img1") == d.SpecHash("img1") {
		t.Error("another order of steps did not change the hash")
	}
	if got := a.Archives(); len(got) != 1 || got[0] != strings.Repeat("ab", 32) {
		t.Errorf("Archives: %v", got)
	}
}
