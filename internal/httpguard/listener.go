package httpguard

import (
	"net"
	"sync"
	"syscall"
)

// LimitListener returns a listener that holds at most n accepted
// connections open at once: past n, Accept waits for one to close, and new
// connections wait in the kernel's backlog, holding no descriptor of the
// process. n < 1 means no limit.
func LimitListener(l net.Listener, n int) net.Listener {
	if n < 1 {
		return l
	}
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// ConnLimit is the most connections a server should hold: ceiling, or
// half of the process's descriptor limit (RLIMIT_NOFILE, as the Go runtime
// raised it at start) if that is lower, so that a flood of connections to
// one listener leaves descriptors for the rest of the process (its other
// listeners, its files, its clients).
func ConnLimit(ceiling int) int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return ceiling
	}
	if half := rl.Cur / 2; half < uint64(ceiling) {
		return max(int(half), 1)
	}
	return ceiling
}
