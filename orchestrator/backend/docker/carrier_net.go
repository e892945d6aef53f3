package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// A networked sandbox's fast wake (and a networked sandbox's start from a
// snapshot, a fork's among them) is carried by a container of the pool
// with network (shape.go), whose network namespace is its holder's. The
// carrier's namespace becomes the sandbox's, with the sandbox's own
// address, so that nothing a caller or the gateway knows of the sandbox
// changes (its address, policy, counters, CA, ports and their tokens):
//
//   - the gateway forgets the carrier (it was attached sealed);
//   - the carrier's veth becomes the sandbox's (readdress): its host end
//     renamed as the sandbox's, both ends given the sandbox's addresses
//     and the carrier's given back; the carrier's container, runc, sees
//     eth0's new address at once (gVisor's netstack would not: fast wake
//     is runc's), and no veth is made or destroyed;
//   - the sandbox's CA certificate and bundle replace the carrier's in the
//     directory its container sees at /etc/sandboxd (the CA's env points
//     there already: every container with network has it);
//   - the holder is recorded as the sandbox's (meta.json's net.holder),
//     so hibernation, deletion and reconcile treat it as the sandbox's
//     own; the carrier's release removes it by name when the sandbox never
//     got it (releaseCarrier).
//
// The pool sandbox's driver has made no connection, so nothing open
// crosses from the carrier's address to the sandbox's.

// carryNet moves carrier p's network namespace to networked sb (above);
// nothing for a sandbox without network. On failure the caller undoes
// the carry, which removes whatever holder sb was given.
func (m *Manager) carryNet(ctx context.Context, sb, p *sandbox) error {
	sb.mu.Lock()
	networked := sb.net != nil
	sb.mu.Unlock()
	if !networked {
		return nil
	}
	p.mu.Lock()
	pn := p.net
	p.mu.Unlock()
	if pn == nil || pn.Holder == "" {
		return errors.New("the carrier has no network holder")
	}
	info, err := m.docker.ContainerInspect(ctx, pn.Holder)
	if err != nil {
		return dockerError("inspect the carrier's network holder", err)
	}
	if info.State == nil || !info.State.Running || info.State.Pid <= 0 {
		return fmt.Errorf("the carrier's network holder %s is not running", pn.Holder)
	}
	if err := m.carryCA(sb, p); err != nil {
		return fmt.Errorf("give the carrier the sandbox's CA: %w", err)
	}
	m.net.gw.Detach(p.id)
	sb.mu.Lock()
	s := sb.net.Addr
	sb.net.Holder = pn.Holder
	sb.mu.Unlock()
	if err := m.net.kernel.readdress(m.net.names, m.net.names.link(p.id), m.net.names.link(sb.id), info.State.Pid, hostAddr(s), s); err != nil {
		return fmt.Errorf("give the carrier's veth the sandbox's address: %w", err)
	}
	m.net.pool.release(p.id, pn.Addr)
	return m.attachNet(sb)
}

// carryCA writes sb's CA certificate and bundle where carrier p's
// container sees /etc/sandboxd. A sandbox that has no bundle yet (a new
// one from a snapshot) gets one made of the carrier's roots, which are
// the same image's, and its own CA.
func (m *Manager) carryCA(sb, p *sandbox) error {
	own := filepath.Join(sb.dir, netDir, caMountDir)
	theirs := filepath.Join(p.dir, netDir, caMountDir)
	cert, err := os.ReadFile(filepath.Join(own, caCertFile))
	if err != nil {
		return err
	}
	bundle, err := os.ReadFile(filepath.Join(own, caBundleFile))
	if errors.Is(err, fs.ErrNotExist) {
		pBundle, err := os.ReadFile(filepath.Join(theirs, caBundleFile))
		if err != nil {
			return err
		}
		pCert, err := os.ReadFile(filepath.Join(theirs, caCertFile))
		if err != nil {
			return err
		}
		roots, ok := bytes.CutSuffix(pBundle, pCert)
		if !ok {
			return errors.New("the carrier's bundle does not end with its CA")
		}
		bundle = append(roots, cert...)
		if err := writeFileAtomic(filepath.Join(own, caBundleFile), bundle, 0o644); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(theirs, caCertFile), cert, 0o644); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(theirs, caBundleFile), bundle, 0o644)
}

// writeFileAtomic writes name through a temporary file renamed over it,
// so a reader sees the old content or the new, never a part.
func writeFileAtomic(name string, b []byte, mode os.FileMode) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}
