package core

import (
	"errors"
	"strings"
	"testing"
)

func TestTemplateSpecRules(t *testing.T) {
	ok := TemplateSpec{
		Packages: []string{"jq", "r-cran-ggplot2", "libssl3=3.0.11-1"},
		Files:    []TemplateFile{{SHA256: strings.Repeat("ab", 32), Dest: "/opt/tool/config.yaml", Mode: 0o640}},
		Env:      map[string]string{"TOOL_HOME": "/opt/tool"},
		Workdir:  "/opt/tool",
		Run:      []string{"echo built > /opt/tool/stamp"},
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("a good spec: %v", err)
	}
	for want, mutate := range map[string]func(*TemplateSpec){
		"not a Debian package": func(s *TemplateSpec) { s.Packages = []string{"jq; rm -rf /"} },
		"64 lower-case hex":    func(s *TemplateSpec) { s.Files[0].SHA256 = "xyz" },
		"absolute, clean":      func(s *TemplateSpec) { s.Files[0].Dest = "opt/x" },
		"/io is sandboxd's":    func(s *TemplateSpec) { s.Files[0].Dest = "/io/stdin" },
		"/workspace is":        func(s *TemplateSpec) { s.Workdir = "/workspace" },
		"sandbox-driver is":    func(s *TemplateSpec) { s.Files[0].Dest = "/usr/local/bin/sandbox-driver" },
		"ld.so.preload is":     func(s *TemplateSpec) { s.Files[0].Dest = "/etc/ld.so.preload" },
		"not the root":         func(s *TemplateSpec) { s.Workdir = "/" },
		"is empty":             func(s *TemplateSpec) { s.Run = []string{"  "} },
		"NUL byte":             func(s *TemplateSpec) { s.Run = []string{"a\x00b"} },
		"permission bits":      func(s *TemplateSpec) { s.Files[0].Mode = 0o4755 },
		"base":                 func(s *TemplateSpec) { s.Base = "a/b" },
		"empty name":           func(s *TemplateSpec) { s.Env = map[string]string{"": "x"} },
	} {
		s := ok
		s.Files = append([]TemplateFile(nil), ok.Files...)
		mutate(&s)
		if err := s.Validate(); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want InvalidArgument saying %q", want, err, want)
		}
	}
}

func TestTemplateSpecHash(t *testing.T) {
	a := TemplateSpec{Packages: []string{"jq", "curl"}, Run: []string{"true"}}
	b := TemplateSpec{Packages: []string{"curl", "jq"}, Run: []string{"true"}}
	if a.SpecHash("img1") != b.SpecHash("img1") {
		t.Error("the packages' order changed the hash")
	}
	if a.SpecHash("img1") == a.SpecHash("img2") {
		t.Error("another base image did not change the hash")
	}
	c := a
	c.Run = []string{"false"}
	if a.SpecHash("img1") == c.SpecHash("img1") {
		t.Error("another command did not change the hash")
	}
	if a.Packages[0] != "jq" {
		t.Error("SpecHash sorted the caller's slice")
	}
}
