package core

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Templates: a tenant's own sandbox images, built by sandboxd from a spec
// on top of the sandbox image (or another template of the tenant), so a
// team's agent gets its packages, files and environment without anyone
// rebuilding sandboxd's image. A template adds to the image; it cannot
// replace what runs the sandbox (the driver, the io sidecar, the user,
// /io, /workspace): sandboxd lays those again in every template's last
// layer (docs/templates.md; SECURITY.md on what a build can do).
//
// A spec is an ordered list of steps, as a Dockerfile is and as E2B's
// template builder sends them; its content hash (SpecHash) names the built
// image, so an unchanged spec is never built twice. Each build of a
// template is a version; sandboxes created from a template get its latest
// ready version, and a version stays on disk while a sandbox uses it.
//
// The rules on names, steps, paths and bounds are here, said once;
// Validating applies them before a backend sees a request.

// TemplateSpec is what a template is built from.
type TemplateSpec struct {
	// Base is "" (the server's sandbox image) or another template of the
	// tenant (its ID or name): its latest ready version.
	Base  string         `json:"base,omitempty"`
	Steps []TemplateStep `json:"steps"`
}

// TemplateStep is one step of a spec: exactly one field is set.
type TemplateStep struct {
	// Apt installs Debian packages from the host's Debian mirror.
	Apt []string `json:"apt,omitempty"`
	// Copy puts files of an uploaded archive into the image.
	Copy *TemplateCopy `json:"copy,omitempty"`
	// Env sets variables in the image (and for the later steps).
	Env map[string]string `json:"env,omitempty"`
	// Workdir is the working directory of the later steps (a sandbox's
	// own stays /workspace).
	Workdir string `json:"workdir,omitempty"`
	// User runs the later Run steps as TemplateUserRoot (the default) or
	// TemplateUserSandbox (uid 1000, the sandbox's user).
	User string `json:"user,omitempty"`
	// Run is a shell command (sh -c) run at build time.
	Run string `json:"run,omitempty"`
}

// TemplateCopy copies from an uploaded archive (PutTemplateFile): a tar,
// plain or gzip-compressed, unpacked by the Docker engine.
type TemplateCopy struct {
	// Archive is the uploaded archive's key (TemplateFileKey's form).
	Archive string `json:"archive"`
	// Src is the path inside the archive ("." for all of it); Dest where
	// it goes in the image, as Docker's COPY does (a Dest ending in "/"
	// is a directory).
	Src  string `json:"src"`
	Dest string `json:"dest"`
	// Mode, when not zero, is set on what was copied (permission bits).
	Mode uint32 `json:"mode,omitempty"`
	// Owner is TemplateUserRoot ("", the default) or TemplateUserSandbox.
	Owner string `json:"owner,omitempty"`
}

// The users a template's steps can name.
const (
	TemplateUserRoot    = "root"
	TemplateUserSandbox = "sandbox" // uid and gid 1000, the sandbox's user
)

// Template describes a template and its builds.
type Template struct {
	ID        string
	Name      string
	Tenant    string
	CreatedAt time.Time
	// Versions are its builds, oldest first, as kept: a failed build's
	// version stays (with its log) until a later build succeeds; a ready
	// one while it is the latest ready one or a sandbox uses it.
	Versions []TemplateVersion
}

// TemplateVersion is one build of a template.
type TemplateVersion struct {
	Version  int
	SpecHash string
	State    TemplateState
	// Reason says why a build failed (with its class: FailedPrecondition
	// for a failed step, ResourceExhausted for a bound, DeadlineExceeded
	// for the time limit, Unavailable for the engine).
	Reason    string
	Cached    bool // ready from an earlier build of the same spec: nothing was built
	StartedAt time.Time
	// FinishedAt is zero while building.
	FinishedAt time.Time
	// SizeBytes is the image's size once ready.
	SizeBytes int64
	// UsedBy counts the sandboxes (running or hibernated) created from it.
	UsedBy int
}

