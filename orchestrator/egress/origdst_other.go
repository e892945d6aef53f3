//go:build !linux

package egress

import (
	"errors"
	"net"
	"net/netip"
)

// OriginalDst is Linux's alone (SO_ORIGINAL_DST): elsewhere it fails.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("egress: original destinations need Linux's SO_ORIGINAL_DST")
}
