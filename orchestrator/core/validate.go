package core

import (
	"crypto/rand"
	"encoding/base32"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/ioproto"
)

// MaxUserIDLen bounds a user ID.
const MaxUserIDLen = 128

// userIDPattern: user IDs come from the caller's own identity system (emails,
// UUIDs, numeric IDs), so they allow '@' and '.', but nothing that could
// matter in a label value, a log line or a path.
var userIDPattern = regexp.MustCompile(`^[A-Za-z0-9._@-]+$`)

// ValidateUserID checks a caller-chosen end-user ID: 1 to 128 characters from
// [A-Za-z0-9._@-]. Errors wrap ErrInvalidArgument and say what is wrong.
func ValidateUserID(id string) error {
	return checkName("user ID", id, MaxUserIDLen, userIDPattern, "has characters outside [A-Za-z0-9._@-]")
}

// checkName applies the rule user IDs and tenant names share: present, at
// most max bytes long, and matching pattern. what names the value in the
// messages; mismatch says what a value that does not match breaks.
func checkName(what, s string, max int, pattern *regexp.Regexp, mismatch string) error {
	switch {
	case s == "":
		return Invalidf("%s is empty", what)
	case len(s) > max:
		return Invalidf("%s is %d bytes long; the limit is %d", what, len(s), max)
	case !pattern.MatchString(s):
		// s is at most max bytes long here: quoting it in full is safe.
		return Invalidf("%s %q %s", what, s, mismatch)
	}
	return nil
}

// sandboxIDPrefix starts every sandbox ID so IDs are recognisable in logs,
// container names and directory listings.
const sandboxIDPrefix = "sb-"

// sandboxIDRandLen is the number of random base32 characters after the
// prefix: 20 characters carry 100 bits, plenty against collisions and guessing.
const sandboxIDRandLen = 20

var sandboxIDPattern = regexp.MustCompile(`^sb-[a-z2-7]{20}$`)

// ValidateSandboxID checks the form of a sandbox ID ("sb-" and 20 characters
// of lowercase base32, [a-z2-7]) without looking it up. IDs name directories
// on the host, so nothing else is ever used as one. Errors wrap
// ErrInvalidArgument.
func ValidateSandboxID(id string) error {
	if id == "" {
		return Invalidf("sandbox ID is empty")
	}
	if !sandboxIDPattern.MatchString(id) {
		return Invalidf("sandbox ID %q is malformed: want %q followed by %d characters of [a-z2-7]", Truncate(id, 64), sandboxIDPrefix, sandboxIDRandLen)
	}
	return nil
}

var sandboxIDEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newSandboxID returns a fresh random sandbox ID.
func NewSandboxID() string {
	var b [13]byte  // 104 bits, of which the first 100 are used
	rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return sandboxIDPrefix + strings.ToLower(sandboxIDEncoding.EncodeToString(b[:]))[:sandboxIDRandLen]
}

// ValidateCommandID checks a command ID with the /io protocol's rule (the
// driver applies the same one: IDs name files under /io/out). Errors wrap
// ErrInvalidArgument.
func ValidateCommandID(id string) error {
	if err := ioproto.ValidateCommandID(id); err != nil {
		return Invalidf("%v", err)
	}
	return nil
}

// validateIDs checks the IDs of an operation on a command: the sandbox's
// first, then the command's.
func validateIDs(sandboxID, commandID string) error {
	if err := ValidateSandboxID(sandboxID); err != nil {
		return err
	}
	return ValidateCommandID(commandID)
}

// languageAliases are the other names a caller may use for a language
// (E2B's SDKs say "js", "ts" and "r"); they are normalised before the
// record is written, so a retry under either name is the same command.
var languageAliases = map[string]string{
	"js": ioproto.LanguageJavaScript, "ts": ioproto.LanguageTypeScript, "R": ioproto.LanguageR,
}

// canonicalLanguage is lang with an alias resolved and the default applied.
func CanonicalLanguage(lang string) string {
	if lang == "" {
		return ioproto.LanguagePython
	}
	if c, ok := languageAliases[lang]; ok {
		return c
	}
	return lang
}

// validateLanguage checks a command's language: one the /io protocol knows
// (python, bash, javascript, typescript, r, java), an alias of one, or empty for
// the default (python). Whether the sandbox's image has it is Submit's
// check (FAILED_PRECONDITION).
func validateLanguage(lang string) error {
	if ioproto.KnownLanguage(CanonicalLanguage(lang)) {
		return nil
	}
	return Invalidf("language %q is not supported; use one of %s", Truncate(lang, 32), strings.Join(ioproto.Languages, ", "))
}

// validateCommandEnv checks a command's environment with the /io
// protocol's rules (the driver checks them again).
func validateCommandEnv(env map[string]string) error {
	if err := ioproto.ValidateEnv(env); err != nil {
		return Invalidf("%v", err)
	}
	return nil
}