// TemplateState is where a version's build stands.
type TemplateState string

// The states of a template version.
const (
	TemplateBuilding TemplateState = "building"
	TemplateReady    TemplateState = "ready"
	TemplateFailed   TemplateState = "failed"
)

// Current returns the template's latest ready version, if any.
func (t Template) Current() (TemplateVersion, bool) {
	for i := len(t.Versions) - 1; i >= 0; i-- {
		if t.Versions[i].State == TemplateReady {
			return t.Versions[i], true
		}
	}
	return TemplateVersion{}, false
}

// Latest returns the template's newest version (building, ready or
// failed), if any.
func (t Template) Latest() (TemplateVersion, bool) {
	if len(t.Versions) == 0 {
		return TemplateVersion{}, false
	}
	return t.Versions[len(t.Versions)-1], true
}

// TemplateBuildEvent is one event of a build: a line of its log, or (last)
// the version it finished as.
type TemplateBuildEvent struct {
	// Seq numbers the log's lines from 1; FollowTemplateBuild resumes after
	// one.
	Seq  int64
	Time time.Time
	Line string
	// Done is set on the last event only: the version as it finished.
	Done *TemplateVersion
}

// Template bounds.
const (
	MaxTemplateSteps     = 100
	MaxTemplatePackages  = 200 // over all Apt steps
	MaxTemplateRunBytes  = 16 << 10
	MaxTemplatePathBytes = 1024
	// MaxTemplateLogLine cuts a build log's lines; a build's log keeps at
	// most MaxTemplateLogBytes (its end is marked when cut).
	MaxTemplateLogLine  = 4 << 10
	MaxTemplateLogBytes = 4 << 20
	// MaxTemplateLogPage bounds the lines of one TemplateBuildLog answer.
	MaxTemplateLogPage = 1000
	// DefaultMaxTemplateFileBytes caps one uploaded archive unless
	// configured; DefaultMaxTemplatesPerTenant a tenant's templates.
	DefaultMaxTemplateFileBytes  = 1 << 30
	DefaultMaxTemplatesPerTenant = 50
	// DefaultTemplateBuilds is how many builds run at once unless
	// configured; DefaultTemplateBuildTimeout how long one may take.
	DefaultTemplateBuilds       = 2
	DefaultTemplateBuildTimeout = 20 * time.Minute
)

