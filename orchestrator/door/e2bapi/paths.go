package e2bapi

import (
	"path"
	"strings"
)

// The sandbox's files live under /workspace; E2B's SDKs default to
// /home/user, which this door takes as an alias of /workspace.
const (
	workspace = "/workspace"
	e2bHome   = "/home/user"
)

// toWorkspace turns a path from the SDK into the domain's form (relative
// to /workspace; "" for /workspace itself). Relative paths are relative to
// /workspace, E2B's home directory. Other absolute paths are the domain's
// to refuse (it names the rule).
func toWorkspace(p string) string {
	switch {
	case p == e2bHome || p == e2bHome+"/":
		return ""
	case strings.HasPrefix(p, e2bHome+"/"):
		return strings.TrimPrefix(p, e2bHome+"/")
	case p == workspace || p == workspace+"/":
		return ""
	case strings.HasPrefix(p, workspace+"/"):
		return strings.TrimPrefix(p, workspace+"/")
	}
	return p
}

// fromWorkspace is the absolute path, inside the sandbox, of a path the
// domain returned (relative to /workspace).
func fromWorkspace(rel string) string {
	if rel == "" || rel == "." {
		return workspace
	}
	return path.Join(workspace, rel)
}

// absDir is the absolute directory, inside the sandbox, for a cwd from the
// SDK ("" stays "").
func absDir(p string) string {
	if p == "" {
		return ""
	}
	if strings.HasPrefix(p, "/") && !strings.HasPrefix(p, e2bHome) {
		return p
	}
	return fromWorkspace(toWorkspace(p))
}
