package main

import (
	"fmt"
	"strings"
)

// envFlag collects repeated --env NAME=VALUE flags: a command's own
// environment (Execute's env), checked by sandboxd.
type envFlag map[string]string

func (e envFlag) String() string {
	parts := make([]string, 0, len(e))
	for k, v := range e {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

func (e envFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want NAME=VALUE, got %q", s)
	}
	e[k] = v
	return nil
}
