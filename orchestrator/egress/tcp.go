package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// ServeTCP accepts the sandboxes' redirected connections on l until l is
// closed; origDst recovers a connection's original destination
// (OriginalDst on Linux after a DNAT).
//
// The accept loop does no more per connection than look its source up
// (no lock) and take a slot (MaxConnsPerSandbox, MaxConns: atomics); it
// takes no lock a sandbox's own traffic contends for, and everything
// that waits on the sandbox (registering with it, the peek, the lookup,
// the dial, the copy) runs in the connection's own goroutine, so a
// sandbox flooding connections costs the others one accept and one
// close per connection past its cap.
func (g *Gateway) ServeTCP(l net.Listener, origDst func(net.Conn) (netip.AddrPort, error)) error {
	return g.accept(l, func(cn *conn) { go g.serveConn(cn, origDst) })
}

// accept runs the accept loop of ServeTCP and ServeDNSTCP on l until it
// is closed: each connection from a sandbox that has a slot left is
// handed to serve in this goroutine (serve must not block); the others
// are closed at once.
func (g *Gateway) accept(l net.Listener, serve func(*conn)) error {
	if !g.serving(l) {
		l.Close()
		return net.ErrClosed
	}
	defer g.unserving(l)
	var backoff time.Duration
	for i := 0; ; i++ {
		if i%yieldEvery == 0 {
			runtime.Gosched() // as in readDNS: a flood never parks this loop
		}
		c, err := l.Accept()
		if err != nil {
			if g.isClosed() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// EMFILE and the like: wait a little, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			g.log.Warn("egress: accept failed; retrying", "err", err, "in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-g.done:
				t.Stop()
				return nil
			}
			continue
		}
		backoff = 0
		sb := g.bySource(addrOf(c.RemoteAddr()))
		if sb == nil {
			g.strayConns.Add(1)
		}
		if sb == nil || !g.acquire(sb) {
			closeNow(c)
			continue
		}
		serve(g.newConn(sb, c))
	}
}

// addrOf is the IP of a net.Addr (TCP or UDP), unmapped.
func addrOf(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	case *net.UDPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap.Addr().Unmap()
}

// closeNow closes c with a reset, so a refused sandbox connection costs
// the host no TIME_WAIT.
func closeNow(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// conn is one sandbox connection from accept to close: its client side,
// the upstream connections dialled for it (one when spliced; those of
// its HTTP transport when intercepted), and the verdict it was let
// through on, which Update judges again.
type conn struct {
	g      *Gateway
	sb     *sandbox
	client net.Conn
	done   chan struct{} // closed by close
	last   atomic.Int64  // when a byte last moved, in ns since g.epoch
	idle   *time.Timer
	life   *time.Timer

	mu        sync.Mutex
	closed    bool
	upstreams map[net.Conn]struct{}
	// The verdict, once judged (set under sb.mu): the name the
	// connection carried, the address dialled, and whether it was
	// dialled by name (resolved by the gateway) or by address.
	judged bool
	name   string
	target netip.AddrPort
	byName bool
	dns    bool // a DNS-over-TCP connection: not judged again
}

func (g *Gateway) newConn(sb *sandbox, c net.Conn) *conn {
	cn := &conn{g: g, sb: sb, client: c, done: make(chan struct{}), upstreams: map[net.Conn]struct{}{}}
	cn.touch()
	cn.idle = time.AfterFunc(g.cfg.IdleTimeout, cn.checkIdle)
	cn.life = time.AfterFunc(g.cfg.MaxConnLifetime, cn.close)
	return cn
}

// add registers cn with its sandbox; false once the sandbox is detached.
func (sb *sandbox) add(cn *conn) bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.detached {
		return false
	}
	sb.conns[cn] = struct{}{}
	return true
}

func (sb *sandbox) remove(cn *conn) {
	sb.mu.Lock()
	delete(sb.conns, cn)
	sb.mu.Unlock()
}

func (cn *conn) touch() { cn.last.Store(int64(time.Since(cn.g.epoch))) }

