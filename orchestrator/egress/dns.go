package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"runtime"
	"time"

	"github.com/miekg/dns"
)

// The sandboxes' DNS. Queries are parsed and answers built with
// github.com/miekg/dns's message code; the serving loops are the
// gateway's own, because miekg/dns's Server starts a goroutine per
// packet with no bound, and the gateway must bound work before it starts
// it: a query from an unknown source is dropped unread, then the
// sandbox's rate (DNSPerSecond, DNSBurst) and its queries in flight
// (dnsInFlightPerSandbox, and dnsInFlightTotal in all) are checked before
// a goroutine is spent on it. Past either the query is dropped, counted
// as DNSRateLimited: a client retries, and a flood costs its sender only.

// ServeDNS answers the sandboxes' queries on pc until it is closed.
//
// Two goroutines read pc (dnsReaders), so that dropping a flood keeps up
// with it and the kernel's queue of the socket, which every sandbox
// shares, seldom overflows; on a *net.UDPConn the reads allocate nothing
// and the receive buffer is raised to dnsReadBuffer (within the kernel's
// net.core.rmem_max). What a flood beyond that costs the others
// is best cut before the socket: the plumbing can drop each sandbox's
// DNS packets past a rate in nftables.
func (g *Gateway) ServeDNS(pc net.PacketConn) error {
	if !g.serving(pc) {
		pc.Close()
		return net.ErrClosed
	}
	defer g.unserving(pc)
	if uc, ok := pc.(*net.UDPConn); ok {
		uc.SetReadBuffer(dnsReadBuffer)
	}
	readers := dnsReaders
	errc := make(chan error, readers)
	for range readers {
		go func() { errc <- g.readDNS(pc) }()
	}
	var err error
	for range readers {
		if e := <-errc; e != nil && err == nil {
			err = e
			pc.Close() // stop the other readers
		}
	}
	if g.isClosed() {
		return nil
	}
	return err
}

// readDNS is one of ServeDNS's readers.
func (g *Gateway) readDNS(pc net.PacketConn) error {
	uc, _ := pc.(*net.UDPConn)
	buf := make([]byte, maxDNSMessage)
	for i := 0; ; i++ {
		if i%yieldEvery == 0 {
			// Under a flood every read returns at once and this loop
			// never parks; it steps aside now and then so that the
			// goroutines carrying other sandboxes' traffic run at once
			// rather than at the next preemption (10 ms).
			runtime.Gosched()
		}
		var (
			n    int
			from netip.AddrPort
			err  error
		)
		if uc != nil {
			n, from, err = uc.ReadFromUDPAddrPort(buf)
		} else {
			var a net.Addr
			if n, a, err = pc.ReadFrom(buf); err == nil {
				from, _ = netip.ParseAddrPort(a.String())
			}
		}
		if err != nil {
			if g.isClosed() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		sb := g.bySource(from.Addr())
		if sb == nil {
			g.strayDNS.Add(1)
			continue
		}
		if !g.admitQuery(sb) {
			continue
		}
		msg := append([]byte(nil), buf[:n]...)
		go func() {
			defer g.queryDone(sb)
			out := g.answer(sb, msg, false)
			switch {
			case out == nil:
			case uc != nil:
				uc.WriteToUDPAddrPort(out, from)
			default:
				pc.WriteTo(out, net.UDPAddrFromAddrPort(from))
			}
		}()
	}
}

// ServeDNSTCP answers the sandboxes' queries over TCP (RFC 7766) on l
// until it is closed. A connection counts against the same caps as any
// other (MaxConnsPerSandbox, MaxConns) and its queries against the same
// rate; it carries at most maxDNSQueriesPerTCP queries, each read within
// dnsTCPTimeout and at most maxDNSMessage long.
func (g *Gateway) ServeDNSTCP(l net.Listener) error {
	return g.accept(l, func(cn *conn) {
		cn.dns = true
		go g.serveDNSConn(cn)
	})
}

func (g *Gateway) serveDNSConn(cn *conn) {
	sb := cn.sb
	defer g.release(sb)
	if !sb.add(cn) { // detached meanwhile
		cn.close()
		return
	}
	defer func() {
		cn.close()
		sb.remove(cn)
	}()
	c := cn.client
	var hdr [2]byte
	for range maxDNSQueriesPerTCP {
		c.SetReadDeadline(time.Now().Add(dnsTCPTimeout))
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(hdr[:]))
		if n < 12 || n > maxDNSMessage {
			return
		}
		msg := make([]byte, n)
		if _, err := io.ReadFull(c, msg); err != nil {
			return
		}
		cn.touch()
		if !g.admitQuery(sb) {
			return
		}
		out := g.answer(sb, msg, true)
		g.queryDone(sb)
		if out == nil {
			return
		}
		c.SetWriteDeadline(time.Now().Add(dnsTCPTimeout))
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...)); err != nil {
			return
		}
	}
}

