package core

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Templates: a tenant's own sandbox image, built by sandboxd from a spec
// on top of the sandbox image (or another template), so a team's agent
// gets its packages, files and environment without rebuilding sandboxd's
// image. A template can add to the image; it cannot replace what runs the
// sandbox (the driver, the kernels, the user, /io, /workspace): sandboxd
// keeps those its own (see the README's Templates).
//
// WORK IN PROGRESS (branch templates): the types and the rules; the port,
// the Docker builder and the doors are not written yet. See
// /work/notes/issue25-templates-design.md.

// TemplateSpec is what a template is built from. Its hash (SpecHash) names
// the built image: an unchanged spec is never built twice.
type TemplateSpec struct {
	// Base is "" (the server's sandbox image) or another template of the
	// tenant, by name.
	Base string `json:"base,omitempty"`
	// Packages are Debian packages to install (apt-get install), from the
	// host's Debian mirror.
	Packages []string `json:"packages,omitempty"`
	// Files are uploaded files (content-addressed by their SHA-256) put at
	// Dest in the image, owned by root, mode Mode.
	Files []TemplateFile `json:"files,omitempty"`
	// Env is set in the image.
	Env map[string]string `json:"env,omitempty"`
	// Workdir is the working directory of commands run at build time
	// (the sandbox's own stays /workspace).
	Workdir string `json:"workdir,omitempty"`
	// Run are shell commands run as root at build time, in order, after
	// the packages and files.
	Run []string `json:"run,omitempty"`
}

// TemplateFile is a file of a template: an uploaded blob and where it goes.
type TemplateFile struct {
	SHA256 string `json:"sha256"`
	Dest   string `json:"dest"`
	Mode   uint32 `json:"mode,omitempty"` // 0: 0644
}

// Template describes a built (or building) version of a template.
type Template struct {
	ID       string
	Name     string
	Tenant   string
	Version  int
	SpecHash string
	// State is building, ready or failed; Reason says why a build failed.
	State     string
	Reason    string
	CreatedAt time.Time
	BuiltAt   time.Time
}

// Template bounds.
const (
	MaxTemplatePackages = 200
	MaxTemplateFiles    = 100
	MaxTemplateRun      = 50
	MaxTemplateRunBytes = 16 << 10
)

var (
	// debianPackageRE is Debian policy's package name, with an optional
	// "=version" (policy 5.6.1, 5.6.12).
	debianPackageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+~:-]+)?$`)
	sha256HexRE     = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ValidateTemplateName checks a template's name: as a snapshot's.
func ValidateTemplateName(name string) error {
	if name == "" {
		return Invalidf("template: a name is required")
	}
	if !snapshotNameRE.MatchString(name) || name == "." || name == ".." {
		return Invalidf("template name %q: want 1 to 64 of A-Z a-z 0-9 _ . -", Truncate(name, 80))
	}
	return nil
}

// Validate checks a spec: bounded, names and paths well formed, the env
// as Options.Env's.
func (s TemplateSpec) Validate() error {
	if s.Base != "" {
		if err := ValidateTemplateName(s.Base); err != nil {
			return Invalidf("base: %v", err)
		}
	}
	if len(s.Packages) > MaxTemplatePackages {
		return Invalidf("template: %d packages, at most %d", len(s.Packages), MaxTemplatePackages)
	}
	for _, p := range s.Packages {
		if !debianPackageRE.MatchString(p) {
			return Invalidf("package %q: not a Debian package name (e.g. jq, or jq=1.6-2.1)", Truncate(p, 80))
		}
	}
	if len(s.Files) > MaxTemplateFiles {
		return Invalidf("template: %d files, at most %d", len(s.Files), MaxTemplateFiles)
	}
	for _, f := range s.Files {
		switch {
		case !sha256HexRE.MatchString(f.SHA256):
			return Invalidf("file %q: sha256 %q is not 64 lower-case hex digits", Truncate(f.Dest, 80), Truncate(f.SHA256, 80))
		case f.Mode > 0o777:
			return Invalidf("file %s: mode %#o: permission bits only", f.Dest, f.Mode)
		}
		if err := validateImagePath("file destination", f.Dest); err != nil {
			return err
		}
	}
	if err := validateEnv(s.Env); err != nil {
		return err
	}
	if s.Workdir != "" {
		if err := validateImagePath("workdir", s.Workdir); err != nil {
			return err
		}
	}
	if len(s.Run) > MaxTemplateRun {
		return Invalidf("template: %d commands, at most %d", len(s.Run), MaxTemplateRun)
	}
	for i, c := range s.Run {
		switch {
		case strings.TrimSpace(c) == "":
			return Invalidf("run command %d is empty", i+1)
		case len(c) > MaxTemplateRunBytes:
			return Invalidf("run command %d is %d bytes; at most %d", i+1, len(c), MaxTemplateRunBytes)
		case strings.ContainsRune(c, 0) || !utf8.ValidString(c):
			return Invalidf("run command %d contains a NUL byte or invalid UTF-8", i+1)
		}
	}
	return nil
}

// reservedImagePaths are what a template's files may not be: what runs the
// sandbox is sandboxd's (sandbox-image/Dockerfile). A Run command, as
// root, can still write anywhere: the builder therefore lays the driver,
// the io sidecar and the statx shim again in the image's last layer, and
// the container's user and entrypoint are sandboxd's, so that no template
// replaces them.
var reservedImagePaths = []string{"/io", "/workspace", "/usr/local/bin/sandbox-driver", "/usr/local/bin/sandbox-iosidecar",
	"/usr/local/lib/sandboxd", "/etc/ld.so.preload", "/proc", "/sys", "/dev"}

// validateImagePath checks a path a template writes in its image.
func validateImagePath(what, p string) error {
	switch {
	case !path.IsAbs(p) || path.Clean(p) != p:
		return Invalidf("%s %q: want an absolute, clean path", what, Truncate(p, 80))
	case strings.ContainsRune(p, 0) || len(p) > 1024:
		return Invalidf("%s %q: a NUL byte, or longer than 1024 bytes", what, Truncate(p, 80))
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

// SpecHash is the spec's identity: the SHA-256 of its canonical JSON
// (packages sorted: their order does not change what is installed), with
// the base image's ID, so a new sandbox image makes new templates.
func (s TemplateSpec) SpecHash(baseImageID string) string {
	c := s
	c.Packages = slices.Clone(s.Packages)
	slices.Sort(c.Packages)
	b, _ := json.Marshal(struct {
		Base string       `json:"base_image"`
		Spec TemplateSpec `json:"spec"`
	}{baseImageID, c})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
