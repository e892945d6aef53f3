package egress

import (
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// query asks the gateway's DNS from src over UDP (or TCP).
func (e *env) query(src, name string, qtype uint16, tcp bool) (*dns.Msg, error) {
	c := &dns.Client{Timeout: 2 * time.Second}
	addr := e.udp.LocalAddr().String()
	if tcp {
		c.Net = "tcp"
		c.Dialer = &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		addr = e.dnsTCP.Addr().String()
	} else {
		c.Dialer = &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(src)}}
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	r, _, err := c.Exchange(m, addr)
	return r, err
}

func TestDNS(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	e.attach("a", srcA, core.NetworkPolicy{DenyOut: []string{"blocked.egress.test", "10.0.0.0/8"}})
	for _, tcp := range []bool{false, true} {
		name := map[bool]string{false: "udp", true: "tcp"}[tcp]
		t.Run(name, func(t *testing.T) {
			r, err := e.query(srcA, "WWW.egress.test", dns.TypeA, tcp)
			if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
				t.Fatalf("A www = %v, %v", r, err)
			}
			a := r.Answer[0].(*dns.A)
			if !a.A.Equal(net.ParseIP("127.0.0.1")) || a.Hdr.Ttl != dnsAnswerTTL || a.Hdr.Name != "WWW.egress.test." {
				t.Fatalf("answer %v", a)
			}
			for _, tc := range []struct {
				name  string
				qtype uint16
				rcode int
				n     int
			}{
				{"blocked.egress.test", dns.TypeA, dns.RcodeNameError, 0},
				{"private.egress.test", dns.TypeA, dns.RcodeNameError, 0}, // its only address is denied
				{"nowhere.egress.test", dns.TypeA, dns.RcodeNameError, 0}, // the host does not know it
				{"localhost", dns.TypeA, dns.RcodeNameError, 0},
				{"www.egress.test", dns.TypeAAAA, dns.RcodeSuccess, 0},
				{"www.egress.test", dns.TypeMX, dns.RcodeRefused, 0},
				{"www.egress.test", dns.TypeHTTPS, dns.RcodeRefused, 0},
				{"mixed.egress.test", dns.TypeA, dns.RcodeSuccess, 1}, // the link-local one is left out
			} {
				r, err := e.query(srcA, tc.name, tc.qtype, tcp)
				if err != nil || r.Rcode != tc.rcode || len(r.Answer) != tc.n {
					t.Errorf("%s %s = %v, %v; want rcode %s with %d answers", dns.TypeToString[tc.qtype], tc.name, r, err, dns.RcodeToString[tc.rcode], tc.n)
				}
			}
		})
	}
	ds := e.g.Denials("a")
	if len(ds) != 4 || ds[0].Kind != "dns" || ds[0].Name != "blocked.egress.test" || ds[0].Reason != "denied by deny_out" {
		t.Fatalf("denials = %+v", ds)
	}
	if s := e.g.Stats("a"); s.DNSDenied != 4 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestDNSAllowListNeverAsksTheHost(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	e.attach("a", srcA, allowList)
	if r, err := e.query(srcA, "www.egress.test", dns.TypeA, false); err != nil || len(r.Answer) != 1 {
		t.Fatalf("A www = %v, %v", r, err)
	}
	// A name the allow-list does not list: NXDOMAIN, and never looked up
	// on the host (it would leak whatever the sandbox encodes in it).
	r, err := e.query(srcA, "c2VjcmV0.exfil.egress.test", dns.TypeA, false)
	if err != nil || r.Rcode != dns.RcodeNameError {
		t.Fatalf("A exfil = %v, %v", r, err)
	}
	if n := e.names.count("c2VjcmV0.exfil.egress.test"); n != 0 {
		t.Fatalf("the host was asked %d times", n)
	}
	// Nor over TLS SNI or HTTP Host.
	e.get(e.client(srcA, e.httpDst(), nil), "http://aGVsbG8.exfil.egress.test/")
	if n := e.names.count("aGVsbG8.exfil.egress.test"); n != 0 {
		t.Fatalf("the host was asked %d times", n)
	}
	if ds := e.g.Denials("a"); len(ds) != 2 || ds[0].Reason != "not in allow_out (deny_out 0.0.0.0/0 makes it an allow-list)" {
		t.Fatalf("denials = %+v", ds)
	}
}

func TestDNSUnknownSourceAndRate(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback, DNSPerSecond: 1, DNSBurst: 5})
	e.attach("a", srcA, core.NetworkPolicy{})
	// An unknown source gets no answer at all.
	if r, err := e.query(srcB, "www.egress.test", dns.TypeA, false); err == nil {
		t.Fatalf("unknown source answered: %v", r)
	}
	// Past the burst, queries are dropped and counted.
	answered := 0
	for range 8 {
		c := &dns.Client{Timeout: 300 * time.Millisecond, Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(srcA)}}}
		m := new(dns.Msg)
		m.SetQuestion("www.egress.test.", dns.TypeA)
		if _, _, err := c.Exchange(m, e.udp.LocalAddr().String()); err == nil {
			answered++
		}
	}
	s := e.g.Stats("a")
	if answered < 5 || answered > 7 || s.DNSRateLimited == 0 || s.DNSRateLimited+uint64(answered) != 8 {
		t.Fatalf("answered %d of 8; stats %+v", answered, s)
	}
}

func TestDNSHostileMessages(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	e.attach("a", srcA, core.NetworkPolicy{})
	c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(srcA)}, e.udp.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Garbage, a response, two questions: none crashes the server, and a
	// well-formed query after them is answered.
	resp := new(dns.Msg)
	resp.SetQuestion("www.egress.test.", dns.TypeA)
	resp.Response = true
	respRaw, _ := resp.Pack()
	two := new(dns.Msg)
	two.Question = []dns.Question{{Name: "a.egress.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET}, {Name: "b.egress.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET}}
	twoRaw, _ := two.Pack()
	for _, raw := range [][]byte{{0, 1, 2}, make([]byte, 4000), respRaw, twoRaw} {
		c.Write(raw)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 512)
	n, err := c.Read(buf) // the FORMERR for two questions
	if err != nil {
		t.Fatal(err)
	}
	m := new(dns.Msg)
	if err := m.Unpack(buf[:n]); err != nil || m.Rcode != dns.RcodeFormatError {
		t.Fatalf("reply %v, %v", m, err)
	}
	if r, err := e.query(srcA, "www.egress.test", dns.TypeA, false); err != nil || len(r.Answer) != 1 {
		t.Fatalf("A www = %v, %v", r, err)
	}
}
