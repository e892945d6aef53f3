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
	//go:embed javakernel/Kernel.java
	javaKernelSource []byte
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
	kindJava   = "java"
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
	// args gives the interpreter bin's arguments for the script at path.
	args func(bin, path string) []string
	// env is added to the sandbox's environment for the kernel.
	env []string
	// interruptOp: the kernel is interrupted by a request {"id", "op":
	// "interrupt"} after the SIGINT, not by the SIGINT alone (Java, whose
	// JVM runs a signal handler late, on a thread of its own).
	interruptOp bool
}

var kernelSpecs = map[string]*kernelSpec{
	kindPython: {
		kind: kindPython, display: "Python", file: "kernel.py", source: kernelSource,
		args: func(_, p string) []string { return []string{"-u", p} },
		env:  []string{"PYTHONUNBUFFERED=1"},
	},
	kindNode: {
		kind: kindNode, display: "Node.js", file: "kernel.mjs", source: jsKernelSource,
		bins: []string{"node", "nodejs"},
		args: func(_, p string) []string { return []string{p} },
		env:  []string{"NODE_DISABLE_COLORS=1"},
	},
	kindR: {
		kind: kindR, display: "R", file: "kernel.R", source: rKernelSource,
		bins: []string{"Rscript"},
		args: func(_, p string) []string { return []string{"--vanilla", p} },
	},
	// Java runs on JShell in the kernel's own JVM, started by the
	// single-file source launcher (the kernel is compiled in memory at each
	// start). The serial collector, C1 only and no perf data file keep a
	// JVM that mostly compiles snippets small and quick to start on the
	// sandbox's CPUs; java.util is opened so the kernel can set the
	// environment snippets see (Kernel.java).
	kindJava: {
		kind: kindJava, display: "Java", file: "Kernel.java", source: javaKernelSource,
		bins:        []string{"java"},
		args:        javaArgs,
		interruptOp: true,
	},
}

// javaArgs are the JVM's arguments for the Java kernel at path. The
// foreign linker of JDK 17 (an incubator module, gone from later JDKs),
// when the JDK has it, lets the kernel set the environment of the
// processes snippets start.
func javaArgs(bin, path string) []string {
	args := []string{"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
		"--add-opens", "java.base/java.util=ALL-UNNAMED"}
	if jdkHasModule(bin, "jdk.incubator.foreign") {
		args = append(args, "--add-modules", "jdk.incubator.foreign", "--enable-native-access=ALL-UNNAMED")
	}
	return append(args, path)
}

// jdkHasModule reports whether the JDK of the java at bin lists module in
// its release file.
func jdkHasModule(bin, module string) bool {
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(real)), "release"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if mods, ok := strings.CutPrefix(line, "MODULES="); ok {
			return slices.Contains(strings.Fields(strings.Trim(mods, `"`)), module)
		}
	}
	return false
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
	case ioproto.LanguageJava:
		return kindJava
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
// Rscript is, Java where a JDK's java is (hasJShell). Only file lookups: no interpreter is started, so an idle
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
	if bins[kindJava] != "" && hasJShell(bins[kindJava]) {
		langs = append(langs, ioproto.LanguageJava)
	}
	return langs
}

// hasJShell reports whether the java at bin is a JDK's, with JShell (a
// JRE's lacks the jdk.jshell module): its jshell sits next to it.
func hasJShell(bin string) bool {
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(filepath.Dir(real), "jshell"))
	return err == nil
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
