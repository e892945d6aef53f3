package core

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
)

// TestVolumeRules: the one place the volume rules are said, each refusal
// an InvalidArgument that says what is wrong.
func TestVolumeRules(t *testing.T) {
	for _, name := range []string{"data", "Team_1.v2-x", strings.Repeat("a", 64)} {
		if err := ValidateVolumeName(name); err != nil {
			t.Errorf("ValidateVolumeName(%q) = %v", name, err)
		}
	}
	for name, want := range map[string]string{
		"":                         "a name is required",
		strings.Repeat("a", 65):    "1 to 64",
		"a/b":                      "1 to 64",
		"..":                       "1 to 64",
		"vol-abcdefghij0123456789": "form of a volume ID",
	} {
		if err := ValidateVolumeName(name); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateVolumeName(%q) = %v; want InvalidArgument saying %q", name, err, want)
		}
	}
	id := NewVolumeID()
	if !IsVolumeID(id) || ValidateVolumeRef(id) != nil || ValidateVolumeRef("data") != nil {
		t.Errorf("a new ID %q or a name is not a valid reference", id)
	}
	if err := ValidateVolumeRef(""); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("empty reference: %v", err)
	}

	for _, p := range []string{"/mnt/data", "/data/x", "/mnt/a/b-c_d.e"} {
		if err := ValidateMountPath(p); err != nil {
			t.Errorf("ValidateMountPath(%q) = %v", p, err)
		}
	}
	for p, want := range map[string]string{
		"":                                 "a path is required",
		"/mnt":                             "under /mnt or /data",
		"/data":                            "under /mnt or /data",
		"/workspace/x":                     "under /mnt or /data",
		"/io/x":                            "under /mnt or /data",
		"/mnt/../etc":                      "clean",
		"/mnt/x/":                          "clean",
		"mnt/x":                            "clean",
		"/mnt/a b":                         "printable ASCII",
		"/mnt/\x00":                        "printable ASCII",
		"/mntx/y":                          "under /mnt or /data",
		"/mnt/" + strings.Repeat("a", 300): "longer than 256",
	} {
		if err := ValidateMountPath(p); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateMountPath(%q) = %v; want InvalidArgument saying %q", p, err, want)
		}
	}

	ok := []VolumeMount{{Volume: "a", Path: "/mnt/a"}, {Volume: "b", Path: "/mnt/b", ReadOnly: true}}
	if err := ValidateVolumeMounts(ok); err != nil {
		t.Errorf("two distinct mounts: %v", err)
	}
	many := make([]VolumeMount, MaxVolumeMounts+1)
	for i := range many {
		many[i] = VolumeMount{Volume: "v" + string(rune('a'+i)), Path: "/mnt/" + string(rune('a'+i))}
	}
	for name, c := range map[string]struct {
		ms   []VolumeMount
		want string
	}{
		"twice":   {[]VolumeMount{{Volume: "a", Path: "/mnt/a"}, {Volume: "a", Path: "/mnt/b"}}, "mounted twice"},
		"same":    {[]VolumeMount{{Volume: "a", Path: "/mnt/a"}, {Volume: "b", Path: "/mnt/a"}}, "overlap"},
		"nested":  {[]VolumeMount{{Volume: "a", Path: "/mnt/a"}, {Volume: "b", Path: "/mnt/a/b"}}, "overlap"},
		"nested2": {[]VolumeMount{{Volume: "a", Path: "/data/a/b"}, {Volume: "b", Path: "/data/a"}}, "overlap"},
		"many":    {many, "at most"},
		"badref":  {[]VolumeMount{{Volume: "", Path: "/mnt/a"}}, "an ID or a name"},
		"badpath": {[]VolumeMount{{Volume: "a", Path: "/etc"}}, "under /mnt or /data"},
	} {
		if err := ValidateVolumeMounts(c.ms); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want InvalidArgument saying %q", name, err, c.want)
		}
	}
	// Prefixes that are not path prefixes do not overlap.
	if err := ValidateVolumeMounts([]VolumeMount{{Volume: "a", Path: "/mnt/a"}, {Volume: "b", Path: "/mnt/ab"}}); err != nil {
		t.Errorf("/mnt/a and /mnt/ab: %v", err)
	}
}

func TestVolumeSize(t *testing.T) {
	p := Policy{}
	if err := p.ApplyDefaults(); err != nil {
		t.Fatal(err)
	}
	if n, err := p.ValidateVolumeSize(0); err != nil || n != DefaultVolumeBytes {
		t.Errorf("default size: %d, %v", n, err)
	}
	if n, err := p.ValidateVolumeSize(64 << 20); err != nil || n != 64<<20 {
		t.Errorf("64 MiB: %d, %v", n, err)
	}
	for _, n := range []int64{-1, MinVolumeBytes - 1, p.MaxVolumeBytes + 1} {
		if _, err := p.ValidateVolumeSize(n); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("size %d: %v; want InvalidArgument", n, err)
		}
	}
	small := Policy{MaxVolumeBytes: 100 << 20}
	if n, err := small.ValidateVolumeSize(0); err != nil || n != 100<<20 {
		t.Errorf("the default under a smaller maximum: %d, %v; want the maximum", n, err)
	}
}

func TestCleanVolumePath(t *testing.T) {
	for in, want := range map[string]string{"": ".", "/": ".", "a": "a", "/a/b": "a/b", "//a//b/": "a/b", "./a": "a"} {
		if got, err := CleanVolumePath(in); err != nil || got != want {
			t.Errorf("CleanVolumePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"../x", "/a/../../x", "a\x00b", strings.Repeat("a", MaxPathLen+1)} {
		if _, err := CleanVolumePath(in); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("CleanVolumePath(%q): %v; want InvalidArgument", in, err)
		}
	}
}

func TestValidateFileAttributes(t *testing.T) {
	u := func(n uint32) *uint32 { return &n }
	m := func(n fs.FileMode) *fs.FileMode { return &n }
	for _, a := range []FileAttributes{{UID: u(0)}, {GID: u(MaxFileOwner)}, {Mode: m(0o640)}, {Mode: m(0o777 | fs.ModeSticky)}} {
		if err := ValidateFileAttributes(a); err != nil {
			t.Errorf("%+v: %v", a, err)
		}
	}
	for want, a := range map[string]FileAttributes{
		"give a uid":     {},
		"uid 65536":      {UID: u(MaxFileOwner + 1)},
		"gid 4294967295": {GID: u(1<<32 - 1)},
		"no setuid":      {Mode: m(0o755 | fs.ModeSetuid)},
		"setgid":         {Mode: m(0o755 | fs.ModeSetgid)},
		"or file type":   {Mode: m(0o755 | fs.ModeDir)},
	} {
		if err := ValidateFileAttributes(a); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v; want InvalidArgument saying %q", a, err, want)
		}
	}
}

// A name picks one volume, or none (NOT_FOUND), or is ambiguous across
// tenants (INVALID_ARGUMENT, naming how many): both backends' rule.
func TestVolumeNamed(t *testing.T) {
	if err := VolumeNamed("data", 1); err != nil {
		t.Errorf("one volume: %v", err)
	}
	if err := VolumeNamed("data", 0); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "volume data not found") {
		t.Errorf("no volume: %v; want NOT_FOUND", err)
	}
	if err := VolumeNamed("data", 3); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "used by 3 tenants; name it by its ID") {
		t.Errorf("three volumes: %v; want INVALID_ARGUMENT", err)
	}
}
