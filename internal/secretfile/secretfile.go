// Package secretfile keeps a server secret in a file of sandboxd's state
// directory: the keys of the tokens sandboxd derives rather than stores
// (the E2B door's access tokens, the ports front's traffic tokens), so
// that tokens handed out survive restarts and removing the file revokes
// them all.
package secretfile

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Size is the length of a secret Load makes.
const Size = 32

// Load reads the secret at path, creating it (Size random bytes, mode
// 0600, its directory 0700) when it is missing. A file shorter than Size
// is refused: it was not made here.
func Load(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) < Size {
			return nil, fmt.Errorf("%s is shorter than %d bytes; remove it to have a new one made", path, Size)
		}
		return b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	secret := make([]byte, Size)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return Load(path) // another process made it first
	}
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(secret); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return secret, nil
}
