package core

import (
	"time"
)

// Defaults.
const (
	DefaultImage          = "sandboxd-sandbox:latest"
	DefaultIdleTTL        = 30 * time.Minute
	DefaultCommandTimeout = 10 * time.Minute
	DefaultMaxTimeout     = time.Hour
	DefaultMaxUploadBytes = 256 << 20
)

// MaxCodeBytes bounds the code of one command, whatever the configuration.
// The protocol allows records up to 2 MiB; 1 MiB of code leaves room for
// JSON escaping.
const MaxCodeBytes = 1 << 20

// sandboxNotFound is the one answer for a sandbox a caller cannot use,
// whether it never existed, is gone, or belongs to another tenant.
func SandboxNotFound(sandboxID string) error {
	return NotFoundf("sandbox %s not found: it never existed, expired or was deleted", sandboxID)
}

// Disk sizes.
const (
	// DefaultDiskBytes is a sandbox's /workspace size unless configured.
	DefaultDiskBytes = 1 << 30
	// DefaultMaxDiskBytes caps what a request may ask for unless configured.
	DefaultMaxDiskBytes = 16 << 30
	// DefaultIODiskBytes is the size of a sandbox's /io unless configured:
	// room for the command log and the retained commands' outputs.
	DefaultIODiskBytes = 1 << 30
	// minDiskBytes is the smallest volume: ext4 with a journal needs a few
	// MiB of its own.
	MinDiskBytes = 16 << 20
)

// DefaultHibernatedTTL keeps a hibernated sandbox a week.
const DefaultHibernatedTTL = 7 * 24 * time.Hour
