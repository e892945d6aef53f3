package core

import (
	"cmp"
	"crypto/rand"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Named snapshots and forks: a sandbox's state saved apart from it.
//
// A snapshot holds what a hibernation keeps (the default context's Python
// globals at level "globals", or none at level "files") and a copy of
// /workspace. It belongs to its sandbox's tenant and outlives the sandbox;
// new sandboxes start from it (Options.FromSnapshot), and a fork is a
// snapshot taken and started count times at once.

// Snapshot is a named snapshot.
type Snapshot struct {
	ID        string
	Name      string
	Tenant    string
	SandboxID string // the sandbox it was taken from
	Level     string // ioproto.LevelGlobals or LevelFiles
	Reason    string // why the level is below globals, or what was not kept
	Bytes     int64  // on disk: globals and the allocated blocks of /workspace
	CreatedAt time.Time
}

// SnapshotFilter narrows ListSnapshots; empty fields match everything the
// caller may see.
type SnapshotFilter struct {
	Tenant    string // admins only: one tenant's
	SandboxID string
}

// ForkRequest asks for copies of a sandbox.
type ForkRequest struct {
	// Count is how many forks, 1 to MaxForks.
	Count int
	// UserIDs are the forks' users (Count of them) or empty: generated.
	UserIDs []string
	// Options are the forks' options, with the source's env and network
	// (policy and header rules) where they set none, as for a start from
	// a snapshot; nil: the source's, every one of them (network policy
	// with its header rules, env, limits, metadata, timeouts, volumes,
	// image), checked again by the server's policy.
	Options *Options
}

// ForkResult is one fork: its sandbox and how its state came back, or
// why it failed.
type ForkResult struct {
	Sandbox Sandbox
	Woke    *WakeInfo
	Err     error
}

// MaxForks bounds ForkRequest.Count.
const MaxForks = 20

var snapshotNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
var snapshotIDRE = regexp.MustCompile(`^snap-[a-z0-9]{20}$`)

// ValidateSnapshotName checks a snapshot's name ("" is allowed: none).
func ValidateSnapshotName(name string) error {
	if name != "" && !snapshotNameRE.MatchString(name) {
		return Invalidf("snapshot name %q: want 1 to 64 of A-Z a-z 0-9 _ . -", Truncate(name, 80))
	}
	return nil
}

// ValidateSnapshotRef checks a reference to a snapshot: its ID or name.
func ValidateSnapshotRef(ref string) error {
	if ref == "" {
		return Invalidf("snapshot: an ID or a name is required")
	}
	return ValidateSnapshotName(ref)
}

// NewSnapshotID returns a fresh snapshot ID: "snap-" and 20 random
// lower-case base32 characters, the form IsSnapshotID recognises.
func NewSnapshotID() string {
	var b [13]byte
	rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return "snap-" + strings.ToLower(sandboxIDEncoding.EncodeToString(b[:]))[:20]
}

// IsSnapshotID reports whether ref has the form of a snapshot ID (else it
// is a name).
func IsSnapshotID(ref string) bool { return snapshotIDRE.MatchString(ref) }

// SnapshotNotFound is the error for a snapshot the caller cannot see.
func SnapshotNotFound(ref string) error {
	return Errorf(ErrNotFound, "snapshot %s not found", Truncate(ref, 80))
}

// Shows reports whether a listing under f by caller c includes snapshot
// s (hidden ones, forks' own, never are).
func (f SnapshotFilter) Shows(c Caller, s Snapshot, hidden bool) bool {
	return !hidden && c.Sees(s.Tenant) && (f.Tenant == "" || s.Tenant == f.Tenant) && (f.SandboxID == "" || s.SandboxID == f.SandboxID)
}

// SortSnapshots orders a listing: newest first, then by ID.
func SortSnapshots(list []Snapshot) {
	slices.SortFunc(list, func(a, b Snapshot) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), strings.Compare(a.ID, b.ID))
	})
}

// ForkParallel bounds the forks made at once: each is a sandbox's start
// and a restore.
const ForkParallel = 4

// ForkEach runs start for each of req's forks, ForkParallel at a time,
// and returns their results in order. Each fork's user is req.UserIDs[i]
// or, when none are given, "fork-" and random. start says how one fork
// went, on its own; a user who already has a sandbox gets no fork (start
// reports it with ErrAlreadyExists, ForkTaken's error).
func ForkEach(req ForkRequest, start func(user string) ForkResult) []ForkResult {
	users := req.UserIDs
	if len(users) == 0 {
		for range req.Count {
			users = append(users, "fork-"+strings.TrimPrefix(NewSnapshotID(), "snap-"))
		}
	}
	results := make([]ForkResult, len(users))
	sem := make(chan struct{}, ForkParallel)
	var wg sync.WaitGroup
	for i, user := range users {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i] = start(user)
		})
	}
	wg.Wait()
	return results
}

// ForkTaken is a fork's error for a user who already has sandbox id.
func ForkTaken(user, id string) error {
	return Errorf(ErrAlreadyExists, "user %s already has sandbox %s; a fork needs a user without one", user, id)
}

// SnapshotNamed picks which of found, the snapshots named ref that caller
// c may see (hidden ones left out), the name means: the only one, else
// the caller's own tenant's; an admin's name that several other tenants
// use is ambiguous. It returns found's index.
func SnapshotNamed(c Caller, ref string, found []Snapshot) (int, error) {
	switch len(found) {
	case 0:
		return 0, SnapshotNotFound(ref)
	case 1:
		return 0, nil
	}
	if i := slices.IndexFunc(found, func(s Snapshot) bool { return s.Tenant == c.Tenant }); i >= 0 {
		return i, nil
	}
	return 0, Invalidf("snapshot name %q is used by %d tenants; name it by its ID", Truncate(ref, 80), len(found))
}

// SnapshotBudget bounds the bytes named snapshots take (sandboxd
// --snapshot-disk-budget and its per-tenant share); zero fields: no bound.
type SnapshotBudget struct {
	All, PerTenant int64
}

// Check refuses a snapshot of adding bytes for tenant when the named
// snapshots, taking all bytes of which ofTenant are the tenant's, would
// pass either bound: RESOURCE_EXHAUSTED naming the flag.
func (b SnapshotBudget) Check(tenant string, all, ofTenant, adding int64) error {
	if b.PerTenant > 0 && ofTenant+adding > b.PerTenant {
		return Errorf(ErrResourceExhausted, "tenant %s's snapshots would take %d bytes, past its snapshot disk budget of %d (--snapshot-disk-budget-per-tenant): delete some", tenant, ofTenant+adding, b.PerTenant)
	}
	if b.All > 0 && all+adding > b.All {
		return Errorf(ErrResourceExhausted, "the snapshots would take %d bytes, past the server's snapshot disk budget of %d (--snapshot-disk-budget)", all+adding, b.All)
	}
	return nil
}
