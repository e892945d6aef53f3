package driver

import (
	_ "embed"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/ioproto"
)

// The kernels' sources ship inside the driver binary, like kernel.py, so an
// image cannot hold a mismatched copy. All speak the same kernel protocol
// (kernel.go): a hello with the nonce on fd 3, requests {"id","code",
// "language","env","setenv"} on fd 3, ready/display/result/error/done on fd 4, and
// the sync markers on fd 1 and 2 before each message, after all the output
// written before it (ioproto/PROTOCOL.md, "Output framing inside the
// sandbox").
var (
	//go:embed jskernel/kernel.mjs
	jsKernelSource []byte
	//go:embed rkernel/kernel.R
	rKernelSource []byte
)

// Kernel kinds: one running interpreter per kind. JavaScript and TypeScript
// share the Node.js kernel, and so its globals: a TypeScript cell is
// transpiled to JavaScript and runs in the same global scope, so values
// pass between the two languages (and one Node process is paid for, not
// two).
const (
	kindPython = "python"
	kindNode   = "node"
	kindR      = "r"
)

// kernelSpec says how to run one kind of kernel.
type kernelSpec struct {
	kind string
	// display names the interpreter in reasons ("the Node.js process died").
	display string
	// file is the script's name in the launcher's directory; source its text.
	file   string
	source []byte
	// bins are the interpreter's names, the first found is used.
	bins []string
	// args gives the interpreter's arguments for the script at path.
	args func(path string) []string
	// env is added to the sandbox's environment for the kernel.
	env []string
}

var kernelSpecs = map[string]*kernelSpec{
	kindPython: {
		kind: kindPython, display: "Python", file: "kernel.py", source: kernelSource,
		args: func(p string) []string { return []string{"-u", p} },
		env:  []string{"PYTHONUNBUFFERED=1"},
	},
	kindNode: {
		kind: kindNode, display: "Node.js", file: "kernel.mjs", source: jsKernelSource,
		bins: []string{"node", "nodejs"},
		args: func(p string) []string { return []string{p} },
		env:  []string{"NODE_DISABLE_COLORS=1"},
	},
	kindR: {
		kind: kindR, display: "R", file: "kernel.R", source: rKernelSource,
		bins: []string{"Rscript"},
		args: func(p string) []string { return []string{"--vanilla", p} },
	},
}

// kernelKind is the kind of kernel that runs a language, "" for bash
// (a fresh shell per command).
func kernelKind(lang string) string {
	switch lang {
	case ioproto.LanguageBash:
		return ""
	case ioproto.LanguageJavaScript, ioproto.LanguageTypeScript:
		return kindNode
	case ioproto.LanguageR:
		return kindR
	}
	return kindPython
}

// typeScriptModules are where Debian (node-typescript) and npm (global
// install) put the TypeScript compiler; the Node kernel loads it from the
// first that exists, at the first TypeScript cell.
var typeScriptModules = []string{
	"/usr/share/nodejs/typescript",
	"/usr/lib/nodejs/typescript",
	"/usr/local/lib/node_modules/typescript",
	"/usr/lib/node_modules/typescript",
}

// acornModules are where the JavaScript parser the Node kernel uses to
// rewrite cells (top-level declarations, imports, await) may be.
var acornModules = []string{
	"/usr/share/nodejs/acorn",
	"/usr/lib/nodejs/acorn",
	"/usr/local/lib/node_modules/acorn",
	"/usr/lib/node_modules/acorn",
}

// firstModule returns the first of dirs that holds a package.
func firstModule(dirs []string) string {
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "package.json")); err == nil {
			return d
		}
	}
	return ""
}

// probeLanguages lists the languages this image can run: python and bash
// always (the driver needs them), JavaScript where node and its parser are
// installed, TypeScript where the TypeScript compiler is too, R where
// Rscript is. Only file lookups: no interpreter is started, so an idle
// sandbox costs nothing more.
func probeLanguages(bins map[string]string) []string {
	langs := []string{ioproto.LanguagePython, ioproto.LanguageBash}
	if bins[kindNode] != "" && firstModule(acornModules) != "" {
		langs = append(langs, ioproto.LanguageJavaScript)
		if firstModule(typeScriptModules) != "" {
			langs = append(langs, ioproto.LanguageTypeScript)
		}
	}
	if bins[kindR] != "" {
		langs = append(langs, ioproto.LanguageR)
	}
	return langs
}

// lookBins finds each kernel kind's interpreter; python is the configured
// one, as before.
func lookBins(python string) map[string]string {
	bins := map[string]string{kindPython: python}
	for kind, spec := range kernelSpecs {
		for _, b := range spec.bins {
			if p, err := exec.LookPath(b); err == nil {
				bins[kind] = p
				break
			}
		}
	}
	return bins
}

// languageName is how reasons name a language's interpreter.
func languageName(lang string) string {
	if s := kernelSpecs[kernelKind(lang)]; s != nil && lang != ioproto.LanguageBash {
		return s.display
	}
	return "bash"
}

// withEnv is base (KEY=value entries) with env's variables set, replacing
// base's entries of the same names: a command's own environment over the
// sandbox's.
func withEnv(base []string, env map[string]string) []string {
	if len(env) == 0 {
		return base
	}
	out := make([]string, 0, len(base)+len(env))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, over := env[k]; !over {
			out = append(out, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}
