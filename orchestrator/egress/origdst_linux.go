package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"
)

// soOriginalDst is SO_ORIGINAL_DST (linux/netfilter_ipv4.h), and
// IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/ip6_tables.h) has the same
// number.
const soOriginalDst = 80

// OriginalDst returns the destination a connection redirected by a DNAT
// (nftables' dnat, iptables' REDIRECT) was first sent to, from the
// connection tracking entry (getsockopt SO_ORIGINAL_DST). c must be a
// *net.TCPConn accepted from a listener the DNAT sent it to.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("egress: original destination of a %T", c)
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	local, _ := netip.ParseAddrPort(tc.LocalAddr().String())
	v6 := local.Addr().Is6() && !local.Addr().Is4In6()
	var ap netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		// Room for a sockaddr_in6 (28 bytes); a sockaddr_in is 16.
		var buf [28]byte
		size := uint32(len(buf))
		level := syscall.SOL_IP
		if v6 {
			level = syscall.SOL_IPV6
		}
		_, _, errno := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, uintptr(level), soOriginalDst,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		if errno != 0 {
			serr = errno
			return
		}
		ap, serr = parseSockaddr(buf[:size])
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("egress: SO_ORIGINAL_DST: %w", err)
	}
	return ap, nil
}

// parseSockaddr reads a struct sockaddr_in or sockaddr_in6 as the kernel
// wrote it: family in host order, port in network order.
func parseSockaddr(b []byte) (netip.AddrPort, error) {
	if len(b) < 2 {
		return netip.AddrPort{}, errors.New("short sockaddr")
	}
	family := binary.NativeEndian.Uint16(b)
	switch {
	case family == syscall.AF_INET && len(b) >= 8:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4])), nil
	case family == syscall.AF_INET6 && len(b) >= 24:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])).Unmap(), binary.BigEndian.Uint16(b[2:4])), nil
	}
	return netip.AddrPort{}, fmt.Errorf("unexpected sockaddr (family %d, %d bytes)", family, len(b))
}
