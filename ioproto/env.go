package ioproto

import (
	"fmt"
	"maps"
	"slices"
)

// KindEnv is the record that gives a sandbox environment variables after
// its container started (PROTOCOL.md, *Sandbox environment*), so that a
// started warm-pool sandbox can be claimed and then shaped as if it had
// been created with the caller's env. It sets its variables (Record.Env)
// for every command after it in the log, in every context and language.
// Like an interrupt it has a command ID but is no command: no events file,
// no use of the ID. It is state: a restarted driver applies again every
// env record before its saved offset before it runs anything.
const KindEnv = "env"

// EnvRecordIDPrefix starts the command ID of the env records the host
// appends ("sbx-env-<random>"), so a reader of the log can tell them from
// the user's IDs.
const EnvRecordIDPrefix = "sbx-env-"

// EnvRecord returns the env record with command ID id giving the sandbox
// the variables in env (EncodeRecord validates it).
func EnvRecord(id string, env map[string]string) Record {
	return Record{Type: KindEnv, CommandID: id, Env: env}
}

// Driver-internal variables: the sandbox-driver binary reads them from its
// environment at start to configure itself (cmd/sandbox-driver/main.go).
// An env record may not set them: what the driver reads for its own control
// comes from the container's creation alone, never from the log the
// sandbox can append to.
const (
	EnvIO        = "SANDBOX_IO"
	EnvWorkspace = "SANDBOX_WORKSPACE"
	EnvPython    = "SANDBOX_PYTHON"
	EnvWake      = "SANDBOX_WAKE"
	EnvMaxOutput = "SANDBOX_MAX_OUTPUT"
	EnvOutBudget = "SANDBOX_OUT_BUDGET"
	EnvLogLevel  = "SANDBOX_LOG_LEVEL"
)

// DriverEnv lists the driver-internal variables (EnvPoolDriver and the
// Env* constants above), which an env record may not set. A sandbox whose
// requested env names one cannot be shaped from a started pool sandbox: it
// must be created with that env.
var DriverEnv = []string{EnvPoolDriver, EnvIO, EnvWorkspace, EnvPython, EnvWake, EnvMaxOutput, EnvOutBudget, EnvLogLevel}

// IsDriverEnv reports whether name is one of DriverEnv.
func IsDriverEnv(name string) bool { return slices.Contains(DriverEnv, name) }

// validateEnvRecord checks an env record: its variables follow a
// command's env rules (ValidateEnv) and name no driver-internal variable.
func (r *Record) validateEnvRecord() error {
	if err := ValidateEnv(r.Env); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	for _, k := range slices.Sorted(maps.Keys(r.Env)) {
		if IsDriverEnv(k) {
			return fmt.Errorf("%w: env record sets %s, a variable the driver reads for its own control (the sandbox must be created with it)", ErrMalformed, k)
		}
	}
	return nil
}

// MergeEnv returns the sandbox's environment cur with the env record's
// variables add set over it (later records override earlier ones key by
// key), without changing either map. The result must still follow
// ValidateEnv's bounds, as an env given at the sandbox's creation does;
// otherwise MergeEnv returns an error and the record is not applied.
func MergeEnv(cur, add map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(cur)+len(add))
	maps.Copy(out, cur)
	maps.Copy(out, add)
	if err := ValidateEnv(out); err != nil {
		return nil, fmt.Errorf("the sandbox's environment with this record would break the env bounds: %v", err)
	}
	return out, nil
}