// checkIdle closes cn when nothing moved for IdleTimeout, else waits for
// the rest of it.
func (cn *conn) checkIdle() {
	idle := time.Since(cn.g.epoch) - time.Duration(cn.last.Load())
	if left := cn.g.cfg.IdleTimeout - idle; left > 0 {
		cn.idle.Reset(left)
		return
	}
	cn.close()
}

// close closes the client side and every upstream; safe to call any
// number of times from anywhere (never under sb.mu's callers' locks: it
// takes only cn.mu).
func (cn *conn) close() {
	cn.mu.Lock()
	if cn.closed {
		cn.mu.Unlock()
		return
	}
	cn.closed = true
	ups := cn.upstreams
	cn.upstreams = nil
	cn.mu.Unlock()
	cn.idle.Stop()
	cn.life.Stop()
	cn.client.Close()
	for u := range ups {
		u.Close()
	}
	close(cn.done)
}

// addUpstream ties u's life to cn's; false (u closed) if cn is closed.
func (cn *conn) addUpstream(u net.Conn) bool {
	cn.mu.Lock()
	if cn.closed {
		cn.mu.Unlock()
		u.Close()
		return false
	}
	cn.upstreams[u] = struct{}{}
	cn.mu.Unlock()
	return true
}

func (cn *conn) removeUpstream(u net.Conn) {
	cn.mu.Lock()
	delete(cn.upstreams, u)
	cn.mu.Unlock()
}

// rejudge judges an open connection under p (sb.mu held): "" if it may
// stay open, else why not. A connection not yet judged is left to
// settle.
func (cn *conn) rejudge(g *Gateway, p *core.CompiledPolicy) string {
	if !cn.judged || cn.dns {
		return ""
	}
	if cn.name != "" && (p == nil || p.JudgeName(cn.name) == core.VerdictDenied) {
		return "denied by deny_out"
	}
	name := ""
	if cn.byName {
		name = cn.name
	}
	return g.admit(p, name, cn.target.Addr())
}

// settle records cn's verdict, judged under p; if the sandbox's policy
// changed meanwhile, the verdict is judged again under the new one. It
// returns "" or why the connection must close.
func (cn *conn) settle(p *core.CompiledPolicy, name string, target netip.AddrPort, byName bool) string {
	sb := cn.sb
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.detached {
		return "the sandbox was detached"
	}
	cn.judged, cn.name, cn.target, cn.byName = true, name, target, byName
	if sb.policy != p {
		return cn.rejudge(cn.g, sb.policy)
	}
	return ""
}

