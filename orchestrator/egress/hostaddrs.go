package egress

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// hostAddrs is the default source of the host's own addresses, which no
// sandbox reaches (Config.HostAddrs unset). An address the host gains is
// refused from the moment the kernel reports it, not at the next periodic
// re-read: on Linux a netlink subscription to address changes
// (hostaddrs_linux.go) drops the kept list at each change and lists the
// addresses again. Whenever the kept list is not known to be current
// (before the first listing, between a change and its re-listing, while
// the subscription is broken or being re-made), every check lists the
// addresses afresh instead: a check is never answered from a list that a
// change reported since has made stale. Without a subscription (other
// systems) every check lists afresh.
type hostAddrs struct {
	log *slog.Logger
	// list reads the host's addresses now; watch follows the changes
	// until stop is closed, then closes stopped. Both are the
	// platform's (hostaddrs_linux.go), tests substitute them.
	list  func() ([]netip.Addr, error)
	watch func(h *hostAddrs)

	startOnce sync.Once
	stopOnce  sync.Once
	started   atomic.Bool
	stop      chan struct{}
	stopped   chan struct{}

	// cur is the kept list, nil while it is not known to be current. mu
	// orders invalidate and keep (epoch), so that a listing taken before
	// a change is never kept after the change invalidated the list.
	cur   atomic.Pointer[[]netip.Addr]
	mu    sync.Mutex
	epoch uint64
}

// Bounds of the subscription's upkeep.
const (
	hostAddrsRetryMin = 100 * time.Millisecond // first wait before re-subscribing
	hostAddrsRetryMax = 5 * time.Second
	// hostAddrsBackstop: the kept list is read again this often even
	// without changes (watchHostAddrs).
	hostAddrsBackstop = 30 * time.Second
)

func newHostAddrs(log *slog.Logger) *hostAddrs {
	return &hostAddrs{log: log, list: listHostAddrs, watch: watchHostAddrs,
		stop: make(chan struct{}), stopped: make(chan struct{})}
}

// get returns the host's addresses: the kept list when it is current, a
// fresh listing otherwise. An error means they could not be read; the
// caller refuses (closed, not open, when the host's addresses are unknown).
// The subscription starts at the first call, so that a gateway that never
// judges a destination never subscribes.
func (h *hostAddrs) get() ([]netip.Addr, error) {
	h.startOnce.Do(func() {
		h.started.Store(true)
		go h.watch(h)
	})
	if p := h.cur.Load(); p != nil {
		return *p, nil
	}
	return h.list()
}

// invalidate drops the kept list: an address changed, or changes may have
// been missed (the subscription reported an error or broke).
func (h *hostAddrs) invalidate() {
	h.mu.Lock()
	h.epoch++
	h.cur.Store(nil)
	h.mu.Unlock()
}

// refresh lists the addresses and keeps the list, unless a change
// invalidated it while it was being read (the next refresh keeps one).
func (h *hostAddrs) refresh() {
	h.mu.Lock()
	e := h.epoch
	h.mu.Unlock()
	addrs, err := h.list()
	if err != nil {
		h.log.Warn("egress: listing the host's addresses failed; every check lists them afresh until it works", "error", err)
		return
	}
	h.mu.Lock()
	if h.epoch == e {
		h.cur.Store(&addrs)
	}
	h.mu.Unlock()
}

// close stops the subscription and waits for its goroutine.
func (h *hostAddrs) close() {
	h.stopOnce.Do(func() {
		close(h.stop)
		h.startOnce.Do(func() {}) // never start after this
		if h.started.Load() {
			<-h.stopped
		}
	})
}

// sleep waits d, or less when stop is closed; false then.
func (h *hostAddrs) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-h.stop:
		return false
	}
}

// listHostAddrs lists the addresses of the host's interfaces.
func listHostAddrs() ([]netip.Addr, error) {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	addrs := make([]netip.Addr, 0, len(ifas))
	for _, a := range ifas {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			addrs = append(addrs, p.Addr().Unmap())
		}
	}
	return addrs, nil
}
