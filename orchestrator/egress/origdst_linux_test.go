package egress

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

func TestParseSockaddr(t *testing.T) {
	b := make([]byte, 16)
	binary.NativeEndian.PutUint16(b, syscall.AF_INET)
	binary.BigEndian.PutUint16(b[2:], 443)
	copy(b[4:], []byte{198, 18, 0, 7})
	if got, err := parseSockaddr(b); err != nil || got != netip.MustParseAddrPort("198.18.0.7:443") {
		t.Fatalf("v4: %v, %v", got, err)
	}
	b6 := make([]byte, 28)
	binary.NativeEndian.PutUint16(b6, syscall.AF_INET6)
	binary.BigEndian.PutUint16(b6[2:], 80)
	a := netip.MustParseAddr("2001:db8::1").As16()
	copy(b6[8:], a[:])
	if got, err := parseSockaddr(b6); err != nil || got != netip.MustParseAddrPort("[2001:db8::1]:80") {
		t.Fatalf("v6: %v, %v", got, err)
	}
	if _, err := parseSockaddr(b[:1]); err == nil {
		t.Fatal("short")
	}
}

// Without a DNAT, SO_ORIGINAL_DST either fails (no conntrack entry) or
// names the address the connection was made to: never anything else.
func TestOriginalDstWithoutNAT(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := OriginalDst(s)
	if err != nil {
		t.Logf("no conntrack entry: %v", err)
		return
	}
	if got != netip.MustParseAddrPort(l.Addr().String()) {
		t.Fatalf("OriginalDst = %v, want %v", got, l.Addr())
	}
	if _, err := OriginalDst(&net.UDPConn{}); err == nil {
		t.Fatal("a UDP conn has an original destination")
	}
}

// TestOriginalDstAfterDNAT runs the real redirect path in a network
// namespace of its own (unshare --net, as root): an nftables DNAT sends
// the "sandbox's" connections (from 127.0.0.2) to the gateway, which
// recovers each one's original destination with OriginalDst and judges
// it. Nothing leaves the namespace.
func TestOriginalDstAfterDNAT(t *testing.T) {
	if os.Getenv("EGRESS_TEST_NETNS") != "1" {
		if testing.Short() {
			t.Skip("-short")
		}
		if os.Geteuid() != 0 {
			testenv.Unavailable(t, "needs root for a network namespace and nftables")
			return
		}
		for _, bin := range []string{"unshare", "nft", "ip"} {
			if _, err := exec.LookPath(bin); err != nil {
				testenv.Unavailable(t, "needs %s: %v", bin, err)
				return
			}
		}
		cmd := exec.Command("unshare", "--net", os.Args[0], "-test.run=^TestOriginalDstAfterDNAT$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "EGRESS_TEST_NETNS=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in a new network namespace:\n%s", out)
		if err != nil {
			t.Fatal(err)
		}
		return
	}

	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link: %v: %s", err, out)
	}
	e := newEnv(t, Config{Bounds: allowLoopback})
	e.attach("a", srcA, allowList)
	gw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go e.g.ServeTCP(gw, OriginalDst)
	rules := fmt.Sprintf(`table ip egresstest {
	chain out {
		type nat hook output priority -100;
		ip saddr %s ip daddr 127.0.0.9 meta l4proto tcp dnat to %s
	}
}`, srcA, gw.Addr())
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}

	// The sandbox sends its request to 127.0.0.9 (where nothing listens);
	// the DNAT brings it to the gateway, which sees that destination and
	// the Host, and dials the name's own address.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(srcA)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", fmt.Sprintf("127.0.0.9:%d", e.httpPort))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /natted HTTP/1.1\r\nHost: www.egress.test\r\n\r\n")
	readResponse(t, c)
	if got := e.lastSeen().Path; got != "/natted" {
		t.Fatalf("upstream saw %q", got)
	}
	// Without a name it is judged on the original destination, 127.0.0.9,
	// which the allow-list denies.
	c2, err := d.Dial("tcp", fmt.Sprintf("127.0.0.9:%d", e.httpPort))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	fmt.Fprintf(c2, "GET / HTTP/1.1\r\nHost: 127.0.0.9\r\n\r\n")
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(c2)
	if !strings.Contains(string(got), "address 127.0.0.9 denied by deny_out") {
		t.Fatalf("reply %q", got)
	}
	if ds := e.g.Denials("a"); len(ds) != 1 || ds[0].Addr != netip.AddrPortFrom(netip.MustParseAddr("127.0.0.9"), e.httpPort) {
		t.Fatalf("denials = %+v", ds)
	}
}
