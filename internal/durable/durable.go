// Package durable writes files whose existence is a commit point (a
// snapshot's record, renamed into place with its directory): written
// whole and synced before anything relies on them.
package durable

import "os"

// WriteFile writes a new file (never an existing one) and syncs it.
func WriteFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// SyncDir syncs a directory, so that a rename into it is durable. It is
// best effort: a failure leaves the rename as durable as the file system
// makes it anyway.
func SyncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