var (
	templateIDRE = regexp.MustCompile(`^tpl-[a-z0-9]{20}$`)
	// debianPackageRE is Debian policy's package name, with an optional
	// "=version" (policy 5.6.1, 5.6.12) or "/release".
	debianPackageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+~:-]+|/[a-z0-9-]+)?$`)
	sha256HexRE     = regexp.MustCompile(`^[0-9a-f]{64}$`)
	// templatePathRE keeps a template's paths to characters that mean
	// nothing to a Dockerfile's parser (no quotes, spaces, "$" or "\").
	templatePathRE = regexp.MustCompile(`^[A-Za-z0-9_.+@%,:=~/-]+$`)
	envNameRE      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// NewTemplateID returns a new template ID: "tpl-" and 20 random lower-case
// base32 characters.
func NewTemplateID() string {
	var b [13]byte
	rand.Read(b[:])
	return "tpl-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))[:20]
}

// IsTemplateID reports whether ref has the form of a template ID (else it
// is a name).
func IsTemplateID(ref string) bool { return templateIDRE.MatchString(ref) }

// ValidateTemplateName checks a template's name: 1 to 64 of A-Z a-z 0-9
// _ . -, and not of the form of an ID (so a reference is never ambiguous).
func ValidateTemplateName(name string) error {
	switch {
	case name == "":
		return Invalidf("template: a name is required")
	case !snapshotNameRE.MatchString(name) || name == "." || name == "..":
		return Invalidf("template name %q: want 1 to 64 of A-Z a-z 0-9 _ . -", Truncate(name, 80))
	case IsTemplateID(name):
		return Invalidf("template name %q has the form of a template ID", name)
	}
	return nil
}

// ValidateTemplateRef checks a reference to a template: its ID or name.
func ValidateTemplateRef(ref string) error {
	if IsTemplateID(ref) {
		return nil
	}
	if err := ValidateTemplateName(ref); err != nil {
		return Invalidf("template %q: want a template ID (tpl-…) or name", Truncate(ref, 80))
	}
	return nil
}

// ValidateTemplateFileKey checks an uploaded archive's key: 64 lower-case
// hex digits (clients use the SHA-256 of the archive; E2B's SDK its own
// hash of the files). Keys are a tenant's own and immutable: a second
// upload under one is ignored, so a spec naming keys names content.
func ValidateTemplateFileKey(key string) error {
	if !sha256HexRE.MatchString(key) {
		return Invalidf("template file key %q: want 64 lower-case hex digits (the archive's SHA-256)", Truncate(key, 80))
	}
	return nil
}

// TemplateNotFound is the error for a template the caller cannot see.
func TemplateNotFound(ref string) error {
	return NotFoundf("template %q not found", Truncate(ref, 80))
}

// Validate checks a spec: bounded, every step one thing, names and paths
// well formed.
func (s TemplateSpec) Validate() error {
	if s.Base != "" {
		if err := ValidateTemplateRef(s.Base); err != nil {
			return Invalidf("base: %v", err)
		}
	}
	if len(s.Steps) == 0 {
		return Invalidf("template: a spec needs at least one step")
	}
	if len(s.Steps) > MaxTemplateSteps {
		return Invalidf("template: %d steps, at most %d", len(s.Steps), MaxTemplateSteps)
	}
	packages := 0
	for i, st := range s.Steps {
		n := 0
		for _, set := range []bool{st.Apt != nil, st.Copy != nil, st.Env != nil, st.Workdir != "", st.User != "", st.Run != ""} {
			if set {
				n++
			}
		}
		if n != 1 {
			return Invalidf("step %d: set exactly one of apt, copy, env, workdir, user, run (%d set)", i+1, n)
		}
		if err := st.validate(); err != nil {
			return Invalidf("step %d: %v", i+1, strings.TrimPrefix(err.Error(), ErrInvalidArgument.Error()+": "))
		}
		packages += len(st.Apt)
	}
	if packages > MaxTemplatePackages {
		return Invalidf("template: %d packages, at most %d", packages, MaxTemplatePackages)
	}
	return nil
}

func (st TemplateStep) validate() error {
	switch {
	case st.Apt != nil:
		if len(st.Apt) == 0 {
			return Invalidf("apt: no packages")
		}
		for _, p := range st.Apt {
			if !debianPackageRE.MatchString(p) {
				return Invalidf("apt: %q is not a Debian package name (e.g. jq, or jq=1.6-2.1)", Truncate(p, 80))
			}
		}
	case st.Copy != nil:
		c := st.Copy
		if err := ValidateTemplateFileKey(c.Archive); err != nil {
			return Invalidf("copy: %v", err)
		}
		src := c.Src
		if src == "" || path.IsAbs(src) || path.Clean(src) != src || src == ".." || strings.HasPrefix(src, "../") ||
			len(src) > MaxTemplatePathBytes || !templatePathRE.MatchString(src) {
			return Invalidf("copy: source %q: want a clean relative path inside the archive, of A-Z a-z 0-9 and _.+@%%,:=~/-", Truncate(src, 80))
		}
		dest := strings.TrimSuffix(c.Dest, "/")
		if err := validateImagePath("copy destination", dest); err != nil {
			return err
		}
		if c.Mode > 0o777 {
			return Invalidf("copy: mode %#o: permission bits only", c.Mode)
		}
		if err := validateTemplateUser("copy owner", c.Owner); err != nil {
			return err
		}
	case st.Env != nil:
		if len(st.Env) == 0 {
			return Invalidf("env: no variables")
		}
		for k, v := range st.Env {
			if !envNameRE.MatchString(k) {
				return Invalidf("env: name %q: want letters, digits and _, not starting with a digit", Truncate(k, 64))
			}
			if i := strings.IndexFunc(v, unicode.IsControl); i >= 0 || !utf8.ValidString(v) {
				return Invalidf("env: %s: control characters and invalid UTF-8 cannot be set in an image", k)
			}
		}
		if err := validateEnv(st.Env); err != nil {
			return err
		}
	case st.Workdir != "":
		return validateImagePath("workdir", st.Workdir)
	case st.User != "":
		return validateTemplateUser("user", st.User)
	case st.Run != "":
		switch {
		case strings.TrimSpace(st.Run) == "":
			return Invalidf("run: the command is blank")
		case len(st.Run) > MaxTemplateRunBytes:
			return Invalidf("run: the command is %d bytes; at most %d", len(st.Run), MaxTemplateRunBytes)
		case strings.ContainsRune(st.Run, 0) || !utf8.ValidString(st.Run):
			return Invalidf("run: the command contains a NUL byte or invalid UTF-8")
		}
	}
	return nil
}

func validateTemplateUser(what, u string) error {
	if u == "" || u == TemplateUserRoot || u == TemplateUserSandbox {
		return nil
	}
	return Invalidf("%s %q: want %q or %q", what, Truncate(u, 64), TemplateUserRoot, TemplateUserSandbox)
}

// reservedImagePaths are what a template may not write by its steps: what
// runs the sandbox is sandboxd's (sandbox-image/Dockerfile). A Run step,
// as root, can still write anywhere: the builder therefore lays the
// driver, the io sidecar and the statx shim again in the image's last
// layer, and the container's user, entrypoint, /io and /workspace are
// sandboxd's, so that no template replaces them.
var reservedImagePaths = []string{"/io", "/workspace", "/usr/local/bin/sandbox-driver", "/usr/local/bin/sandbox-iosidecar",
	"/usr/local/lib/sandboxd", "/etc/ld.so.preload", "/proc", "/sys", "/dev"}

// validateImagePath checks a path a template's step names in its image.
func validateImagePath(what, p string) error {
	switch {
	case !path.IsAbs(p) || path.Clean(p) != p:
		return Invalidf("%s %q: want an absolute, clean path", what, Truncate(p, 80))
	case len(p) > MaxTemplatePathBytes || !templatePathRE.MatchString(p):
		return Invalidf("%s %q: want at most %d of A-Z a-z 0-9 and _.+@%%,:=~/-", what, Truncate(p, 80), MaxTemplatePathBytes)
	case p == "/":
		return Invalidf("%s: not the root", what)
	}
	for _, r := range reservedImagePaths {
		if p == r || strings.HasPrefix(p, r+"/") {
			return Invalidf("%s %s: %s is sandboxd's, a template cannot write there", what, p, r)
		}
	}
	return nil
}

// Archives returns the keys of the archives the spec copies from, each
// once, in order.
func (s TemplateSpec) Archives() []string {
	var keys []string
	for _, st := range s.Steps {
		if st.Copy != nil && !slices.Contains(keys, st.Copy.Archive) {
			keys = append(keys, st.Copy.Archive)
		}
	}
	return keys
}

// SpecHash is the spec's identity: the SHA-256 of its canonical JSON with
// the base image's ID (so a new sandbox image, or a new version of the
// base template, makes new templates). Archives are named by their
// immutable keys, so the hash covers their content.
func (s TemplateSpec) SpecHash(baseImageID string) string {
	b, _ := json.Marshal(struct {
		Base  string         `json:"base_image"`
		Steps []TemplateStep `json:"steps"`
	}{baseImageID, s.Steps}) // maps marshal with sorted keys
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
