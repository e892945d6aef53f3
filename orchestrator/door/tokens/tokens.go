// Package tokens is the bearer tokens every door of sandboxd takes (the
// gRPC API's "authorization: Bearer", the E2B door's API keys): a token
// file naming a tenant and a role per token, kept as digests.
package tokens

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Bearer tokens. A token file has one token per line:
//
//	# comment
//	<token> <tenant> <role> [<name>]
//
// where role is "user" (sees its tenant's sandboxes) or "admin" (sees every
// tenant's), and the optional name says whose token it is in the audit
// trail (core.Caller.Name; 1 to 64 characters of [A-Za-z0-9._@-]). A token
// without a name is named by its fingerprint ("sha256:" and the first 12
// hex digits of its SHA-256): stable, distinct per token, and useless to
// guess the token from, so the audit never holds a secret either way. Blank lines and lines starting with '#' are ignored. Tokens
// are at least MinLen characters of printable ASCII without spaces;
// one token is one caller, so a token may appear only once.
//
// Clients send "authorization: Bearer <token>" metadata. The server keeps
// only SHA-256 digests of the tokens and looks up the digest of the token
// presented: the lookup's timing depends on the digest, which an attacker
// cannot steer towards a valid token, so it reveals nothing about valid
// tokens (the constant-time property a byte-by-byte comparison lacks).

// MinLen is the shortest token accepted: 16 random characters are far
// beyond guessing, shorter ones invite weak secrets.
const MinLen = 16

// Roles a token may have.
const (
	RoleUser  = "user"
	RoleAdmin = "admin"
)

// Set maps bearer tokens to the callers they authenticate.
type Set struct {
	byDigest map[[sha256.Size]byte]core.Caller
}

// Load reads a token file (see Parse).
func Load(path string) (*Set, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	t, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	return t, nil
}

// Parse reads tokens in the token file format. Errors name the line
// but never echo a token. A file with no tokens is an error: a server that
// requires tokens and accepts none serves nobody.
func Parse(r io.Reader) (*Set, error) {
	t := &Set{byDigest: make(map[[sha256.Size]byte]core.Caller)}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 && len(f) != 4 {
			return nil, fmt.Errorf("line %d: want \"TOKEN TENANT ROLE [NAME]\", got %d fields", n, len(f))
		}
		token, tenant, role := f[0], f[1], f[2]
		if len(token) < MinLen {
			return nil, fmt.Errorf("line %d: the token is %d characters long; use at least %d random characters", n, len(token), MinLen)
		}
		for _, c := range token {
			if c < '!' || c > '~' {
				return nil, fmt.Errorf("line %d: the token has a character outside printable ASCII", n)
			}
		}
		if err := core.ValidateTenant(tenant); err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		var admin bool
		switch role {
		case RoleUser:
		case RoleAdmin:
			admin = true
		default:
			return nil, fmt.Errorf("line %d: role %q is not %q or %q", n, role, RoleUser, RoleAdmin)
		}
		name := Fingerprint(token)
		if len(f) == 4 {
			name = f[3]
			if err := validateName(name); err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
		}
		d := sha256.Sum256([]byte(token))
		if _, dup := t.byDigest[d]; dup {
			return nil, fmt.Errorf("line %d: the token repeats an earlier line's", n)
		}
		t.byDigest[d] = core.Caller{Tenant: tenant, Admin: admin, Name: name}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t.byDigest) == 0 {
		return nil, fmt.Errorf("no tokens")
	}
	return t, nil
}

// MaxNameLen bounds a token's name, which every audit record carries.
const MaxNameLen = 64

// namePattern: names appear in audit records and logs; '@' lets a name be
// a person's address.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]*$`)

func validateName(name string) error {
	if len(name) > MaxNameLen || !namePattern.MatchString(name) {
		return fmt.Errorf("token name %q must be 1 to %d characters from [A-Za-z0-9._@-], starting with a letter or digit", name, MaxNameLen)
	}
	return nil
}

// Fingerprint is the name of a token the file names none for: "sha256:"
// and the first 12 hex digits of the token's SHA-256. 48 bits tell an
// operator's tokens apart and reveal nothing usable about the token.
func Fingerprint(token string) string {
	d := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(d[:6])
}

// Len returns the number of tokens.
func (t *Set) Len() int { return len(t.byDigest) }

// Tenants returns the number of tenants the tokens name.
func (t *Set) Tenants() int {
	seen := map[string]bool{}
	for _, c := range t.byDigest {
		seen[c.Tenant] = true
	}
	return len(seen)
}

// Lookup returns the caller token authenticates.
func (t *Set) Lookup(token string) (core.Caller, bool) {
	c, ok := t.byDigest[sha256.Sum256([]byte(token))]
	return c, ok
}
