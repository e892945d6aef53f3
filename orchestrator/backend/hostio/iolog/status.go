package iolog

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/sandboxd/sandboxd/ioproto"
)

// maxDriverStatusFile bounds what is read of io/driver.json, which the
// driver writes in a few hundred bytes.
const maxDriverStatusFile = 8 << 10

// ReadDriverStatus reads the driver's io/driver.json through openBounded
// (the sandbox owns the file: no symlink, no FIFO, no sparse or oversized
// file). It returns the decoded status and the stat of the file it read, so
// callers can tell a new version from one they have seen; a missing file
// is an error wrapping fs.ErrNotExist (an older driver, or one not started
// yet).
func (d *Dir) ReadDriverStatus() (ioproto.DriverStatus, fs.FileInfo, error) {
	var ds ioproto.DriverStatus
	root, err := os.OpenRoot(d.path)
	if err != nil {
		return ds, nil, err
	}
	defer root.Close()
	f, st, r, err := openBounded(root, ioproto.DriverStatusFile, maxDriverStatusFile)
	if err != nil {
		return ds, nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return ds, st, err
	}
	if err := json.Unmarshal(b, &ds); err != nil {
		return ds, st, fmt.Errorf("decode %s: %w", ioproto.DriverStatusFile, err)
	}
	return ds, st, nil
}
