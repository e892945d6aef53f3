package orchestrator

import (
	"context"
	"regexp"
	"time"
	"unicode/utf8"
)

// Lifetime control: a sandbox's own idle TTL (Options.IdleTimeout,
// SetTimeout) and the caller's metadata (Options.Metadata, ListFilter).
// Both live in meta.json, so they survive restarts and a warm-pool sandbox
// gets them when claimed (its container's labels cannot change).

// Bounds of a sandbox's own idle TTL.
const (
	// MinIdleTimeout is the shortest idle TTL a caller may set: shorter
	// would expire a sandbox between two calls of one client.
	MinIdleTimeout = time.Second
	// DefaultMaxIdleTTL is Config.MaxIdleTTL's default: a sandbox may be
	// kept for a day without use, not forever.
	DefaultMaxIdleTTL = 24 * time.Hour
)

// Bounds of a sandbox's metadata: enough for a few IDs and names, small
// enough that meta.json, List responses and their filters stay cheap.
const (
	maxMetadataEntries  = 64
	maxMetadataKeyLen   = 64
	maxMetadataValueLen = 512
	maxMetadataBytes    = 16 << 10
)

// metadataKeyPattern is the charset of metadata keys: label-like, so they
// print unquoted in logs and sandboxctl output.
var metadataKeyPattern = regexp.MustCompile(`^[A-Za-z0-9._:/-]+$`)

// validateMetadata checks a sandbox's metadata. Errors wrap
// ErrInvalidArgument and name the offending key.
func validateMetadata(md map[string]string) error {
	if len(md) > maxMetadataEntries {
		return invalidf("metadata has %d entries; the limit is %d", len(md), maxMetadataEntries)
	}
	total := 0
	for k, v := range md {
		if err := checkMetadataPair(k, v); err != nil {
			return err
		}
		total += len(k) + len(v)
	}
	if total > maxMetadataBytes {
		return invalidf("metadata is %d bytes long (keys and values); the limit is %d", total, maxMetadataBytes)
	}
	return nil
}

// validateMetadataFilter checks ListFilter.Metadata: each pair as in
// validateMetadata (a pair no sandbox can have is a mistake worth telling).
func validateMetadataFilter(md map[string]string) error {
	if len(md) > maxMetadataEntries {
		return invalidf("metadata filter has %d entries; the limit is %d", len(md), maxMetadataEntries)
	}
	for k, v := range md {
		if err := checkMetadataPair(k, v); err != nil {
			return err
		}
	}
	return nil
}

func checkMetadataPair(k, v string) error {
	switch {
	case k == "":
		return invalidf("metadata has an empty key")
	case len(k) > maxMetadataKeyLen:
		return invalidf("metadata key %q is %d characters long; the limit is %d", truncate(k, 64), len(k), maxMetadataKeyLen)
	case !metadataKeyPattern.MatchString(k):
		return invalidf("metadata key %q may contain only letters, digits and . _ : / -", truncate(k, 64))
	case len(v) > maxMetadataValueLen:
		return invalidf("metadata value of key %s is %d bytes long; the limit is %d", k, len(v), maxMetadataValueLen)
	case !utf8.ValidString(v):
		return invalidf("metadata value of key %s is not valid UTF-8", k)
	}
	return nil
}

// hasMetadata reports whether md has every pair of want.
func hasMetadata(md, want map[string]string) bool {
	for k, v := range want {
		if got, ok := md[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// checkIdleTimeout checks an idle TTL a caller asks for against
// MinIdleTimeout and Config.MaxIdleTTL.
func (m *Manager) checkIdleTimeout(d time.Duration) error {
	return CheckIdleTimeout(d, m.cfg.MaxIdleTTL)
}

// SetTimeout sets a sandbox's own idle TTL to d and counts the call as
// activity, so the sandbox expires d from now (or at the end of its maximum
// lifetime, if sooner) unless used again; each later use restarts d. The
// TTL is persisted at once and survives restarts. Outside MinIdleTimeout to
// Config.MaxIdleTTL is ErrInvalidArgument; another tenant's sandbox is
// ErrNotFound, as everywhere. A dead sandbox may be given a timeout too (it
// stays visible until it expires).
func (m *Manager) SetTimeout(ctx context.Context, sandboxID string, d time.Duration) (Sandbox, error) {
	if err := ValidateSandboxID(sandboxID); err != nil {
		return Sandbox{}, err
	}
	if err := m.checkIdleTimeout(d); err != nil {
		return Sandbox{}, err
	}
	sb, err := m.lookup(ctx, sandboxID)
	if err != nil {
		return Sandbox{}, err
	}
	if !m.reg.touchWith(sb, d) {
		return Sandbox{}, sandboxNotFound(sandboxID)
	}
	// Written now rather than by the next flush: a caller that extended
	// the timeout must not lose it to a crash a moment later.
	if err := sb.persist(false); err != nil {
		m.log.Error("persist sandbox metadata", "sandbox_id", sb.id, "error", err)
	}
	m.log.Info("sandbox idle timeout set", "sandbox_id", sb.id, "tenant", sb.tenant, "user_id", sb.userID, "idle_timeout", d)
	return m.snapshot(sb), nil
}

// lookup finds a sandbox the caller in ctx may see, without refreshing its
// idle TTL (use does both). A malformed ID is ErrInvalidArgument; a sandbox
// that is gone or another tenant's is ErrNotFound.
func (m *Manager) lookup(ctx context.Context, sandboxID string) (*sandbox, error) {
	if err := ValidateSandboxID(sandboxID); err != nil {
		return nil, err
	}
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	sb := m.reg.get(sandboxID)
	if sb == nil || !callerOf(ctx).sees(sb.tenant) {
		return nil, sandboxNotFound(sandboxID)
	}
	return sb, nil
}