// Validate checks the rules of an ExecRequest that do not depend on the
// server's configuration: the IDs' forms, the language, the env, and a timeout that
// is a duration at all (not negative, not below the protocol's
// millisecond). Submit also checks the code and the timeout against the
// server's limits. Errors wrap ErrInvalidArgument.
func (r ExecRequest) Validate() error {
	if err := ValidateSandboxID(r.SandboxID); err != nil {
		return err
	}
	if r.CommandID != "" {
		if err := ValidateCommandID(r.CommandID); err != nil {
			return err
		}
	}
	if err := validateLanguage(r.Language); err != nil {
		return err
	}
	if err := validateCommandEnv(r.Env); err != nil {
		return err
	}
	if err := validateContextID(r.ContextID, true); err != nil {
		return err
	}
	switch {
	case r.Timeout < 0:
		return Invalidf("timeout %v is negative; use 0 for the server default", r.Timeout)
	case r.Timeout > 0 && r.Timeout < time.Millisecond:
		return Invalidf("timeout %v is below the 1ms resolution", r.Timeout)
	}
	return r.validateInput()
}

// Validate checks a List filter: each field is empty or well-formed.
// Errors wrap ErrInvalidArgument.
func (f ListFilter) Validate() error {
	if f.Tenant != "" {
		if err := ValidateTenant(f.Tenant); err != nil {
			return err
		}
	}
	if f.UserID != "" {
		if err := ValidateUserID(f.UserID); err != nil {
			return err
		}
	}
	if err := validateMetadataFilter(f.Metadata); err != nil {
		return err
	}
	switch f.State {
	case "", StateRunning, StateDead, StateHibernated:
		return nil
	}
	return Invalidf("state filter %q is not %q, %q or %q", Truncate(string(f.State), 32), StateRunning, StateDead, StateHibernated)
}

// Bounds below which Docker refuses (or the sandbox cannot work): the
// driver and a Python interpreter need some memory and a few processes
// (minDiskBytes, for volumes, is in volume.go).
const (
	minMemoryBytes = 32 << 20
	minNanoCPUs    = 10_000_000 // 0.01 CPU, Docker's own minimum
	minPidsLimit   = 16
	// MinPidsLimitGVisor: under runsc the limit also counts gVisor's own
	// threads (its sandboxed processes are not host processes), and with 64
	// the sandbox itself crashes (measured: exit 2); 96 works, 128 leaves
	// room.
	MinPidsLimitGVisor = 128
)

// checkRuntimeLimits refuses limits a runtime cannot run with.
func checkRuntimeLimits(runtime string, l Limits) error {
	if runtime == RuntimeGVisor && l.PidsLimit < MinPidsLimitGVisor {
		return Invalidf("limit pids_limit is %d; under the %s runtime the minimum is %d (the limit also counts gVisor's own threads)", l.PidsLimit, RuntimeGVisor, MinPidsLimitGVisor)
	}
	return nil
}

// resolveLimits applies the server defaults to zero fields of req and checks
// the result against the server maxima (a zero maximum means no cap).
func resolveLimits(req, def, max Limits) (Limits, error) {
	fields := []struct {
		name          string
		req, def, max int64
		min           int64
		out           *int64
	}{
		{"memory_bytes", req.MemoryBytes, def.MemoryBytes, max.MemoryBytes, minMemoryBytes, nil},
		{"nano_cpus", req.NanoCPUs, def.NanoCPUs, max.NanoCPUs, minNanoCPUs, nil},
		{"pids_limit", req.PidsLimit, def.PidsLimit, max.PidsLimit, minPidsLimit, nil},
		{"disk_bytes", req.DiskBytes, def.DiskBytes, max.DiskBytes, MinDiskBytes, nil},
	}
	var out Limits
	fields[0].out, fields[1].out, fields[2].out, fields[3].out = &out.MemoryBytes, &out.NanoCPUs, &out.PidsLimit, &out.DiskBytes
	for _, f := range fields {
		v := f.req
		switch {
		case v < 0:
			return Limits{}, Invalidf("limit %s is %d; it must be positive, or 0 for the server default", f.name, v)
		case v == 0:
			v = f.def
		case f.max > 0 && v > f.max:
			return Limits{}, Invalidf("limit %s is %d; the server maximum is %d", f.name, v, f.max)
		case v < f.min:
			return Limits{}, Invalidf("limit %s is %d; the minimum is %d", f.name, v, f.min)
		}
		*f.out = v
	}
	return out, nil
}

// Bounds on the environment a caller may give a sandbox: it travels in the
// container's config, so it stays small.
const (
	maxEnvVars  = 256
	maxEnvBytes = 128 << 10
)

// validateEnv checks variables that Docker would otherwise mangle or refuse.
func validateEnv(env map[string]string) error {
	if len(env) > maxEnvVars {
		return Invalidf("env has %d variables; the limit is %d", len(env), maxEnvVars)
	}
	total := 0
	for k, v := range env {
		switch {
		case k == "":
			return Invalidf("env has a variable with an empty name")
		case strings.ContainsAny(k, "=\x00"):
			return Invalidf("env variable name %q contains '=' or a NUL byte", Truncate(k, 64))
		case strings.ContainsRune(v, 0):
			return Invalidf("env variable %s contains a NUL byte", Truncate(k, 64))
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			return Invalidf("env variable %s is not valid UTF-8", Truncate(k, 64))
		}
		total += len(k) + len(v) + 1
	}
	if total > maxEnvBytes {
		return Invalidf("env is %d bytes long; the limit is %d", total, maxEnvBytes)
	}
	return nil
}

// truncate shortens s for an error message so a huge invalid input cannot
// blow up the response.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
