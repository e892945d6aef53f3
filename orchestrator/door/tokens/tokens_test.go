package tokens

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

const (
	tokAcme  = "acme-user-token-0123456789"
	tokBeta  = "beta-user-token-0123456789"
	tokAdmin = "ops-admin-token-0123456789"
)

const testTokenFile = `# sandboxd tokens
` + tokAcme + ` acme user

` + tokBeta + `   beta   user
  ` + tokAdmin + ` ops admin ops-oncall@example.org
`

// callerRecorder scripts the fake domain to record the caller each call
// carried.
type callerRecorder struct {
	mu      sync.Mutex
	callers []core.Caller
}

func TestParse(t *testing.T) {
	toks, err := Parse(strings.NewReader(testTokenFile))
	if err != nil {
		t.Fatalf("ParseTokens: %v", err)
	}
	if toks.Len() != 3 || toks.Tenants() != 3 {
		t.Errorf("Len = %d, Tenants = %d; want 3, 3", toks.Len(), toks.Tenants())
	}
	for tok, want := range map[string]core.Caller{
		tokAcme:  {Tenant: "acme", Name: Fingerprint(tokAcme)},
		tokBeta:  {Tenant: "beta", Name: Fingerprint(tokBeta)},
		tokAdmin: {Tenant: "ops", Admin: true, Name: "ops-oncall@example.org"},
	} {
		if got, ok := toks.Lookup(tok); !ok || got != want {
			t.Errorf("lookup(%s) = %+v, %v; want %+v", tok, got, ok, want)
		}
	}
	if _, ok := toks.Lookup(tokAcme[:len(tokAcme)-1]); ok {
		t.Errorf("a prefix of a token authenticates")
	}

	secret := "s3cret-s3cret-s3cret"
	for _, tc := range []struct{ name, file, want string }{
		{"two fields", secret + " acme\n", "line 1: want \"TOKEN TENANT ROLE [NAME]\", got 2 fields"},
		{"five fields", "# c\n" + secret + " acme user name extra\n", "line 2: want"},
		{"bad name", secret + " acme user -x\n", `line 1: token name "-x" must be 1 to 64 characters`},
		{"short token", "short acme user\n", "line 1: the token is 5 characters long; use at least 16"},
		{"bad role", secret + " acme root\n", `line 1: role "root" is not "user" or "admin"`},
		{"bad tenant", secret + " -acme user\n", "line 1: tenant name \"-acme\" must start with a letter or digit"},
		{"duplicate", secret + " acme user\n" + secret + " beta admin\n", "line 2: the token repeats an earlier line's"},
		{"non-ASCII", "s3cret-s3cret-s3crét acme user\n", "line 1: the token has a character outside printable ASCII"},
		{"empty", "# nothing\n\n", "no tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v; want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q echoes the token", err)
			}
		})
	}
}

// TestFingerprint: an unnamed token's name is stable, differs between
// tokens and holds no more of the token than 48 bits of its digest.
func TestFingerprint(t *testing.T) {
	a, b := Fingerprint(tokAcme), Fingerprint(tokBeta)
	if a != Fingerprint(tokAcme) || a == b {
		t.Errorf("Fingerprint: %q, %q", a, b)
	}
	if !strings.HasPrefix(a, "sha256:") || len(a) != len("sha256:")+12 || strings.Contains(a, tokAcme[:8]) {
		t.Errorf("Fingerprint(%q) = %q; want sha256: and 12 hex digits", tokAcme, a)
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(testTokenFile), 0o600); err != nil {
		t.Fatal(err)
	}
	if toks, err := Load(path); err != nil || toks.Len() != 3 {
		t.Fatalf("LoadTokens = %v, %v; want 3 tokens", toks, err)
	}
	if _, err := Load(path + ".missing"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: error %v", err)
	}
}