// serveConn judges, dials and carries one connection.
func (g *Gateway) serveConn(cn *conn, origDst func(net.Conn) (netip.AddrPort, error)) {
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
	orig, err := origDst(cn.client)
	if err != nil {
		g.log.Warn("egress: no original destination; connection dropped", "sandbox", sb.id, "err", err)
		return
	}
	orig = netip.AddrPortFrom(orig.Addr().Unmap(), orig.Port())
	p, ca := sb.current()

	// Wait for a name only as long as it matters: if the address alone
	// would be let through, a client that says nothing for a moment is
	// one whose server speaks first.
	quiet := g.cfg.PeekTimeout
	if g.admit(p, "", orig.Addr()) == "" {
		quiet = min(g.cfg.FirstByteTimeout, quiet)
	}
	pk := g.peek(cn.client, quiet)
	cn.touch()
	name := pk.name // "" also for an IP literal or a non-domain: judged by address

	// Judge, resolving an allowed name on the host. A connection closed
	// meanwhile (Update, Detach, Close) stops the lookup and the dial.
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	go func() {
		select {
		case <-cn.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	var targets []netip.AddrPort
	byName, reason := false, ""
	if name != "" {
		byName, reason = g.route(p, name)
	}
	switch {
	case reason != "":
	case byName:
		var addrs []netip.Addr
		addrs, reason, err = g.candidates(ctx, sb, p, name, true)
		switch {
		case errors.Is(err, errNoSuchName):
			reason = "the name does not resolve"
		case err != nil:
			reason = "the host could not resolve the name"
		}
		for _, a := range addrs {
			targets = append(targets, netip.AddrPortFrom(a, orig.Port()))
		}
	default:
		if reason = g.admit(p, "", orig.Addr()); reason == "" {
			targets = []netip.AddrPort{orig}
		} else if name != "" {
			reason = g.nameRefusal(p, name)
		} else {
			reason = "no TLS SNI or HTTP Host: judged by address: " + reason
		}
	}
	if reason != "" {
		g.deny(sb, Denial{Kind: "tcp", Name: name, Addr: orig, Reason: reason})
		if pk.kind == peekHTTP {
			g.replyHTTP(cn.client, 403, "sandboxd egress: refused: "+reason)
		}
		return
	}

	// A TLS connection to a rule's domain is terminated here; the rule's
	// upstream is dialled per request by the interceptor, through the
	// same checks.
	if pk.kind == peekTLS && byName && ca != nil {
		if _, ok := p.Rule(name); ok {
			if r := cn.settle(p, name, targets[0], true); r != "" {
				g.deny(sb, Denial{Kind: "tcp", Name: name, Addr: orig, Reason: r})
				return
			}
			sb.st.connsAllowed.Add(1)
			cancel()
			g.ix.serve(cn, pk.buf, name, orig.Port(), ca)
			return
		}
	}

	up, target, err := g.dialAny(ctx, targets)
	cancel()
	if err != nil {
		g.log.Debug("egress: upstream unreachable", "sandbox", sb.id, "name", name, "addr", orig, "err", err)
		if pk.kind == peekHTTP {
			g.replyHTTP(cn.client, 502, "sandboxd egress: could not connect upstream")
		}
		return
	}
	if !cn.addUpstream(up) {
		return
	}
	if r := cn.settle(p, name, target, byName); r != "" {
		g.deny(sb, Denial{Kind: "tcp", Name: name, Addr: orig, Reason: r})
		return
	}
	sb.st.connsAllowed.Add(1)
	if len(pk.buf) > 0 {
		n, err := up.Write(pk.buf)
		sb.st.bytesOut.Add(uint64(n))
		if err != nil {
			return
		}
	}
	pk.buf = nil
	g.splice(cn, up)
}

// dialAny dials the targets in order until one answers, within ctx.
func (g *Gateway) dialAny(ctx context.Context, targets []netip.AddrPort) (net.Conn, netip.AddrPort, error) {
	err := errors.New("no address to dial")
	for _, t := range targets {
		var c net.Conn
		if c, err = g.cfg.Dial(ctx, "tcp", t.String()); err == nil {
			return c, t, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, netip.AddrPort{}, err
}

// replyHTTP answers a refused plain-HTTP connection with a status and a
// reason the sandbox may read (it names the sandbox's own policy only),
// within a short write budget.
func (g *Gateway) replyHTTP(c net.Conn, code int, msg string) {
	text := map[int]string{403: "Forbidden", 502: "Bad Gateway"}[code]
	c.SetWriteDeadline(time.Now().Add(deniedReplyWriteBudget))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n", code, text, len(msg)+1, msg)
}

// copyBufSize is the buffer each direction of a spliced connection
// holds: 2 × 16 KiB per open connection, so at most 128 MiB at the
// default global cap of 4096 connections.
const copyBufSize = 16 << 10

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// splice copies both ways until both sides are done (a half-close is
// passed on) or either fails, counting bytes to and from the world.
func (g *Gateway) splice(cn *conn, up net.Conn) {
	sb := cn.sb
	errc := make(chan error, 1)
	go func() { errc <- cn.pipe(up, cn.client, &sb.st.bytesOut) }()
	err1 := cn.pipe(cn.client, up, &sb.st.bytesIn)
	if err1 != nil {
		cn.close() // unblocks the other direction
	}
	if err2 := <-errc; err2 != nil {
		cn.close()
	}
}

// pipe copies src to dst until src ends (then half-closes dst) or either
// fails; it counts what dst accepted.
func (cn *conn) pipe(dst, src net.Conn, count *atomic.Uint64) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			cn.touch()
			w, werr := dst.Write(buf[:n])
			count.Add(uint64(w))
			if werr != nil {
				return werr
			}
		}
		if rerr == io.EOF {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
				return nil
			}
			return io.EOF // no half-close: end the connection
		}
		if rerr != nil {
			return rerr
		}
	}
}
