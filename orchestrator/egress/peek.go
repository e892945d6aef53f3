package egress

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"time"
)

// Finding a connection's name. The gateway reads the first bytes a
// sandbox sends, bounded in size (PeekBytes) and time (PeekTimeout), and
// hands them to the standard library's own parsers: crypto/tls reads the
// ClientHello (its GetConfigForClient callback sees the SNI, then aborts
// the handshake before anything is written back), net/http reads an
// HTTP/1 request's head (its Host). Every byte read is kept and replayed
// to the upstream, so the peek is invisible to both ends. Nothing here
// is a hand-written parser of hostile input.

type peekKind int

const (
	peekNone peekKind = iota // nothing recognisable: judged by address
	peekTLS                  // a ClientHello crypto/tls accepted
	peekHTTP                 // an HTTP/1 request head net/http accepted
)

type peeked struct {
	kind peekKind
	name string // normalised (normName); "" when none or not a domain
	buf  []byte // every byte read from the client, to replay
}

// peek reads a connection's first bytes: the first within quiet, the
// rest within PeekTimeout of the start, at most PeekBytes in all.
func (g *Gateway) peek(c net.Conn, quiet time.Duration) peeked {
	start := time.Now()
	rec := &recorder{Conn: c, max: g.cfg.PeekBytes}
	defer c.SetReadDeadline(time.Time{})
	c.SetReadDeadline(start.Add(quiet))
	var first [1]byte
	if n, _ := rec.Read(first[:]); n == 0 {
		return peeked{buf: rec.buf}
	}
	rec.pos = 0 // the parsers read from the first byte
	c.SetReadDeadline(start.Add(g.cfg.PeekTimeout))
	pk := peeked{}
	switch b := first[0]; {
	case b == 0x16: // a TLS handshake record
		if sni, ok := clientHelloSNI(rec); ok {
			pk.kind, pk.name = peekTLS, normName(sni)
		}
	case b >= 'A' && b <= 'Z': // an HTTP method
		if host, ok := requestHost(rec); ok {
			pk.kind, pk.name = peekHTTP, hostName(host)
		}
	}
	pk.buf = rec.buf
	return pk
}

var errPeekDone = errors.New("egress: peeked")

// clientHelloSNI runs crypto/tls's server handshake over the recorded
// bytes just far enough to read the ClientHello: ok when it parsed one,
// with the SNI it carries ("" for none).
func clientHelloSNI(rec *recorder) (sni string, ok bool) {
	cfg := &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			sni, ok = h.ServerName, true
			return nil, errPeekDone
		},
	}
	_ = tls.Server(rec, cfg).Handshake() // always fails: errPeekDone, or a bad hello
	return sni, ok
}

// requestHost reads an HTTP/1 request's head with net/http: its Host
// (from an absolute-form target if any, as a server would take it).
func requestHost(rec *recorder) (string, bool) {
	req, err := http.ReadRequest(bufio.NewReaderSize(rec, 4096))
	if err != nil {
		return "", false
	}
	return req.Host, true
}

var errPeekFull = errors.New("egress: peek limit reached")

// recorder is the client connection as the parsers see it: reads come
// first from what was read already, then from the connection, and are
// kept, at most max bytes; writes (a TLS alert) are swallowed, so the
// client never hears from the peek; Close does nothing.
type recorder struct {
	net.Conn
	buf []byte
	pos int
	max int
}

func (r *recorder) Read(p []byte) (int, error) {
	if r.pos < len(r.buf) {
		n := copy(p, r.buf[r.pos:])
		r.pos += n
		return n, nil
	}
	room := r.max - len(r.buf)
	if room <= 0 {
		return 0, errPeekFull
	}
	if len(p) > room {
		p = p[:room]
	}
	n, err := r.Conn.Read(p)
	r.buf = append(r.buf, p[:n]...)
	r.pos += n
	return n, err
}

func (r *recorder) Write(p []byte) (int, error) { return len(p), nil }
func (r *recorder) Close() error                { return nil }
