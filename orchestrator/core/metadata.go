package core

import (
	"regexp"
	"time"
	"unicode/utf8"
)

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
		return Invalidf("metadata has %d entries; the limit is %d", len(md), maxMetadataEntries)
	}
	total := 0
	for k, v := range md {
		if err := checkMetadataPair(k, v); err != nil {
			return err
		}
		total += len(k) + len(v)
	}
	if total > maxMetadataBytes {
		return Invalidf("metadata is %d bytes long (keys and values); the limit is %d", total, maxMetadataBytes)
	}
	return nil
}

// validateMetadataFilter checks ListFilter.Metadata: each pair as in
// validateMetadata (a pair no sandbox can have is a mistake worth telling).
func validateMetadataFilter(md map[string]string) error {
	if len(md) > maxMetadataEntries {
		return Invalidf("metadata filter has %d entries; the limit is %d", len(md), maxMetadataEntries)
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
		return Invalidf("metadata has an empty key")
	case len(k) > maxMetadataKeyLen:
		return Invalidf("metadata key %q is %d characters long; the limit is %d", Truncate(k, 64), len(k), maxMetadataKeyLen)
	case !metadataKeyPattern.MatchString(k):
		return Invalidf("metadata key %q may contain only letters, digits and . _ : / -", Truncate(k, 64))
	case len(v) > maxMetadataValueLen:
		return Invalidf("metadata value of key %s is %d bytes long; the limit is %d", k, len(v), maxMetadataValueLen)
	case !utf8.ValidString(v):
		return Invalidf("metadata value of key %s is not valid UTF-8", k)
	}
	return nil
}

// hasMetadata reports whether md has every pair of want.
func HasMetadata(md, want map[string]string) bool {
	for k, v := range want {
		if got, ok := md[k]; !ok || got != v {
			return false
		}
	}
	return true
}
