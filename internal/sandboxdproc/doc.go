// Package sandboxdproc runs a real sandboxd binary for tests and benchmarks.
//
// It holds the mechanics the end-to-end suites, the agent's integration
// tests and sandbox-bench share: building the binary, starting it and
// waiting until it serves, keeping the tail of its log, stopping or killing
// it, and removing what it leaves behind in a state directory. Deciding
// whether to skip, fail or report stays with the callers.
package sandboxdproc