// admitQuery takes a query's place: within the sandbox's rate and the
// bounds on queries in flight; false (counted) past them.
func (g *Gateway) admitQuery(sb *sandbox) bool {
	// A sandbox past its rate stays past it until its next token: its
	// flood is dropped on an atomic load, without the limiter's lock.
	now := time.Since(g.epoch)
	if now < time.Duration(sb.dnsQuiet.Load()) {
		sb.st.dnsRateLimited.Add(1)
		return false
	}
	if !sb.limiter.Allow() {
		sb.dnsQuiet.Store(int64(now + time.Duration(float64(time.Second)/g.cfg.DNSPerSecond)))
		sb.st.dnsRateLimited.Add(1)
		return false
	}
	if sb.dnsBusy.Add(1) > dnsInFlightPerSandbox {
		sb.dnsBusy.Add(-1)
		sb.st.dnsRateLimited.Add(1)
		return false
	}
	if g.dnsInFlight.Add(1) > dnsInFlightTotal {
		g.dnsInFlight.Add(-1)
		sb.dnsBusy.Add(-1)
		sb.st.dnsRateLimited.Add(1)
		return false
	}
	return true
}

func (g *Gateway) queryDone(sb *sandbox) {
	sb.dnsBusy.Add(-1)
	g.dnsInFlight.Add(-1)
}

// answer builds the reply to one query, or nil to send none (not a
// query, or not parseable).
func (g *Gateway) answer(sb *sandbox, raw []byte, tcp bool) []byte {
	req := new(dns.Msg)
	if err := req.Unpack(raw); err != nil || req.Response {
		return nil
	}
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.RecursionAvailable = true
	limit := dns.MinMsgSize
	if opt := req.IsEdns0(); opt != nil {
		limit = int(min(max(opt.UDPSize(), dns.MinMsgSize), 1232))
		resp.SetEdns0(1232, false)
	}
	if tcp {
		limit = dns.MaxMsgSize
	}
	switch {
	case req.Opcode != dns.OpcodeQuery:
		resp.Rcode = dns.RcodeNotImplemented
	case len(req.Question) != 1:
		resp.Rcode = dns.RcodeFormatError
	case req.Question[0].Qclass != dns.ClassINET:
		resp.Rcode = dns.RcodeRefused
	default:
		g.question(sb, req.Question[0], resp)
	}
	resp.Truncate(limit)
	out, err := resp.Pack()
	if err != nil {
		return nil
	}
	return out
}

// question answers one IN question into resp.
func (g *Gateway) question(sb *sandbox, q dns.Question, resp *dns.Msg) {
	switch q.Qtype {
	case dns.TypeA:
	case dns.TypeAAAA:
		// Sandboxes have no IPv6: no data, whatever the name.
		sb.st.dnsAllowed.Add(1)
		return
	default:
		resp.Rcode = dns.RcodeRefused
		return
	}
	name := normName(q.Name)
	if name == "" {
		// A single label ("localhost", a search-domain try) or not a
		// domain at all: nothing the host should be asked.
		resp.Rcode = dns.RcodeNameError
		return
	}
	p, _ := sb.current()
	byName, reason := g.route(p, name)
	if reason == "" && !byName {
		reason = g.nameRefusal(p, name)
	}
	var addrs []net.IP
	if reason == "" {
		ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
		ok, why, err := g.candidates(ctx, sb, p, name, false)
		cancel()
		switch {
		case errors.Is(err, errNoSuchName):
			sb.st.dnsAllowed.Add(1)
			resp.Rcode = dns.RcodeNameError
			return
		case err != nil:
			resp.Rcode = dns.RcodeServerFailure
			return
		}
		reason = why
		for _, a := range ok[:min(len(ok), maxDNSAnswers)] {
			addrs = append(addrs, a.AsSlice())
		}
	}
	if reason != "" {
		g.deny(sb, Denial{Kind: "dns", Name: name, Reason: reason})
		resp.Rcode = dns.RcodeNameError
		return
	}
	sb.st.dnsAllowed.Add(1)
	for _, a := range addrs {
		resp.Answer = append(resp.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: dnsAnswerTTL},
			A:   a,
		})
	}
}
