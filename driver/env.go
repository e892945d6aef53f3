package driver

import (
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/ioproto"
)

// The sandbox's environment (ioproto/PROTOCOL.md, *Sandbox environment*):
// env records in the log give every command after them variables, as if
// the container had been created with them. The driver keeps the
// environment as of each point of the log it has read (envState, a new one
// per record, never changed once made): an exec record queued takes the
// state current when it was read, so a record after it in the log cannot
// change it, however long it waits in its context's queue, and a command
// after a record cannot run without it.
//
// bash gets the state's variables over the driver's environment at start
// (baseEnv). A kernel is started with the state of the next command it
// will run; before each later command the driver sends it, with the
// request (setenv), the variables that changed since, which the kernel
// sets for good. The states of the commands a kernel runs only grow along
// the log (each context runs its commands in log order, and records only
// add or override), so a kernel is only ever moved forward.
//
// The driver also sets the variables in its own process environment, so
// whatever else it starts inherits them. A restarted driver applies the
// records before its saved offset again while it reads the log at start,
// before it starts any interpreter; those after the offset it reads again
// in order, as the previous driver did.

// envState is the sandbox's environment after some prefix of the log.
type envState struct {
	// gen counts the env records applied to reach this state; 0 is the
	// environment the driver started with.
	gen int64
	// vars are the variables the env records set, merged key by key.
	vars map[string]string
}

// genOf is st's generation; a nil state is the start (a kernel that was
// never told of any record).
func (st *envState) genOf() int64 {
	if st == nil {
		return 0
	}
	return st.gen
}

// changedSince returns the variables of st whose values old (nil: none)
// does not have.
func (st *envState) changedSince(old *envState) map[string]string {
	var out map[string]string
	for k, v := range st.vars {
		if old != nil {
			if ov, ok := old.vars[k]; ok && ov == v {
				continue
			}
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// applyEnvRecord makes the env record rec the sandbox's environment from
// here on in the log (recover and handleLine): merged over the current
// state into a new one, and set in the driver's own environment. A record
// whose result would break the env bounds is not applied; the error says
// why.
func (d *Driver) applyEnvRecord(rec ioproto.Record) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	vars, err := ioproto.MergeEnv(d.env.vars, rec.Env)
	if err != nil {
		return err
	}
	d.env = &envState{gen: d.env.gen + 1, vars: vars}
	for _, k := range slices.Sorted(maps.Keys(rec.Env)) {
		if err := os.Setenv(k, rec.Env[k]); err != nil {
			d.log.Warn("env record: cannot set the variable in the driver's environment", "command_id", rec.CommandID, "name", k, "err", err)
		}
	}
	return nil
}

// envRecord handles an env record read from the log: it applies it, or
// answers it like a malformed record when it cannot be applied.
func (d *Driver) envRecord(rec ioproto.Record, offset int64) {
	if err := d.applyEnvRecord(rec); err != nil {
		d.reportMalformed(rec.CommandID, err, offset)
		return
	}
	d.log.Info("env record applied: later commands get its variables", "command_id", rec.CommandID, "names", strings.Join(slices.Sorted(maps.Keys(rec.Env)), ","))
}

// envForNextLocked is the state a kernel of c started now must have: that
// of c's next queued command, or the current one when none is queued
// (every command queued later takes that one or a newer one). d.mu is
// held.
func (d *Driver) envForNextLocked(c *execContext) *envState {
	if len(c.queue) > 0 {
		return c.queue[0].env
	}
	return d.env
}

func (d *Driver) envForNext(c *execContext) *envState {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.envForNextLocked(c)
}

// processEnv is the environment of a process the driver starts under
// state st: the driver's at start with st's variables over it.
func (d *Driver) processEnv(st *envState) []string {
	if st == nil {
		return d.baseEnv
	}
	return withEnv(d.baseEnv, st.vars)
}

// setenvFor returns the variables to send kernel k with a request of a
// command under state st, and records that k has them. nil: nothing
// changed.
func (d *Driver) setenvFor(k *kernel, st *envState) map[string]string {
	if st.genOf() == k.env.genOf() {
		return nil
	}
	if st.genOf() < k.env.genOf() {
		// Cannot happen (see above): a kernel is started with the state
		// of the next command it runs, and a context runs in log order.
		d.log.Error("a command's environment is older than its kernel's; the kernel keeps the newer variables", "kernel_gen", k.env.genOf(), "command_gen", st.genOf())
		return nil
	}
	set := st.changedSince(k.env)
	k.env = st
	return set
}

// restoreProcessEnv undoes in the process environment what the env
// records applied by st set, back to base (after an adoption, before a new
// Driver starts on another sandbox's /io).
func restoreProcessEnv(base []string, st *envState) {
	if st == nil {
		return
	}
	orig := map[string]string{}
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		orig[k] = v
	}
	for k := range st.vars {
		if v, ok := orig[k]; ok {
			_ = os.Setenv(k, v)
		} else {
			_ = os.Unsetenv(k)
		}
	}
}
