package egress

import (
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// clientHello returns the first flight of a TLS client for sni.
func clientHello(t testing.TB, sni string) []byte {
	a, b := net.Pipe()
	defer a.Close()
	go tls.Client(b, &tls.Config{ServerName: sni, InsecureSkipVerify: sni == ""}).Handshake()
	a.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16<<10)
	n, err := a.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	return buf[:n]
}

func TestPeek(t *testing.T) {
	g := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer g.Close()
	for _, tc := range []struct {
		in   []byte
		kind peekKind
		name string
	}{
		{clientHello(t, "API.Example.com"), peekTLS, "api.example.com"},
		{clientHello(t, ""), peekTLS, ""},
		{[]byte("GET / HTTP/1.1\r\nHost: www.example.com:8080\r\n\r\n"), peekHTTP, "www.example.com"},
		{[]byte("GET http://abs.example.com/x HTTP/1.1\r\nHost: other.example.com\r\n\r\n"), peekHTTP, "abs.example.com"},
		{[]byte("GET / HTTP/1.1\r\nHost: 198.18.0.1\r\n\r\n"), peekHTTP, ""},
		{[]byte("GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n"), peekHTTP, ""},
		{[]byte("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"), peekHTTP, ""},
		{[]byte("GET / HTTP/1.1\r\nHost: a..b\r\n\r\n"), peekHTTP, ""},
		{[]byte("SSH-2.0-client\r\n"), peekNone, ""},
		{[]byte{0x16, 3, 1, 0, 5, 1, 2, 3, 4, 5}, peekNone, ""},
	} {
		a, b := net.Pipe()
		go func() { a.Write(tc.in); a.Close() }()
		pk := g.peek(b, time.Second)
		b.Close()
		if pk.kind != tc.kind || pk.name != tc.name || !bytes.HasPrefix(tc.in, pk.buf) || len(pk.buf) == 0 {
			t.Errorf("peek(%q) = kind %d name %q buf %d bytes; want kind %d name %q", tc.in[:min(len(tc.in), 40)], pk.kind, pk.name, len(pk.buf), tc.kind, tc.name)
		}
	}
}

// FuzzPeek: whatever a sandbox sends first, the peek reads at most
// PeekBytes, keeps exactly what it read (to replay), and yields either no
// name or a normalised domain.
func FuzzPeek(f *testing.F) {
	f.Add(clientHello(f, "api.example.com"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: www.example.com\r\n\r\n"))
	f.Add([]byte("CONNECT a.example.com:443 HTTP/1.1\r\n\r\n"))
	f.Add([]byte{0x16, 3, 3, 0xff, 0xff})
	const limit = 4096
	g := New(Config{PeekBytes: limit, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer g.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := net.Pipe()
		go func() { a.Write(data); a.Close() }()
		pk := g.peek(b, time.Second)
		b.Close()
		if len(pk.buf) > limit || !bytes.HasPrefix(data, pk.buf) {
			t.Fatalf("kept %d bytes, not a prefix of the input", len(pk.buf))
		}
		if pk.name != "" && normName(pk.name) != pk.name {
			t.Fatalf("name %q is not normalised", pk.name)
		}
	})
}

// FuzzDNSAnswer: any packet from an attached sandbox gets no reply or a
// well-formed one within the UDP size.
func FuzzDNSAnswer(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"www.egress.test.", dns.TypeA}, {"x.", dns.TypeAAAA}, {"a.b.", dns.TypeTXT}} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		m.SetEdns0(4096, false)
		raw, _ := m.Pack()
		f.Add(raw)
	}
	names := newNameTable()
	names.set("www.egress.test", "198.18.0.1", "198.18.0.2")
	g := New(Config{Resolver: names, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer g.Close()
	p, _ := core.CompileNetworkPolicy(core.NetworkPolicy{})
	g.Attach("a", netip.MustParseAddr("127.0.0.2"), p, nil)
	sb := g.sandbox("a")
	f.Fuzz(func(t *testing.T, raw []byte) {
		out := g.answer(sb, raw, false)
		if out == nil {
			return
		}
		if len(out) > 1232 {
			t.Fatalf("answer of %d bytes", len(out))
		}
		if err := new(dns.Msg).Unpack(out); err != nil {
			t.Fatalf("answer does not parse: %v", err)
		}
	})
}
